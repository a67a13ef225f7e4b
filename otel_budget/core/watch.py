"""What a run watches between calls: the tools the model asked for, repeated calls and cycles, unchanged
results (stalls), and the admission of a tool execution."""
from __future__ import annotations

from typing import Any

from ..model.budget import StopReason, check_cost, plural
from ..model.signatures import canonical_arguments
from . import ledger as lg
from .admission import NodeAdmission
from .progress import find_cycle, newest_results

#: Distinct (tool, arguments) requests whose call ids are kept for `@tool` to find (the newest).
_REQUESTED_KEYS = 256


class NodeWatch(NodeAdmission):
    """Progress checks: repeats, cycles and stalls record a stop that refuses the next call; tools are admitted."""

    def take_call_id(self, name: str, arguments: Any) -> str | None:
        """The call id the model gave a tool call with this name and arguments, once (None when unknown)."""
        key = f"{name}\x00{canonical_arguments(arguments)}"
        for node in self.chain:
            with self.lock:
                ids = node.requested_ids.get(key)
                if ids:
                    found = ids.pop(0)
                    if not ids:
                        del node.requested_ids[key]
                    return found
        return None

    def record_tool_requests(self, calls: list[tuple[Any, ...]]) -> None:
        """The model asked for these tools, as (name, arguments[, call id]): count them, watch for repetition
        and for calls that need a person's approval.
        """
        if not calls:
            return
        # Only what fits under max_tool_calls is counted as used; the requests beyond it are refused (never run).
        counted = lg.take(self.accounts, "tool_calls", len(calls), self.lock)
        refused = len(calls) - counted
        if counted:
            self._charge_shared({"tool_calls": float(counted)})
        with self.lock:  # the tools of a child count in every ancestor's record (the wrap-up lists the tree's)
            for node in self.chain:
                node.tools_requested.update(name for name, *_ in calls[:counted])
            for node in self.chain if refused else ():
                node.tool_calls_refused += refused
        for index, (name, args, *call_id) in enumerate(calls):
            if self.approval is not None:
                self.approval.on_request(self, name, args, call_id[0] if call_id else None)
            if index < counted:
                self.pending_tools[name] += 1  # counted: its execution is not counted again
            key = f"{name}\x00{canonical_arguments(args)}"
            if call_id and call_id[0]:
                with self.lock:  # bounded: ids of calls no @tool runs are never taken, the oldest make room
                    ids = self.requested_ids.setdefault(key, [])
                    if len(ids) < 16:
                        ids.append(str(call_id[0]))
                    if len(self.requested_ids) > _REQUESTED_KEYS:
                        del self.requested_ids[next(iter(self.requested_ids))]
            self._request_streak = self._request_streak + 1 if key == self._last_request else 1
            self._last_request = key
            limit = self.repeat_limit(name)
            with self.lock:
                self.progress.requested(name, call_id[0] if call_id else None)
                self.progress.requests.append((name, key))
            self._check_cycle(self.progress.requests, "the model requested", "the next model call was not sent")
            if limit is not None and self._request_streak >= limit and self.stop_state is None:
                self.stop_state = (
                    StopReason.REPEAT,
                    "max_repeats",
                    f"the model requested {name} with the same arguments {self._request_streak} times in a row "
                    f"({self.allowance([name], 'max_repeats', limit)}); the next model call was not sent.",
                )
        if refused:
            self.stop(
                StopReason.TOOL_CALLS, "max_tool_calls",
                f"the model requested {plural(refused, 'more tool call')} than max_tool_calls allows (refused, "
                "not run and not counted); the next call was not sent.",
                by=self._exhausted("tool_calls"),
            )
        self._check_near()

    def repeat_limit(self, name: str) -> int | None:
        """How many identical calls of `name` in a row stop the run: its poll allowance, else max_repeats."""
        polls = self.budget.polls
        return polls.get(name, self.budget.max_repeats)

    def stall_limit(self, name: str) -> int | None:
        """How many unchanged results of `name` in a row stop the run: its poll allowance, else max_stalls."""
        polls = self.budget.polls
        return polls.get(name, self.budget.max_stalls)

    def allowance(self, tools: list[str], field: str, cap: int) -> str:
        """How a stop's detail names the allowance it met: `polls['wait_for_ci']=20` when a poll of one of
        `tools` set `cap`, else `max_repeats=3` / `max_stalls=3` (`field`)."""
        polls = self.budget.polls
        poll = next((t for t in tools if polls.get(t) == cap), None)
        return f"polls[{poll!r}]={cap}" if poll is not None else f"{field}={cap}"

    def _cycle(self, history: list[tuple[str, str]]) -> tuple[list[str], int] | None:
        if self.budget.max_repeats is None and not self.budget.polls:
            return None
        limits: dict[str, int] = {"": self.budget.max_repeats or 1 << 30, **self.budget.polls}
        return find_cycle(history, limits)

    def _check_cycle(self, history: Any, who: str, then: str) -> None:
        """Record a `repeat` stop when the actions end with a cycle of 2 or 3 repeated max_repeats times."""
        if self.stop_state is not None:
            return
        cycle = self._cycle(list(history)[-64:])
        if cycle is not None:
            tools, cap = cycle
            self.stop_state = (
                StopReason.REPEAT, "max_repeats",
                f"{who} the cycle {' -> '.join(tools)} (the same actions with the same arguments) {cap} times in a "
                f"row ({self.allowance(tools, 'max_repeats', cap)}); {then}.",
            )

    def note_results(self, results: list[tuple[str | None, str | None, Any]], executed: bool = False) -> None:
        """Tool results seen (name or call id, result): the same result `max_stalls` times in a row from one
        tool, whatever its arguments, records a `stalled` stop, so the next model or tool call is refused."""
        for name, call_id, result in results:
            with self.lock:
                counted = self.progress.result(name, call_id, result, executed)
            if counted is None:
                continue
            tool, streak = counted
            limit = self.stall_limit(tool)
            if limit is not None and streak >= limit and self.stop_state is None:
                self.stop_state = (
                    StopReason.STALLED, "max_stalls",
                    f"{tool} returned the same result {streak} times in a row, whatever its arguments "
                    f"({self.allowance([tool], 'max_stalls', limit)}); the next call was not sent.",
                )

    def read_results(self, body: Any, key: str) -> None:
        """Count the newest tool results a request carries (see progress.newest_results); never raises."""
        if self.budget.max_stalls is None and not self.budget.polls:
            return
        try:
            results = newest_results(body, key)
        except Exception:  # noqa: BLE001 - an odd body is no evidence of a stall
            return
        if results:
            self.note_results(results)

    def note_tool_result(self, name: str, call_id: str | None, result: Any) -> None:
        """A tool executed here (`@tool`, a framework's tool node) returned `result`."""
        with self.lock:
            call_id = call_id or self.progress.answered(name)
        self.note_results([(name, call_id, result)], executed=True)

    def admit_tool(self, name: str, arguments: Any, cost_usd: float) -> dict[str, float]:
        """Check a tool execution before it runs; returns what it reserved."""
        what = f"the tool {name}"
        cost_usd = check_cost(cost_usd, f"the cost_usd of tool {name}")
        # A request counted within max_tool_calls still runs when others of its response went over the cap.
        self._check_gates(what, counted=self.pending_tools[name] > 0)
        if self.approval is not None:
            self.approval.on_execute(self, name, arguments)
        key = f"{name}\x00{canonical_arguments(arguments)}"
        streak = self._exec_streak + 1 if key == self._last_exec else 1
        limit = self.repeat_limit(name)
        cycle = self._cycle([*list(self.progress.executions)[-64:], (name, key)])
        if cycle is not None:
            tools, cap = cycle
            raise self.stop(
                StopReason.REPEAT, "max_repeats",
                f"{what} was not run: it would complete the cycle {' -> '.join(tools)} (the same actions with the "
                f"same arguments) {cap} times in a row ({self.allowance(tools, 'max_repeats', cap)}).",
            )
        if limit is not None and streak >= limit:
            raise self.stop(
                StopReason.REPEAT,
                "max_repeats",
                f"{what} was not run: it would run with the same arguments {streak} times in a row "
                f"({self.allowance([name], 'max_repeats', limit)}).",
            )
        amounts: dict[str, float] = {}
        with self.lock:
            precounted = self.pending_tools[name] > 0
            if precounted:
                self.pending_tools[name] -= 1
        if not precounted:
            amounts["tool_calls"] = 1.0
        if cost_usd:
            amounts["usd"] = cost_usd
        if amounts:
            refusal = lg.reserve(self.accounts, amounts, self.lock)
            if refusal is not None:
                raise self._refusal_error(refusal, what)
            if self.scopes:
                self._settle_shared(self._reserve_shared(amounts, what, local=amounts), {})
        self._exec_streak, self._last_exec = streak, key
        with self.lock:
            self.progress.executions.append((name, key))
        return amounts
