"""`golem serve` and `golem worker` take their seal key from `$GOLEM_SEAL_KEY`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from golem.durable.store import Decision, RunRecord, RunStatus, open_store
from golem.durable.worker import start_run
from golem.seal import SealKeys
from tests.support.agents import build_registry
from tests.support.cli import golem, golem_process, load, wait_for

KEY = "a-seal-key-of-at-least-32-characters!"
OLD = "an-older-seal-key-of-32-characters-too"


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def approved(db: str, seal_key: SealKeys | None) -> RunRecord:
    """A run of `mixed` saved (sealed with `seal_key`, if any), every call decided."""

    async def go() -> RunRecord:
        store = await open_store(db)
        try:
            run = await start_run(
                store, build_registry(), "mixed", "go", started_by="seed", seal_key=seal_key
            )
            for c in run.calls:
                kind = c.kind.value
                d = Decision.approve() if kind == "approval" else Decision.external("v")
                await store.decide(run.id, c.call_id, d, decided_by="bob")
            return run
        finally:
            await store.close()

    return asyncio.run(go())


def ended(db: str, run_id: str) -> RunRecord | None:
    run = load(db, run_id)
    return run if run.status in (RunStatus.COMPLETED, RunStatus.FAILED) else None


def test_a_worker_with_the_key_resumes_sealed_runs_and_refuses_unsealed_ones(db: str) -> None:
    older = approved(db, SealKeys(OLD.encode(), key_id="k0"))  # sealed before a rotation
    current = approved(db, SealKeys(KEY.encode(), key_id="k2"))
    unsealed = approved(db, None)
    env = {
        "GOLEM_SEAL_KEY": KEY,
        "GOLEM_SEAL_KEY_ID": "k2",
        "GOLEM_SEAL_OLDER_KEYS": f'{{"k0": "{OLD}"}}',
    }
    args = ("worker", "--app", "tests.support.agents:registry", "--db", db, "--poll", "0.05")
    with golem_process(*args, env=env) as running:
        done = [
            wait_for(lambda r=r: ended(db, r.id), "the worker") for r in (older, current, unsealed)
        ]
        out = running.stop()
    assert "verifying seals" in out
    assert [r.status for r in done] == [RunStatus.COMPLETED, RunStatus.COMPLETED, RunStatus.FAILED]
    assert done[2].outcome is not None
    assert "seal" in (done[2].outcome.error or "").lower()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"GOLEM_SEAL_KEY": "too short"}, "at least 32 bytes"),
        ({"GOLEM_SEAL_KEY": KEY, "GOLEM_SEAL_OLDER_KEYS": "[1]"}, "JSON object"),
        ({"GOLEM_SEAL_KEY": KEY, "GOLEM_SEAL_OLDER_KEYS": "{bad"}, "the seal key"),
        ({"GOLEM_SEAL_OLDER_KEYS": "{}"}, "GOLEM_SEAL_KEY is not"),
    ],
)
@pytest.mark.parametrize("command", ["worker", "serve"])
def test_a_bad_seal_key_stops_the_command_before_it_starts(
    db: str, env: dict[str, str], message: str, command: str
) -> None:
    result = golem(command, "--app", "tests.support.agents:registry", "--db", db, env=env)
    assert result.exit_code == 2
    assert message in result.output
