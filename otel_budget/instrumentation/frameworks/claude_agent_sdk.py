"""Claude Agent SDK: `query()` and `ClaudeSDKClient` sessions become budgeted runs.

The SDK drives the Claude Code CLI, which makes the model calls itself, so this adapter works at two seams:

- the gate: the CLI reaches the model through `ANTHROPIC_BASE_URL`, which we point at a loopback gateway
  (`_claude_gateway`). Every model request, the main agent's and each subagent's, is admitted there before it
  is forwarded to the API the CLI would have used; a request that does not fit is never sent and is answered
  with the wrap-up instead, which ends that agent's turn. The `tool_result` blocks a request carries (without
  the CLI's own `<system-reminder>` text) feed the stall check (`max_stalls`) before it is admitted. The
  response streams through the gateway, which reads its usage and tool requests on the way (the meter);
- the hooks: `PreToolUse` denies a tool once the run stopped (repeat, tool-call cap) and refuses a delegation
  (`Agent`/`Task`) beyond `Budget.max_depth`; `SubagentStart` / `SubagentStop` open and close each subagent's
  child run (`invoke_agent {agent_type}`), which its requests (the CLI tags them `x-claude-code-agent-id`) are
  admitted in and charged to, drawing from the session's budget.

The CLI's own `max_budget_usd` is set to what the budget leaves, as a second line of defence. The result
message's `total_cost_usd` is charged where it exceeds what the calls were priced at, so the CLI's own
accounting is never lost nor counted twice.

A budget for one session: `otel_budget.claude.BudgetedOptions(..., otel_budget=Budget(...))`, or the older
`options.otel_budget = Budget(...)` on a `ClaudeAgentOptions`. After the session, `outcome(result_message)` /
`outcome(client)` is its RunOutcome.

This module holds the patches. The options pointed at the gateway are `_claude_options`, the session (admission,
hooks, the CLI's messages) `_claude_session`, the gateway `_claude_gateway` (what it serves and the bounds it
keeps: `_claude_http`; its server's life: `_claude_serving`): imported one way, in that order. What the gateway
trusts is in docs/security.md ("The Claude gateway").
"""

from __future__ import annotations

import logging
from typing import Any

from ...core.run import Run
from ...core.wrapup import template_wrap_up
from .._spec import AdapterSpec, PatchPoint, points
from ._claude_options import DEFAULT_MODEL, configure, has_session
from ._claude_session import Agent, ClaudeCall, Session
from ._framework import budget_from

log = logging.getLogger(__name__)

#: The CLI's default per-call output limit (Claude Code 2.x); each request's own `max_tokens` is reserved.
CLI_MAX_OUTPUT_TOKENS = 32000
_OUTCOME_ATTR = "otel_budget_outcome"


def outcome(obj: Any) -> Any:
    """The RunOutcome attached to a ResultMessage or a ClaudeSDKClient after its run ended (else None)."""
    return getattr(obj, _OUTCOME_ATTR, None)


def _open_run(options: Any) -> Run:
    """The run of a session: named for its agent (`options.agent`), under the budget its options carry."""
    return Run(str(getattr(options, "agent", None) or "claude-agent"), budget_from(options))


def _finish_message(message: Any, session: Session) -> Any:
    """Watch the message; a stopped run's result carries the wrap-up."""
    session.observe(message)
    node = session.node
    if type(message).__name__ == "ResultMessage" and node.stop_state is not None:
        message.result = template_wrap_up(node, node.snapshot(*node.stop_state))
        message.is_error = True
    return message


# --- query() ------------------------------------------------------------------------------------------------


async def _process_query(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ("prompt", "options", "transport")
    values = dict(zip(names, args, strict=False)) | kwargs
    options = values.get("options")
    if options is None or has_session(options):
        async for message in wrapped(*args, **kwargs):
            yield message
        return
    run = _open_run(options)
    last: Any = None
    session: Session | None = None
    with run:
        try:
            configured, session = configure(options, run.node)
        except Exception:  # noqa: BLE001 - our bug: the session runs unmetered
            log.warning("otel-budget: could not configure a Claude Agent SDK query", exc_info=True)
        else:
            values["options"] = configured
        try:
            async for message in wrapped(**values):
                shown = message if session is None else _finish_message(message, session)
                if type(shown).__name__ == "ResultMessage":
                    last = shown
                yield shown
        finally:
            if session is not None:
                session.close()
    if last is not None:
        setattr(last, _OUTCOME_ATTR, run.node.outcome)


# --- ClaudeSDKClient ----------------------------------------------------------------------------------------

_CLIENT_RUN = "_otel_budget_run"
_CLIENT_SESSION = "_otel_budget_session"


async def _connect(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    options = instance.options
    if getattr(instance, _CLIENT_RUN, None) is not None or has_session(options):
        return await wrapped(*args, **kwargs)
    run = _open_run(options)
    run.__enter__()
    try:
        configured, session = configure(options, run.node)
    except Exception:  # noqa: BLE001
        log.warning("otel-budget: could not configure a ClaudeSDKClient", exc_info=True)
        run.__exit__(None, None, None)
        return await wrapped(*args, **kwargs)
    setattr(instance, _CLIENT_RUN, run)
    setattr(instance, _CLIENT_SESSION, session)
    instance.options = configured
    try:
        return await wrapped(*args, **kwargs)
    except BaseException as exc:
        _end_client(instance, options, exc)
        raise


async def _disconnect(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _end_client(instance, None, None)


def _end_client(instance: Any, original_options: Any, exc: BaseException | None) -> None:
    run: Run | None = getattr(instance, _CLIENT_RUN, None)
    session: Session | None = getattr(instance, _CLIENT_SESSION, None)
    if run is None:
        return
    setattr(instance, _CLIENT_RUN, None)
    if session is not None:
        session.close()
    if original_options is not None:
        instance.options = original_options
    try:
        run.__exit__(type(exc) if exc else None, exc, None)
    except ValueError:  # the run was opened in another context (a different task): close it from here
        log.debug("otel-budget: closing a ClaudeSDKClient run from another context", exc_info=True)
    setattr(instance, _OUTCOME_ATTR, run.node.outcome)


async def _receive_messages(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    session: Session | None = getattr(instance, _CLIENT_SESSION, None)
    async for message in wrapped(*args, **kwargs):
        yield message if session is None else _finish_message(message, session)


SPEC = AdapterSpec(
    requires=("claude-agent-sdk >= 0.1, < 1",),
    patches=(PatchPoint("claude_agent_sdk._internal.client", "InternalClient.process_query", _process_query),
             *points("claude_agent_sdk.client", {"ClaudeSDKClient.connect": _connect,
                                                 "ClaudeSDKClient.disconnect": _disconnect,
                                                 "ClaudeSDKClient.receive_messages": _receive_messages})),
)


__all__ = ["CLI_MAX_OUTPUT_TOKENS", "DEFAULT_MODEL", "Agent", "ClaudeCall", "Session", "outcome"]
