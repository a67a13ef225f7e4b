"""The Claude Agent SDK's session inside its run: the gateway's route that admits each model request of the CLI
(the main agent's and each subagent's), the hooks that gate tools and open and close subagents' runs, and the
CLI's messages read for the cost it reports."""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import json
import logging
import math
import re
import secrets
import shutil
import threading
from collections.abc import Iterator
from typing import Any

from opentelemetry import context as otel_context

from ...core import calls
from ...core.calls import Guard
from ...core.node import (
    _current as _current_run,  # the run tree's ContextVar: hooks and the gateway run elsewhere
)
from ...core.run import Run, RunNode
from ...core.stops import _GATED_STOPS
from ...core.wrapup import template_wrap_up
from ...model.budget import StopReason
from ...model.call import ModelCall
from ...model.outcome import BudgetExceeded, UnknownPriceError
from ...telemetry import semconv as sc
from ..providers.anthropic import AnthropicAdapter, MessageStream
from ._claude_gateway import BadRequest, gateway
from ._framework import stop_text

log = logging.getLogger(__name__)

_AGENT_HEADER = "x-claude-code-agent-id"
_DELEGATION_TOOLS = frozenset({"Agent", "Task"})
_REFUSAL_ID = "msg_otel_budget_"
#: Subagent runs a session keeps open at once (a request with a new `x-claude-code-agent-id` opens one): beyond it,
#: a request of a new subagent is answered with a refusal and not sent.
MAX_SUBAGENTS = 64
_ids = itertools.count(1)


#: What the CLI appends to a tool's result on its way to the model (tokens and USD left): not the tool's answer.
_REMINDER = re.compile(r"<system-reminder>.*?</system-reminder>\s*", re.DOTALL)


def _tool_results(request: dict[str, Any]) -> dict[str, Any]:
    """The request's last message with the CLI's `<system-reminder>` text taken out of its `tool_result` blocks
    (they change every turn), so the stall check reads what the tools returned, as for the anthropic SDK."""
    messages = request.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, dict) or not isinstance(last.get("content"), list):
        return {"messages": [last] if last is not None else []}
    blocks = [{**block, "content": _without_reminders(block.get("content"))}
              if isinstance(block, dict) and block.get("type") == "tool_result" else block
              for block in last["content"]]
    return {"messages": [{**last, "content": blocks}]}


def _without_reminders(content: Any) -> Any:
    if isinstance(content, str):
        return _REMINDER.sub("", content)
    if isinstance(content, list):
        return [{**part, "text": _REMINDER.sub("", part["text"])}
                if isinstance(part, dict) and isinstance(part.get("text"), str) else part for part in content]
    return content


class Agent:
    """The main agent or one subagent of a session: the run its calls are admitted in, and its tracing context."""

    __slots__ = ("node", "otel", "run", "context")

    def __init__(self, node: RunNode, otel: Any, run: Run | None = None,
                 context: contextvars.Context | None = None) -> None:
        self.node = node
        self.otel = otel
        self.run = run  # a subagent's own run, opened in `context` and closed there
        self.context = context

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Make this agent's run (and its span) current while a call is admitted."""
        token = _current_run.set(self.node)
        otel_token = otel_context.attach(self.otel)
        try:
            yield
        finally:
            otel_context.detach(otel_token)
            _current_run.reset(token)


class Session:
    """One CLI session inside one run: its agents, the calls the gateway carried, the CLI's reported cost."""

    def __init__(self, node: RunNode, model: str, upstream: str) -> None:
        self.id = f"s{next(_ids)}-{secrets.token_urlsafe(12)}"  # its gateway route: not guessable by other processes
        self.secret = secrets.token_urlsafe(32)  # the header value every request must carry besides the route
        self.files: str | None = None  # the directory of the CLI's settings file, removed with the session
        self.node = node
        self.model = model
        self.upstream = upstream
        self.main = Agent(node, otel_context.get_current())
        self.subagents: dict[str, Agent] = {}
        self.served: set[str] = set()
        self.unserved: set[str] = set()
        self.priced = 0.0
        self.extra_charged = 0.0
        self.lock = threading.Lock()

    # --- the gate (the gateway's route) --------------------------------------------------------------------

    def admit(self, headers: dict[str, str], body: bytes) -> ClaudeCall | str:
        """Admit one model request of the CLI: its ClaudeCall, or the wrap-up to answer with instead. When admitting
        fails (our bug), the request is not sent: the run stops with `error`, naming the bug (fails closed)."""
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            raise BadRequest("the request body is not JSON") from None
        if not isinstance(request, dict):
            raise BadRequest("the request body is not a JSON object")
        node = self.node
        try:
            agent = self.agent(headers.get(_AGENT_HEADER))
            if agent is None:
                return (f"otel-budget: this subagent was not started: {MAX_SUBAGENTS} subagents of this session "
                        f"are running already, the most a session opens at once.")
            node = agent.node
            return self._admit(agent, request, body)
        except Exception as exc:  # noqa: BLE001 - our bug: the brake fails closed
            log.warning("otel-budget: could not admit a Claude Code request; it was not sent", exc_info=True)
            detail = (f"otel-budget could not admit a model request ({type(exc).__name__}), so it was not sent; "
                      "this is a bug in otel-budget")
            return stop_text(node, node.stop(StopReason.ERROR, None, detail))

    def _admit(self, agent: Agent, request: dict[str, Any], body: bytes) -> ClaudeCall | str:
        limit = request.get("max_tokens")
        call = ModelCall(sc.PROVIDER_ANTHROPIC, sc.OP_CHAT, str(request.get("model") or self.model),
                         limit if isinstance(limit, int) else None, request.get("stream") is True)
        call.results = (_tool_results(request), "messages")  # what its tools returned: the stall check
        node = agent.node
        with agent.current():
            try:
                guard = calls.begin(call, lambda: len(body))
            except BudgetExceeded as exc:
                return stop_text(node, exc)
            except UnknownPriceError as exc:
                return stop_text(node, node.stop(StopReason.ERROR, None, str(exc)))
        if guard is None:  # pragma: no cover - the gateway's thread is never inside another call
            raise RuntimeError("a Claude Code request was admitted inside another call")
        if guard.max_output_tokens is not None:
            body = json.dumps({**request, "max_tokens": guard.max_output_tokens}).encode()
        return ClaudeCall(self, guard, body)

    def agent(self, agent_id: str | None, name: str | None = None) -> Agent | None:
        """The main agent (no id) or the subagent `agent_id`, whose run is opened on first sight; None when
        MAX_SUBAGENTS are open already."""
        if not agent_id:
            return self.main
        with self.lock:
            agent = self.subagents.get(agent_id)
            if agent is None:
                if len(self.subagents) >= MAX_SUBAGENTS:
                    return None
                agent = self.subagents[agent_id] = self._open(name or "subagent")
            return agent

    def _open(self, name: str) -> Agent:
        """A subagent's child run, opened in a context of its own (it is closed there, from another task)."""
        context = contextvars.Context()
        parent = self.main

        def enter() -> Agent:
            _current_run.set(parent.node)
            otel_context.attach(parent.otel)
            run = Run(name)
            run.__enter__()
            return Agent(run.node, otel_context.get_current(), run, context)

        return context.run(enter)

    def _close(self, agent_id: str) -> None:
        with self.lock:
            agent = self.subagents.pop(agent_id, None)
        if agent is not None and agent.run is not None and agent.context is not None:
            agent.context.run(agent.run.__exit__, None, None, None)

    def carried(self, response_id: Any) -> None:
        """The gateway carries the response `response_id` (known before the CLI sees any of it)."""
        if response_id:
            with self.lock:
                self.served.add(str(response_id))

    def settled(self, call: ModelCall) -> None:
        with self.lock:
            self.priced += call.cost_usd or 0.0

    # --- the hooks ------------------------------------------------------------------------------------------

    async def on_tool(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        try:
            return self._gate_tool(data)
        except Exception:  # noqa: BLE001 - our bug never blocks the agent
            log.warning("otel-budget: Claude Agent SDK tool gate failed", exc_info=True)
            return {}

    async def on_subagent_start(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        try:
            if self.agent(str(data.get("agent_id") or ""), str(data.get("agent_type") or "subagent")) is None:
                log.warning("otel-budget: a Claude Code subagent was not started: %d are running already",
                            MAX_SUBAGENTS)
        except Exception:  # noqa: BLE001
            log.warning("otel-budget: could not open a Claude Code subagent's run", exc_info=True)
        return {}

    async def on_subagent_stop(self, data: Any, tool_use_id: str | None, context: Any) -> dict[str, Any]:
        try:
            self._close(str(data.get("agent_id") or ""))
        except Exception:  # noqa: BLE001
            log.warning("otel-budget: could not close a Claude Code subagent's run", exc_info=True)
        return {}

    def _gate_tool(self, data: Any) -> dict[str, Any]:
        """Deny a tool once its agent's run stopped; refuse a delegation beyond max_depth."""
        agent = self.agent(data.get("agent_id"))
        if agent is None:
            return _deny(f"otel-budget: {MAX_SUBAGENTS} subagents of this session are running already.")
        node = agent.node
        name = str(data.get("tool_name", ""))
        if name in _DELEGATION_TOOLS:
            refused = self._refuse_delegation(node, data.get("tool_input") or {})
            if refused is not None:
                return _deny(refused)
        if node.stop_state is not None and node.stop_state[0] in _GATED_STOPS:
            return _deny(template_wrap_up(node, node.snapshot(*node.stop_state)))
        return {}

    def _refuse_delegation(self, node: RunNode, arguments: Any) -> str | None:
        """Open the delegate's run; when max_depth refuses it, close it with `depth` and say why."""
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

    # --- the CLI's messages ---------------------------------------------------------------------------------

    def observe(self, message: Any) -> None:
        """Watch the CLI's messages: a call the gateway never carried, the result's own cost and stop."""
        kind = type(message).__name__
        if kind == "AssistantMessage":
            mid = getattr(message, "message_id", None)
            if mid and not str(mid).startswith(_REFUSAL_ID):
                with self.lock:
                    missed = mid not in self.served and mid not in self.unserved
                    if missed:
                        self.unserved.add(mid)
                if missed:
                    log.warning("otel-budget: Claude Code answered with a message (%s) that did not come through the "
                                "budget's gateway; is ANTHROPIC_BASE_URL overridden by its settings?", mid)
        elif kind == "ResultMessage":
            self._result(message)

    def _result(self, message: Any) -> None:
        node = self.node
        reported = getattr(message, "total_cost_usd", None)
        if isinstance(reported, (int, float)) and math.isfinite(reported):
            with self.lock:
                extra = float(reported) - self.priced - self.extra_charged
                if extra > 1e-12:
                    self.extra_charged += extra
            if extra > 1e-12 and not node.closed:  # what the CLI spent beyond the calls we priced (a closed run
                node.charge(extra, "claude-code")    # is never charged: charge() would refuse it)
        subtype = getattr(message, "subtype", None)
        if node.stop_state is None and subtype == "error_max_budget_usd":
            node.stop_state = (StopReason.COST, "max_usd", "Claude Code stopped at max_budget_usd.")
        elif node.stop_state is None and subtype == "error_max_turns":
            node.stop_state = (StopReason.STEPS, "max_steps", "Claude Code stopped at max_turns.")

    def close(self) -> None:
        """Close the subagents' runs still open, stop serving this session and remove its settings file."""
        gateway().remove(self.id)
        if self.files is not None:
            shutil.rmtree(self.files, ignore_errors=True)
        with self.lock:
            left = list(self.subagents)
        for agent_id in left:
            self._close(agent_id)


class ClaudeCall:
    """One admitted request of the CLI as the gateway carries it: the response is read before it is passed on."""

    __slots__ = ("session", "guard", "body", "timeout", "stream", "_ended")

    def __init__(self, session: Session, guard: Guard, body: bytes) -> None:
        self.session = session
        self.guard = guard
        self.body = body
        self.timeout = guard.timeout
        self.stream = MessageStream(guard.call)
        self._ended = False

    def event(self, event: dict[str, Any]) -> None:
        stream = self.stream
        stream.feed(event)
        kind = event.get("type")
        if kind == "message_start":
            self.session.carried(self.guard.call.response_id)
        elif kind == "content_block_stop":
            # The CLI runs a tool as soon as its block is complete: count the request before the CLI sees it.
            block = stream.blocks.pop(event.get("index", 0), None)
            if block is not None and self.guard.node is not None:
                name, arguments, call_id = block
                self.guard.node.record_tool_requests([(name, arguments or "{}", call_id)])
        elif kind == "message_stop":
            self.finish()  # settled before the CLI sees the end, so its next request meets the settled ledger

    def response(self, body: dict[str, Any]) -> None:
        AnthropicAdapter().read(body, self.guard.call)
        self.session.carried(self.guard.call.response_id)

    def _end(self) -> bool:
        if self._ended:
            return False
        self._ended = True
        if self.guard.call.stream:
            self.stream.apply()  # usage; the tool requests were counted block by block
        return True

    def finish(self) -> None:
        if self._end():
            self.guard.finish()
            self.session.settled(self.guard.call)

    def fail(self, error: BaseException) -> str | None:
        if not self._end():
            return None
        stop = self.guard.fail(error)
        node = self.guard.node
        return stop_text(node, stop) if isinstance(stop, BudgetExceeded) and node is not None else None

    def abandon(self) -> None:
        if self._end():
            self.guard.abandon()
            self.session.settled(self.guard.call)


def _deny(reason: str) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": reason}}


__all__ = ["MAX_SUBAGENTS", "Agent", "ClaudeCall", "Session"]
