"""Healthy agents are never stopped as stalled: a result whose canonical text is at most 64 characters (an
acknowledgment such as "ok", `{"status": "ok"}`, `[]`, "no match") never counts toward a stall, on every path
that feeds results to the check (chat `tool` messages, Responses `function_call_output`, Anthropic `tool_result`,
`@tool`). Identical calls are still repeats, and the stuck portal (a long list unchanged) still stalls."""

from __future__ import annotations

import json

import pytest
from _loops import LOOPS, chat_loop, model_requests, script

import otel_budget as ob

LIST = "Page 1 of 17: INV-2026-0400 OPEN 120.00; INV-2026-0401 PAID 80.00; INV-2026-0402 OPEN 95.50"


@pytest.fixture(params=sorted(LOOPS))
def loop(request, oai, anth):
    client = anth if request.param == "anthropic" else oai
    return lambda tools: LOOPS[request.param](client, tools)


def _files(n: int = 5) -> list[tuple[str, dict]]:
    return [("write_file", {"path": f"src/m{i}.py", "text": f"x = {i}\n"}) for i in range(n)]


@pytest.mark.parametrize("ack", ["ok", "done", "OK\n", '{"status": "ok"}', "[]", "File written: 7 bytes."])
def test_an_agent_writing_five_files_answered_ok_ends_done(otel, llm, loop, ack):
    script(llm, _files(), final="all five written")
    with ob.run("writer", budget=ob.Budget(max_steps=50)) as run:
        loop({"write_file": lambda path, text: ack})
    assert run.outcome.stop_reason is ob.StopReason.DONE, run.outcome.detail
    assert model_requests(llm) == 6  # five tool turns and the answer all reached the server


def test_sending_mail_and_searching_with_no_match_end_done(otel, llm, loop):
    actions = [("send_mail", {"to": f"user{i}@example.com", "body": "hi"}) for i in range(5)]
    actions += [("search", {"query": f"invoice {q}"}) for q in ("2026-0400", "0400", "INV-0400", "400", "Q1")]
    script(llm, actions)
    with ob.run("mailer", budget=ob.Budget(max_steps=50)) as run:
        loop({"send_mail": lambda to, body: {"status": "ok", "id": None}, "search": lambda query: "no match"})
    assert run.outcome.stop_reason is ob.StopReason.DONE, run.outcome.detail
    assert model_requests(llm) == 11


def test_the_stuck_portal_still_stalls_at_the_third_result(otel, llm, loop):
    script(llm, [("next_page", {"page": p}) for p in range(2, 12)])
    with ob.run("portal", budget=ob.Budget(max_steps=50)) as run:
        loop({"next_page": lambda page: LIST})
    assert run.outcome.stop_reason is ob.StopReason.STALLED
    assert model_requests(llm) == 3


def test_a_result_just_over_64_characters_still_stalls(otel, llm, oai):
    """The bound is on the canonical text: 65 characters of unchanged text are an observation."""
    text = "x" * 65
    script(llm, [("next_page", {"page": p}) for p in range(2, 12)])
    with ob.run("edge") as run:
        chat_loop(oai, {"next_page": lambda page: text})
    assert run.outcome.stop_reason is ob.StopReason.STALLED
    assert model_requests(llm) == 3
    script(llm, [("next_page", {"page": p}) for p in range(2, 7)])
    with ob.run("edge-64") as run:
        chat_loop(oai, {"next_page": lambda page: "x" * 64})
    assert run.outcome.stop_reason is ob.StopReason.DONE


def test_an_acknowledgment_breaks_a_row_of_unchanged_results(otel, llm, oai):
    """LIST, LIST, ok, LIST, LIST: never three unchanged results in a row."""
    results = iter([LIST, LIST, "ok", LIST, LIST])
    script(llm, [("next_page", {"page": p}) for p in range(2, 7)])
    with ob.run("broken-row") as run:
        chat_loop(oai, {"next_page": lambda page: next(results)})
    assert run.outcome.stop_reason is ob.StopReason.DONE


def test_identical_writes_answered_ok_are_still_repeats(otel, llm, loop):
    script(llm, [("write_file", {"path": "src/m0.py", "text": "x = 0\n"})] * 6)
    with ob.run("same-write", budget=ob.Budget(max_steps=50)) as run:
        loop({"write_file": lambda path, text: "ok"})
    assert run.outcome.stop_reason is ob.StopReason.REPEAT
    assert run.outcome.limit == "max_repeats"


def test_at_tool_writing_files_answered_ok_ends_done(otel, llm, loop):
    written: list[str] = []

    @ob.tool
    def write_file(path: str, text: str) -> dict:
        written.append(path)
        return {"status": "ok"}

    script(llm, _files())
    with ob.run("tool-writer") as run:
        loop({"write_file": write_file})
    assert run.outcome.stop_reason is ob.StopReason.DONE, run.outcome.detail
    assert len(written) == 5 and model_requests(llm) == 6


def test_at_tool_alone_with_acknowledgments_is_never_stalled(otel):
    """A plain loop of @tool executions (no model in between): twenty saves answered "saved" all run."""
    saved: list[int] = []

    @ob.tool
    def save(item: int) -> str:
        saved.append(item)
        return "saved"

    with ob.run("saver") as run:
        for item in range(20):
            save(item)
    assert run.outcome.stop_reason is ob.StopReason.DONE
    assert saved == list(range(20))


def test_at_tool_alone_with_a_long_unchanged_result_still_stalls(otel):
    @ob.tool
    def next_page(page: int) -> dict:
        return {"invoices": ["INV-2026-0400", "INV-2026-0401", "INV-2026-0402"], "page": 1}

    assert len(json.dumps(next_page.__wrapped__(1), separators=(",", ":"))) > 64
    with ob.run("tools-only") as run:
        for page in range(2, 10):
            next_page(page)
    assert run.outcome.stop_reason is ob.StopReason.STALLED
