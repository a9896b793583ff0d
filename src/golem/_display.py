"""Show model text to a person without letting it lie: `reveal_parts` marks bidi controls,
invisible format characters and control characters other than newline and tab
(`⟨U+202E RLO⟩`), for the inbox and the CLI."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["has_hidden", "marker", "reveal", "reveal_parts"]

_NAMES = {
    "\u061c": "ALM",
    "\u200b": "ZWSP",
    "\u200c": "ZWNJ",
    "\u200d": "ZWJ",
    "\u200e": "LRM",
    "\u200f": "RLM",
    "\u202a": "LRE",
    "\u202b": "RLE",
    "\u202c": "PDF",
    "\u202d": "LRO",
    "\u202e": "RLO",
    "\u2060": "WJ",
    "\u2066": "LRI",
    "\u2067": "RLI",
    "\u2068": "FSI",
    "\u2069": "PDI",
    "\ufeff": "BOM",
    "\u00ad": "SHY",
    "\x1b": "ESC",
    "\x7f": "DEL",
}


def _hidden(ch: str) -> bool:
    if ch in "\n\t":
        return False
    if ch in _NAMES:
        return True
    category = unicodedata.category(ch)
    # Cc: control characters; Cf: format characters (bidi, zero-width, tags, ...);
    # Zl/Zp: line and paragraph separators that some renderers break on.
    return category in ("Cc", "Cf", "Zl", "Zp", "Co", "Cs")


def marker(ch: str) -> str:
    """The visible stand-in of one hidden character, e.g. `⟨U+202E RLO⟩`."""
    name = _NAMES.get(ch)
    code = f"U+{ord(ch):04X}"
    return f"⟨{code} {name}⟩" if name else f"⟨{code}⟩"


_ASCII_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f]")


def has_hidden(text: str) -> bool:
    """Whether `text` holds a character `reveal` would replace (fast for ASCII text)."""
    if text.isascii():
        return _ASCII_HIDDEN.search(text) is not None
    return any(_hidden(ch) for ch in text)


def reveal_parts(text: str) -> list[tuple[str, bool]]:
    """Split `text` into `(run, is_marker)` pieces; markers stand for hidden characters."""
    if not has_hidden(text):
        return [(text, False)] if text else []
    parts: list[tuple[str, bool]] = []
    start = 0
    for i, ch in enumerate(text):
        if _hidden(ch):
            if start < i:
                parts.append((text[start:i], False))
            parts.append((marker(ch), True))
            start = i + 1
    if start < len(text):
        parts.append((text[start:], False))
    return parts


def reveal(text: str) -> str:
    """`text` with every hidden character replaced by its visible marker (safe for a terminal)."""
    if not has_hidden(text):
        return text
    return "".join(part for part, _ in reveal_parts(text))
