"""Claude Agent SDK, typed: options that carry the session's budget as a field, and the outcome of a session.

    from otel_budget.claude import BudgetedOptions, outcome

    options = BudgetedOptions(model="claude-sonnet-4-5", otel_budget=otel_budget.Budget(max_usd=0.50))
    async for message in query(prompt="...", options=options): ...
    outcome(message)  # the RunOutcome, on the ResultMessage (or on a ClaudeSDKClient after disconnect)

Importing this module needs `claude-agent-sdk` installed (`pip install "otel-budget[claude]"`).
"""

from __future__ import annotations

from dataclasses import dataclass

try:
    from claude_agent_sdk import ClaudeAgentOptions
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "otel_budget.claude needs the Claude Agent SDK: pip install 'otel-budget[claude]' (or claude-agent-sdk)"
    ) from exc

from .instrumentation.frameworks.claude_agent_sdk import outcome
from .model.budget import Budget


@dataclass
class BudgetedOptions(ClaudeAgentOptions):
    """`ClaudeAgentOptions` with the budget of the session's run as a typed field."""

    otel_budget: Budget | None = None
    """The budget of the `query()` / `ClaudeSDKClient` session (None: the default given to `instrument()`)."""

    def __post_init__(self) -> None:
        if self.otel_budget is not None and not isinstance(self.otel_budget, Budget):
            raise TypeError(
                f"BudgetedOptions(otel_budget=...) takes an otel_budget.Budget, not {type(self.otel_budget).__name__}: "
                "e.g. otel_budget=otel_budget.Budget(max_usd=0.50)"
            )


__all__ = ["BudgetedOptions", "outcome"]
