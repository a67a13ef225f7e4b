"""How a model call is admitted before it is sent: the gates and headroom, the input estimate or bound, the
output limit, and the reservation in every account and shared scope (waiting for calls in flight: in_flight.py)."""
from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from ..model.budget import StopReason
from ..model.outcome import BudgetExceeded, UnknownPriceError
from ..telemetry import semconv as sc
from . import config
from . import ledger as lg
from .in_flight import ADMISSION_WAIT, RoomPending, _holder
from .node_state import _DIM_REASON, _LOCAL_STORE, Admission
from .settlement import NodeSettlement

#: Above this many output tokens of headroom the enforcer leaves a request without an output limit as it is.
AUTO_MAX_TOKENS_CEILING = 16384
#: Reserved as the output of a call with no output limit when the budget leaves more than the ceiling.
_UNBOUNDED_OUTPUT_RESERVE = 4096
#: Dimensions counted per call that need no input estimate.
_COUNT_DIMS = frozenset({"steps", "tool_calls"})

#: Request fields that do not change the input tokens: two requests that differ only in them share a prefix.
_OUTPUT_FIELDS = frozenset({
    "max_tokens", "max_completion_tokens", "max_output_tokens", "temperature", "top_p", "top_k", "stream",
    "stream_options", "n", "seed", "stop", "stop_sequences", "metadata", "user", "store", "timeout",
})


def _settled_since(root: Any, seen: int) -> bool:
    return bool(root.settled_count != seen)


def _prompt_shape(body: dict[str, Any], key: str) -> tuple[str, tuple[str, ...], tuple[int, ...]] | None:
    """(digest of the body without its messages and output fields, digest of each message, characters of each
    message's JSON), or None when the body cannot be read so."""
    messages = body.get(key)
    if not isinstance(messages, list):
        return None
    try:
        rest = {k: v for k, v in body.items() if k != key and k not in _OUTPUT_FIELDS}
        head = hashlib.sha1(json.dumps(rest, sort_keys=True, default=str).encode(), usedforsecurity=False).hexdigest()
        texts = [json.dumps(m, sort_keys=True, default=str) for m in messages]
    except Exception:  # noqa: BLE001 - odd content: no prefix bound, the whole body's bound applies
        return None
    digests = tuple(hashlib.sha1(t.encode(), usedforsecurity=False).hexdigest() for t in texts)
    return head, digests, tuple(len(t) for t in texts)


class NodeAdmission(NodeSettlement):
    """Admission: a model call is checked and reserved before it is sent, or refused with the stop recorded."""

    def allows(self) -> bool:
        """Whether one more minimal model call fits; records the stop reason when it does not."""
        if self.stop_state is not None:
            return False
        try:
            self._check_gates("the next model call")
        except BudgetExceeded:
            return False
        for dim in ("steps", "input_tokens", "output_tokens", "total_tokens", "usd"):
            room = lg.headroom(self.accounts, dim)
            if room <= (0 if dim != "steps" else 0.5):
                reason, field = _DIM_REASON[dim]
                self.stop(reason, field, f"the run has no {dim} left ({field}).", by=self._exhausted(dim))
                return False
        if lg.headroom(self.accounts, "tool_calls") < 0:
            self.stop(StopReason.TOOL_CALLS, "max_tool_calls", "the model requested more tool calls than allowed.",
                      by=self._exhausted("tool_calls"))
            return False
        return self._shared_allows()

    def _shared_allows(self) -> bool:
        """Whether every shared scope has room left (one read each; an unreachable store is left to the call)."""
        if not self.scopes:
            return True
        store = config.get().ledger or _LOCAL_STORE
        for scope in self.scopes:
            try:
                taken = store.read(scope.name)
            except Exception:  # noqa: BLE001 - the next call applies the store's fail mode
                continue
            for dim, limit in scope.limits().items():
                if dim in _DIM_REASON and taken.get(dim, 0.0) > limit - (0.5 if dim == "steps" else 0.0):
                    reason, field = _DIM_REASON[dim]
                    self.stop(reason, field, f"the shared budget '{scope.name}' has no {dim} left ({field}).",
                              pausable=False)
                    return False
        return True

    # --- model calls ------------------------------------------------------------------------------------

    def admit(
        self, provider: str, model: str, max_output: int | None, input_chars: Callable[[], int], choices: int = 1,
        prompt: tuple[dict[str, Any], str] | None = None,
    ) -> Admission:
        """Check and reserve one model call, or raise BudgetExceeded / UnknownPriceError; nothing is sent.

        `choices` answers (OpenAI `n`) each get up to `max_output` tokens. Input is reserved at the estimate
        for one call of the tree at a time; a call made while that one is in flight (or every call, with
        `Budget.strict`) reserves an upper bound: one token per byte (or character) of the request body, or, when the
        request's messages (`prompt`: the body and its message-list key) extend the previous request's, what
        the server reported for that one plus one token per character of the new messages.
        """
        what = f"the call to {model}"
        self._check_gates(what)
        limited = self._limited()
        tools_left = lg.headroom(self.accounts, "tool_calls") if "tool_calls" in limited else math.inf
        if tools_left < 0:
            raise self.stop(
                StopReason.TOOL_CALLS, "max_tool_calls", f"{what} was not sent: the model requested more tool "
                "calls than max_tool_calls allows.", by=self._exhausted("tool_calls")
            )
        amounts: dict[str, float] = {"steps": 1.0}
        adm = Admission(self, amounts)
        if tools_left < 1:
            adm.no_tools = True  # no tool call remains: the call goes without tools, so the model can answer
        if limited <= _COUNT_DIMS:
            self._reserve(adm, what)
            return adm
        # A small margin covers what the SDK adds to the body and the provider's message framing tokens.
        chars = input_chars()
        est_in = int(chars / self.root.chars_per_token * 1.05) + 8
        adm.input_estimate = est_in
        pricing = None
        if "usd" in limited:
            adm.pricing = pricing = config.get().prices.lookup(provider, model)
            if pricing is None:
                raise UnknownPriceError(
                    f"otel-budget: no price is known for model '{model}' (provider '{provider}') and this run has "
                    f"a money cap (max_usd), so the call was not sent. Add its price, e.g. "
                    f"otel_budget.instrument(prices={{'{model}': otel_budget.Price(input_per_mtok=..., "
                    f"output_per_mtok=...)}}), or remove max_usd."
                )
        adm.estimated = self._take_estimate_slot()
        if not adm.estimated:
            # The body's JSON has at least one byte (the bytes sent) or character (non-ASCII escaped) per UTF-8 byte
            # of its text, and a byte-level BPE token is at least one byte: an upper bound of the input tokens.
            est_in = self._input_bound(adm, chars, prompt)
        out = max_output
        input_cost = per_token = 0.0
        if pricing is not None:
            fresh, read, write, output = pricing.rates_at(est_in)
            # An upper bound prices every input token at the dearest input rate (fresh, cache read or write).
            rate = fresh
            if not adm.estimated:  # (comparisons: max() parses its arguments in C)
                if read > rate:
                    rate = read
                if write > rate:
                    rate = write
            input_cost = est_in * rate / 1e6
            per_token = output / 1e6
        n = choices if choices > 1 else 1  # (a comparison, not max(): a builtin call parses its arguments in C)
        if out is None:
            # The dimension that leaves the least room for output bounds it (the first of these on a tie).
            room, total_room, usd_room = lg.output_rooms(self.accounts)
            adm.bound_by = "output_tokens"
            total_room -= est_in
            if total_room < room:
                adm.bound_by, room = "total_tokens", total_room
            if per_token > 0:
                usd_room = (usd_room - input_cost) / per_token
                if usd_room < room:
                    adm.bound_by, room = "usd", usd_room
            room = room / n  # each of the n answers may write up to the limit
            if room <= AUTO_MAX_TOKENS_CEILING and self.auto_max_tokens:
                out = int(room)
                if out < 0:
                    out = 0
                adm.set_max_tokens = out >= 1
            else:
                # room is infinite when only a shared scope limits output: reserve the default worst case there
                out = _UNBOUNDED_OUTPUT_RESERVE if room == math.inf or room >= _UNBOUNDED_OUTPUT_RESERVE else int(room)
        adm.max_output_tokens = out
        amounts["input_tokens"] = est_in
        amounts["output_tokens"] = out * n
        amounts["total_tokens"] = est_in + out * n
        if pricing is not None:
            amounts["usd"] = input_cost + out * n * per_token
        try:
            self._reserve(adm, what)
        except BaseException:
            self._free_estimate_slot(adm)
            raise
        if max_output is None and adm.max_output_tokens is not None and adm.max_output_tokens < 1:
            self.release(adm)
            dim = "usd" if pricing is not None and lg.headroom(self.accounts, "usd") < math.inf else "total_tokens"
            reason, field = _DIM_REASON[dim]
            raise self.stop(reason, field, f"{what} was not sent: the budget leaves no room for any output ({field}).")
        return adm

    def _input_bound(self, adm: Admission, chars: int, prompt: tuple[dict[str, Any], str] | None) -> int:
        """An upper bound of the call's input tokens. Chat formats tokenize each message apart, so a request that
        only appends messages to the previous one has at most its reported count plus the new messages' bytes.
        """
        bound = chars
        if prompt is None:
            return bound
        shape = _prompt_shape(*prompt)
        if shape is None:
            return bound
        adm.prompt_shape = shape
        last = self.last_prompt
        if last is not None and last[0] == shape[0] and shape[1][: len(last[1])] == last[1]:
            bound = min(bound, last[2] + sum(shape[2][len(last[1]):]) + 8)
        return bound

    def _reserve(self, adm: Admission, what: str) -> None:
        root = self.root
        settled = root.settled_count
        local = not self.scopes  # no shared scope: the call takes its turn with the reservation, in one lock
        refusal = self._reserve_here(adm, local)
        until: float | None = None
        while refusal is not None:
            # Only what other calls hold in flight may be in the way: wait for one of them to settle, re-check.
            how = self._may_wait(refusal, adm.amounts)
            if how is None:
                break
            if how == "task":
                raise RoomPending(self, settled)  # the async wrapper awaits `wait_settled` and admits again
            until = self.wait_until() if until is None else until
            with root.settled:
                seen = settled
                root.threads_waiting += 1
                try:
                    # (a partial, not a lambda: the variables a lambda reads become cells on every call)
                    root.settled.wait_for(partial(_settled_since, root, seen), timeout=max(0.0, until - time.monotonic()))
                finally:
                    root.threads_waiting -= 1
                if root.settled_count == settled:
                    break  # nothing settled in time: refuse
                settled = root.settled_count
            refusal = self._reserve_here(adm, local)
        if refusal is not None:
            raise self._refusal_after_wait(refusal, adm.amounts, what)
        if not local:
            adm.shared = self._reserve_shared(adm.amounts, what, local=adm.amounts)
        if not local:
            with self.lock:
                self._take_turn(adm)

    def _reserve_here(self, adm: Admission, turn: bool) -> lg.Refusal | None:
        """Reserve in this run's accounts (and the ancestors'); with `turn`, the call's turn is taken at once."""
        with self.lock:
            refusal = lg.reserve_locked(self.accounts, adm.amounts)
            if refusal is None and turn:
                self._take_turn(adm)
        return refusal

    def _take_turn(self, adm: Admission) -> None:
        """Number the admitted call and count it in flight (the caller holds the lock)."""
        root = self.root
        root.turns += 1
        adm.turn = root.turns
        adm.thread = holder = _holder()
        in_flight = root.in_flight
        in_flight[holder] = in_flight.get(holder, 0) + 1  # (a Counter's missing key runs Python code)

    def _refusal_after_wait(self, refusal: lg.Refusal, amounts: dict[str, float], what: str) -> BudgetExceeded:
        """The error of a call that does not fit: a time stop when the run's time ran out meanwhile (while it
        waited for calls in flight); else the limit's, saying so when calls in flight hold the room it needs."""
        if self.deadline is not math.inf and self.time_left() <= 0:
            return self.stop(StopReason.TIME, "max_seconds", f"{what} was not sent: the run's time ran out while it "
                             "waited for calls in flight to settle.", by=self._deadline_owner())
        note = ""
        if self.held_in_flight(refusal, amounts):
            note = (" Calls in flight hold the rest and none settled in time (a refused call waits for them at most "
                    f"{ADMISSION_WAIT:g} s, or until the run's deadline).")
        return self._refusal_error(refusal, what, note=note)

    def precheck(self, provider: str, model: str, max_output: int | None, input_chars: Callable[[], int]) -> None:
        """Raise BudgetExceeded (recording the stop) when a call like this would be refused now; keeps nothing.

        For a framework that must end its turn before it attempts a call (the call is still admitted when sent).
        `input_chars` should not exceed the request's size, so that what this refuses `admit` would refuse too."""
        adm = self.admit(provider, model, max_output, input_chars)
        self.release(adm)
        with self.lock:
            if self.root.turns == adm.turn:  # the probe takes no turn number (unless another call came in between)
                self.root.turns -= 1

    # --- shared (fleet) scopes ----------------------------------------------------------------------------

    def _reserve_shared(self, amounts: dict[str, float], what: str, local: dict[str, float]) -> list[lg.Reservation]:
        """Reserve in every shared scope too; on a refusal undo everything and raise."""
        store = config.get().ledger or _LOCAL_STORE
        held: list[lg.Reservation] = []
        for scope in self.scopes:
            result = store.reserve(scope.name, amounts, scope.limits(), window=scope.window_seconds)
            if isinstance(result, lg.Refusal):
                lg.settle(self.accounts, local, {}, self.lock)
                self._settle_shared(held, {})
                result.scope = result.scope or scope.name
                raise self._refusal_error(result, what, shared=True)
            if not result.enforced:
                self.unenforced += 1
                config.get().telemetry.fail_open.add(1, {sc.LABEL_RUN_NAME: self.root.name, sc.LABEL_SCOPE: scope.name})
            held.append(result)
        return held
