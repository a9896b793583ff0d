"""Load the recorded provider exchanges and replay them with httpx.

The recordings live outside the repository, in `../shared/recordings/pydantic-ai/` next to the
checkout; set `GOLEM_RECORDINGS` to read them from elsewhere (the `pydantic-ai` directory itself,
or the `recordings` directory above it). Without them the replay tests skip with `MISSING` as the
reason (tests/providers/conftest.py does the same for test cases drawn from them).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ENV = "GOLEM_RECORDINGS"
DEFAULT = ROOT.parent / "shared" / "recordings" / "pydantic-ai"
APIS = ("openai-chat", "openai-responses", "anthropic", "gemini")


def location(value: str | None = None) -> Path:
    """Where the recordings are: `$GOLEM_RECORDINGS` (or its `pydantic-ai` subdirectory when it
    has one), else `DEFAULT`."""
    value = os.environ.get(ENV, "") if value is None else value
    if not value.strip():
        return DEFAULT
    path = Path(value.strip()).expanduser()
    return path / "pydantic-ai" if (path / "pydantic-ai").is_dir() else path


RECORDINGS = location()
MISSING = (
    f"provider recordings not found at {RECORDINGS}: set {ENV} to the directory holding "
    f"{', '.join(f'{api}/' for api in APIS)} (see CONTRIBUTING.md)"
)


@dataclass
class Interaction:
    """One recorded request/response pair."""

    cassette: str
    index: int
    method: str
    uri: str
    request_body: Any
    status: int
    headers: dict[str, str]
    body: str

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def is_stream(self) -> bool:
        ctype = self.headers.get("content-type", "")
        return "event-stream" in ctype or self.body.lstrip().startswith(("data:", "event:"))


def _header_map(raw: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in (raw or {}).items():
        out[k.lower()] = v[0] if isinstance(v, list) and v else str(v)
    return out


def load(api: str, name: str) -> list[Interaction]:
    """All interactions of one cassette (`api` is openai-chat, openai-responses, anthropic or
    gemini); an empty cassette has none."""
    return list(_load(api, name))


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's loader when PyYAML has it (the pure-Python one took ~30 s per test module
that reads every cassette)."""


@functools.cache
def _load(api: str, name: str) -> tuple[Interaction, ...]:
    path = RECORDINGS / api / name
    data = yaml.load(path.read_text(), Loader=_LOADER)  # a safe loader
    out = []
    for i, it in enumerate((data or {}).get("interactions") or []):
        req, resp = it["request"], it["response"]
        body = resp.get("parsed_body")
        if body is not None:
            text = json.dumps(body)
        else:
            raw = (resp.get("body") or {}).get("string", "")
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        out.append(
            Interaction(
                cassette=name,
                index=i,
                method=req.get("method", "POST"),
                uri=req.get("uri", ""),
                request_body=req.get("parsed_body"),
                status=int(
                    resp["status"]["code"] if isinstance(resp["status"], dict) else resp["status"]
                ),
                headers=_header_map(resp.get("headers")),
                body=text,
            )
        )
    return tuple(out)


def all_interactions(api: str) -> Iterator[Interaction]:
    """Every interaction of every cassette of one API, in file order."""
    for path in sorted((RECORDINGS / api).glob("*.yaml")):
        yield from load(api, path.name)


def available(api: str | None = None) -> bool:
    """Whether the recordings (of one API, when named) are there."""
    return (RECORDINGS / api if api else RECORDINGS).is_dir()


needs_recordings = pytest.mark.skipif(not available(), reason=MISSING)
"""Skip a test (or, as `pytestmark`, a module) when the recordings are missing, saying where they
were looked for and how to point the tests at them."""


def replay_transport(
    interactions: list[Interaction], seen: list[httpx.Request] | None = None
) -> httpx.MockTransport:
    """A transport that answers each request with the next recorded response, in order."""
    queue = list(interactions)

    def handler(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if not queue:
            raise AssertionError(f"unexpected extra request to {request.url}")
        it = queue.pop(0)
        headers = {"content-type": it.headers.get("content-type", "application/json")}
        return httpx.Response(it.status, headers=headers, content=it.body.encode())

    return httpx.MockTransport(handler)


def interaction_id(it: Interaction) -> str:
    return f"{it.cassette.removesuffix('.yaml')}#{it.index}"


def _is_answer(api: str, it: Interaction) -> bool:
    path = it.uri.split("?", 1)[0]
    if api == "openai-chat":
        return path.endswith("/chat/completions")
    if api == "anthropic":
        host = path.startswith("https://api.anthropic.com/")  # errors of any endpoint
        return path == "https://api.anthropic.com/v1/messages" or (host and it.status != 200)
    if api == "gemini":
        return "/v1beta/models/" in path and path.endswith(
            (":generateContent", ":streamGenerateContent")
        )
    if "/responses" not in path or it.status != 200:
        return "/responses" in path
    if it.is_stream:
        return "response.completed" in it.body
    return isinstance(it.json, dict) and it.json.get("status") == "completed"


def answers(api: str, *, ok: bool = True) -> list[Interaction]:
    """The recorded model calls of `api` answered with 200 (`ok`) or with an error; other
    endpoints and background polling left out."""
    if not available(api):
        return []
    return [
        it
        for it in all_interactions(api)
        if _is_answer(api, it) and (it.status == 200) is ok
    ]
