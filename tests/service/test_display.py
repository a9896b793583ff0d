"""Hidden characters in model text are shown, in the inbox and in the CLI."""

from __future__ import annotations

import asyncio
import unicodedata
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from golem._display import reveal, reveal_parts
from golem.durable.store import open_store
from golem.durable.worker import start_run
from tests.support.agents import build_registry
from tests.support.cli import golem

TRICK = "rm -rf /home/\u202egpj.exe \x1b[2J\x1b]0;pwned\x07 zero\u200bwidth"


def test_bidi_overrides_and_escapes_become_visible_markers() -> None:
    shown = reveal("rm -rf /home/\u202egpj.exe")
    assert shown == "rm -rf /home/⟨U+202E RLO⟩gpj.exe"
    assert reveal("a\x1b[31mred") == "a⟨U+001B ESC⟩[31mred"
    assert reveal("zero\u200bwidth\ufeff") == "zero⟨U+200B ZWSP⟩width⟨U+FEFF BOM⟩"
    assert reveal("lines\nand\ttabs stay") == "lines\nand\ttabs stay"
    assert reveal("plain") == "plain"


@given(st.text())
def test_revealed_text_has_nothing_hidden_and_keeps_visible_text(text: str) -> None:
    hidden = {"Cc", "Cf", "Zl", "Zp", "Co", "Cs"}
    shown = reveal(text)
    assert all(ch in "\n\t" or unicodedata.category(ch) not in hidden for ch in shown)
    kept = "".join(p for p, marker in reveal_parts(text) if not marker)
    assert kept == "".join(
        ch
        for ch in text
        if ch in "\n\t" or (unicodedata.category(ch) not in hidden and ch != "\u00ad")
    )


def test_the_cli_never_prints_hidden_characters_or_escapes(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"

    async def seed() -> str:
        store = await open_store(db)
        try:
            run = await start_run(store, build_registry(), "mixed", TRICK, started_by="seed")
            return run.id
        finally:
            await store.close()

    run_id = asyncio.run(seed())
    for args in (("pending", "--db", db), ("show", run_id, "--db", db)):
        out = golem(*args).output
        for hidden in ("\x1b", "\u202e", "\u200b"):
            assert hidden not in out, args
        assert "U+202E RLO" in out, args
        assert "U+001B ESC" in out, args
