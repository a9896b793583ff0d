"""Requests: golem's `ModelRequest` as the JSON body of Gemini `generateContent`."""

from __future__ import annotations

import base64
import copy
import json
import mimetypes
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from golem.messages import Message, Part, ServerToolBlock, ThinkingBlock
from golem.model import ModelRequest
from golem.providers._answers import (
    FOREIGN_PART_PREFIXES,
    RESPONSES_REASONING_PREFIX,
    in_order,
    own_blocks,
)
from golem.providers._jsonio import args_object, base64_bytes, given

__all__ = [
    "DUMMY_SIGNATURE",
    "EMPTY_PROMPT_TEXT",
    "SERVER_PARTS",
    "SYNTHETIC_ID_PREFIX",
    "build_request_body",
    "deep_merge",
    "function_calling_config",
    "supports_json_output_with_tools",
]

SERVER_PARTS: dict[str, str] = {
    "executableCode": "code_execution",
    "codeExecutionResult": "code_execution",
    "toolCall": "",
    "toolResponse": "",
}
"""Keys of the parts a server-side tool produces, and the tool's name (for `toolCall` /
`toolResponse`, their `toolType`, lower-cased)."""

SYNTHETIC_ID_PREFIX = "gemini_"
"""Prefix of the call IDs this adapter makes up for function calls Gemini sent without one."""

DUMMY_SIGNATURE = base64.b64encode(b"skip_thought_signature_validator").decode("ascii")
"""The documented placeholder signature for a function call that has none of its own."""

EMPTY_PROMPT_TEXT = "."
"""The text of the user turn sent for an empty prompt: the API refuses empty `contents`
and empty text parts."""

_PROMPTED_OUTPUT = (
    "Answer with a single JSON value that matches the JSON schema below, "
    "with no other text and no code fences.\nJSON schema: "
)

_GEMINI_VERSION = re.compile(r"gemini-(\d+)")


# --------------------------------------------------------------------------- request


def supports_json_output_with_tools(model: str) -> bool:
    """Whether `model` accepts a JSON response schema together with function declarations."""
    match = _GEMINI_VERSION.search(model.rsplit("/", 1)[-1])
    return match is not None and int(match.group(1)) >= 3


def build_request_body(
    request: ModelRequest,
    *,
    max_tokens: int | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    stop: Sequence[str] | None = None,
    thinking_budget: int | None = None,
    include_thoughts: bool = False,
    json_output_with_tools: bool = False,
    multimodal_results: bool = False,
    extra_body: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Build the JSON body of a `generateContent` request."""
    system, contents = _contents(request.messages, multimodal_results)
    body: dict[str, Any] = {"contents": contents}

    config = given(
        maxOutputTokens=max_tokens,
        temperature=temperature,
        topP=top_p,
        stopSequences=list(stop) if stop else None,
    )
    thinking = given(
        thinkingBudget=thinking_budget, includeThoughts=True if include_thoughts else None
    )
    if thinking:
        config["thinkingConfig"] = thinking
    if request.output_schema is not None:
        if request.tools and not json_output_with_tools:
            system.append(_PROMPTED_OUTPUT + _compact(request.output_schema))
        else:
            config["responseMimeType"] = "application/json"
            config["responseJsonSchema"] = request.output_schema

    if system:
        body["systemInstruction"] = {"role": "user", "parts": [{"text": t} for t in system]}
    if request.tools:
        declarations = []
        for spec in request.tools:
            decl: dict[str, Any] = {"name": spec.name, "description": spec.description}
            if spec.schema:
                decl["parametersJsonSchema"] = spec.schema
            declarations.append(decl)
        body["tools"] = [{"functionDeclarations": declarations}]
        if request.tool_choice != "auto":
            body["toolConfig"] = {
                "functionCallingConfig": function_calling_config(request.tool_choice)
            }
    if config:
        body["generationConfig"] = config
    if extra_body:
        extra = dict(extra_body)
        extra_tools = extra.pop("tools", None)
        deep_merge(body, extra)
        if isinstance(extra_tools, list):
            # built-in tools (googleSearch, codeExecution, urlContext, ...) join the functions
            body["tools"] = [*body.get("tools", ()), *copy.deepcopy(extra_tools)]
        elif extra_tools is not None:
            body["tools"] = copy.deepcopy(extra_tools)
    return body


def function_calling_config(choice: str) -> dict[str, Any]:
    """`toolConfig.functionCallingConfig` for a golem tool choice: "auto" → `AUTO`,
    "required" → `ANY`, "none" → `NONE`, a tool name → `ANY` with `allowedFunctionNames`."""
    if choice in _CHOICE_MODES:
        return {"mode": _CHOICE_MODES[choice]}
    return {"mode": "ANY", "allowedFunctionNames": [choice]}


_CHOICE_MODES = {"auto": "AUTO", "required": "ANY", "none": "NONE"}


def deep_merge(target: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `extra` into `target` in place: nested objects merge, other values replace."""
    for key, value in extra.items():
        current = target.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            deep_merge(current, value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _contents(
    messages: Sequence[Message], multimodal_results: bool = False
) -> tuple[list[str], list[dict[str, Any]]]:
    """System texts and `contents` for a conversation."""
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    call_names: dict[str, str] = {}
    responses: list[dict[str, Any]] = []
    media: list[tuple[str, list[dict[str, Any]]]] = []

    def flush() -> None:
        if responses:
            contents.append({"role": "user", "parts": list(responses)})
        if media:
            parts: list[dict[str, Any]] = []
            for name, tool_parts in media:
                if len(media) > 1:
                    parts.append({"text": f'Attachments of the "{name}" result:'})
                parts.extend(tool_parts)
            contents.append({"role": "user", "parts": parts})
        responses.clear()
        media.clear()

    for m in messages:
        if m.role == "tool":
            name = m.tool_name or call_names.get(m.tool_call_id, "") or "unknown_tool"
            call: dict[str, Any] = {"name": name}
            if m.tool_call_id and not m.tool_call_id.startswith(SYNTHETIC_ID_PREFIX):
                call["id"] = m.tool_call_id
            output = m.content
            if m.parts and multimodal_results:
                # Gemini 3: media ride inside the function response; text parts join the output
                texts = [p.text for p in m.parts if p.kind == "text" and p.text]
                output = "\n\n".join([output, *texts] if output else texts)
                media_parts = [_part(p) for p in m.parts if p.kind != "text"]
                if media_parts:
                    call["parts"] = media_parts
            call["response"] = {"error" if m.failed else "output": output}
            responses.append({"functionResponse": call})
            if m.parts and not multimodal_results:
                media.append((name, [_part(p) for p in m.parts]))
            continue
        flush()
        if m.role == "system":
            if m.content:
                system.append(m.content)
        elif m.role == "user":
            parts = [{"text": m.content}] if m.content else []
            parts.extend(_part(p) for p in m.parts)
            if not parts and not (contents and contents[-1]["role"] == "user"):
                parts = [{"text": EMPTY_PROMPT_TEXT}]
            if parts:
                contents.append({"role": "user", "parts": parts})
        else:
            model_parts = _model_parts(m)
            for c in m.tool_calls:
                call_names[c.id] = c.name
            if model_parts:
                contents.append({"role": "model", "parts": model_parts})
    flush()
    if not contents:
        contents.append({"role": "user", "parts": [{"text": EMPTY_PROMPT_TEXT}]})
    return system, contents


def _model_parts(m: Message) -> list[dict[str, Any]]:
    """The parts of a `model` content for an assistant message, signatures in place."""
    parts: list[dict[str, Any]] = []
    text_signatures: list[str] = []
    for block in m.thinking:
        if block.text:
            # Signatures on thought text are not replayed: Gemini never puts them there,
            # and a block from another provider would carry a signature Gemini rejects.
            parts.append({"text": block.text, "thought": True})
        elif (
            block.signature
            and not block.redacted
            and not block.signature.startswith(RESPONSES_REASONING_PREFIX)
        ):
            text_signatures.append(block.signature)
    text_part: dict[str, Any] | None = None
    if m.content or text_signatures:
        text_part = {"text": m.content}
        if text_signatures:
            text_part["thoughtSignature"] = text_signatures[0]
    # Gemini's own server-side tool parts (grounding and URL-context metadata are no parts:
    # the API takes them in no request)
    server = own_blocks(m, "gemini", SERVER_PARTS.__contains__)
    if server and m.content:
        parts.extend(_interleaved(m, server, text_part))
    elif text_part is not None and m.content:
        parts.append(text_part)
    else:
        parts.extend(part for _, part in server)
    for p in m.parts:
        media = _part(p)
        if p.signature and not p.signature.startswith(FOREIGN_PART_PREFIXES):
            media["thoughtSignature"] = p.signature
        parts.append(media)
    for i, c in enumerate(m.tool_calls):
        call: dict[str, Any] = {"name": c.name, "args": args_object(c.args, strict=True)}
        if c.id and not c.id.startswith(SYNTHETIC_ID_PREFIX):
            call["id"] = c.id
        part: dict[str, Any] = {"functionCall": call}
        if c.signature:
            part["thoughtSignature"] = c.signature
        elif i == 0:
            part["thoughtSignature"] = DUMMY_SIGNATURE
        parts.append(part)
    if text_part is not None and not m.content:
        parts.append(text_part)  # a signature-only text part, as Gemini sends it
    return parts


def _interleaved(
    m: Message,
    server: list[tuple[ServerToolBlock, dict[str, Any]]],
    first_text: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """Text parts and server parts in the order they arrived (thought parts are sent
    before, by the caller); the first text part keeps the text signature of `first_text`."""
    parts: list[dict[str, Any]] = []
    for item in in_order(m, server):
        if isinstance(item, slice):
            part: dict[str, Any] = {"text": m.content[item]}
            if first_text is not None and "thoughtSignature" in first_text:
                part["thoughtSignature"] = first_text["thoughtSignature"]
            first_text = None
            parts.append(part)
        elif not isinstance(item, ThinkingBlock):
            parts.append(item)
    return parts


def _part(p: Part) -> dict[str, Any]:
    """An `inlineData` or `fileData` part for an image/document/audio/video part, or a text part."""
    if p.kind == "text":
        return {"text": p.text}
    if p.data is not None:
        return {
            "inlineData": {
                "mimeType": p.media_type or "application/octet-stream",
                "data": base64.b64encode(p.data).decode("ascii"),
            }
        }
    url = p.url or ""
    if url.startswith("data:"):
        inline = _data_url(url)
        if inline is not None:
            return {"inlineData": inline}
    file_data: dict[str, Any] = {"fileUri": url}
    mime = p.media_type or _guess_mime(url)
    if mime:
        file_data["mimeType"] = mime
    return {"fileData": file_data}


def _data_url(url: str) -> dict[str, Any] | None:
    """`inlineData` for a base64 `data:` URL, or None when it is not one."""
    header, sep, payload = url[5:].partition(",")
    if not sep or not header.endswith(";base64"):
        return None
    if base64_bytes(payload) is None:
        return None
    return {"mimeType": header[: -len(";base64")] or "application/octet-stream", "data": payload}


def _guess_mime(url: str) -> str | None:
    path = urlsplit(url).path
    mime, _ = mimetypes.guess_type(path, strict=False)
    return mime
