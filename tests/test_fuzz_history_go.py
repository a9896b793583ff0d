"""Damaged histories: golem accepts what the Go golem accepts and refuses what it refuses, but
for the differences ADR 0015, ADR 0047 and ADR 0070 list (on documents Go never writes).

The Go program is `tests/fixtures/gohistory/main.go` (the Go message model read with
`encoding/json`), built as `tests/test_contract_go_interop.py` builds it (skipped without a Go
toolchain). Each damaged document goes to both readers; a disagreement must be one of the
listed differences, recognised from golem's named error or from the document itself.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings

from golem import HistoryError, loads_history
from golem.messages import ROLES
from tests.support.histories import damaged

GO_FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# golem refuses, Go accepts: recognised from golem's message (ADR 0015, 0047, 0070)
_REFUSED_HERE = re.compile(
    r"role must be one of"  # an unknown role (ADR 0015)
    r"|missing required field `role`|role: expected `str`, got `null`"  # no role (ADR 0070)
    r"|holds a lone surrogate"  # in a text field (ADR 0015, 0047)
    r"|expected `object`, got `null`"  # a null array element (ADR 0070)
    r"|citations|serverTools|toolCalls\[\d+\]\.seal|parts\[\d+\]\.(?:text|signature)"  # golem's keys
    r"|parts\[\d+\]\.data: expected `bytes \| null`, got `array`"  # Go: bytes as numbers
)
_GO_KEYS = {
    "role",
    "content",
    "parts",
    "toolCalls",
    "toolCallId",
    "toolName",
    "failed",
    "thinking",
    "runId",
    "conversationId",
    "kind",
    "url",
    "data",
    "mediaType",
    "id",
    "name",
    "args",
    "signature",
    "text",
    "redacted",
}
_FOLDED = {k.casefold(): k for k in _GO_KEYS}


def _keys(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [k for k in value] + [k for v in value.values() for k in _keys(v)]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


def _pairs(document: str) -> Any:
    """The document's JSON with every key kept (duplicates included), or None."""
    try:
        return json.loads(
            document,
            object_pairs_hook=lambda pairs: {f"{i}:{k}": v for i, (k, v) in enumerate(pairs)},
        )
    except (ValueError, RecursionError):
        return None


def _case_folded_key(document: str) -> bool:
    """A key Go would match case-insensitively to one of its fields (golem matches exactly)."""
    value = _pairs(document)
    if value is None:
        return False
    for key in _keys(value):
        name = key.split(":", 1)[1]
        known = _FOLDED.get(name.casefold()) or _FOLDED.get(
            name.replace("\u017f", "s").replace("\u212a", "k").casefold()
        )
        if known is not None and known != name:
            return True
    return False


def _base64_line_breaks(document: str) -> bool:
    return re.search(r'"data"\s*:\s*"[^"]*\\[rn]', document) is not None


def _explained(document: str, ours: str | None, theirs: dict[str, Any]) -> bool:
    if ours is not None and theirs["ok"]:  # golem refuses what Go accepts
        return (
            bool(_REFUSED_HERE.search(ours))
            or _case_folded_key(document)
            or ("base64" in ours and _base64_line_breaks(document))
        )
    if ours is None and not theirs["ok"]:  # golem accepts what Go refuses
        return _case_folded_key(document)
    return True


def _golem(document: str | bytes) -> str | None:
    try:
        loads_history(document)
    except HistoryError as exc:
        return str(exc)
    return None


@GO_FUZZ
@example(b'[{"Role":"user"}]')
@example(b'[{"role":"user","Content":5}]')
@example(b'[{"role":"user","citations":5}]')
@example(b'[{"role":"assistant","toolCalls":[null]}]')
@example(b'[{"role":"user","parts":[{"kind":"image","data":"aGVs\\nbG8=","mediaType":"a/b"}]}]')
@example(
    b'[{"role":"assistant","toolCalls":[{"id":"a","name":"n","args":'
    + b"[" * 1500
    + b"]" * 1500
    + b"}]}]"
)
@example(b'[{"role":"user","content":"\\ud800"}]')
@example(b'[{"role":"user","content":"\xed\xa0\x80","x":"\xff"}]')  # not UTF-8: both load
@example(b'[{"role":"assistant","toolCalls":[{"id":"a","name":"n","args":["\xe2\x82"]}]}]')
@example(b'[{"role":"user","x":' + b"[" * 9998 + b"]" * 9998 + b"}]")  # 10,000 deep: both load
@example(b'[{"role":"user","x":' + b"[" * 9999 + b"]" * 9999 + b"}]")  # 10,001: both refuse
@example(b'[{"role":"user","parts":[{"kind":"image","data":[104,105],"mediaType":"a/b"}]}]')
@example(b'[{"role":"user","parts":[{"kind":"image","data":[104,105],"mediaType":"a/b"}]}]')
@given(damaged())
def test_golem_and_go_agree_on_damaged_histories_but_for_the_listed_differences(
    go: Any,
    document: bytes,
) -> None:
    try:
        text = document.decode()
    except UnicodeDecodeError:
        # both read each byte that is not UTF-8 as U+FFFD (ADR 0075); sent as bytes
        text = document.decode("utf-8", "golem-go-replace")
        (theirs,) = go("b64:" + base64.b64encode(document).decode())
        ours = _golem(document)
    else:
        (theirs,) = go(text)
        ours = _golem(text)
    assert _explained(text, ours, theirs), (
        f"golem {'refuses: ' + ours if ours else 'accepts'}; "
        f"Go {'accepts' if theirs['ok'] else 'refuses: ' + theirs['err']}"
    )


@pytest.mark.parametrize("role", sorted(ROLES))
def test_both_accept_every_role_and_an_unknown_key(go: Any, role: str) -> None:
    document = json.dumps([{"role": role, "x": [1e300, {"y": None}]}])
    (theirs,) = go(document)
    assert theirs["ok"]
    assert _golem(document) is None
