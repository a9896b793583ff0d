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
