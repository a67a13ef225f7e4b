"""Stalls: the same tool returning the same result max_stalls times in a row, whatever its arguments, stops
the run (`stalled`) before the next model call: raw chat, Responses and Anthropic loops, and `@tool`."""

from __future__ import annotations

import pytest
from _loops import LOOPS, model_requests, script

import otel_budget as ob

LIST = "Page 1 of 17: INV-2026-0400 OPEN 120.00; INV-2026-0401 PAID 80.00; INV-2026-0402 OPEN 95.50"


@pytest.fixture(params=sorted(LOOPS))
def loop(request, oai, anth):
    """(the loop, its client) for each provider path."""
    client = anth if request.param == "anthropic" else oai
    return lambda tools: LOOPS[request.param](client, tools)


def _pages(n: int) -> list[tuple[str, dict]]:
    return [("next_page", {"page": p}) for p in range(2, 2 + n)]


def test_stuck_portal_with_changing_page_numbers_stops_stalled_before_the_4th_call(otel, llm, loop):
    script(llm, _pages(10))
    with ob.run("stuck-portal", budget=ob.Budget(max_steps=50)) as run:
        loop({"next_page": lambda page: LIST})
    out = run.outcome
    assert out.stop_reason is ob.StopReason.STALLED
    assert out.limit == "max_stalls"
    assert model_requests(llm) == 3  # three unchanged results; the 4th call, carrying the 3rd, was never sent
    assert out.wrap_up.startswith("Stopped: no progress (max_stalls). next_page returned the same result 3 times "
                                  "in a row.")
    assert "NOT complete" in out.wrap_up and "Missing:" in out.wrap_up
    assert "INV-2026" not in out.wrap_up  # counts and tool names, never content
    span = otel.run_span("stuck-portal")
    assert span.attributes["stop.reason"] == "stalled"
    assert span.attributes["otel_budget.stop.limit"] == "max_stalls"


def test_results_that_change_never_stall(otel, llm, loop):
    script(llm, _pages(6))
    with ob.run("healthy", budget=ob.Budget(max_steps=50)) as run:
        loop({"next_page": lambda page: f"Page {page} of 17: INV-2026-{400 + page:04d} OPEN"})
    assert run.outcome.stop_reason is ob.StopReason.DONE
    assert model_requests(llm) == 7


def test_same_results_not_in_a_row_never_stall(otel, llm, loop):
    results = iter(["A", "A", "B", "A", "A", "B", "A", "A"])
    script(llm, _pages(8))
    with ob.run("alternating", budget=ob.Budget(max_steps=50)) as run:
        loop({"next_page": lambda page: next(results)})
    assert run.outcome.stop_reason is ob.StopReason.DONE
    assert model_requests(llm) == 9


def test_max_stalls_none_switches_the_check_off(otel, llm, loop):
    script(llm, _pages(5))
    with ob.run("off", budget=ob.Budget(max_stalls=None)) as run:
        loop({"next_page": lambda page: LIST})
    assert run.outcome.stop_reason is ob.StopReason.DONE
    assert model_requests(llm) == 6


def test_at_tool_results_count_once_with_the_requests_that_carry_them(otel, llm, loop):
    """A result seen through @tool and again in the next request counts once: the stop still comes at the
    3rd unchanged result (counted twice, it would come after the 2nd, with only 2 requests sent)."""
    ran: list[int] = []

    @ob.tool
    def next_page(page: int) -> str:
        ran.append(page)
        return LIST

    script(llm, _pages(10))
    with ob.run("stuck-tool", budget=ob.Budget(max_steps=50)) as run:
        loop({"next_page": next_page})
    assert run.outcome.stop_reason is ob.StopReason.STALLED
    assert model_requests(llm) == 3
    assert ran == [2, 3, 4]


def test_at_tool_alone_stops_the_next_tool_call(otel):
    """Without a model in between (a plain loop of @tool calls), the 4th execution is refused."""
    ran: list[int] = []

    @ob.tool
    def next_page(page: int) -> dict:
        ran.append(page)
        return {"invoices": ["INV-2026-0400", "INV-2026-0401", "INV-2026-0402", "INV-2026-0403"], "page": 1}

    with ob.run("tools-only") as run:
        for page in range(2, 10):
            next_page(page)
    assert run.outcome.stop_reason is ob.StopReason.STALLED
    assert ran == [2, 3, 4]
    assert "next_page returned the same result 3 times in a row" in run.outcome.detail


def test_stall_counts_each_tool_apart(otel, llm, oai):
    """Another tool's results in between do not hide a stall, and do not stall with it."""
    actions = [a for p in range(2, 7) for a in (("next_page", {"page": p}), ("log", {"line": p}))]
    script(llm, actions)
    from _loops import chat_loop

    logs = iter(range(100))
    with ob.run("interleaved") as run:
        chat_loop(oai, {"next_page": lambda page: LIST, "log": lambda line: f"logged {next(logs)}"})
    assert run.outcome.stop_reason is ob.StopReason.STALLED
    assert model_requests(llm) == 5  # next_page, log, next_page, log, next_page: the 3rd same list stops it
    assert run.outcome.detail.startswith("next_page")


def test_budget_rejects_bad_stall_settings():
    with pytest.raises(ValueError, match="max_stalls=True: a bool is not a limit"):
        ob.Budget(max_stalls=True)
    with pytest.raises(ValueError, match="polls"):
        ob.Budget(polls={"wait_for_ci": 0})
    with pytest.raises(ValueError, match="polls"):
        ob.Budget(polls={"wait_for_ci": True})
    assert ob.Budget(max_stalls=float("inf")).max_stalls is None
