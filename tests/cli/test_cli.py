"""The `golem` command: decisions from the terminal, `demo --once`, and the serving commands."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from golem.durable.store import open_store
from tests.support.cli import WAIT, golem, golem_process, load, seed, wait_for


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


# --------------------------------------------------------------------------- in-process commands


def test_pending_lists_undecided_calls(db: str) -> None:
    assert "no golem database at" in golem("pending", "--db", db).output

    async def create() -> None:
        await (await open_store(db)).close()

    asyncio.run(create())
    assert "Nothing is waiting" in golem("pending", "--db", db).output
    twin, mixed = seed(db, "twin", "mixed")
    out = golem("pending", "--db", db).output
    assert "4 pending call(s)" in out
    for run in (twin, mixed):
        assert run.id in out
    assert "lookup" in out
    assert "deploys to staging" in out
    only = golem("pending", "--db", db, "--tool", "lookup").output
    assert "1 pending call(s)" in only
    assert twin.id not in only
    assert "2 pending call(s)" in golem("pending", "--db", db, "--agent", "twin").output
    assert "4 pending call(s)" in golem("pending", env={"GOLEM_DB": db}).output


def test_commands_on_a_missing_database_say_so_and_create_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.db"
    for url in (str(missing), f"sqlite:///{missing}"):
        for args in (("pending",), ("show", "r1"), ("approve", "r1", "c1")):
            res = golem(*args, "--db", url)
            assert res.exit_code == 1, (args, res.output)
            assert "no golem database at" in res.output
    assert not missing.exists()
    res = golem("pending", "--db", "mysql://nowhere/db")
    assert res.exit_code == 2
    assert "unsupported URL" in res.output


def test_approve_deny_and_answer_record_the_identity(db: str) -> None:
    twin, mixed = seed(db, "twin", "mixed")
    res = golem("approve", twin.id, "c1", "--as", "ops@example.com", "--db", db)
    assert res.exit_code == 0
    assert "1 call(s) still wait" in res.output
    res = golem("deny", twin.id, "c2", "--reason", "prod is frozen", "--db", db)
    assert res.exit_code == 0
    assert "a worker will resume it" in res.output
    res = golem("answer", mixed.id, "x1", "INC-42", "--as", "sam", "--db", db)
    assert res.exit_code == 0
    saved = load(db, twin.id)
    assert saved.call("c1").decision.decided_by == "ops@example.com"  # type: ignore[union-attr]
    denial = saved.call("c2").decision
    assert denial is not None
    assert (denial.kind.value, denial.reason) == ("deny", "prod is frozen")
    assert denial.decided_by.startswith("cli:")
    answered = load(db, mixed.id).call("x1").decision
    assert answered is not None
    assert (answered.text, answered.decided_by) == ("INC-42", "sam")


def test_approve_with_edited_args_records_them_beside_the_models(db: str) -> None:
    (twin,) = seed(db, "twin")
    res = golem("approve", twin.id, "c1", "--args", '{"note": "edited \u202e"}', "--db", db)
    assert res.exit_code == 0, res.output
    decision = load(db, twin.id).call("c1").decision
    assert decision is not None
    assert decision.kind.value == "approve"
    assert decision.args == '{"note": "edited \u202e"}'
    for bad in ("[1, 2]", "not json", '"text"'):
        res = golem("approve", twin.id, "c2", "--args", bad, "--db", db)
        assert res.exit_code == 2, (bad, res.output)
        assert load(db, twin.id).call("c2").decision is None, "a refused edit records nothing"


def test_show_prints_a_run(db: str) -> None:
    (mixed,) = seed(db, "mixed")
    out = golem("show", mixed.id, "--db", db).output
    assert mixed.id in out
    assert "pending" in out
    assert "Working on: go" in out
    assert "Audit trail" in out
    assert "created" in out
    res = golem("show", mixed.id, "--db", db, "--json")
    shown = json.loads(res.output)
    assert shown["id"] == mixed.id
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]
    assert golem("show", "nope", "--db", db).exit_code == 1


def test_demo_once_runs_the_whole_cycle() -> None:
    res = golem("demo", "--once")
    assert res.exit_code == 0, res.output
    out = res.output
    assert "is pending" in out
    assert "restart_service" in out
    assert "approve → 200, decided by demo; run is ready" in out
    assert "resumed the run: True" in out
    assert "→ completed" in out
    assert "restarted web: 4 of 4 instances healthy" in out
    assert "created (demo) → decided (demo) → ready (demo) → claimed" in out


def test_help_lists_every_command_and_serve_needs_approvers_and_a_registry(db: str) -> None:
    out = golem("--help").output
    for command in ("serve", "worker", "pending", "approve", "deny", "answer", "show", "demo"):
        assert command in out
    env = {"GOLEM_APPROVERS": "", "GOLEM_APPROVERS_FILE": ""}
    res = golem("serve", "--app", "tests.support.agents:registry", "--db", db, env=env)
    assert res.exit_code == 2
    assert "no approvers configured" in res.output
    res = golem("serve", "--app", "tests.service.nothing:registry", "--db", db)
    assert res.exit_code == 2
    assert "No module named" in res.output
    res = golem("worker", "--app", "tests.support.agents", "--db", db)
    assert res.exit_code == 2
    assert "module:attribute" in res.output
    env = {"GOLEM_APPROVERS": '{"t": "alice"}'}
    app = "tests.support.agents:registry"
    res = golem("serve", "--app", app, "--db", db, "--notify", "ftp://nope", env=env)
    assert res.exit_code == 2
    assert "webhook URL must be http(s)" in res.output


def test_serve_asked_for_a_missing_uvloop_says_how_to_install_it(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` fails
    env = {"GOLEM_APPROVERS": '{"t": "alice"}'}
    app = "tests.support.agents:registry"
    res = golem("serve", "--app", app, "--db", db, "--loop", "uvloop", env=env)
    assert res.exit_code == 2
    assert "pip install 'golem-agents[uvloop]'" in res.output


def test_without_the_server_extra_golem_prints_the_install_line() -> None:
    code = "import sys; sys.modules['typer'] = None; from golem.cli.commands import main; main()"
    proc = subprocess.run(
        [sys.executable, "-c", code, "pending"], capture_output=True, text=True, timeout=WAIT
    )
    assert proc.returncode == 2
    assert "pip install 'golem-agents[server]'" in proc.stderr


# --------------------------------------------------------------------------- processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/api/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_worker_resumes_ready_runs_until_interrupted(db: str) -> None:
    (run,) = seed(db, "mixed", decide=True)
    args = ("worker", "--app", "tests.support.agents:registry", "--db", db, "--poll", "0.05")
    with golem_process(*args, "--id", "w1") as running:
        assert wait_for(lambda: load(db, run.id).status.value == "completed", "the worker")
        out = running.stop()
    assert running.proc.returncode == 0
    assert "golem: worker w1 polling" in out
    assert "golem: worker w1 stopped" in out
    assert load(db, run.id).lease_owner == "w1"


def test_serve_runs_the_service_and_a_worker(db: str) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    approvers = json.dumps({"tok-cli": {"identity": "carol"}})
    args = ("serve", "--app", "tests.support.agents:registry", "--db", db, "--port", str(port))
    with golem_process(*args, env={"GOLEM_APPROVERS": approvers}) as running:
        wait_for(lambda: healthy(base) or running.proc.poll() is not None, "the server")
        assert running.proc.poll() is None, "golem serve exited"
        headers = {"Authorization": "Bearer tok-cli"}
        with httpx.Client(base_url=base, headers=headers, timeout=WAIT) as http:
            run = http.post("/api/runs", json={"agent": "twin", "prompt": "go"}).json()["run"]
            for call in ("c1", "c2"):
                http.post(
                    f"/api/runs/{run['id']}/calls/{call}/decision", json={"decision": "approve"}
                )

            def completed() -> Any:
                shown = http.get(f"/api/runs/{run['id']}").json()["run"]
                return shown if shown["status"] == "completed" else None

            shown = wait_for(completed, "the in-process worker")
        assert shown["outcome"]["output"] == "deployed to staging; deployed to production"
        assert {c["decision"]["decided_by"] for c in shown["calls"]} == {"carol"}


def test_demo_serves_the_demo_agent_with_a_sign_in_link(tmp_path: Path) -> None:
    port = free_port()
    with golem_process("demo", "--port", str(port)) as running:
        while True:
            line = running.next_line()
            match = re.search(r"(http://127\.0\.0\.1:\d+)/login#token=([\w-]+)", line)
            if match:
                break
        base, token = match.groups()
        wait_for(lambda: healthy(base), "the demo server")
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as http:
            calls = http.get("/api/calls").json()["calls"]
            assert [c["tool_name"] for c in calls] == ["restart_service"]
            call = calls[0]
            res = http.post(
                f"/api/runs/{call['run_id']}/calls/{call['call_id']}/decision",
                json={"decision": "approve"},
            )
            assert res.json()["decision"]["decided_by"] == "demo"

            def answer() -> Any:
                shown = http.get(f"/api/runs/{call['run_id']}").json()["run"]
                return shown["outcome"] if shown["status"] == "completed" else None

            outcome = wait_for(answer, "the demo worker")
        assert "restarted web" in outcome["output"]
        assert httpx.get(f"{base}/login").status_code == 200


def test_refused_decisions_exit_1_with_the_reason_as_http_answers_409(db: str) -> None:
    (twin,) = seed(db, "twin")
    for args, why in ((("no-such-run", "c1"), "not found"), ((twin.id, "nope"), "no pending call")):
        res = golem("approve", *args, "--db", db)
        assert res.exit_code == 1
        assert why in res.output
    assert golem("approve", twin.id, "c1", "--as", "alice", "--db", db).exit_code == 0
    res = golem("approve", twin.id, "c1", "--as", "carol", "--db", db)
    assert res.exit_code == 1, res.output
    assert f'call "c1" of run "{twin.id}" is already decided (approve by alice)' in res.output
    assert "nothing was recorded for carol" in res.output
    again = golem("approve", twin.id, "c1", "--as", "alice", "--db", db)
    assert again.exit_code == 0, again.output  # the approver's own repeat is safe to send
    assert "recorded (by alice)" in again.output
    assert load(db, twin.id).call("c1").decision.decided_by == "alice"  # type: ignore[union-attr]
    res = golem("deny", twin.id, "c1", "--as", "alice", "--db", db)
    assert res.exit_code == 1
    assert "already decided" in res.output
    assert load(db, twin.id).call("c1").decision.kind.value == "approve"  # type: ignore[union-attr]
    denied = golem("deny", twin.id, "c2", "--as", "alice", "--db", db)
    assert denied.exit_code == 0
    res = golem("deny", twin.id, "c2", "--as", "carol", "--db", db)
    assert res.exit_code == 1
    assert "already decided (deny by alice)" in res.output
