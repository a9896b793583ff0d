"""The Chat Completions wire format: request bodies from golem requests, responses from bodies."""

from __future__ import annotations

import base64
import hashlib
import json
import mimetypes
import re
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from golem.errors import ResponseFormatError
from golem.messages import Citation, Message, Part, ThinkingBlock, ToolCall
from golem.model import TOOL_CHOICE_MODES, FinishReason, ModelRequest, ModelResponse, ToolSpec
from golem.providers._answers import (
    ASSISTANT_MEDIA_TEXT,
    CHAT_AUDIO_PREFIX,
    finish_of,
    named_calls,
    refuse_no_answer,
    unique_calls,
)
from golem.providers._jsonio import (
    args_json,
    base64_bytes,
    dig,
    given,
    int_of,
    json_text,
    raw_json,
    table,
    text_of,
    usage_of,
)
from golem.providers.openai._errors import error_from_payload
from golem.providers.openai._schemas import schema_name, strict_compatible
from golem.usage import Usage

__all__ = [
    "CHAT_USAGE",
    "PROVIDER",
    "TOOL_PARTS_PLACEHOLDER",
    "Options",
    "RequestOptions",
    "SystemRole",
    "answer",
    "audio_id_of",
    "build_request_body",
    "citations_of",
    "data_url",
    "foreign_call",
    "json_schema_format",
    "map_messages",
    "media_message",
    "parse_response",
    "parse_tool_call",
    "reasoning_text",
    "synthesize_call_id",
    "text_content",
    "tool_choice_of",
    "user_content",
    "wire_args",
    "wire_call_id",
]

PROVIDER = "openai"

SystemRole = Literal["system", "developer", "user"]

TOOL_PARTS_PLACEHOLDER = "File attached"
"""Tool message text when a tool returned only parts (they follow in a user message)."""


@dataclass(frozen=True, slots=True)
class Options:
    """What an OpenAI model (either API) adds to every request body, besides the conversation."""

    model: str
    """Model name sent as `model`."""
    max_tokens: int | None = None
    """Sent as `max_completion_tokens` (Chat), `max_output_tokens` (Responses)."""
    temperature: float | None = None
    top_p: float | None = None
    reasoning_effort: str | None = None
    """Sent as `reasoning_effort` (Chat), `reasoning.effort` (Responses): "low", "high", ..."""
    strict: bool = True
    """Mark tool and output schemas `strict` when they already satisfy OpenAI's strict subset."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Merged last into the body (shallow), overriding what golem set; for Responses, a
    `tools` list is added after the function tools (`{"type": "web_search"}`, ...)."""


@dataclass(frozen=True, slots=True)
class RequestOptions(Options):
    """What an `OpenAIChatModel` adds to every request body (beside `Options`)."""

    stop: list[str] | None = None
    system_role: SystemRole = "system"
    """Role that system messages are sent with."""
    reasoning_field: str | None = None
    """Send thinking text back in this assistant-message field (e.g. "reasoning_content")."""
    tool_call_signatures: bool = False
    """Send `ToolCall.signature` back as Gemini's `extra_content.google.thought_signature`."""


# --------------------------------------------------------------------------- request


def build_request_body(
    request: ModelRequest, options: RequestOptions, *, stream: bool = False
) -> dict[str, Any]:
    """The JSON body of `POST /chat/completions` for `request`."""
    body: dict[str, Any] = {
        "model": options.model,
        "messages": map_messages(request.messages, options),
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if request.tools:
        body["tools"] = [_tool(t, options.strict) for t in request.tools]
        body["tool_choice"] = tool_choice_of(request.tool_choice)
    if request.output_schema is not None:
        fmt = json_schema_format(request.output_schema, options.strict)
        body["response_format"] = {"type": "json_schema", "json_schema": fmt}
    body |= given(
        max_completion_tokens=options.max_tokens,
        temperature=options.temperature,
        top_p=options.top_p,
        stop=list(options.stop) if options.stop else None,
        reasoning_effort=options.reasoning_effort,
    )
    body.update(options.extra_body)
    return body


def tool_choice_of(choice: str, *, nested: bool = True) -> str | dict[str, Any]:
    """The `tool_choice`: "auto", "required", "none", or the named function (Chat nests
    its name in `function`, Responses does not)."""
    if choice in TOOL_CHOICE_MODES:
        return choice
    return (
        {"type": "function", "function": {"name": choice}}
        if nested
        else {"type": "function", "name": choice}
    )


def json_schema_format(schema: dict[str, Any], strict: bool) -> dict[str, Any]:
    """The `json_schema` output format of both APIs (Chat wraps it in `json_schema`)."""
    return {
        "name": schema_name(schema),
        "schema": schema,
        "strict": strict and strict_compatible(schema),
    }


def _tool(spec: ToolSpec, strict: bool) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.schema,
    }
    if strict and strict_compatible(spec.schema):
        function["strict"] = True
    return {"type": "function", "function": function}


def map_messages(messages: Sequence[Message], options: RequestOptions) -> list[dict[str, Any]]:
    """Map a golem conversation to Chat Completions messages."""
    out: list[dict[str, Any]] = []
    ids = _CallIds()
    attachments: list[tuple[str, Message]] = []
    media: list[Part] = []
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    for i, m in enumerate(messages):
        if m.role != "tool":
            if media:
                out.append(media_message(media, _part))
                media = []
            if attachments:
                out.append(_attachments_message(attachments))
                attachments = []
        if m.role == "system":
            out.append({"role": options.system_role, "content": m.content})
        elif m.role == "user":
            out.append({"role": "user", "content": user_content(m, _part)})
        elif m.role == "assistant":
            msg = _assistant_message(m, i, ids, options, after_last_user=i > last_user)
            out.append(msg)
            # assistant turns take text only: the media follow it (an audio answer the
            # API still holds goes back by its ID instead)
            media = [p for p in m.parts if "audio" not in msg or not _chat_audio(p)]
        else:
            call_id = ids.for_result(m)
            content = m.content
            if not content and m.parts:
                content = TOOL_PARTS_PLACEHOLDER
            out.append({"role": "tool", "tool_call_id": call_id, "content": content})
            if m.parts:
                attachments.append((call_id, m))
    if media:
        out.append(media_message(media, _part))
    if attachments:
        out.append(_attachments_message(attachments))
    return out


def media_message(
    parts: list[Part], part: Callable[[Part], dict[str, Any]], text: str = "text"
) -> dict[str, Any]:
    """The user message carrying the media of an assistant message (ADR 0060)."""
    return {
        "role": "user",
        "content": [{"type": text, "text": ASSISTANT_MEDIA_TEXT}, *map(part, parts)],
    }


def user_content(
    m: Message, part: Callable[[Part], dict[str, Any]], text: str = "text"
) -> str | list[dict[str, Any]]:
    """A user (or tool) message's content: its text, or text and parts as a list."""
    if not m.parts:
        return m.content
    head = [{"type": text, "text": m.content}] if m.content else []
    return [*head, *map(part, m.parts)]


def _attachments_message(attachments: list[tuple[str, Message]]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    labelled = len(attachments) > 1
    for call_id, m in attachments:
        if labelled:
            label = f"Attachments of tool call {call_id} ({m.tool_name}):"
            content.append({"type": "text", "text": label})
        content.extend(_part(p) for p in m.parts)
    return {"role": "user", "content": content}


def _chat_audio(p: Part) -> bool:
    return p.kind == "audio" and p.signature.startswith(CHAT_AUDIO_PREFIX)


def audio_id_of(m: Message, now: float | None = None) -> str:
    """The ID of the audio answer `m` holds, while the API still keeps it (its `expires_at`
    is after `now`, default the current time; an audio without one is taken as kept); ""
    when there is none, or it has expired."""
    for p in m.parts:
        if _chat_audio(p):
            expires, _, audio_id = p.signature[len(CHAT_AUDIO_PREFIX) :].partition("/")
            try:
                expired = float(expires) <= (time.time() if now is None else now)
            except ValueError:
                expired = False
            return "" if expired else audio_id
    return ""


def _assistant_message(
    m: Message, index: int, ids: _CallIds, options: RequestOptions, *, after_last_user: bool
) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant"}
    audio_id = audio_id_of(m)
    if audio_id:
        # an audio answer goes back by its ID (the API keeps its audio and transcript for
        # multi-turn conversations); its text is that transcript
        msg["audio"] = {"id": audio_id}
    elif m.content or not m.tool_calls:
        msg["content"] = m.content
    if m.tool_calls:
        ids.start_turn()
        calls = []
        for j, c in enumerate(m.tool_calls):
            call: dict[str, Any] = {
                "id": ids.for_call(c, index, j),
                "type": "function",
                "function": {"name": c.name, "arguments": wire_args(c.args)},
            }
            if options.tool_call_signatures and c.signature:
                call["extra_content"] = {"google": {"thought_signature": c.signature}}
            calls.append(call)
        msg["tool_calls"] = calls
    if options.reasoning_field:
        text = "\n\n".join(t.text for t in m.thinking if t.text)
        if text:
            msg[options.reasoning_field] = text
        elif m.tool_calls and after_last_user:
            # DeepSeek's thinking mode rejects a current-turn tool call without the field.
            msg[options.reasoning_field] = ""
    return msg


def wire_args(args: str) -> str:
    """Arguments as sent: the raw text when it is a JSON object, else wrapped in one."""
    if not args.strip():
        return "{}"
    try:
        value = json.loads(args)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict):
        return args
    if isinstance(value, str):
        # History JSON stores arguments that are not JSON as a string value; unwrap it.
        args = value
    return json.dumps({"truncated_args": args}, ensure_ascii=False)


_ID_OK = re.compile(r"[A-Za-z0-9_-]{1,40}")


def wire_call_id(call_id: str) -> str:
    """The call ID as sent: IDs OpenAI accepts (<= 40 chars of [A-Za-z0-9_-]) unchanged,
    others replaced by a stable `call_<hash>`."""
    if _ID_OK.fullmatch(call_id):
        return call_id
    return "call_" + hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:32]


def synthesize_call_id() -> str:
    """A fresh call ID for a tool call the server sent without one."""
    return "call_" + secrets.token_hex(12)


class _CallIds:
    """Wire IDs for calls, pairing calls that have no ID with their results by order and name."""

    def __init__(self) -> None:
        self._unnamed: list[tuple[str, str]] = []

    def start_turn(self) -> None:
        self._unnamed = []

    def for_call(self, call: ToolCall, message_index: int, call_index: int) -> str:
        if call.id:
            return wire_call_id(call.id)
        synthetic = f"call_{message_index}_{call_index}"
        self._unnamed.append((call.name, synthetic))
        return synthetic

    def for_result(self, m: Message) -> str:
        if m.tool_call_id:
            return wire_call_id(m.tool_call_id)
        for k, (name, synthetic) in enumerate(self._unnamed):
            if not m.tool_name or name == m.tool_name:
                del self._unnamed[k]
                return synthetic
        return wire_call_id("")


# --------------------------------------------------------------------------- parts

_TEXT_TYPES = ("application/json", "application/xml", "application/x-yaml", "application/yaml")
_AUDIO_FORMATS = table("audio/mpeg=mp3 audio/mp3=mp3 audio/wav=wav audio/x-wav=wav audio/wave=wav")


def _is_text(media_type: str) -> bool:
    mt = media_type.split(";", 1)[0].strip().lower()
    return (
        mt.startswith("text/")
        or mt in _TEXT_TYPES
        or mt.endswith(("+json", "+xml"))
        or mt == "application/toml"
    )


def data_url(p: Part) -> str:
    assert p.data is not None
    return f"data:{p.media_type};base64,{base64.b64encode(p.data).decode('ascii')}"


def _part(p: Part) -> dict[str, Any]:
    """One content block for a part; what the API cannot take becomes a short text note."""
    if p.problem() is not None:
        return _note(p, "it is not a valid part")
    if p.kind == "text":
        return {"type": "text", "text": p.text}
    media_type = p.media_type or ""
    if p.kind == "image":
        return {"type": "image_url", "image_url": {"url": p.url or data_url(p)}}
    if p.kind == "document" and p.data is not None:
        if _is_text(media_type):
            ident = hashlib.sha1(p.data, usedforsecurity=False).hexdigest()[:6]
            text = p.data.decode("utf-8", "replace")
            framed = (
                f'-----BEGIN FILE id="{ident}" type="{media_type}"-----\n'
                f"{text}\n"
                f'-----END FILE id="{ident}"-----'
            )
            return {"type": "text", "text": framed}
        ext = mimetypes.guess_extension(media_type.split(";", 1)[0].strip()) or ".bin"
        return {"type": "file", "file": {"file_data": data_url(p), "filename": f"filename{ext}"}}
    if p.kind == "audio" and p.data is not None:
        fmt = _AUDIO_FORMATS.get(media_type.split(";", 1)[0].strip().lower())
        if fmt:
            data = base64.b64encode(p.data).decode("ascii")
            return {"type": "input_audio", "input_audio": {"data": data, "format": fmt}}
        return _note(p, "only mp3 and wav audio can be sent")
    if p.url:
        return _note(p, f"the Chat Completions API cannot fetch a {p.kind} by URL")
    return _note(p, f"the Chat Completions API cannot take {p.kind} input")


def _note(p: Part, why: str) -> dict[str, Any]:
    ref = p.url or p.media_type or "content"
    return {"type": "text", "text": f"[{p.kind} {ref} not attached: {why}]"}


# --------------------------------------------------------------------------- response

_FINISH = cast(
    dict[str, FinishReason],
    table(
        "stop=stop length=length tool_calls=tool_call function_call=tool_call "
        "content_filter=content_filter eos_token=stop eos=stop stop_sequence=stop end_turn=stop "
        "max_tokens=length tool_use=tool_call"
    ),
)
"""Chat Completions finish reasons, and what compatible servers (TGI, proxies in front of
Anthropic's API) send for the same stops."""


CHAT_USAGE = {
    "input_tokens": ("prompt_tokens",),
    "output_tokens": ("completion_tokens",),
    "cache_read_tokens": ("prompt_tokens_details.cached_tokens|prompt_cache_hit_tokens",),
    "cache_write_tokens": ("prompt_tokens_details.cache_write_tokens",),
    "reasoning_tokens": ("completion_tokens_details.reasoning_tokens",),
}
"""Where a Chat Completions `usage` object keeps each count (`usage_of`)."""


class OutputMedia:
    """Media an answer carries beside its text, gathered from a message or the deltas of a
    stream: `audio` (audio output: base64 data and its transcript), `images` (what some
    compatible servers, OpenRouter's image models among them, answer with) and `image_url`
    parts of a content list."""

    __slots__ = ("audio", "audio_expires", "audio_id", "images", "transcript")

    def __init__(self) -> None:
        self.audio: list[str] = []  # the base64 text of the audio, in fragments
        self.audio_id = ""  # the audio's ID, which the next request names to send the answer back
        self.audio_expires = ""
        """When the API stops keeping the audio (Unix seconds, as digits), "" unknown."""
        self.transcript: list[str] = []
        self.images: list[Any] = []  # the `image_url` objects, as sent

    def add(self, obj: dict[str, Any]) -> str:
        """Gather the media of `obj` (a message, or a stream delta); return the transcript
        text it adds."""
        audio = obj.get("audio")
        added = ""
        if isinstance(audio, dict):
            audio_id = audio.get("id")
            if isinstance(audio_id, str) and audio_id and not self.audio_id:
                self.audio_id = audio_id
            expires = audio.get("expires_at")
            if (
                isinstance(expires, int | float)
                and not isinstance(expires, bool)
                and -1e15 < expires < 1e15  # not NaN, not beyond any date
            ):
                self.audio_expires = str(int(expires))
            data = audio.get("data")
            if isinstance(data, str) and data:
                self.audio.append(data)
            transcript = audio.get("transcript")
            if isinstance(transcript, str) and transcript:
                self.transcript.append(transcript)
                added = transcript
        images = obj.get("images")
        for image in images if isinstance(images, list) else ():
            if isinstance(image, dict):
                self.images.append(image.get("image_url"))
        content = obj.get("content")
        if isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "image_url":
                    self.images.append(part.get("image_url"))
        return added

    def parts(self) -> list[Part]:
        """The media as `Part`s: the audio first, then the images in order."""
        out: list[Part] = []
        if self.audio:
            data = _audio_data(self.audio)
            signature = ""
            if self.audio_id:
                signature = f"{CHAT_AUDIO_PREFIX}{self.audio_expires}/{self.audio_id}"
            out.append(Part("audio", data=data, media_type=_audio_type(data), signature=signature))
        for image in self.images:
            url = image.get("url") if isinstance(image, dict) else image
            if not isinstance(url, str) or not url:
                raise ResponseFormatError(
                    f"openai answered with an image without a URL: {json_text(image)[:200]}",
                    provider=PROVIDER,
                )
            if url.startswith("data:"):
                header, _, payload = url[5:].partition(",")
                media_type = header.split(";", 1)[0] or "application/octet-stream"
                data = _base64(PROVIDER, payload, "image")
                out.append(Part("image", data=data, media_type=media_type))
            else:
                out.append(Part("image", url=url))
        return out


def _audio_data(fragments: list[str]) -> bytes:
    """The audio of the base64 fragments of a message or stream. A stream sends each chunk
    of audio encoded on its own (each padded: `"AAE="` then `"AgM="`), which joined is no
    base64; fragments that are not whole base64 quanta are pieces of one text."""
    if len(fragments) > 1 and all(len(f) % 4 == 0 for f in fragments):
        return b"".join(_base64(PROVIDER, f, "audio") for f in fragments)
    return _base64(PROVIDER, "".join(fragments), "audio")


def _base64(provider: str, text: str, what: str) -> bytes:
    data = base64_bytes(text)
    if data is None:
        raise ResponseFormatError(
            f"{provider} answered with {what} data that is not base64", provider=provider
        )
    return data


_AUDIO_MAGIC = (
    (b"RIFF", "audio/wav"),
    (b"ID3", "audio/mpeg"),
    (b"\xff\xfb", "audio/mpeg"),
    (b"\xff\xf3", "audio/mpeg"),
    (b"\xff\xf2", "audio/mpeg"),
    (b"fLaC", "audio/flac"),
    (b"OggS", "audio/ogg"),
)


def _audio_type(data: bytes) -> str:
    """The MIME type of audio output, from its first bytes (the response does not say which
    format the request asked for); headerless audio is the API's `pcm16` (16-bit
    little-endian mono at 24 kHz)."""
    for magic, media_type in _AUDIO_MAGIC:
        if data.startswith(magic):
            return media_type
    return "audio/pcm;rate=24000"


def reasoning_text(obj: dict[str, Any], reasoning_field: str | None = None) -> str:
    """The reasoning text of a message or delta (`reasoning_content`, `reasoning`)."""
    for name in (reasoning_field, "reasoning_content", "reasoning"):
        if name:
            value = obj.get(name)
            if isinstance(value, str) and value:
                return value
    return ""


def text_content(content: Any) -> str:
    """Message content as text: a string, or the text of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            c["text"] for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)
        )
    return ""


def citations_of(annotations: Any, content: str) -> list[Citation]:
    """The `url_citation` annotations of a message (web search models) as `Citation`s."""
    out: list[Citation] = []
    for a in annotations if isinstance(annotations, list) else ():
        cited = a.get("url_citation") if isinstance(a, dict) else None
        if not isinstance(cited, dict):
            continue
        start, end = int_of(cited.get("start_index")), int_of(cited.get("end_index"))
        start = min(max(start, 0), len(content))
        url, title = cited.get("url"), cited.get("title")
        out.append(
            Citation(
                start=start,
                end=min(max(end, start), len(content)),
                url=url if isinstance(url, str) else "",
                title=title if isinstance(title, str) else "",
                provider=PROVIDER,
                raw=raw_json(a),
            )
        )
    return out


_CALL_TYPES = ("function", "custom")


def foreign_call(tc: Any) -> bool:
    """Whether a `tool_calls` entry is of a type golem does not know (neither a function
    nor a custom tool call, and none's object in it): skipped, as no declared tool can run
    it; an entry without a type is read as a function call."""
    if not isinstance(tc, dict):
        return False
    kind = tc.get("type")
    return (
        isinstance(kind, str)
        and kind not in _CALL_TYPES
        and not any(isinstance(tc.get(k), dict) for k in _CALL_TYPES)
    )


def parse_tool_call(tc: dict[str, Any]) -> ToolCall:
    """A complete tool call of a response message (`function` or `custom` type)."""
    fn = tc.get("function")
    if not isinstance(fn, dict):
        fn = tc.get("custom")
    fn = fn if isinstance(fn, dict) else {}
    args = fn.get("arguments", fn.get("input", ""))
    if args is None:
        args = ""
    elif not isinstance(args, str):  # a server that sends the arguments as an object
        args = args_json(args)
    return ToolCall(
        id=str(tc.get("id") or "") or synthesize_call_id(),
        name=str(fn.get("name") or ""),
        args=args,
        signature=text_of(dig(tc, "extra_content", "google", "thought_signature")),
    )


def parse_response(body: dict[str, Any], *, reasoning_field: str | None = None) -> ModelResponse:
    """Map a non-streamed `chat.completion` body to a `ModelResponse` (first choice)."""
    if (body.get("error") or body.get("object") == "error") and not body.get("choices"):
        raise error_from_payload(body)
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ResponseFormatError(
            f"openai response has no choices: {json_text(body)[:200]}", provider=PROVIDER
        )
    try:
        # the first choice (`n` is never sent; a server that sends several may order them
        # as it likes): the one of index 0
        choice = next(
            (c for c in choices if isinstance(c, dict) and c.get("index", 0) == 0), choices[0]
        )
        msg = choice.get("message") or {}
        content = text_content(msg.get("content"))
        media = OutputMedia()
        transcript = media.add(msg)
        if transcript and not content:
            content = transcript  # an audio answer: its text is what it says
        calls = [parse_tool_call(tc) for tc in msg.get("tool_calls") or () if not foreign_call(tc)]
        legacy = msg.get("function_call")
        if isinstance(legacy, dict) and not calls:
            calls.append(parse_tool_call({"function": legacy}))
        reasoning = reasoning_text(msg, reasoning_field)
        annotations = msg.get("annotations")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ResponseFormatError(
            f"openai response has an unexpected shape ({exc!r}): {json_text(body)[:200]}",
            provider=PROVIDER,
        ) from exc
    return answer(
        content,
        text_of(msg.get("refusal")),
        reasoning,
        media,
        unique_calls(calls),
        annotations,
        choice.get("finish_reason"),
        usage_of(body.get("usage"), CHAT_USAGE),
        text_of(body.get("model")),
    )


def answer(
    content: str,
    refusal: str,
    reasoning: str,
    media: OutputMedia,
    calls: list[ToolCall],
    annotations: Any,
    reason: Any,
    usage: Usage,
    model: str,
) -> ModelResponse:
    """The response of an answer's pieces (a body's message, or what a stream gathered); a
    refusal is the text of an answer that has none."""
    finish = finish_of(_FINISH, reason)
    if refusal and not content:
        content, finish = refusal, "content_filter"
    response = ModelResponse(
        message=Message(
            role="assistant",
            content=content,
            parts=media.parts(),
            tool_calls=named_calls(PROVIDER, calls),
            thinking=[ThinkingBlock(text=reasoning)] if reasoning else [],
            citations=citations_of(annotations, content),
        ),
        usage=usage,
        finish_reason=finish,
        model_name=model,
    )
    return refuse_no_answer(PROVIDER, response, str(reason)) if finish == "other" else response
