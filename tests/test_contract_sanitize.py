"""`sanitize_history`'s URL rule against the Go reference (§3.7 rule 2): "every part with a
non-empty URL whose scheme (parsed, lowercased) is not http/https is removed — unparsable URLs,
scheme-relative (`//host/x`), `file:`, `ftp:`, `javascript:` (any case), etc." The Go golem
parses with `net/url.Parse`; Python's `urlsplit` is more forgiving (it strips leading spaces and
drops tabs and newlines anywhere, as browsers do), so URLs Go cannot parse kept their `http`
scheme here and were passed on to the provider. They are removed and reported with scheme "".
"""

from __future__ import annotations

import pytest

from golem import Message, Part, UnsafePart, sanitize_history


def _sanitized(url: str) -> tuple[list[Part], list[UnsafePart]]:
    history = [Message(role="user", content="look", parts=[Part("image", url=url)])]
    out, report = sanitize_history(history)
    return out[0].parts, report.unsafe_parts


@pytest.mark.parametrize(
    "url",
    [
        " http://example.com/a.png",  # Go: "first path segment in URL cannot contain colon"
        "http://example.com /a.png",  # a space in the host
        "ht\ttp://example.com/a.png",  # control characters anywhere
        "http://example.com/a\n.png",
        "http://example.com/\x00.png",
        "http://exa mple.com/a.png",
        "http://example.com:https/a.png",  # a port that is not digits
        "http://example.com/%zz.png",  # an invalid escape (path)
        "https://example.com/a.png#%",  # ... fragment
        "http://[::1/a.png",  # an unclosed IPv6 bracket
        "1http://example.com/a.png",  # a scheme starts with a letter
    ],
)
def test_a_url_go_cannot_parse_is_removed_with_an_empty_scheme(url: str) -> None:
    parts, unsafe = _sanitized(url)
    assert parts == []
    assert unsafe == [UnsafePart(message_index=0, kind="image", scheme="")]


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/a.png",
        "HTTPS://EXAMPLE.COM/A.PNG",
        "http://example.com:8080/a b.png",  # Go accepts a space in the path
        "https://example.com/a.png?sig=%zz",  # ... and leaves the query unchecked
        "https://user:pw@[::1]:443/a.png#top",
        "https://bücher.example/a.png",
        "http://example.com:/a.png",  # an empty port
    ],
)
def test_a_url_go_parses_as_http_is_kept(url: str) -> None:
    parts, unsafe = _sanitized(url)
    assert parts == [Part("image", url=url)]
    assert unsafe == []


@pytest.mark.parametrize(
    ("url", "scheme"),
    [("JavaScript:alert(1)", "javascript"), ("file:///etc/passwd", "file"), ("data:,x", "data")],
)
def test_a_parsed_scheme_other_than_http_is_reported_lowercased(url: str, scheme: str) -> None:
    parts, unsafe = _sanitized(url)
    assert parts == []
    assert unsafe == [UnsafePart(message_index=0, kind="image", scheme=scheme)]


# --------------------------------------------------------------------------- any history

from dataclasses import replace  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.support.histories import histories  # noqa: E402

URLS = st.sampled_from(
    ["https://x/a.png", "http://x/b", "file:///etc/passwd", "javascript:alert(1)", "//h/x", ""]
)


@st.composite
def sanitize_inputs(draw: st.DrawFn) -> list[Message]:
    """Any history, with URL parts of every scheme on every role (media answers included)."""
    out = []
    for m in draw(histories()):
        extra = [
            Part("image", url=u, signature=draw(st.just("") | st.just("sig")))
            for u in draw(st.lists(URLS, max_size=2))
            if u
        ]
        out.append(
            Message(
                **{
                    **{f: getattr(m, f) for f in m.__dataclass_fields__},
                    "parts": [*m.parts, *extra],
                }
            )
        )
    return out


def _safe(url: str | None) -> bool:
    return not url or url.lower().startswith(("http://", "https://"))


def _kept(p: Part) -> bool:
    """What sanitizing keeps of a part: a safe URL, and text in a text part (the Go golem
    empties text parts when it re-writes a history)."""
    return _safe(p.url) and not (p.kind == "text" and not p.text)


@settings(deadline=None)
@given(sanitize_inputs())
def test_sanitize_is_idempotent_and_touches_only_what_its_rules_name(
    history: list[Message],
) -> None:
    # Go reference §3.7: rules in order, on a copy; never content, thinking, failed flags,
    # call arguments or stamps; a second pass changes nothing and reports nothing but the
    # truncation it still sees.
    before = list(history)
    out, report = sanitize_history(history)
    assert history == before
    assert report.system_prompts == sum(m.role == "system" for m in history)
    assert all(m.role != "system" for m in out)
    assert all(_safe(p.url) for m in out for p in m.parts)
    removed = [
        (i, p.kind)
        for i, m in enumerate(history)
        if m.role != "system"
        for p in m.parts
        if not _kept(p)
    ]
    assert [(u.message_index, u.kind) for u in report.unsafe_parts] == removed
    # everything kept is an original message (in order) with only its unsafe parts gone:
    # out, less the repair's synthesized results, is a subsequence of the filtered input
    kept = [m for m in out if m.role != "tool" or m.tool_call_id not in report.repair.synthesized]
    originals = iter(
        replace(m, parts=[p for p in m.parts if _kept(p)])
        for m in history
        if m.role != "system"
    )
    assert all(any(m == o for o in originals) for m in kept)
    again, second = sanitize_history(out)
    assert again == out
    assert (second.system_prompts, second.unsafe_parts) == (0, [])
    assert (second.repair.synthesized, second.repair.dropped) == ([], [])
    assert second.repair.truncated == report.repair.truncated
