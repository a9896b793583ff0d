"""Call IDs are matched exactly by the store (ADR 0065): a decision naming another Unicode
form of a pending call's ID is refused by name, and the pending call stays undecided."""

from __future__ import annotations

import unicodedata

import pytest

from golem.durable.store import CallKind, CallNotFound, Decision, NewCall, NewRun, RunStatus, Store

FORMS = [("c\u00e9", "ce\u0301"), ("ce\u0301", "c\u00e9"), ("\u212b", "\u00c5"), ("\ufb01", "fi")]


@pytest.mark.parametrize(("stored", "decided"), FORMS, ids=["nfc-nfd", "nfd-nfc", "angstrom", "fi"])
async def test_a_decision_for_another_unicode_form_of_a_call_id_is_call_not_found(
    store: Store, stored: str, decided: str
) -> None:
    assert stored != decided
    assert unicodedata.normalize("NFKC", stored) == unicodedata.normalize("NFKC", decided)
    await store.save_pending(
        NewRun(
            id="u1",
            agent="ops",
            conversation_id="conv",
            history="[]",
            calls=(NewCall(call_id=stored, kind=CallKind.APPROVAL, tool_name="t", args="{}"),),
        )
    )
    with pytest.raises(CallNotFound):
        await store.decide("u1", decided, Decision.approve(), decided_by="mallory")
    run = await store.get_run("u1")
    assert run.status is RunStatus.PENDING
    assert [(c.call_id, c.decision) for c in run.calls] == [(stored, None)]
    await store.decide("u1", stored, Decision.approve(), decided_by="bob")
    run = await store.get_run("u1")
    assert run.status is RunStatus.READY
