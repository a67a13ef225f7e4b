"""max_tool_calls is never passed: `usage.tool_calls` <= the cap. When none remains, the next model call goes
without tools (so the model can answer and the run ends `done`); tool calls requested beyond what remains are
not counted, never run through `@tool`, stop the run `tool_calls`, and are counted on the run span as
`otel_budget.tool_calls.refused`. The real openai SDK against ScriptedLLM: one call at a time, parallel tool
calls in one response, and a storm of threads. What reached the server is counted there."""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any

import pytest

import otel_budget as ob
from otel_budget.testing import ToolCall, Turn

SPECS = [{"type": "function", "function": {"name": "save", "parameters": {"type": "object", "properties": {}}}}]


def _offering(per_turn: int = 1):
    """A model that asks for `per_turn` fresh `save` calls while tools are offered, and answers without them."""
    n = itertools.count()
    lock = threading.Lock()
    asked: list[int] = []

    def respond(req: Any) -> Turn:
        if not req.body.get("tools"):
            return Turn(text="saved what I could")
        with lock:
            ids = [next(n) for _ in range(per_turn)]
            asked.append(per_turn)
        return Turn(tool_calls=[ToolCall("save", {"item": i}) for i in ids])

    return respond, asked


def _loop(oai: Any, save: Any, turns: int = 20) -> str | None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "save the items"}]
    for _ in range(turns):
        msg = oai.chat.completions.create(model="gpt-4o", messages=messages, tools=SPECS).choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            return msg.content
        for tc in msg.tool_calls:
            messages.append({"role": "tool", "tool_call_id": tc.id,
                             "content": save(**json.loads(tc.function.arguments))})
    return None


def _saver(ran: list[int]) -> Any:
    @ob.tool
    def save(item: int) -> str:
        ran.append(item)
        return f"saved {item}"

    return save


def test_when_no_tool_call_remains_the_next_call_goes_without_tools_and_the_run_ends_done(otel, llm, oai):
    llm.responder, _ = _offering()
    ran: list[int] = []
    with ob.run("saver", budget=ob.Budget(max_tool_calls=2)) as run:
        answer = _loop(oai, _saver(ran))
    assert answer == "saved what I could"
    assert run.outcome.stop_reason is ob.StopReason.DONE, run.outcome.detail
    assert run.outcome.usage.tool_calls == 2 and ran == [0, 1]
    assert [bool(r.body.get("tools")) for r in llm.requests] == [True, True, False]
    assert all("tool_choice" not in r.body for r in llm.requests)
    assert "otel_budget.tool_calls.refused" not in otel.run_span("saver").attributes


def test_a_model_that_asks_anyway_is_refused_and_not_counted(otel, llm, oai):
    """The model asks for a third tool although none was offered: it is refused before it runs."""
    n = itertools.count()
    llm.responder = lambda req: Turn(tool_calls=[ToolCall("save", {"item": next(n)})])
    ran: list[int] = []
    with ob.run("pushy", budget=ob.Budget(max_tool_calls=2)) as run:
        _loop(oai, _saver(ran))
    out = run.outcome
    assert out.stop_reason is ob.StopReason.TOOL_CALLS and out.limit == "max_tool_calls"
    assert out.usage.tool_calls == 2 and ran == [0, 1]
    assert len(llm.requests) == 3
    assert out.wrap_up.startswith("Stopped at a limit: max_tool_calls (2 of 2 tool calls used).")
    assert otel.run_span("pushy").attributes["otel_budget.tool_calls.refused"] == 1
    assert otel.run_span("pushy").attributes["otel_budget.used.tool_calls"] == 2


def test_parallel_tool_calls_beyond_the_cap_are_refused_before_they_run(otel, llm, oai):
    llm.responder, asked = _offering(per_turn=5)
    ran: list[int] = []
    with ob.run("parallel", budget=ob.Budget(max_tool_calls=3)) as run:
        _loop(oai, _saver(ran))
    out = run.outcome
    assert asked == [5] and len(llm.requests) == 1
    assert ran == [0, 1, 2]  # the three counted ran; the 4th was refused before it ran, the 5th never reached
    assert out.stop_reason is ob.StopReason.TOOL_CALLS and out.usage.tool_calls == 3
    assert otel.run_span("parallel").attributes["otel_budget.tool_calls.refused"] == 2


def test_a_storm_of_threads_never_passes_the_cap(otel, llm, oai):
    llm.responder, asked = _offering(per_turn=3)
    messages = [{"role": "user", "content": "save"}]
    errors: list[BaseException] = []

    def worker() -> None:
        for _ in range(5):
            try:
                oai.chat.completions.create(model="gpt-4o", messages=messages, tools=SPECS)
            except ob.BudgetExceeded:
                return
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    with ob.run("storm", budget=ob.Budget(max_tool_calls=10)) as run:
        threads = [threading.Thread(target=worker) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    out = run.outcome
    requested = 3 * len(asked)  # tool calls the server's answers asked for
    assert requested > 10
    assert out.usage.tool_calls == 10
    assert otel.run_span("storm").attributes["otel_budget.tool_calls.refused"] == requested - 10
    assert out.stop_reason is ob.StopReason.TOOL_CALLS


@pytest.mark.parametrize("cap", [2, 5])
def test_a_paused_run_shows_used_within_the_cap_and_a_resume_ends_at_its_cap(otel, llm, oai, cap):
    n = itertools.count()
    llm.responder = lambda req: Turn(tool_calls=[ToolCall("save", {"item": next(n)})])
    ran: list[int] = []
    save = _saver(ran)
    messages: list[dict[str, Any]] = []
    with ob.run("pausing", budget=ob.Budget(max_tool_calls=2, on_limit="pause")) as run:
        _loop(oai, save)
    out = run.outcome
    assert out.stop_reason is ob.StopReason.AWAITING_APPROVAL
    assert out.paused.pending.used == 2 <= out.paused.pending.cap == 2
    assert out.usage.tool_calls == 2
    with ob.resume(out.paused, approved=True, budget=ob.Budget(max_tool_calls=cap)) as resumed:
        if resumed.allows():
            _loop(oai, save)
    assert resumed.outcome.usage.tool_calls == cap
    assert len(ran) == cap
    del messages


def test_responses_and_anthropic_calls_go_without_tools_when_none_remains(otel, llm, oai, anth):
    """Responses: the tool fields are left out. Anthropic keeps the tools (the API wants them defined while the
    messages carry tool_use blocks) with `tool_choice: none`."""
    tool = {"type": "function", "name": "save", "parameters": {"type": "object", "properties": {}}}
    llm.script(Turn(tool_calls=[ToolCall("save", {"item": 0})]), Turn(text="a"), Turn(text="b"))
    with ob.run("responses", budget=ob.Budget(max_tool_calls=1)) as run:
        oai.responses.create(model="gpt-4o", input="save", tools=[tool], tool_choice="auto")
        oai.responses.create(model="gpt-4o", input="save", tools=[tool], tool_choice="auto",
                             parallel_tool_calls=True)
    assert run.outcome.stop_reason is ob.StopReason.DONE
    assert "tools" in llm.requests[0].body
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(llm.requests[1].body)
    spec = {"name": "save", "input_schema": {"type": "object", "properties": {}}}
    llm.reset()
    llm.script(Turn(tool_calls=[ToolCall("save", {"item": 0})]), Turn(text="a"))
    with ob.run("anthropic", budget=ob.Budget(max_tool_calls=1)) as run:
        for _ in range(2):
            anth.messages.create(model="claude-sonnet-4-5", max_tokens=50, tools=[spec],
                                 messages=[{"role": "user", "content": "save"}])
    assert run.outcome.stop_reason is ob.StopReason.DONE
    assert "tool_choice" not in llm.requests[0].body
    assert llm.requests[1].body["tool_choice"] == {"type": "none"}
