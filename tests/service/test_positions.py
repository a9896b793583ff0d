"""The unit test of golem.service.positions: sealed cursors and entry references read back
exactly, under this service's secret only, and anything else is None."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from golem.durable.store import AuditAction, AuditEntry
from golem.service.positions import entry_id, read_position, seal_cursor

SECRET = b"audit-pages-secret-that-is-32-bytes!"


@settings(deadline=None)
@given(
    entry=st.integers(0, 2**63 - 1),
    text=st.text(max_size=60) | st.from_regex(r"[se][A-Za-z0-9_=!-]{20,50}", fullmatch=True),
    at=st.integers(0, 60),
    to=st.characters(codec="utf-8"),
)
def test_positions_read_back_exactly_and_nothing_else_raises(
    entry: int, text: str, at: int, to: str
) -> None:
    reference = entry_id(
        AuditEntry(entry, "r", datetime.now(UTC), "a", AuditAction.DECIDED), SECRET
    )
    assert isinstance(reference, str)
    for full in (True, False):
        value = read_position(SECRET, text, full_view=full)
        assert value is None or 0 <= value < 2**63
        for sealed in (reference, seal_cursor(SECRET, entry)):
            assert read_position(SECRET, sealed, full_view=full) == entry
            assert (
                read_position(b"another-secret-of-32-bytes-long!", sealed, full_view=full) is None
            )
            i = at % len(sealed)
            changed = sealed[:i] + to + sealed[i + 1 :]
            if changed != sealed:  # one character changed: refused, however it decodes
                assert read_position(SECRET, changed, full_view=full) is None, (sealed, changed)
