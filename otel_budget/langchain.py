"""LangChain v1 agents: the budget as a middleware, next to `ModelCallLimitMiddleware`.

    from langchain.agents import create_agent
    from otel_budget.langchain import BudgetMiddleware

    agent = create_agent(model, tools, name="researcher",
                         middleware=[BudgetMiddleware(budget=otel_budget.Budget(max_steps=20, max_usd=0.50))])
    result = agent.invoke({"messages": [("user", "...")]})   # a stop ends it with the wrap-up AIMessage last

Every `invoke` / `ainvoke` / `stream` / `astream` of the agent is one budgeted run named after the agent. A budget
given per call (`config={"configurable": {"otel_budget": Budget(...)}}`) replaces the middleware's for that call.
"""

from __future__ import annotations

import logging
from typing import Any

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config

from .core import config
from .core.run import current_run
from .instrumentation.frameworks.langchain_models import stop_message
from .instrumentation.frameworks.langchain_pauses import interrupt_at_limit
from .model.budget import Budget

log = logging.getLogger(__name__)

__all__ = ["BudgetMiddleware"]


class BudgetMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Runs a `create_agent` agent on a budget: checked before every model call, ended with the wrap-up.

    Model calls are checked and charged where they are sent (the provider patches), so a call the budget refuses
    is never sent; before each model call this middleware also ends the agent (`jump_to="end"`) with the wrap-up
    `AIMessage` once the run has stopped or has no room for one more call. The message's
    `response_metadata["otel_budget"]` holds the stop reason, the limit and the run name.
    """

    def __init__(self, budget: Budget | None = None) -> None:
        super().__init__()
        if budget is not None and not isinstance(budget, Budget):
            raise TypeError(f"BudgetMiddleware(budget=...) takes an otel_budget.Budget, not {type(budget).__name__}")
        self.budget = budget
        """The agent's budget; None: the default given to `otel_budget.instrument()`."""
        if not config.get().instrumented:
            import otel_budget

            log.info("otel-budget: BudgetMiddleware instruments with the defaults (otel_budget.instrument())")
            otel_budget.instrument()

    @property
    def otel_budget(self) -> Budget | None:
        """The budget under the key the framework adapters read (`budget` by another name)."""
        return self.budget

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        """End the agent with the wrap-up when the run has stopped or one more model call does not fit."""
        node = current_run()
        if node is None or node.allows() or node.stop_state is None:
            return None
        stop = node.stop(*node.stop_state)
        interrupt_at_limit(node, stop)  # a limit pause with a checkpointer: LangGraph's interrupt()
        return {"jump_to": "end", "messages": [stop_message(node, stop)]}

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        """`before_model` for async agents."""
        return self.before_model(state, runtime)
