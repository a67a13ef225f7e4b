"""pydantic-ai: every `Agent.run`, `run_sync`, `run_stream` and `iter` is a budgeted run.

- All four go through `Agent.iter`, patched once. The run is named after the agent (`agent.name`, "agent" unless
  set). Its budget is the `otel_budget.pydantic_ai.BudgetLimits` capability the call brings
  (`agent.run(..., capabilities=[BudgetLimits(Budget(...))])`) or the agent was built with
  (`Agent(..., capabilities=[...])`), else the default given to `instrument()`. An agent run inside a run (an
  agent called from a tool: delegation) is a child run that draws from its parents.
- Model calls are checked and charged by the provider patches underneath (pydantic-ai's OpenAI models use the
  openai SDK, its Anthropic model the anthropic SDK, its Google model google-genai). Each run gets one more
  capability of ours, which only maps: a refused call becomes the final answer, tools are admitted and spanned.
- A stop: the model request the budget refuses is not sent; when the run's output may be text (`output_type` str,
  the default) it is answered by a text response carrying the wrap-up, so the run ends the usual way and
  `result.output` is the wrap-up (a streamed request refused as its stream opens gets a one-part stream of the
  wrap-up). An answer cut at the output limit the budget set is replaced by the wrap-up the same way (in
  `run_stream` the stream's consumer, who already got the cut text, gets the wrap-up after it; the output and the
  history are the wrap-up). When the output type allows no text (a structured output), `agent.run()` raises
  `otel_budget.BudgetExceeded` after the run closed; its `.outcome` is the run's final RunOutcome. A refused tool
  execution is not run; the model gets a short refusal as the tool's result. `outcome(result)` gives the
  RunOutcome; `stop.reason` is on the run span.
- pydantic-ai's own `UsageLimits` keep working: `UsageLimitExceeded` is raised as before and the run ends with the
  matching stop reason (`steps`, `tool_calls` or `tokens`; `cost` for its `cost_limit`) and `outcome.limit` naming
  pydantic-ai's limit (e.g. `request_limit`).
- One span per request: with pydantic-ai's instrumentation on (`Agent(capabilities=[Instrumentation(...)])`,
  `agent.instrument = ...`, `Agent.instrument_all()`), its model-request span is left out for requests our
  provider patch spans (inside a run), so each request has exactly one LLM span (ours, with cost and budget
  attributes; a call that was never sent has none), and its agent-run and tool spans stay; our own tool span is
  then left out, so each tool execution is spanned once.
"""

from __future__ import annotations

import contextlib
import logging
import re
import weakref
from collections.abc import AsyncIterator
from typing import Any

from .. import config
from ..budget import Budget, BudgetExceeded, RunOutcome, StopReason
from ..run import Run, RunNode, current_run
from ..tools import begin_tool, end_tool
from ._framework import budget_from, stop_text
from ._patch import Patches

log = logging.getLogger(__name__)

_OUTCOME_ATTR = "otel_budget_outcome"
#: pydantic-ai model modules -> our provider module whose patch meters (and spans) their requests.
_METERED_BY = {
    "pydantic_ai.models.openai": "openai",
    "pydantic_ai.models.anthropic": "anthropic",
    "pydantic_ai.models.google": "google_genai",
}
#: Runs whose stop we answered with a wrap-up response (so the final output can carry the final wrap-up).
_answered: weakref.WeakKeyDictionary[RunNode, str] = weakref.WeakKeyDictionary()
#: UsageLimitExceeded message fragment -> (stop reason, limit) of the run it ends.
_USAGE_LIMITS = (
    ("request_limit", StopReason.STEPS), ("tool_calls_limit", StopReason.TOOL_CALLS),
    ("cost_limit", StopReason.COST), ("tokens_limit", StopReason.TOKENS),
)


def outcome(result: Any) -> RunOutcome | None:
    """The RunOutcome of an `Agent.run` / `run_sync` / `run_stream` / `iter` result (None if it was not budgeted)."""
    return getattr(result, _OUTCOME_ATTR, None)


# --- runs ---------------------------------------------------------------------------------------------------


def _budget(agent: Any, kwargs: dict[str, Any]) -> Budget | None:
    """The budget of the call's `BudgetLimits` capability, else of the agent's, else None."""
    for capabilities in (kwargs.get("capabilities"), _agent_capabilities(agent)):
        for capability in capabilities or ():
            found = budget_from(capability)
            if found is not None:
                return found
    return None


def _agent_capabilities(agent: Any) -> Any:
    root = getattr(agent, "root_capability", None)
    leaves = getattr(root, "capabilities", None)
    return leaves if leaves is not None else getattr(agent, "_capabilities", None)


def _iter(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    from ..pydantic_ai import _Enforcer

    run = Run(str(getattr(instance, "name", None) or "agent"), _budget(instance, kwargs))
    kwargs = {**kwargs, "capabilities": [*(kwargs.get("capabilities") or ()), _Enforcer()]}
    return _budgeted(run, lambda: wrapped(*args, **kwargs))


@contextlib.asynccontextmanager
async def _budgeted(run: Run, make: Any) -> AsyncIterator[Any]:
    agent_run: Any = None
    stop: BaseException | None = None
    async with run:
        try:
            async with make() as agent_run:
                yield agent_run
        except BudgetExceeded as exc:
            stop = exc  # not answered by a result (a structured output): raised after the run closed
            raise
        except Exception as exc:
            stop = _usage_limit(run.node, exc)
            if stop is None:
                raise
    result = getattr(agent_run, "result", None)
    if stop is not None:
        if isinstance(stop, BudgetExceeded) and run.node.outcome is not None:
            stop.outcome = run.node.outcome
        _attach(stop, run)
        raise stop
    if result is not None:
        _finish(result, run)
    elif agent_run is not None and run.node.outcome is not None and not run.node.outcome.completed:
        _attach(agent_run, run)


def _usage_limit(node: RunNode, exc: BaseException) -> BaseException | None:
    """pydantic-ai's own `UsageLimits` stopped the run: it ends with that limit; the error is raised as before."""
    if type(exc).__name__ != "UsageLimitExceeded":
        return None
    text = str(exc)
    reason = next((r for key, r in _USAGE_LIMITS if key in text), StopReason.STEPS)
    named = re.search(r"\b(\w+_limit)\b", text)
    if node.stop_state is None:
        node.stop_state = (reason, named.group(1) if named else None, f"pydantic-ai's UsageLimits stopped the run: "
                           f"{text}.")
    return exc


def _finish(result: Any, run: Run) -> None:
    _attach(result, run)
    done = run.node.outcome
    if done is None or done.completed:
        return
    answered = _answered.pop(run.node, None)
    if answered is not None and getattr(result, "output", None) == answered:
        with contextlib.suppress(Exception):
            result.output = done.wrap_up  # the final text (with a model-written summary, if configured)


def _attach(obj: Any, run: Run) -> None:
    with contextlib.suppress(Exception):
        setattr(obj, _OUTCOME_ATTR, run.node.outcome)


# --- what the run's capability calls ------------------------------------------------------------------------


def refused_here(exc: BudgetExceeded) -> RunNode | None:
    """The current run, when `exc` is its own stop (or its ancestors')."""
    node = current_run()
    if node is None or node.id not in getattr(exc, "run_path", ()):
        return None
    return node


def answer(node: RunNode, exc: BudgetExceeded) -> str:
    """The wrap-up text that answers a refused (or cut) model request."""
    text = stop_text(node, exc)
    _answered[node] = text
    return text


def metered(model: Any) -> bool:
    """Whether one of our provider patches meters and spans this pydantic-ai model's requests."""
    from . import patched

    for _ in range(8):  # unwrap wrapper models (instrumented, fallback-free wrappers)
        inner = getattr(model, "wrapped", None)
        if inner is None:
            break
        model = inner
    module = type(model).__module__
    ours = next((p for prefix, p in _METERED_BY.items() if module == prefix or module.startswith(prefix + ".")), None)
    return ours is not None and ours in patched()


async def _model_request(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """pydantic-ai's instrumentation around a model request: left out inside a run when our patch spans it."""
    request_context = kwargs.get("request_context")
    handler = kwargs.get("handler")
    try:
        skip = (
            handler is not None and current_run() is not None and config.get().instrumented
            and metered(getattr(request_context, "model", None))
        )
    except Exception:  # noqa: BLE001 - our bug: their span stays
        skip = False
    if skip:
        return await handler(request_context)  # type: ignore[misc]
    return await wrapped(*args, **kwargs)


def tool_begin(ctx: Any, name: str, args: Any, call_id: str | None) -> tuple:
    """Admit a tool execution (raises BudgetExceeded); spanned by us unless pydantic-ai's instrumentation spans it."""
    if _instrumented_by_pydantic_ai(ctx):
        node = current_run()
        reserved = node.admit_tool(name, args, 0.0) if node is not None else {}
        return node, name, reserved, None, 0.0, args
    return begin_tool(name, args, call_id)


def tool_end(state: tuple, result: Any, error: BaseException | None = None) -> None:
    end_tool(state, result, error)


def _instrumented_by_pydantic_ai(ctx: Any) -> bool:
    try:
        from pydantic_ai.capabilities.instrumentation import Instrumentation
    except ImportError:
        return False
    capabilities = getattr(ctx, "capabilities", None)
    values = capabilities.values() if isinstance(capabilities, dict) else capabilities or ()
    return any(isinstance(c, Instrumentation) for c in values)


def instrument(patches: Patches) -> bool:
    """Patch the installed pydantic-ai (agent runs, and its instrumentation's model-request span)."""
    try:
        from pydantic_ai import Agent
    except ImportError:
        return False
    ok = patches.wrap(Agent, "iter", _iter)
    try:
        from pydantic_ai.capabilities.instrumentation import Instrumentation
    except ImportError:
        Instrumentation = None  # type: ignore[assignment,misc]
    if Instrumentation is not None:
        ok = patches.wrap(Instrumentation, "wrap_model_request", _model_request) and ok
    if not ok:
        log.warning("otel-budget: this pydantic-ai version lacks a patch point; some of it is not budgeted")
    return True


__all__ = ["outcome"]
