"""OpenTelemetry spans (issue 11): the span tree, GenAI attributes, content opt-in, and the
span link from a resumed run to the run that paused — across processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from golem import Agent, Approval, DeferredResults, PausedRun, RunError, Stage, ToolCall, Usage
from golem.errors import Overloaded
from golem.integrations import otel
from golem.messages import Message
from golem.model import ModelResponse
from golem.providers import FallbackModel
from golem.providers.openai import OpenAIChatModel
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved
from tests.otel_support import memory_provider

ROOT = Path(__file__).parents[2]


@pytest.fixture
def content_exporter(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    otel.instrument(memory_provider(exporter)[0], include_content=True)
    return exporter


def by_name(spans: Any) -> dict[str, ReadableSpan]:
    return {s.name: s for s in spans}


def turn(*calls: ToolCall, tokens: tuple[int, int] = (10, 5)) -> ModelResponse:
    return ModelResponse(
        message=Message(role="assistant", tool_calls=list(calls)),
        usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1]),
        finish_reason="tool_call",
    )


def answer(text: str, tokens: tuple[int, int] = (20, 7)) -> ModelResponse:
    return ModelResponse(
        message=Message(role="assistant", content=text),
        usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1]),
        finish_reason="stop",
    )


def weather_agent(*outcomes: Any, **kw: Any) -> Agent:
    agent = Agent(ScriptedModel(*outcomes), name="forecaster", **kw)

    @agent.tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    return agent


# --------------------------------------------------------------------------- tree


def test_span_tree_and_genai_attributes(exporter: InMemorySpanExporter) -> None:
    agent = weather_agent(turn(ToolCall("c1", "weather", '{"city": "Lisbon"}')), answer("Sunny."))
    result = agent.run_sync("weather?")
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == [
        "chat",
        "execute_tool weather",
        "chat",
        "invoke_agent forecaster",
    ]
    run = by_name(spans)["invoke_agent forecaster"]
    assert run.parent is None
    for child in spans[:3]:
        assert child.parent is not None
        assert child.parent.span_id == run.context.span_id
        assert child.context.trace_id == run.context.trace_id
    assert run.kind == SpanKind.INTERNAL
    attrs = dict(run.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.agent.name"] == "forecaster"
    assert attrs["gen_ai.provider.name"] == "ScriptedModel"
    assert "gen_ai.request.model" not in attrs  # a test model has no name (never its class's)
    assert attrs["gen_ai.conversation.id"] == result.conversation_id
    assert attrs["golem.run.id"] == result.run_id
    assert attrs["gen_ai.usage.input_tokens"] == 30
    assert attrs["gen_ai.usage.output_tokens"] == 12
    assert attrs["golem.run.status"] == "completed"
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)

    chat = spans[0]
    assert chat.kind == SpanKind.CLIENT
    chat_attrs = dict(chat.attributes or {})
    assert chat_attrs["gen_ai.operation.name"] == "chat"
    assert chat_attrs["gen_ai.usage.input_tokens"] == 10
    assert chat_attrs["gen_ai.usage.output_tokens"] == 5
    assert chat_attrs["gen_ai.response.finish_reasons"] == ("tool_call",)

    tool = dict(spans[1].attributes or {})
    assert tool == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "weather",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
    }
    assert result.trace_context.startswith(
        f"00-{run.context.trace_id:032x}-{run.context.span_id:016x}-"
    )


def test_no_content_by_default(exporter: InMemorySpanExporter) -> None:
    agent = weather_agent(turn(ToolCall("c1", "weather", '{"city": "Oslo"}')), answer("Cold."))
    agent.run_sync("secret prompt")
    for span in exporter.get_finished_spans():
        text = json.dumps(dict(span.attributes or {}))
        assert "secret prompt" not in text
        assert "Oslo" not in text
        assert "Cold." not in text
        assert not any(
            k.endswith(("messages", "arguments", "result")) for k in span.attributes or {}
        )


def test_content_when_opted_in(content_exporter: InMemorySpanExporter) -> None:
    agent = weather_agent(turn(ToolCall("c1", "weather", '{"city": "Oslo"}')), answer("Cold."))
    agent.run_sync("secret prompt")
    spans = content_exporter.get_finished_spans()
    first_chat = dict(spans[0].attributes or {})
    assert json.loads(str(first_chat["gen_ai.input.messages"])) == [
        {"role": "user", "content": "secret prompt"}
    ]
    assert json.loads(str(first_chat["gen_ai.output.messages"]))[0]["tool_calls"][0]["name"] == (
        "weather"
    )
    tool = dict(spans[1].attributes or {})
    assert tool["gen_ai.tool.call.arguments"] == '{"city": "Oslo"}'
    assert tool["gen_ai.tool.call.result"] == "sunny in Oslo"


def test_the_tool_span_is_current_inside_the_tool_even_in_parallel() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = Agent(
        ScriptedModel(
            turn(ToolCall("c1", "probe", '{"n": 1}'), ToolCall("c2", "probe", '{"n": 2}')),
            answer("ok"),
        ),
        parallel_tool_calls=True,
        tracer_provider=provider,
    )
    tracer = provider.get_tracer("test")

    @agent.tool
    async def probe(n: int) -> str:
        """Start a span inside the tool."""
        await asyncio.sleep(0.01 * (3 - n))
        with tracer.start_as_current_span(f"inner {n}"):
            return "x"

    agent.run_sync("go")
    finished = exporter.get_finished_spans()
    spans = by_name(finished)
    for n in (1, 2):
        tool_span = next(
            s for s in finished if (s.attributes or {}).get("gen_ai.tool.call.id") == f"c{n}"
        )
        inner = spans[f"inner {n}"]
        assert inner.parent is not None
        assert inner.parent.span_id == tool_span.context.span_id


def test_failed_attempts_and_a_failed_run(exporter: InMemorySpanExporter) -> None:
    agent = Agent(
        ScriptedModel(Overloaded("busy"), Overloaded("still busy")),
        max_attempts=2,
        retry_backoff=lambda _: 0.0,
    )
    with pytest.raises(RunError):
        agent.run_sync("hi")
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["chat", "chat", "invoke_agent"]
    for chat in spans[:2]:
        assert chat.status.status_code == StatusCode.ERROR
        assert (chat.attributes or {})["error.type"] == "Overloaded"
    run = spans[2]
    assert run.status.status_code == StatusCode.ERROR
    assert (run.attributes or {})["golem.run.status"] == "failed"
    assert (run.attributes or {})["golem.run.stage"] == "model"
    assert (run.attributes or {})["error.type"] == "Overloaded"  # the cause, retried or not


def test_a_failing_tool_marks_its_span(exporter: InMemorySpanExporter) -> None:
    agent = Agent(ScriptedModel(turn(ToolCall("c1", "broken", "{}"))))

    @agent.tool
    def broken() -> str:
        """Fails."""
        raise OSError("disk on fire")

    with pytest.raises(RunError) as info:
        agent.run_sync("go")
    assert info.value.stage == Stage.TOOL
    tool = by_name(exporter.get_finished_spans())["execute_tool broken"]
    assert tool.status.status_code == StatusCode.ERROR
    assert (tool.attributes or {})["error.type"] == "OSError"


def test_streamed_runs_are_traced(exporter: InMemorySpanExporter) -> None:
    agent = weather_agent(turn(ToolCall("c1", "weather", '{"city": "Rome"}')), answer("Warm."))

    async def main() -> str:
        async with agent.run_stream("go") as stream:
            async for _ in stream:
                pass
        return stream.result.trace_context

    assert asyncio.run(main()).startswith("00-")
    assert [s.name for s in exporter.get_finished_spans()][-1] == "invoke_agent forecaster"


def test_off_means_no_spans_unless_the_agent_has_its_own_provider() -> None:
    provider, exp = memory_provider()
    trace_before = trace.get_tracer_provider()
    assert weather_agent(answer("hi")).run_sync("x").trace_context == ""
    assert exp.get_finished_spans() == ()
    assert trace.get_tracer_provider() is trace_before
    assert weather_agent(answer("hi"), tracer_provider=provider).run_sync("x").trace_context
    assert [s.name for s in exp.get_finished_spans()] == ["chat", "invoke_agent forecaster"]


# --------------------------------------------------------------------------- pause and resume


def approval_agent(*outcomes: Any) -> Agent:
    agent = Agent(ScriptedModel(*outcomes), name="janitor")

    @agent.tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        if not call_approved():
            raise Deferred(DeferKind.APPROVAL, "deletes need sign-off")
        return f"deleted {path}"

    return agent


def test_a_pause_ends_the_run_span_as_paused_and_the_resume_links_to_it(
    exporter: InMemorySpanExporter,
) -> None:
    agent = approval_agent(
        turn(
            ToolCall("c1", "delete_file", '{"path": "a"}'),
            ToolCall("c2", "delete_file", '{"path": "b"}'),
        ),
        answer("Done."),
    )
    paused = agent.run_sync("clean")
    assert paused.pending is not None
    spans = exporter.get_finished_spans()
    run = by_name(spans)["invoke_agent janitor"]
    attrs = dict(run.attributes or {})
    assert attrs["golem.run.status"] == "paused"
    assert attrs["golem.run.pending_call_ids"] == ("c1", "c2")
    assert attrs["golem.run.operation"] == "run"
    assert run.status.status_code == StatusCode.UNSET
    deferred = [s for s in spans if s.name == "execute_tool delete_file"]
    assert [(s.attributes or {}).get("golem.tool.deferred") for s in deferred] == [True, True]
    assert paused.trace_context.split("-")[2] == f"{run.context.span_id:016x}"
    exporter.clear()
    done = agent.run_with_deferred_results_sync(
        paused.paused_run,
        DeferredResults(approvals={"c1": Approval(True), "c2": Approval(False)}),
    )
    assert done.output == "Done."
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == [
        "execute_tool delete_file",
        "chat",
        "invoke_agent janitor",
    ]
    run = spans[-1]
    (link,) = run.links
    _, trace_id, span_id, _ = paused.trace_context.split("-")
    assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == (trace_id, span_id)
    assert (link.attributes or {})["golem.link"] == "resumes_paused_run"
    assert (run.attributes or {})["golem.run.operation"] == "resume"
    rerun = spans[0]
    assert (rerun.attributes or {})["golem.tool.approved"] is True
    assert rerun.parent is not None
    assert rerun.parent.span_id == run.context.span_id


def test_a_malformed_trace_context_is_ignored(exporter: InMemorySpanExporter) -> None:
    agent = approval_agent(turn(ToolCall("c1", "delete_file", '{"path": "a"}')), answer("Done."))
    paused = agent.run_sync("clean")
    done = agent.run_with_deferred_results_sync(
        PausedRun(paused.messages, paused.pending, paused.conversation_id, "", "junk"),
        DeferredResults(approvals={"c1": Approval(False)}),
    )
    assert done.output == "Done."
    assert exporter.get_finished_spans()[-1].links == ()


RESUME_SCRIPT = """
import json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from golem import Agent, Approval, DeferredResults, PausedRun
from golem.integrations import otel
from golem.testing import ScriptedModel
from golem.tool import DeferKind, Deferred, call_approved

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
otel.instrument(provider)

agent = Agent(ScriptedModel("Done."), name="janitor")

@agent.tool
def delete_file(path: str) -> str:
    if not call_approved():
        raise Deferred(DeferKind.APPROVAL, "deletes need sign-off")
    return f"deleted {path}"

done = agent.run_with_deferred_results_sync(
    PausedRun.loads(open(sys.argv[1]).read()), DeferredResults(approvals={"c1": Approval(True)}))
run = exporter.get_finished_spans()[-1]
print(json.dumps({"output": done.output, "name": run.name, "links": [
    [f"{l.context.trace_id:032x}", f"{l.context.span_id:016x}"] for l in run.links]}))
"""


def test_the_link_crosses_processes(exporter: InMemorySpanExporter, tmp_path: Path) -> None:
    agent = approval_agent(turn(ToolCall("c1", "delete_file", '{"path": "a"}')))
    paused = agent.run_sync("clean")
    saved = tmp_path / "paused.json"
    assert paused.paused_run is not None
    saved.write_text(paused.paused_run.dumps())
    out = subprocess.run(
        [sys.executable, "-c", RESUME_SCRIPT, str(saved)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    run = by_name(exporter.get_finished_spans())["invoke_agent janitor"]
    assert got == {
        "output": "Done.",
        "name": "invoke_agent janitor",
        "links": [[f"{run.context.trace_id:032x}", f"{run.context.span_id:016x}"]],
    }


def test_traceparent_round_trip() -> None:
    value = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ctx = otel.parse_traceparent(value)
    assert ctx is not None
    assert otel.format_traceparent(ctx) == value
    assert otel.parse_traceparent("") is None
    assert otel.parse_traceparent("00-zz-01") is None


async def test_a_streamed_and_a_nested_resume_say_resume(exporter: InMemorySpanExporter) -> None:
    """`golem.run.operation` tells a resumed run from a fresh one, however it was resumed."""
    agent = approval_agent(turn(ToolCall("c1", "delete_file", '{"path": "a"}')), answer("Done."))
    paused = await agent.run("clean")
    exporter.clear()
    async with agent.run_stream_with_deferred_results(
        paused.messages, DeferredResults(approvals={"c1": Approval(True)})
    ) as stream:
        async for _ in stream:
            pass
    runs = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert [(s.attributes or {}).get("golem.run.operation") for s in runs] == ["resume"]

    sub = approval_agent(turn(ToolCall("s1", "delete_file", '{"path": "a"}')), answer("Done."))
    call = ToolCall("p1", "janitor", '{"prompt": "clean"}')
    parent = Agent(ScriptedModel(turn(call), answer("All done.")), tools=[sub.as_tool()])
    paused = await parent.run("go")
    exporter.clear()
    done = await parent.run_with_deferred_results(
        paused.messages, DeferredResults(approvals={"p1/s1": Approval(True)})
    )
    assert done.output == "All done."
    runs = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert [(s.attributes or {}).get("golem.run.operation") for s in runs] == ["resume", "resume"]


# --------------------------------------------------------------------------- model names


def chat_completion(request: httpx.Request) -> httpx.Response:
    """An OpenAI chat completion, answered by a dated snapshot of the model asked for."""
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "gpt-4.1-2025-04-14",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hi."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        },
    )


@pytest.mark.parametrize("fallback", [False, True])
async def test_the_model_names_come_from_the_model_and_its_answer(
    exporter: InMemorySpanExporter, fallback: bool
) -> None:
    """The OpenAI adapters keep their name in `model_name`; a `FallbackModel` is named by its
    primary model (not "_fallback"); `gen_ai.response.model` is the model that answered."""
    async with httpx.AsyncClient(transport=httpx.MockTransport(chat_completion)) as client:
        model: Any = OpenAIChatModel("gpt-4.1", api_key="k", http_client=client)
        if fallback:
            model = FallbackModel(model, ScriptedModel("never"))
        assert (await Agent(model, name="greeter").run("hi")).output == "Hi."
    chat, run = exporter.get_finished_spans()
    assert chat.name == "chat gpt-4.1"
    for span in (chat, run):
        attrs = dict(span.attributes or {})
        assert attrs["gen_ai.provider.name"] == "openai"
        assert attrs["gen_ai.request.model"] == "gpt-4.1"
    assert dict(chat.attributes or {})["gen_ai.response.model"] == "gpt-4.1-2025-04-14"


def test_an_ollama_model_is_named_ollama(exporter: InMemorySpanExporter) -> None:
    from golem.providers import infer_model

    model: Any = infer_model("ollama:llama3.2")
    model.generate = ScriptedModel("Hi.").generate  # no server: the name is what is checked
    Agent(model, name="greeter").run_sync("hi")
    chat, _ = exporter.get_finished_spans()
    attrs = dict(chat.attributes or {})
    assert (attrs["gen_ai.provider.name"], attrs["gen_ai.request.model"]) == ("ollama", "llama3.2")


def test_a_model_named_by_its_attributes_and_a_fallback_of_it(
    exporter: InMemorySpanExporter,
) -> None:
    class Named(ScriptedModel):
        provider = "acme"
        model = "acme-large"

    Agent(FallbackModel(Named("Hi.")), name="greeter").run_sync("hi")
    chat, run = exporter.get_finished_spans()
    assert chat.name == "chat acme-large"
    for span in (chat, run):
        attrs = dict(span.attributes or {})
        assert (attrs["gen_ai.provider.name"], attrs["gen_ai.request.model"]) == (
            "acme",
            "acme-large",
        )
    # FallbackModel fills in the answering model's name when the response had none
    assert dict(chat.attributes or {})["gen_ai.response.model"] == "acme-large"


# --------------------------------------------------------------------------- nested resume


def tree(spans: Any) -> dict[str, tuple[int, str | None]]:
    """Each span by name: (trace ID, its parent's name or None for a root)."""
    names = {s.context.span_id: s.name for s in spans}
    return {
        s.name: (s.context.trace_id, names.get(s.parent.span_id, "?") if s.parent else None)
        for s in spans
    }


async def test_a_resumed_sub_agent_runs_under_the_parents_resume(
    exporter: InMemorySpanExporter,
) -> None:
    sub = approval_agent(
        turn(ToolCall("s1", "delete_file", '{"path": "a"}')),
        turn(ToolCall("s2", "delete_file", '{"path": "b"}')),
        answer("Done."),
    )
    call = ToolCall("p1", "janitor", '{"prompt": "clean"}')
    parent = Agent(
        ScriptedModel(turn(call), answer("All done.")), name="boss", tools=[sub.as_tool()]
    )
    paused = await parent.run("go")
    exporter.clear()

    # the sub-agent pauses again: the parent's resume span ends paused, the sub-agent's under it
    again = await parent.run_with_deferred_results(
        paused.paused_run,
        DeferredResults(approvals={"p1/s1": Approval(True)}),
    )
    assert again.pending is not None
    spans = exporter.get_finished_spans()
    shape = tree(spans)
    boss_trace = shape["invoke_agent boss"][0]
    assert shape["invoke_agent boss"] == (boss_trace, None)
    assert shape["invoke_agent janitor"] == (boss_trace, "invoke_agent boss")
    boss = next(s for s in spans if s.name == "invoke_agent boss")
    assert dict(boss.attributes or {})["golem.run.status"] == "paused"
    assert dict(boss.attributes or {})["golem.run.operation"] == "resume"
    assert again.trace_context.split("-")[2] == f"{boss.context.span_id:016x}"
    exporter.clear()

    # the sub-agent answers: the parent's own run continues under the same span
    done = await parent.run_with_deferred_results(
        again.paused_run,
        DeferredResults(approvals={"p1/s2": Approval(True)}),
    )
    assert done.output == "All done."
    spans = exporter.get_finished_spans()
    shape = tree(spans)
    boss_trace = shape["invoke_agent boss"][0]
    assert {trace_id for trace_id, _ in shape.values()} == {boss_trace}
    assert shape["invoke_agent boss"] == (boss_trace, None)
    assert shape["invoke_agent janitor"] == (boss_trace, "invoke_agent boss")
    assert [s.name for s in spans].count("invoke_agent boss") == 1
