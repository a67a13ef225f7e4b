"""Claude Agent SDK: `query()` and `ClaudeSDKClient` sessions become budgeted runs.

The SDK drives the Claude Code CLI, which makes the model calls itself, so this adapter works at the SDK's
seams instead of an HTTP client:

- the gate: our `UserPromptSubmit` hook admits the first model call of each prompt and our `PreToolUse`
  hook admits the model call that follows each tool use (subagents' tools included). When it does not fit,
  the hook denies the tool and tells the CLI to stop (`continue: false`), so the next call is never sent.
  The CLI's own `max_budget_usd` is set to what the budget leaves, as a second line of defence, and its
  per-call output limit (`CLAUDE_CODE_MAX_OUTPUT_TOKENS`) bounds each reservation;
- the meter: the CLI's messages, read as they arrive, give each call's usage (main-thread calls exactly,
  from the stream events we ask for and hide; subagent calls from their assistant messages). Each call is one
  `chat` span under the run span. The result message's `total_cost_usd` is charged where it exceeds what the
  calls were priced at, so the CLI's own accounting is never lost nor counted twice;
- delegation: a subagent (`Agent`/`Task` tool) beyond `Budget.max_depth` is refused with stop reason `depth`
  on its own (empty) run; the parent goes on with the refusal as the tool's result.

A budget for one session: `options.otel_budget = Budget(...)` on the `ClaudeAgentOptions`.
After the session, `outcome(result_message)` / `outcome(client)` is its RunOutcome.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import threading
from collections import deque
from typing import Any

from .. import config
from .. import semconv as sc
from ..budget import BudgetExceeded, StopReason, UnknownPriceError
from ..calls import Guard, ModelCall, TokenUsage
from ..node import _current as _current_run  # the run tree's ContextVar: hooks run in the SDK's reader task
from ..run import Admission, Run, RunNode
from ..wrapup import template_wrap_up
from ._framework import budget_from
from ._patch import Patches
from .anthropic import usage_of

log = logging.getLogger(__name__)

#: The CLI's default per-call output limit (Claude Code 2.x), used when the options do not set one.
CLI_MAX_OUTPUT_TOKENS = 32000
#: The model assumed for reservations when the options name none.
DEFAULT_MODEL = "claude-sonnet-4-5"
_ENV_SESSION = "OTEL_BUDGET_SESSION"
_ENV_MAX_OUTPUT = "CLAUDE_CODE_MAX_OUTPUT_TOKENS"
_SETTLE_POLLS = 400  # x 5 ms
_DELEGATION_TOOLS = frozenset({"Agent", "Task"})
_OUTCOME_ATTR = "otel_budget_outcome"
_ids = itertools.count(1)
_sessions: dict[str, Session] = {}


def outcome(obj: Any) -> Any:
    """The RunOutcome attached to a ResultMessage or a ClaudeSDKClient after its run ended (else None)."""
    return getattr(obj, _OUTCOME_ATTR, None)


class Session:
    """One CLI session inside one run: its pending admissions, the calls seen, the CLI's reported cost."""

    def __init__(self, node: RunNode, model: str, max_output: int, hide_partial: bool) -> None:
        self.id = f"s{next(_ids)}"
        self.node = node
        self.model = model
        self.max_output = max_output
        self.hide_partial = hide_partial
        self.pending: deque[Admission] = deque()
        self.open_calls: dict[str, Guard] = {}
        self.seen: set[str] = set()
        self.last_input = 0
        self.priced = 0.0
        self.extra_charged = 0.0
        self.lock = threading.Lock()

    # --- the gate (hooks) ---------------------------------------------------------------------------------

    def admit_next(self) -> BudgetExceeded | None:
        """Reserve the next model call; the stop to report when it does not fit."""
        node = self.node
        chars = int((self.last_input + 1) * node.root.chars_per_token)
        try:
            adm = node.admit(sc.PROVIDER_ANTHROPIC, self.model, self.max_output, lambda: chars)
        except BudgetExceeded as exc:
            return exc
        except UnknownPriceError as exc:
            return node.stop(StopReason.ERROR, None, str(exc))
        with self.lock:
            self.pending.append(adm)
        return None

    def stop_text(self, exc: BudgetExceeded) -> str:
        node = self.node
        return template_wrap_up(node, node.snapshot(exc.reason, exc.limit, exc.message))

    async def on_prompt(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        try:
            stop = self.admit_next()
        except Exception:  # noqa: BLE001 - our bug never blocks the agent
            log.warning("otel-budget: Claude Agent SDK prompt gate failed", exc_info=True)
            return {}
        if stop is None:
            return {}
        return {"continue_": False, "stopReason": self.stop_text(stop)}

    async def on_tool(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        try:
            if not data.get("agent_id"):
                await self._settled()
            return self._gate_tool(data)
        except Exception:  # noqa: BLE001
            log.warning("otel-budget: Claude Agent SDK tool gate failed", exc_info=True)
            return {}

    async def _settled(self) -> None:
        """Wait (briefly) for the main thread's call in flight to be settled: the CLI runs a tool as soon as
        the model has asked for it, before the call's final usage arrives, and the gate should count what the
        call used rather than what it reserved."""
        import anyio

        for _ in range(_SETTLE_POLLS):
            if "main" not in self.open_calls:
                return
            await anyio.sleep(0.005)

    def _gate_tool(self, data: Any) -> dict[str, Any]:
        node = self.node
        name = str(data.get("tool_name", ""))
        arguments = data.get("tool_input") or {}
        if name in _DELEGATION_TOOLS:
            refused = self._refuse_delegation(arguments)
            if refused is not None:
                return _deny(refused)
        node.record_tool_requests([(name, arguments)])
        stop: BudgetExceeded | None = None
        if node.stop_state is not None and node.stop_state[0] in (StopReason.REPEAT, StopReason.TOOL_CALLS):
            reason, limit, detail = node.stop_state
            stop = node.stop(reason, limit, detail)
        if stop is None:
            stop = self.admit_next()
        if stop is None:
            return {}
        text = self.stop_text(stop)
        return {**_deny(text), "continue_": False, "stopReason": text}

    def _refuse_delegation(self, arguments: Any) -> str | None:
        """Open the delegate's run; when max_depth refuses it, close it with `depth` and say why."""
        node = self.node
        child_depth = node.depth + 1
        for anc in node.chain:
            limit = anc.budget.max_depth
            if limit is not None and child_depth - anc.depth + 1 > limit:
                name = str(arguments.get("subagent_type") or "subagent")
                detail = (f"the delegation to {name} was not started: max_depth {limit} of run '{anc.name}' allows "
                          f"no run at depth {child_depth - anc.depth + 1}.")
                token = _current_run.set(node)  # the delegate's parent, whatever context the hook runs in
                try:
                    with Run(name) as child:
                        child.node.stop_state = (StopReason.DEPTH, "max_depth", detail)
                finally:
                    _current_run.reset(token)
                return detail
        return None

    # --- the meter (CLI messages, in the order the CLI wrote them) ---------------------------------------

    def observe(self, raw: Any) -> None:
        try:
            kind = raw.get("type") if isinstance(raw, dict) else None
            if kind == "stream_event":
                self._stream_event(raw.get("event") or {})
            elif kind == "assistant":
                self._assistant(raw)
            elif kind == "result":
                self._result(raw)
        except Exception:  # noqa: BLE001 - metering must never break the session
            log.warning("otel-budget: could not read a Claude Code message", exc_info=True)

    def _stream_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            mid = str(message.get("id") or "")
            call = ModelCall(sc.PROVIDER_ANTHROPIC, sc.OP_CHAT, str(message.get("model") or self.model),
                             self.max_output, True)
            call.usage = usage_of(message.get("usage"))
            call.response_id = mid
            call.response_model = message.get("model")
            self.seen.add(mid)
            self.open_calls["main"] = self._guard(call)
        elif kind == "message_delta":
            guard = self.open_calls.get("main")
            usage = event.get("usage") or {}
            if guard is not None and guard.call.usage is not None and usage.get("output_tokens") is not None:
                guard.call.usage.set_output(usage["output_tokens"])
            reason = (event.get("delta") or {}).get("stop_reason")
            if guard is not None and reason:
                guard.call.finish_reasons = [reason]
        elif kind == "message_stop":
            guard = self.open_calls.pop("main", None)
            if guard is not None:
                self._finish(guard)

    def _assistant(self, raw: dict[str, Any]) -> None:
        message = raw.get("message") or {}
        mid = str(message.get("id") or "")
        if not mid or mid in self.seen:
            return
        self.seen.add(mid)  # a call not streamed to us (a subagent's): its usage as the message reports it
        call = ModelCall(sc.PROVIDER_ANTHROPIC, sc.OP_CHAT, str(message.get("model") or self.model),
                         self.max_output, False)
        usage = usage_of(message.get("usage")) or TokenUsage(0, 0)
        chars = len(json.dumps(message.get("content") or [], default=str))
        usage.output_tokens = max(usage.output_tokens, (chars + 3) // 4)
        call.usage = usage
        call.response_id = mid
        self._finish(self._guard(call))

    def _guard(self, call: ModelCall) -> Guard:
        node = self.node
        with self.lock:
            adm = self.pending.popleft() if self.pending else None
        if adm is None:  # a call no hook admitted (e.g. a subagent's first call): recorded as it happened
            adm = Admission(node, {})
            with node.lock:
                node.root.turns += 1
                adm.turn = node.root.turns
        span = None
        try:
            span = config.get().telemetry.start_call(call)
        except Exception:  # noqa: BLE001
            log.debug("otel-budget: could not start a call span", exc_info=True)
        return Guard(call, node, adm, span, _no_chars)

    def _finish(self, guard: Guard) -> None:
        guard.finish()
        call = guard.call
        if call.usage is not None:
            self.last_input = max(self.last_input, call.usage.input_tokens)
        self.priced += call.cost_usd or 0.0

    def _result(self, raw: dict[str, Any]) -> None:
        node = self.node
        reported = raw.get("total_cost_usd")
        if isinstance(reported, (int, float)) and math.isfinite(reported):
            extra = float(reported) - self.priced - self.extra_charged
            if extra > 1e-12:  # what the CLI spent beyond the calls we priced (unseen calls, other prices)
                node.charge(extra, "claude-code")
                self.extra_charged += extra
        subtype = raw.get("subtype")
        if node.stop_state is None and subtype == "error_max_budget_usd":
            node.stop_state = (StopReason.COST, "max_usd", "Claude Code stopped at max_budget_usd.")
        elif node.stop_state is None and subtype == "error_max_turns":
            node.stop_state = (StopReason.STEPS, "max_steps", "Claude Code stopped at max_turns.")

    def close(self) -> None:
        """Release reservations no call used and end calls left open."""
        for guard in list(self.open_calls.values()):
            guard.abandon()
        self.open_calls.clear()
        with self.lock:
            left, self.pending = list(self.pending), deque()
        for adm in left:
            self.node.release(adm)
        _sessions.pop(self.id, None)


def _no_chars() -> int:
    return 0  # the CLI's request body is not ours to measure


def _deny(reason: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}


# --- options ------------------------------------------------------------------------------------------------


def _configure(options: Any, node: RunNode) -> tuple[Any, Session]:
    """A copy of the options with our hooks, the session tag, and the CLI's caps set from the budget."""
    from claude_agent_sdk import HookMatcher

    env = dict(options.env or {})
    try:
        max_output = int(env.get(_ENV_MAX_OUTPUT) or CLI_MAX_OUTPUT_TOKENS)
    except ValueError:
        max_output = CLI_MAX_OUTPUT_TOKENS
    session = Session(node, str(options.model or DEFAULT_MODEL), max_output, not options.include_partial_messages)
    env[_ENV_SESSION] = session.id
    hooks = {event: list(matchers) for event, matchers in (options.hooks or {}).items()}
    hooks.setdefault("UserPromptSubmit", []).insert(0, HookMatcher(hooks=[session.on_prompt]))  # type: ignore[list-item]
    hooks.setdefault("PreToolUse", []).insert(0, HookMatcher(hooks=[session.on_tool]))  # type: ignore[list-item]
    changes: dict[str, Any] = {"env": env, "hooks": hooks, "include_partial_messages": True}
    usd_left = _usd_left(node)
    if usd_left is not None:
        current = options.max_budget_usd
        changes["max_budget_usd"] = usd_left if current is None else min(current, usd_left)
    _sessions[session.id] = session
    return dataclasses.replace(options, **changes), session


def _usd_left(node: RunNode) -> float | None:
    from .. import ledger as lg

    room = lg.headroom(node.accounts, "usd")
    return None if room == math.inf else max(0.0, room)


def _run_name(options: Any) -> str:
    agent = getattr(options, "agent", None)
    return str(agent or "claude-agent")


def _finish_message(message: Any, session: Session, hidden: bool) -> Any:
    """None to hide a stream event the caller did not ask for; a stopped run's result carries the wrap-up."""
    kind = type(message).__name__
    if hidden and kind == "StreamEvent":
        return None
    if kind == "ResultMessage":
        node = session.node
        if node.stop_state is not None:
            reason, limit, detail = node.stop_state
            message.result = template_wrap_up(node, node.snapshot(reason, limit, detail))
            message.is_error = True
    return message


# --- query() ------------------------------------------------------------------------------------------------


async def _process_query(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    names = ("prompt", "options", "transport")
    values = dict(zip(names, args, strict=False)) | kwargs
    options = values.get("options")
    if options is None or _ENV_SESSION in (options.env or {}):
        async for message in wrapped(*args, **kwargs):
            yield message
        return
    run = Run(_run_name(options), budget_from(options))
    last: Any = None
    session: Session | None = None
    with run:
        try:
            configured, session = _configure(options, run.node)
        except Exception:  # noqa: BLE001 - our bug: the session runs unmetered
            log.warning("otel-budget: could not configure a Claude Agent SDK query", exc_info=True)
        else:
            values["options"] = configured
        try:
            async for message in wrapped(**values):
                shown = message if session is None else _finish_message(message, session, session.hide_partial)
                if shown is None:
                    continue
                if type(shown).__name__ == "ResultMessage":
                    last = shown
                yield shown
        finally:
            if session is not None:
                session.close()
    if last is not None:
        setattr(last, _OUTCOME_ATTR, run.outcome)


# --- ClaudeSDKClient ----------------------------------------------------------------------------------------

_CLIENT_RUN = "_otel_budget_run"
_CLIENT_SESSION = "_otel_budget_session"


async def _connect(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    options = instance.options
    if getattr(instance, _CLIENT_RUN, None) is not None or _ENV_SESSION in (options.env or {}):
        return await wrapped(*args, **kwargs)
    run = Run(_run_name(options), budget_from(options))
    run.__enter__()
    try:
        configured, session = _configure(options, run.node)
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
    setattr(instance, _OUTCOME_ATTR, run.outcome)


async def _receive_messages(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    session: Session | None = getattr(instance, _CLIENT_SESSION, None)
    async for message in wrapped(*args, **kwargs):
        shown = message if session is None else _finish_message(message, session, session.hide_partial)
        if shown is not None:
            yield shown


# --- the transport tap --------------------------------------------------------------------------------------


def _read_messages(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    options = getattr(instance, "_options", None)
    session = _sessions.get(str((getattr(options, "env", None) or {}).get(_ENV_SESSION, "")))
    messages = wrapped(*args, **kwargs)
    if session is None:
        return messages
    return _tap(messages, session)


async def _tap(messages: Any, session: Session) -> Any:
    async for raw in messages:
        session.observe(raw)
        yield raw


def instrument(patches: Patches) -> bool:
    """Patch the installed claude-agent-sdk; False when it is not installed."""
    try:
        from claude_agent_sdk import client as client_module
        from claude_agent_sdk._internal import client as internal
        from claude_agent_sdk._internal.transport import subprocess_cli
    except ImportError:
        return False
    patches.wrap(internal.InternalClient, "process_query", _process_query)
    patches.wrap(client_module.ClaudeSDKClient, "connect", _connect)
    patches.wrap(client_module.ClaudeSDKClient, "disconnect", _disconnect)
    patches.wrap(client_module.ClaudeSDKClient, "receive_messages", _receive_messages)
    patches.wrap(subprocess_cli.SubprocessCLITransport, "read_messages", _read_messages)
    return True


__all__ = ["CLI_MAX_OUTPUT_TOKENS", "DEFAULT_MODEL", "Session", "instrument", "outcome"]
