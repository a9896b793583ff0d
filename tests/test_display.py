"""The unit test of golem._display: hidden characters in model text are shown, in the inbox
(`reveal_html`) and in the CLI."""

from __future__ import annotations

import asyncio
import html
import re
import unicodedata
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from golem._display import reveal, reveal_parts
from golem.durable.store import open_store
from golem.durable.worker import start_run
from golem.service.views import WORD_CHUNK, reveal_html
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


@settings(deadline=None)
@given(st.text(alphabet=st.sampled_from("aé\u0301 \n<&>\u202e\u200d-x"), max_size=400))
def test_reveal_html_breaks_long_words_and_keeps_the_text(text: str) -> None:
    # A 20,000-letter word in wrapping text took Chromium seconds per occurrence to lay
    # out at phone width (a run page: 20-30 s, test_hostile_text_browser); reveal_html
    # puts a <wbr> in every WORD_CHUNK letters. What it shows is the same text.
    out = str(reveal_html(text))
    assert html.unescape(re.sub(r"<[^>]*>", "", out)) == reveal(text)
    for piece in re.split(r"<wbr>|<[^>]*>", out):
        for word in html.unescape(piece).split():
            letters = [c for c in word if unicodedata.category(c)[0] != "M" and c != "\u200d"]
            assert len(letters) <= WORD_CHUNK, word
