"""The `golem` command: serve the approval service, run workers, decide from a terminal.

```text
golem serve --app myapp.agents:registry --db sqlite:///golem.db   service + in-process worker
golem worker --app myapp.agents:registry --db postgresql://...    an extra worker process
golem pending                                                     pending calls, as a table
golem approve RUN CALL [--as IDENTITY]                            approve one call
golem deny RUN CALL --reason "..."                                deny one call
golem answer RUN CALL TEXT                                        give an external result
golem show RUN                                                    a run, its conversation, audit
golem resolve RUN --retry|--cancel --note "..."                   an interrupted run
golem demo [--once]                                               the whole cycle, in a browser
golem --version                                                   prints `golem <version>`
```

`--db` defaults to `$GOLEM_DB`, else `sqlite:///golem.db`; `$GOLEM_SEAL_KEY` (with
`$GOLEM_SEAL_KEY_ID`, `$GOLEM_SEAL_OLDER_KEYS`) seals pending calls. The decision commands
talk to the store directly and record `--as` (default `cli:<user name>`). Without the
`[server]` extra, `golem` prints the install command and exits with status 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import getpass
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

from golem._display import reveal
from golem.errors import StoreError


class _EventLoop(enum.StrEnum):
    """Which event loop `golem serve` and `golem worker` run on."""

    auto = "auto"
    asyncio = "asyncio"
    uvloop = "uvloop"


try:
    import typer
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
    from rich.table import Table

    _MISSING: str | None = None
    Db = Annotated[str | None, typer.Option("--db", help="Store URL.")]
    RunId = Annotated[str, typer.Argument(metavar="RUN", help="The run ID.")]
    CallId = Annotated[str, typer.Argument(metavar="CALL", help="The call ID.")]
    As = Annotated[str | None, typer.Option("--as", help="Deciding identity (default cli:<user>).")]
    AppSpec = Annotated[str, typer.Option("--app", help="The registry: module:attribute.")]
    Host = Annotated[str, typer.Option(help="Interface to listen on.")]
    Loop = Annotated[
        _EventLoop,
        typer.Option(
            help="Event loop: auto (uvloop when installed, as uvicorn picks), asyncio, or uvloop "
            "(pip install 'golem-agents[uvloop]')."
        ),
    ]
except ImportError as _exc:  # pragma: no cover - exercised in a subprocess by the tests
    _MISSING = _exc.name or "typer"

__all__ = ["build_app", "main"]

INSTALL_HINT = "pip install 'golem-agents[server]'"
DEFAULT_DB = "sqlite:///golem.db"
T = TypeVar("T")
_WAIT = " (raise it when resumes wait on a model)."


def _safe(text: str) -> str:
    """Model or user text for Rich markup: hidden characters shown, markup escaped."""
    return escape(reveal(text))


def _console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)


def _err(message: str, code: int = 1) -> typer.Exit:
    _console(stderr=True).print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def _db(value: str | None) -> str:
    return value or os.environ.get("GOLEM_DB") or DEFAULT_DB


def _loop_factory(choice: _EventLoop) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory for `choice` (None: asyncio's own); exits 2 when uvloop is asked
    for and missing."""
    if choice is _EventLoop.asyncio:
        return None
    try:
        import uvloop
    except ImportError:
        if choice is _EventLoop.auto:
            return None
        raise _err("--loop uvloop needs uvloop: pip install 'golem-agents[uvloop]'", 2) from None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def _seal_keys() -> Any:
    """The `SealKeys` of $GOLEM_SEAL_KEY (with $GOLEM_SEAL_KEY_ID and the retired keys of
    $GOLEM_SEAL_OLDER_KEYS), or None when it is not set; exits with status 2 on a bad key."""
    from golem.seal import SealKeys

    text, older_text = os.environ.get("GOLEM_SEAL_KEY", ""), os.environ.get("GOLEM_SEAL_OLDER_KEYS")
    if not text:
        if older_text:
            raise _err("GOLEM_SEAL_OLDER_KEYS is set but GOLEM_SEAL_KEY is not", 2)
        return None
    try:
        older = json.loads(older_text) if older_text else {}
        if not isinstance(older, dict) or not all(isinstance(v, str) for v in older.values()):
            raise ValueError("GOLEM_SEAL_OLDER_KEYS must be a JSON object of key ID to key")
        return SealKeys(
            text.encode(),
            key_id=os.environ.get("GOLEM_SEAL_KEY_ID", "") or "k1",
            older={key_id: key.encode() for key_id, key in older.items()},
        )
    except ValueError as exc:  # json.JSONDecodeError is one
        raise _err(f"the seal key: {exc}", 2) from None
    except RecursionError:
        message = "the seal key: GOLEM_SEAL_OLDER_KEYS is not valid JSON: nested too deeply"
        raise _err(message, 2) from None


def _registry(spec: str) -> Any:
    from golem.durable.worker import load_registry

    if os.getcwd() not in sys.path:  # `--app module:attr` names a module of the project
        sys.path.insert(0, os.getcwd())
    try:
        return load_registry(spec)
    except (ImportError, AttributeError, ValueError, SyntaxError) as exc:
        raise _err(f"--app {spec}: {exc}", 2) from None


def _with_store(
    db: str,
    fn: Callable[[Any], Awaitable[T]],
    *,
    create: bool = False,
    loop: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """Open the store, run `fn(store)`, close it; store errors exit 1. Unless `create`, a
    SQLite file that does not exist exits 1: reading or deciding never invents a store."""
    from golem.durable.store import open_store

    # the file a SQLite URL names (as `open_store` reads it); None for PostgreSQL
    path: str | None = None if "://" in db else db
    if db.startswith("sqlite://"):
        path = db.removeprefix("sqlite://")
        path = path[1:] if path.startswith("/") else path
    if not create and path and not path.startswith(":") and not os.path.exists(path):
        raise _err(
            f"no golem database at {path}: start one with `golem serve` (or `golem demo`), "
            "or point --db / GOLEM_DB at it"
        )

    async def go() -> T:
        store = await open_store(db)
        try:
            return await fn(store)
        finally:
            await store.close()

    try:
        with asyncio.Runner(loop_factory=loop) as runner:
            return runner.run(go())
    except StoreError as exc:
        raise _err(str(exc)) from None
    except ValueError as exc:
        raise _err(str(exc), 2) from None


def _short(value: str, width: int = 60) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _when(at: datetime | None) -> str:
    return "—" if at is None else at.strftime("%Y-%m-%d %H:%M:%S")


def _serve(
    app_spec: AppSpec,
    db: Annotated[
        str | None,
        typer.Option("--db", help="Store URL (default $GOLEM_DB or sqlite:///golem.db)."),
    ] = None,
    host: Host = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    worker: Annotated[
        bool, typer.Option("--worker/--no-worker", help="Run a worker in this process.")
    ] = True,
    expires_in: Annotated[
        float | None, typer.Option(help="Seconds until a started run's calls expire.")
    ] = None,
    notify: Annotated[
        list[str] | None,
        typer.Option(
            "--notify",
            help="Webhook for paused/expiring/ended runs: URL, AGENT=URL, or slack+URL "
            "(repeatable). Signed with $GOLEM_WEBHOOK_SECRET when set.",
        ),
    ] = None,
    public_url: Annotated[
        str | None,
        typer.Option(help="The inbox's address as people reach it (webhook deep links)."),
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Runs the in-process worker resumes at once" + _WAIT)
    ] = 1,
    loop: Loop = _EventLoop.auto,
) -> None:
    """Serve the approval service (JSON API, web inbox) with an in-process worker.

    Approvers come from $GOLEM_APPROVERS (JSON) or $GOLEM_APPROVERS_FILE; pending calls are
    sealed with $GOLEM_SEAL_KEY when it is set.
    """
    import uvicorn

    from golem.service import AuthConfig, ServiceSettings, create_app
    from golem.service.notify import Webhook

    _loop_factory(loop)  # a clear error when uvloop is asked for and missing, before anything
    registry = _registry(app_spec)
    seal_key = _seal_keys()
    secret = os.environ.get("GOLEM_WEBHOOK_SECRET", "").encode() or None
    try:
        auth = AuthConfig.from_env()
        hooks = [Webhook.parse(spec, secret=secret) for spec in notify or ()]
    except ValueError as exc:
        raise _err(str(exc), 2) from None
    settings = ServiceSettings(
        registry,
        _db(db),
        auth=auth,
        run_worker=worker,
        worker_concurrency=concurrency,
        default_expires_in=expires_in,
        webhooks=hooks,
        public_url=public_url or f"http://{host}:{port}",
        seal_key=seal_key,
    )
    _console().print(
        f"golem: serving {len(registry)} agent(s) on http://{host}:{port} "
        f"(store {_db(db)}, in-process worker {'on' if worker else 'off'}, "
        f"{'sealed' if seal_key is not None else 'unsealed'} pending calls)"
    )
    app = create_app(settings)
    uvicorn.run(
        app, host=host, port=port, loop=loop.value, log_level="info", timeout_graceful_shutdown=3
    )


def _worker(
    app_spec: AppSpec,
    db: Db = None,
    poll: Annotated[float, typer.Option(help="Seconds between polls when idle.")] = 1.0,
    lease: Annotated[float, typer.Option(help="Lease length in seconds.")] = 60.0,
    worker_id: Annotated[str | None, typer.Option("--id", help="This worker's identity.")] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Runs resumed at once by this process" + _WAIT)
    ] = 1,
    loop: Loop = _EventLoop.auto,
) -> None:
    """Resume ready runs until interrupted (several may run against one PostgreSQL).

    The first Ctrl-C (or SIGTERM) stops claiming and waits for the in-flight resumes to
    finish; a second one cancels them (their runs are marked interrupted once their
    leases run out). With $GOLEM_SEAL_KEY every stored call must carry a valid seal
    before its run resumes.
    """
    from golem.durable.store.records import check_seconds
    from golem.durable.worker import Worker

    try:
        check_seconds("--poll", poll)
        check_seconds("--lease", lease)
    except ValueError as exc:
        raise _err(str(exc), 2) from None
    registry = _registry(app_spec)
    seal_key = _seal_keys()

    async def work(store: Any) -> None:
        stop = asyncio.Event()
        running = asyncio.get_running_loop()
        me = asyncio.current_task()

        def on_signal() -> None:
            if stop.is_set() and me is not None:
                me.cancel()  # the second signal: do not wait for the in-flight resumes
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                running.add_signal_handler(sig, on_signal)
        w = Worker(
            store,
            registry,
            worker_id=worker_id,
            lease_seconds=lease,
            concurrency=concurrency,
            seal_key=seal_key,
        )
        sealed = "verifying seals" if seal_key is not None else "unsealed"
        _console().print(
            f"golem: worker {w.worker_id} polling {_db(db)}, {concurrency} run(s) at once, "
            f"on {type(running).__module__.split('.')[0]}, {sealed} "
            "(Ctrl-C stops claiming and lets in-flight runs finish; twice cancels them)"
        )
        try:
            await w.run_forever(poll, stop)
        except asyncio.CancelledError:
            _console().print(f"golem: worker {w.worker_id} cancelled its in-flight runs")
            return
        _console().print(f"golem: worker {w.worker_id} stopped")

    _with_store(_db(db), work, create=True, loop=_loop_factory(loop))


def _pending(
    db: Db = None,
    agent: Annotated[str | None, typer.Option(help="Only this agent.")] = None,
    tool: Annotated[str | None, typer.Option(help="Only this tool.")] = None,
) -> None:
    """List the calls that wait for a decision, oldest first."""
    from golem.durable.store import RunStatus

    async def load(store: Any) -> list[Any]:
        pending = RunStatus.PENDING
        return list(await store.list_runs(status=pending, agent=agent, tool_name=tool, limit=1000))

    runs = reversed(_with_store(_db(db), load))
    rows = [(r, c) for r in runs for c in r.undecided if tool is None or c.tool_name == tool]
    if not rows:
        _console().print("Nothing is waiting for a decision.")
        return
    table = Table(title=f"{len(rows)} pending call(s)", show_lines=True)
    table.add_column("Run / call", no_wrap=True)
    table.add_column("Tool", overflow="fold")
    table.add_column("Arguments / reason", overflow="fold")
    table.add_column("Expires")
    for r, c in rows:
        table.add_row(
            f"{_safe(r.id)}\n{_safe(c.call_id)}",
            f"{_safe(c.tool_name)}\n[dim]{c.kind.value} · {_safe(r.agent)}[/]",
            f"{_safe(_short(c.args, 200))}\n[dim]{_safe(_short(c.reason, 200))}[/]",
            _when(c.deadline),
        )
    _console().print(table)


def _decide(db: str | None, run_id: str, call_id: str, decision: Any, who: str | None) -> None:
    """Record `decision` as `who` (default `cli:<user>`) and say what the run does next."""
    from golem.durable.store import RunStatus

    identity = _identity(who)

    async def go(store: Any) -> tuple[Any, Any]:
        record = await store.decide(run_id, call_id, decision, decided_by=identity)
        return record, await store.get_run(run_id)

    record, run = _with_store(_db(db), go)
    if record.decided_by != identity:
        # the store takes the same decision again from anyone as a no-op: someone else
        # decided first, so this identity decided nothing (HTTP: 409 decision_conflict)
        raise _err(
            f'call "{call_id}" of run "{run_id}" is already decided ({record.kind.value} by '
            f"{record.decided_by}); nothing was recorded for {identity}"
        )
    state = (
        "every call is decided: a worker will resume it"
        if run.status is RunStatus.READY
        else f"{len(run.undecided)} call(s) still wait"
        if run.status is RunStatus.PENDING
        else run.status.value
    )
    _console().print(
        f"{record.kind.value} on call {_safe(call_id)} of run {_safe(run_id)} recorded "
        f"(by {_safe(record.decided_by)}); run {run.status.value}: {state}"
    )


def _identity(value: str | None) -> str:
    if value:
        return value
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli:unknown"


def _approve(
    run_id: RunId,
    call_id: CallId,
    identity: As = None,
    db: Db = None,
    args: Annotated[
        str | None,
        typer.Option(
            "--args",
            metavar="JSON",
            help="Approve with edited arguments (a JSON object); the model is told they changed.",
        ),
    ] = None,
) -> None:
    """Approve a pending call: its tool runs when the run resumes.

    With `--args`, the tool runs with the edited arguments instead; they are recorded beside
    the model's in the decision and the audit log, and checked against the tool's schema
    before the re-run (a mismatch fails the run without running the tool).
    """
    from golem.durable.store import Decision

    try:
        decision = Decision.approve(args=args)
    except StoreError as exc:
        raise _err(str(exc), 2) from None
    _decide(db, run_id, call_id, decision, identity)


def _deny(
    run_id: RunId,
    call_id: CallId,
    reason: Annotated[str, typer.Option(help="Why; the model is told.")] = "",
    identity: As = None,
    db: Db = None,
) -> None:
    """Deny a pending call: it does not run; the model is told why."""
    from golem.durable.store import Decision

    _decide(db, run_id, call_id, Decision.deny(reason), identity)


def _answer(
    run_id: RunId,
    call_id: CallId,
    text: Annotated[str, typer.Argument(help="The tool result, verbatim.")],
    identity: As = None,
    db: Db = None,
) -> None:
    """Give the result of a pending external call."""
    from golem.durable.store import Decision

    _decide(db, run_id, call_id, Decision.external(text), identity)


def _show(
    run_id: RunId,
    db: Db = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON form.")] = False,
) -> None:
    """Show a run: status, outcome, calls, conversation and audit trail."""
    from golem.service.api import run_detail_json

    async def load(store: Any) -> tuple[Any, Any]:
        return await store.get_run(run_id), await store.audit(run_id)

    run, audit = _with_store(_db(db), load)
    console = _console()
    if as_json:
        console.print_json(json.dumps(run_detail_json(run, audit)))
        return
    _print_run(console, run)
    unreadable = _print_conversation(console, run)
    table = _table("Audit trail", "When", "Who", "What", "Detail")
    for e in audit:
        detail = _safe(_short(json.dumps(e.detail), 80))
        table.add_row(_when(e.at), _safe(e.actor), e.action.value, detail)
    console.print(table)
    if unreadable:
        raise _err(unreadable)


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def _print_run(console: Console, run: Any) -> None:
    """A run's facts, outcome and calls."""
    facts = Table.grid(padding=(0, 2))
    for label, value in (
        ("Run", run.id),
        ("Status", run.status.value),
        ("Agent", run.agent),
        ("Conversation", run.conversation_id),
        ("Started by", run.started_by or "—"),
        ("Created", _when(run.created_at)),
        ("Expires", _when(run.expires_at)),
        ("Parent run", run.parent_run_id or "—"),
        ("Continued in", run.child_run_id or "—"),
    ):
        facts.add_row(f"[bold]{label}[/]", _safe(value))
    console.print(facts)
    if run.outcome is not None:
        output = run.outcome.output
        text = output if isinstance(output, str) else json.dumps(output, indent=2)
        panel = Panel(
            reveal(run.outcome.error or text or "—"), title=run.status.value, expand=False
        )
        console.print(panel, markup=False, soft_wrap=False)
    if run.calls:
        calls = _table("Calls", "Call", "Tool", "Kind", "Arguments", "Decision", "By")
        for c in run.calls:
            d = c.decision
            decided = "—" if d is None else d.kind.value + (f": {d.reason}" if d.reason else "")
            shown = (c.call_id, c.tool_name, c.kind.value, _short(c.args), decided)
            calls.add_row(*(_safe(v) for v in shown), _safe(d.decided_by) if d else "")
        console.print(calls)


def _print_conversation(console: Console, run: Any) -> str:
    """The run's conversation; the error text when the stored history cannot be read."""
    from golem.errors import HistoryError
    from golem.messages import loads_history

    console.rule("Conversation")
    try:
        messages = loads_history(run.conversation)
    except HistoryError as exc:  # a stored history golem did not write: show the rest
        console.print("(unreadable: see the error below)")
        return f"run {run.id}: the stored conversation cannot be read: {exc}"
    for m in messages:
        head = m.role if m.role != "tool" else f"tool {m.tool_name}"
        console.print(f"[bold]{_safe(head)}[/]", end=" ")
        console.print(reveal(m.content or ""), markup=False)
        for t in m.tool_calls:
            console.print(reveal(f"  → {t.name}({t.args}) [{t.id}]"), markup=False)
    return ""


def _demo(
    once: Annotated[
        bool, typer.Option("--once", help="Run the whole cycle through the HTTP API and exit.")
    ] = False,
    host: Host = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0 picks a free one).")] = 8765,
    db: Annotated[
        str | None, typer.Option("--db", help="Keep the demo store here (default: a temp file).")
    ] = None,
) -> None:
    """Serve the demo agent (scripted model, SQLite store) and print a sign-in link."""
    from golem.cli import demo
    from golem.durable.worker import start_run

    with demo.demo_db(db) as url:
        if once:
            raise typer.Exit(asyncio.run(demo.run_once(url, _console())))
        registry = demo.build_registry()

        async def first_run(store: Any) -> Any:
            return await start_run(store, registry, "ops", demo.DEMO_PROMPT, started_by="demo")

        run = _with_store(url, first_run, create=True)
        demo.serve(url, host, port or demo.free_port(host), registry, run.id, _console())


def _resolve(
    run_id: Annotated[str, typer.Argument(metavar="RUN", help="The interrupted run's ID.")],
    retry: Annotated[
        bool, typer.Option("--retry", help="Make the run ready for another resume attempt.")
    ] = False,
    cancel: Annotated[bool, typer.Option("--cancel", help="Close the run as failed.")] = False,
    note: Annotated[str, typer.Option("--note", help="Why (kept in the audit log).")] = "",
    confirm: Annotated[
        list[str] | None,
        typer.Option(
            "--confirm",
            metavar="CALL",
            help="With --retry: an approved call that may run again although its tool is "
            "not declared idempotent (repeat for several).",
        ),
    ] = None,
    identity: Annotated[
        str | None, typer.Option("--as", help="Operator identity (default cli:<user>).")
    ] = None,
    db: Db = None,
) -> None:
    """Resolve an interrupted run: retry it (idempotent or confirmed calls only) or cancel it."""
    from golem.durable.store import DecisionKind

    if retry == cancel:
        raise _err("give exactly one of --retry or --cancel", 2)
    if not note.strip():
        raise _err("--note is required: say why, for the audit log", 2)
    if cancel and confirm:
        raise _err("--confirm applies to --retry only", 2)
    who = _identity(identity)

    async def go(store: Any) -> Any:
        if cancel:
            return await store.cancel_interrupted(run_id, resolved_by=who, note=note)
        return await store.retry_interrupted(
            run_id, resolved_by=who, note=note, confirm_calls=confirm or ()
        )

    run = _with_store(_db(db), go)  # store errors (not interrupted, unknown call) exit 1
    out = _console()
    if cancel:
        out.print(f"run {run_id} cancelled (failed) by {who}")
        return
    out.print(f"run {run_id} is ready for attempt {run.attempt} (by {who}); a worker resumes it")
    for call in run.calls:
        if call.decision is None or call.decision.kind is not DecisionKind.APPROVE:
            continue
        if call.rerun_confirmed_by:
            out.print(f"  {call.call_id} ({call.tool_name}): runs again, confirmed")
        else:
            out.print(  # it is too late to confirm it: the run is no longer interrupted
                f"  {call.call_id} ({call.tool_name}): runs again only if its tool is declared "
                "idempotent; otherwise this attempt denies it (not confirmed: a call is "
                f"confirmed only by the --retry itself, with --confirm {call.call_id})"
            )


def _print_version(value: bool) -> None:
    if value:
        from golem import __version__

        print(f"golem {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print golem's version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """The options before any command (`golem --version`)."""


def build_app() -> typer.Typer:
    """The Typer application with every command registered."""
    app = typer.Typer(
        name="golem",
        help="Durable approvals for golem agents: serve the inbox, run workers, decide.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    for fn in (_serve, _worker, _pending, _approve, _deny, _answer, _show, _resolve, _demo):
        app.command(fn.__name__.removeprefix("_"))(fn)
    return app


def main(argv: list[str] | None = None) -> None:
    """Run the `golem` command (exit status 2 and the install line without the extra)."""
    if _MISSING is not None:
        print(
            f"golem: the command line needs the [server] extra ({_MISSING} is missing):\n"
            f"  {INSTALL_HINT}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    build_app()(args=argv, prog_name="golem")
