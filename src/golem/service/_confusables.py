"""Unicode TR39 skeletons: the form under which two look-alike strings are one.

`skeleton("аlice")` (Cyrillic `а`) equals `skeleton("alice")`. The confusables table is
Unicode's `confusables.txt`, as the `confusable-homoglyphs` package ships it: a graph of
characters and their look-alikes in both directions. Each mapping of that file sends a
single character (the source) to its prototype (one or more characters, never itself a
source), so every connected group is a star around its prototype; `_prototypes` reads the
direction back from that shape.
"""

from __future__ import annotations

import unicodedata
from functools import cache

__all__: list[str] = []


@cache
def _prototypes() -> dict[str, str]:
    """Source character → its prototype, from the package's look-alike graph."""
    # read on first use (configuration time): 0.1 s that a process never configuring
    # approvers does not pay
    from confusable_homoglyphs import confusables as _data  # type: ignore[import-untyped]

    graph: dict[str, list[str]] = {
        key: [str(item["c"]) for item in items] for key, items in _data.confusables_data.items()
    }
    out: dict[str, str] = {}
    for key, others in graph.items():
        if len(key) != 1 or len(others) != 1:
            continue  # a prototype (several sources, or several characters)
        other = others[0]
        if len(other) > 1 or len(graph.get(other, ())) > 1:
            out[key] = other  # the other end is a prototype: this is its source
        elif graph.get(other) == [key]:
            # a pair mapped one way, the file's direction not kept: either end stands for
            # both, as long as both choose the same one
            out[key] = min(key, other)
    table = {k: v for k, v in out.items() if k != v}
    # a pair's chosen end may sit inside another prototype (`(日)` beside `⽇`/`日`): map
    # the prototypes too, until nothing changes, so that a skeleton is its own skeleton
    changed = True
    while changed:
        changed = False
        for key, value in table.items():
            mapped = _map(table, value)
            if mapped != value:
                table[key], changed = mapped, True
    return table


def _map(table: dict[str, str], text: str) -> str:
    mapped = "".join(table.get(ch, ch) for ch in unicodedata.normalize("NFD", text))
    return unicodedata.normalize("NFD", mapped)


def skeleton(text: str) -> str:
    """The TR39 skeleton of `text`: NFD, each character replaced by its prototype, NFD."""
    return _map(_prototypes(), text)


_NEUTRAL = frozenset({"COMMON", "INHERITED"})
_ALLOWED_MIXES = (
    frozenset({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}),
    frozenset({"LATIN", "HAN", "BOPOMOFO"}),
    frozenset({"LATIN", "HAN", "HANGUL"}),
)
"""The script mixes TR39's "highly restrictive" level allows within one word (Japanese,
Chinese and Korean writing); any other word holds letters of one script."""


@cache
def _script(ch: str) -> str:
    from confusable_homoglyphs import categories as _categories

    return str(_categories.aliases_categories(ch)[0]).upper()


def mixed_script_word(text: str) -> str | None:
    """The first word of `text` that mixes scripts beyond TR39's "highly restrictive"
    level (a Cyrillic `а` inside a Latin word: `pаypal`), else None. Words are the runs
    between characters of no particular script (spaces, digits, punctuation), so `Иван
    Smith` is two words of one script each."""
    word: list[str] = []
    scripts: set[str] = set()
    for ch in (*unicodedata.normalize("NFD", text), " "):
        script = _script(ch)
        if script not in _NEUTRAL:
            word.append(ch)
            scripts.add(script)
            continue
        if len(scripts) > 1 and not any(scripts <= mix for mix in _ALLOWED_MIXES):
            return unicodedata.normalize("NFC", "".join(word))
        word.clear()
        scripts.clear()
    return None
