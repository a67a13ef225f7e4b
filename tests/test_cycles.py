"""Cycles and polls: the same 2 or 3 actions repeated max_repeats times in a row stop the run (`repeat`);
`Budget(polls=...)` lets a tool that legitimately repeats go on up to its own allowance."""

from __future__ import annotations

import pytest
from _loops import LOOPS, chat_loop, model_requests, script

import otel_budget as ob

# Unchanged observations longer than an acknowledgment (64 characters), which never counts toward a stall.
PENDING = "CI for pull request 7: 14 checks queued, 0 running, 0 passed, 0 failed; no logs yet"
PAGE = "Page 1 of 17: INV-2026-0400 OPEN 120.00; INV-2026-0401 PAID 80.00; INV-2026-0402 OPEN 95.50"


@pytest.fixture(params=sorted(LOOPS))
def loop(request, oai, anth):
    client = anth if request.param == "anthropic" else oai
    return lambda tools: LOOPS[request.param](client, tools)


def _fresh():
    """Tools whose results always change, so only the actions can repeat."""
    n = iter(range(1000))
    return {"open_tab": lambda tab: f"tab {tab} #{next(n)}", "back": lambda: f"home #{next(n)}",
            "search": lambda q: f"hits #{next(n)}"}


def test_two_action_cycle_stops_with_repeat(otel, llm, loop):
    script(llm, [("open_tab", {"tab": "invoices"}), ("back", {})] * 5)
    with ob.run("cycle", budget=ob.Budget(max_steps=50)) as run:
        loop(_fresh())
    out = run.outcome
    assert out.stop_reason is ob.StopReason.REPEAT
    assert out.limit == "max_repeats"
    assert model_requests(llm) == 6  # A,B,A,B,A,B requested: the 7th call was not sent
    assert "open_tab -> back" in out.detail
    assert out.wrap_up.startswith("Stopped at a limit: max_repeats (the same cycle of actions 3 times in a row).")
    assert "NOT complete" in out.wrap_up


def test_three_action_cycle_stops_and_names_it(otel, llm, oai):
    script(llm, [("search", {"q": "acme"}), ("open_tab", {"tab": "1"}), ("back", {})] * 4)
    with ob.run("cycle3") as run:
        chat_loop(oai, _fresh())
    assert run.outcome.stop_reason is ob.StopReason.REPEAT
    assert model_requests(llm) == 9
    assert "search -> open_tab -> back" in run.outcome.detail


def test_a_cycle_broken_by_other_arguments_never_stops(otel, llm, loop):
    actions = [a for t in range(6) for a in (("open_tab", {"tab": t}), ("back", {}))]
    script(llm, actions)
    with ob.run("browsing") as run:
        loop(_fresh())
    assert run.outcome.stop_reason is ob.StopReason.DONE
    assert model_requests(llm) == 13


def test_at_tool_refuses_the_execution_that_completes_the_cycle(otel):
    ran: list[str] = []

    @ob.tool
    def open_tab(tab: str) -> str:
        ran.append("open")
        return f"tab {tab} {len(ran)}"

    @ob.tool
    def back() -> str:
        ran.append("back")
        return f"home {len(ran)}"

    with ob.run("tools-cycle") as run:
        for _ in range(5):
            open_tab("invoices")
            back()
    assert run.outcome.stop_reason is ob.StopReason.REPEAT
    assert ran == ["open", "back", "open", "back", "open"]  # the 3rd back would complete the 3rd repetition
    assert "was not run" in run.outcome.detail and "open_tab -> back" in run.outcome.detail


def test_poll_allowance_lets_a_pending_status_finish_done(otel, llm, loop):
    statuses = iter(["pending"] * 5 + ["passed"])
    script(llm, [("wait_for_ci", {"pr": 7})] * 6)
    with ob.run("ci", budget=ob.Budget(polls={"wait_for_ci": 20})) as run:
        loop({"wait_for_ci": lambda pr: next(statuses)})
    assert run.outcome.stop_reason is ob.StopReason.DONE
    assert model_requests(llm) == 7


def test_without_the_poll_allowance_the_same_status_stops(otel, llm, loop):
    statuses = iter(["pending"] * 5 + ["passed"])
    script(llm, [("wait_for_ci", {"pr": 7})] * 6)
    with ob.run("ci") as run:
        loop({"wait_for_ci": lambda pr: next(statuses)})
    assert run.outcome.stop_reason is ob.StopReason.REPEAT  # the same call 3 times in a row
    assert model_requests(llm) == 3


def test_poll_allowance_is_a_cap_too(otel, llm, oai):
    script(llm, [("wait_for_ci", {"pr": 7})] * 10)
    with ob.run("ci-forever", budget=ob.Budget(polls={"wait_for_ci": 4})) as run:
        chat_loop(oai, {"wait_for_ci": lambda pr: PENDING})
    assert run.outcome.stop_reason in (ob.StopReason.REPEAT, ob.StopReason.STALLED)
    assert model_requests(llm) == 4


def test_poll_allowance_applies_to_its_tool_only(otel, llm, oai):
    script(llm, [("wait_for_ci", {"pr": 7}), ("wait_for_ci", {"pr": 7}), ("read", {"n": 1}), ("read", {"n": 2}),
                 ("read", {"n": 3})])
    with ob.run("mixed", budget=ob.Budget(polls={"wait_for_ci": 20})) as run:
        chat_loop(oai, {"wait_for_ci": lambda pr: PENDING, "read": lambda n: PAGE})
    assert run.outcome.stop_reason is ob.StopReason.STALLED
    assert run.outcome.detail.startswith("read returned the same result 3 times")


def test_a_poll_stop_names_the_poll_allowance_not_max_repeats(otel, llm, loop):
    n = iter(range(1000))
    script(llm, [("wait_for_ci", {"pr": 7})] * 25)
    with ob.run("ci-poll", budget=ob.Budget(polls={"wait_for_ci": 20})) as run:
        loop({"wait_for_ci": lambda pr: f"pending #{next(n)}"})  # results change: only the requests repeat
    out = run.outcome
    assert out.stop_reason is ob.StopReason.REPEAT and out.limit == "max_repeats"
    assert model_requests(llm) == 20
    assert "20 times in a row (polls['wait_for_ci']=20)" in out.detail
    assert "max_repeats=" not in out.detail
    assert out.wrap_up.startswith("Stopped at a limit: max_repeats (the same tool call 20 times in a row).")
    assert "polls['wait_for_ci']=20" in out.wrap_up


def test_a_poll_stall_names_the_poll_allowance_and_other_tools_keep_the_defaults(otel, llm, oai):
    script(llm, [("wait_for_ci", {"pr": n}) for n in range(6)] + [("read", {"n": n}) for n in range(4)])
    with ob.run("ci-stall", budget=ob.Budget(polls={"wait_for_ci": 4})) as run:
        chat_loop(oai, {"wait_for_ci": lambda pr: PENDING, "read": lambda n: PAGE})
    out = run.outcome
    assert out.stop_reason is ob.StopReason.STALLED and out.limit == "max_stalls"
    assert model_requests(llm) == 4  # the 4th unchanged status stops it before the 5th call
    assert out.detail.startswith("wait_for_ci returned the same result 4 times in a row")
    assert "(polls['wait_for_ci']=4)" in out.detail and "max_stalls=" not in out.detail
    assert out.wrap_up.startswith("Stopped: no progress (max_stalls). wait_for_ci returned the same result 4 times")

    llm.reset()
    script(llm, [("read", {"n": n}) for n in range(4)])
    with ob.run("read-stall", budget=ob.Budget(polls={"wait_for_ci": 4})) as run:
        chat_loop(oai, {"read": lambda n: PAGE})
    assert run.outcome.stop_reason is ob.StopReason.STALLED and "(max_stalls=3)" in run.outcome.detail


def test_a_cycle_through_a_poll_and_an_at_tool_poll_name_the_allowance(otel, llm, oai):
    n = iter(range(1000))
    script(llm, [("wait_for_ci", {"pr": 7}), ("read_log", {})] * 6)
    with ob.run("ci-cycle", budget=ob.Budget(polls={"wait_for_ci": 4})) as run:
        chat_loop(oai, {"wait_for_ci": lambda pr: f"pending #{next(n)}", "read_log": lambda: f"log #{next(n)}"})
    assert run.outcome.stop_reason is ob.StopReason.REPEAT
    assert model_requests(llm) == 8  # the cycle may repeat as often as the poll allows
    assert "wait_for_ci -> read_log" in run.outcome.detail and "(polls['wait_for_ci']=4)" in run.outcome.detail

    @ob.tool
    def wait_for_ci(pr: int) -> str:
        return f"pending #{next(n)}"

    with ob.run("ci-tool", budget=ob.Budget(polls={"wait_for_ci": 3})) as run:
        for _ in range(5):
            wait_for_ci(7)
    assert run.outcome.stop_reason is ob.StopReason.REPEAT
    assert "was not run" in run.outcome.detail and "(polls['wait_for_ci']=3)" in run.outcome.detail
