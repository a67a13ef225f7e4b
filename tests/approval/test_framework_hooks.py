"""The generic hooks framework integrations call: needs_approval() for their own approval check, pause() when
the framework interrupts itself, and resume() when it goes on."""

from __future__ import annotations

import otel_budget
from otel_budget import Budget
from otel_budget.core.resume import needs_approval, pause


def test_framework_pause_and_resume_keep_the_quota_and_the_decision(otel):
    budget = Budget(max_tool_calls=5, approve=["refund"])
    framework_state = {"agent": "support", "step": 7}
    with otel_budget.run("support", budget=budget) as run:
        run.charge(0.5, name="earlier work")
        assert needs_approval("refund", {"order": "A1"}) is True
        assert needs_approval("lookup", {"order": "A1"}) is False
        pause("refund", '{"order": "A1"}', "call_9", state=framework_state)
        assert not run.allows()
    paused = run.outcome.paused
    assert run.outcome.stop_reason == "awaiting_approval"
    assert (paused.pending.tool, paused.pending.arguments, paused.pending.call_id) == ("refund", {"order": "A1"}, "call_9")
    assert paused.state == framework_state

    @otel_budget.tool
    def refund(order: str) -> str:
        return f"refunded {order}"

    with otel_budget.resume(paused, approved=True) as resumed:
        assert resumed.state == framework_state
        assert needs_approval("refund", {"order": "A1"}) is False  # granted for exactly this call
        assert needs_approval("refund", {"order": "B2"}) is True
        assert refund(order="A1") == "refunded A1"
    assert resumed.outcome.stop_reason == "done"
    assert resumed.outcome.usage.cost_usd == 0.5
    assert not needs_approval("refund", {})  # outside any run nothing is gated
