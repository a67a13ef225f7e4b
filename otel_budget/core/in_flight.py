"""Calls in flight: which task or thread holds each, the one call of the tree reserved at the input estimate,
and a refused call's wait for one of them to settle (blocking a thread, or RoomPending for an asyncio task)."""
from __future__ import annotations

import asyncio
import math
import threading
import time
from asyncio.events import _get_running_loop as _running_loop
from contextvars import ContextVar

from . import ledger as lg
from .node_state import Admission
from .stops import NodeStops

#: Dimensions a call in flight may give back when it settles: a refusal on them can wait for that.
_WAIT_DIMS = frozenset({"input_tokens", "output_tokens", "total_tokens", "usd"})
#: The longest a refused call waits, in all, for calls in flight to settle before it is refused after all, when the
#: run has no deadline (with one, it waits at most until the deadline, if that comes sooner). A holder that never
#: settles (a stream opened and never read, a hung call) so delays the agent's other threads by this much at most.
ADMISSION_WAIT = 10.0

#: Set by async adapters while they admit a call: a refusal that only waits for calls in flight raises
#: RoomPending for them to await, instead of refusing.
_MAY_AWAIT_ROOM: ContextVar[bool] = ContextVar("otel_budget_may_await_room", default=False)


class RoomPending(Exception):  # noqa: N818 - not an error: a signal to the async adapter
    """A call did not fit only because of what calls in flight hold: await `wait()`, then admit it again."""

    def __init__(self, node: NodeInFlight, seen: int) -> None:
        super().__init__("waiting for calls in flight to settle")
        self.node = node
        self.seen = seen

    async def wait(self, until: float | None = None) -> bool:
        """True once a call settled (admit again); False when none did by `until` (`time.monotonic()`; default:
        the wait limit from now), then admit again without waiting."""
        return await self.node.wait_settled(self.seen, self.node.wait_until() if until is None else until)


def may_await_room() -> ContextVar[bool]:
    """The flag an async adapter sets around admission when it can await RoomPending."""
    return _MAY_AWAIT_ROOM


def _holder() -> int:
    """Who holds a call in flight: the asyncio task, else the thread (no loop running: no exception raised)."""
    loop = _running_loop()
    task = asyncio.current_task(loop) if loop is not None else None
    return id(task) if task is not None else threading.get_ident()


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _wake_all(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]) -> None:
    for loop, fut in waiters:
        try:
            loop.call_soon_threadsafe(_wake, fut)
        except RuntimeError:  # its loop is closed
            pass


class NodeInFlight(NodeStops):
    """The run tree's calls in flight: who holds them, the estimate slot, and waiting for one to settle."""

    def _take_estimate_slot(self) -> bool:
        """Whether this call may reserve its input at the estimate: one call of the tree at a time, never with
        `strict`. So the calls in flight hold at most one estimate's error, and a cap is exceeded by at most that.
        """
        if self.strict:
            return False
        slot = self.root.estimate_slot  # one item while free: `list.pop` is atomic, so one caller takes it, no lock
        if not slot:
            return False
        try:
            slot.pop()
        except IndexError:  # another thread took it since
            return False
        return True

    def _free_estimate_slot(self, adm: Admission) -> None:
        if adm.estimated:
            adm.estimated = False
            self.root.estimate_slot.append(True)  # (only its one holder gives it back)

    def _done(self, adm: Admission) -> None:
        """The call of `adm` is no longer in flight: free what it held and wake calls waiting for room."""
        with self.lock:
            waiters = self._done_locked(adm)
        _wake_all(waiters)

    def _done_locked(self, adm: Admission) -> list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]:
        """`_done` for a caller holding the tree's lock (the `settled` condition's): returns the asyncio waiters to
        wake once the lock is released. Threads waiting for room are notified here, only when there are any."""
        root = self.root
        if adm.estimated:
            adm.estimated = False
            root.estimate_slot.append(True)
        if adm.thread is not None:
            left = root.in_flight[adm.thread] - 1
            if left > 0:
                root.in_flight[adm.thread] = left
            else:
                root.in_flight.pop(adm.thread, None)
            adm.thread = None
        root.settled_count += 1
        if root.threads_waiting:
            root.settled.notify_all()
        waiters = root.room_waiters
        if waiters:
            root.room_waiters = []
        return waiters

    def _may_wait(self, refusal: lg.Refusal, amounts: dict[str, float]) -> str | None:
        """How a refused model call may wait for calls in flight ("thread" blocks, "task" awaits), or None.

        Only a caller that holds none of the tree's calls in flight waits (an asyncio task only when its
        adapter can await), and only when the call would fit once what they hold was settled (tokens and
        money: what a call in flight holds is its worst case, which its settlement may give back).
        """
        if refusal.dim not in _WAIT_DIMS or refusal.message or self.time_left() <= 0:
            return None
        holder = _holder()
        with self.lock:
            root = self.root
            mine = root.in_flight.get(holder, 0)
            if mine > 0 or sum(root.in_flight.values()) <= 0:
                return None
            dim, amount = refusal.dim, amounts.get(refusal.dim, 0.0)
            if any(acc.limits.get(dim, math.inf) < acc.used[dim] + amount - 1e-12 for acc in self.accounts):
                return None  # it does not fit even with nothing in flight
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return "thread"
        return "task" if _MAY_AWAIT_ROOM.get() else None  # blocking would stall the loop that runs the calls

    def wait_until(self) -> float:
        """When a refused call that starts waiting now gives up (`time.monotonic()`): ADMISSION_WAIT from now, or the
        run tree's deadline if sooner. One bound for all its waits, however many calls settle meanwhile."""
        return time.monotonic() + max(0.0, min(ADMISSION_WAIT, self.time_left()))

    def held_in_flight(self, refusal: lg.Refusal, amounts: dict[str, float]) -> bool:
        """Whether the refused call would fit if the calls in flight held nothing (they took the room it needs)."""
        if refusal.dim not in _WAIT_DIMS or refusal.message:
            return False
        with self.lock:
            if sum(self.root.in_flight.values()) <= 0:
                return False
            dim, amount = refusal.dim, amounts.get(refusal.dim, 0.0)
            return all(acc.limits.get(dim, math.inf) >= acc.used[dim] + amount - 1e-12 for acc in self.accounts)

    async def wait_settled(self, seen: int, until: float) -> bool:
        """Wait (in an asyncio task) until a call of the tree settles after `seen` settlements; False when none did
        by `until` (`time.monotonic()`)."""
        root = self.root
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        waiter = (loop, fut)
        with root.settled:
            if root.settled_count != seen:
                return True
            root.room_waiters.append(waiter)
        try:
            await asyncio.wait_for(fut, timeout=max(0.0, until - time.monotonic()))
            return True
        except TimeoutError:
            return False
        finally:
            with root.settled:
                if waiter in root.room_waiters:
                    root.room_waiters.remove(waiter)
