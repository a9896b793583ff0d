"""`golem worker --concurrency N`: one worker process resumes N runs at once."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from golem import Agent, Message, RunContext, ToolCall
from golem.durable.store import Decision, RunStatus, open_store
from golem.durable.worker import AgentEntry, start_run
from golem.model import ModelRequest
from golem.testing import FunctionModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.support.cli import golem, golem_process, wait_for

MEET = 3


def _model(request: ModelRequest) -> Message | str:
    if request.messages[-1].role == "user":
        return Message(role="assistant", tool_calls=[ToolCall("c1", "meet", "{}")])
    return "met"


async def meet(ctx: RunContext[Any]) -> str:
    """Wait for the other resumes (after approval)."""
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, "meet the others")
    here = Path(os.environ["GOLEM_TEST_MEET_DIR"])
    await asyncio.to_thread((here / ctx.run_id).touch)
    async with asyncio.timeout(60):  # a guard: the test fails instead of hanging
        while len(await asyncio.to_thread(os.listdir, here)) < MEET:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    return "everyone is here"


registry = {"meet": AgentEntry(Agent(FunctionModel(_model), tools=[meet]))}


def _seed(db: str, n: int) -> list[str]:
    async def go() -> list[str]:
        store = await open_store(db)
        try:
            ids = []
            for _ in range(n):
                run = await start_run(store, registry, "meet", "go", started_by="t")
                await store.decide(run.id, "c1", Decision.approve(), decided_by="bob")
                ids.append(run.id)
            return ids
        finally:
            await store.close()

    return asyncio.run(go())


def _statuses(db: str, ids: list[str]) -> list[RunStatus]:
    async def go() -> list[RunStatus]:
        store = await open_store(db)
        try:
            return [(await store.get_run(i)).status for i in ids]
        finally:
            await store.close()

    return asyncio.run(go())


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_worker_concurrency_flag_resumes_that_many_runs_at_once(tmp_path: Path, loop: str) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    meet_dir = tmp_path / "meet"
    meet_dir.mkdir()
    ids = _seed(db, MEET)
    args = (
        "worker",
        "--app",
        "tests.durable.worker.test_cli:registry",
        "--db",
        db,
        "--poll",
        "0.05",
    )
    env = {"GOLEM_TEST_MEET_DIR": str(meet_dir)}
    flags = ("--id", "wc", "--concurrency", str(MEET), "--loop", loop)
    with golem_process(*args, *flags, env=env) as running:
        wait_for(
            lambda: _statuses(db, ids) == [RunStatus.COMPLETED] * MEET, "the concurrent resumes"
        )
        out = running.stop()
    assert running.proc.returncode == 0
    assert f"{MEET} run(s) at once, on {loop}" in out
    assert "golem: worker wc stopped" in out


SECONDS = "must be a number of seconds above 0 and at most 316224000"
BAD_FLAGS = {  # the flags, and what the refusal says
    "loop-trio": (("--loop", "trio"), "--loop"),
    "no-uvloop": (("--loop", "uvloop"), "golem-agents[uvloop]"),  # `import uvloop` fails
    **{f"concurrency-{bad}": (("--concurrency", bad), "--concurrency") for bad in ("0", "-1", "two")},
    **{
        f"{flag[2:]}-{bad}": ((flag, bad), f"{flag} {SECONDS}")
        for flag, bad in [("--lease", "inf"), ("--lease", "1e12"), ("--lease", "nan"),
                          ("--poll", "inf"), ("--poll", "0")]
    },
}  # fmt: skip


@pytest.mark.parametrize(("flags", "says"), BAD_FLAGS.values(), ids=BAD_FLAGS)
def test_a_bad_worker_flag_exits_2_before_opening_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, str], says: str
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    res = golem("worker", "--app", "tests.durable.worker.test_cli:registry", "--db", db, *flags)
    assert res.exit_code == 2, res.output
    assert says in res.output
    assert not (tmp_path / "cli.db").exists(), "nothing opened before the check"
