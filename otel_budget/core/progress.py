"""Whether a run still makes progress: tool results that stop changing (stalls) and actions that go round in
a cycle. The run (`node.RunNode`) owns one `ProgressWatch` and turns what it finds into a stop.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ..model.signatures import canonical_arguments, result_signature, signature

#: The cycle lengths watched for (a cycle of one action is a plain repeat, checked by the run).
CYCLE_LENGTHS = (2, 3)
#: Actions kept per history: enough for the longest cycle at a generous limit, and never more.
_HISTORY = 3 * 64
#: Call ids remembered as counted (a result seen through `@tool` and again in the next request counts once), and
#: call ids whose tool name is remembered.
_SEEN = 1024
#: Tools whose progress is kept (the most recently used): a stall is a row of one tool's results, so it is recent.
_TOOLS = 128
#: Per tool: open requests remembered (for `@tool` to find the call id it answers), distinct results counted.
_PENDING = 256
_DISTINCT = 256
#: A result whose canonical text is at most this long carries no observation ("ok", `{"status":"ok"}`, `[]`,
#: "no match"): it never counts toward a stall (DESIGN, Enforcement rules: Stalls).
ACK_CHARS = 64


def newest_results(body: Any, key: str) -> list[tuple[str | None, str | None, Any]]:
    """The tool results a request carries after its last assistant turn, as (tool name, call id, result).

    Reads OpenAI chat `tool` messages, Anthropic `tool_result` blocks and Responses `function_call_output`
    items; anything else gives nothing. Only the trailing results are read, so the cost does not grow with
    the history.
    """
    items = body.get(key) if isinstance(body, dict) else None
    if not isinstance(items, list) or not items:
        return []
    last = items[-1]
    # The usual request ends with a text message (the user's): nothing after the last assistant turn is a result.
    if (type(last) is dict and type(last.get("content")) is str and last.get("role") != "tool"
            and "parts" not in last and last.get("type") != "function_call_output"):
        return []
    out: list[tuple[str | None, str | None, Any]] = []
    for item in reversed(items):
        if not isinstance(item, dict):
            break
        role, kind = item.get("role"), item.get("type")
        parts = item.get("parts")
        if isinstance(parts, list) and role != "model":  # Gemini: one user turn of functionResponse parts
            if not out:
                for part in reversed(parts):
                    response = part.get("functionResponse") or part.get("function_response") \
                        if isinstance(part, dict) else None
                    if isinstance(response, dict):
                        value = response.get("response")
                        if isinstance(value, dict) and len(value) == 1 and "result" in value:
                            value = value["result"]  # the SDK wraps a function's return value so
                        out.append((response.get("name"), response.get("id"), value))
            break
        if role == "tool":  # OpenAI chat
            out.append((item.get("name"), item.get("tool_call_id"), _text(item.get("content"))))
        elif kind == "function_call_output":  # Responses
            out.append((None, item.get("call_id"), _text(item.get("output"))))
        elif role == "user" and isinstance(item.get("content"), list) and not out:  # Anthropic: one user turn
            for block in reversed(item["content"]):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    out.append((None, block.get("tool_use_id"), _text(block.get("content"))))
            break
        else:
            break
    out.reverse()
    return out


def _text(content: Any) -> Any:
    """A result as text when it is text parts (`[{"type": "text", "text": ...}]`), else as it is."""
    if isinstance(content, list) and content and all(isinstance(p, dict) and "text" in p for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    return content


def result_key(result: Any) -> str:
    """The signature of a result; JSON text and the value it encodes sign the same."""
    return read_result(result)[0]


def read_result(result: Any) -> tuple[str, bool]:
    """(the signature of a result, whether it is an acknowledgment: canonical text of at most ACK_CHARS)."""
    if isinstance(result, bytes):
        return result_signature(result), len(result) <= ACK_CHARS
    text = canonical_arguments(result)
    return signature(text), len(text) <= ACK_CHARS


class _ToolProgress:
    """What one tool returned lately: its row of unchanged results, its distinct results, its open requests."""

    __slots__ = ("last", "streak", "distinct", "more", "pending", "unclaimed")

    def __init__(self) -> None:
        self.last: str | None = None  # the signature of its last counted result
        self.streak = 0  # times in a row it returned `last`
        self.distinct: set[str] = set()  # the result signatures it gave (the first _DISTINCT), for the wrap-up
        self.more = False  # it gave more distinct results than `distinct` holds
        self.pending: deque[str] = deque(maxlen=_PENDING)  # call ids of its requests not yet answered
        # signatures of results counted where the tool ran: a request that carries one next without a call id
        # (google-genai's function responses) is the same result, not a new one.
        self.unclaimed: deque[str] = deque(maxlen=64)

    def saw(self, sig: str) -> None:
        if sig in self.distinct:
            return
        if len(self.distinct) < _DISTINCT:
            self.distinct.add(sig)
        else:
            self.more = True


class ProgressWatch:
    """What the run's tools returned and did, to tell a stall (same result) or a cycle (same actions).

    Every structure is bounded (DESIGN: memory per run is bounded): the newest _SEEN call ids, the _TOOLS tools
    used most recently, and per tool _PENDING open requests, 64 unclaimed results and _DISTINCT distinct results.
    """

    __slots__ = ("names", "seen", "tools", "requests", "executions")

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # call id -> tool name, from the model's tool requests (the newest _SEEN)
        self.seen: dict[str, None] = {}  # call ids whose result was counted (the newest _SEEN)
        self.tools: dict[str, _ToolProgress] = {}  # tool -> its progress, the most recently used last
        self.requests: deque[tuple[str, str]] = deque(maxlen=_HISTORY)  # (tool, action key) the model asked for
        self.executions: deque[tuple[str, str]] = deque(maxlen=_HISTORY)  # (tool, action key) run by @tool

    def _tool(self, name: str) -> _ToolProgress:
        """The progress of `name`, made the most recently used (the least recently used beyond _TOOLS is dropped)."""
        tools = self.tools
        state = tools.pop(name, None)
        if state is None:
            state = _ToolProgress()
            if len(tools) >= _TOOLS:
                del tools[next(iter(tools))]
        tools[name] = state
        return state

    def requested(self, name: str, call_id: str | None) -> None:
        if call_id:
            _remember(self.names, call_id, name)
            self._tool(name).pending.append(call_id)

    def result(self, name: str | None, call_id: str | None, result: Any, executed: bool = False,
               ) -> tuple[str, int] | None:
        """Count one result (`executed`: where the tool ran, else as a request carries it); (tool, times in a
        row unchanged), or None when it is not counted (seen already, an acknowledgment, or of no known tool)."""
        if call_id:
            if call_id in self.seen:
                return None
            _remember(self.seen, call_id, None)
            name = name or self.names.get(call_id)
        if not name:
            return None
        try:
            sig, ack = read_result(result)
        except Exception:  # noqa: BLE001 - a result we cannot read is no evidence either way
            return None
        state = self._tool(name)
        state.saw(sig)
        if ack:  # no observation: it cannot show a lack of progress, and it ends a row of unchanged results
            state.last, state.streak = None, 0
            return None
        if executed:
            state.unclaimed.append(sig)
        elif not call_id and sig in state.unclaimed:
            state.unclaimed.remove(sig)
            return None
        state.streak = state.streak + 1 if state.last == sig else 1
        state.last = sig
        return name, state.streak

    def answered(self, name: str) -> str | None:
        """The call id of the model's request that an `@tool` execution of `name` answers (the oldest open one)."""
        state = self.tools.get(name)
        queue = state.pending if state is not None else None
        while queue:
            call_id = queue.popleft()
            if call_id not in self.seen:
                return call_id
        return None

    def distinct_count(self, name: str) -> tuple[int, bool]:
        """(how many distinct results `name` gave, whether that is exact): past _DISTINCT it is a lower bound."""
        state = self.tools.get(name)
        if state is None:
            return 0, True
        return len(state.distinct), not state.more


def _remember(recent: dict[str, Any], key: str, value: Any) -> None:
    """Put `key` in an insertion-ordered dict holding the newest _SEEN keys."""
    recent[key] = value
    if len(recent) > _SEEN:
        del recent[next(iter(recent))]


def find_cycle(history: deque[tuple[str, str]] | list[tuple[str, str]], limit: int | dict[str, int],
               ) -> tuple[list[str], int] | None:
    """The cycle of 2 or 3 distinct-in-turn actions the history ends with, repeated `limit` times in a row
    (the tools of the cycle, and the limit that applied), or None. `limit` may be per tool (polls)."""
    n = len(history)
    for length in CYCLE_LENGTHS:
        tail = list(history)[-length:] if n >= length else []
        if not tail or len({key for _, key in tail}) < 2:
            continue
        cap = limit if isinstance(limit, int) else max(limit.get(t, limit[""]) for t, _ in tail)
        need = length * cap
        if n < need:
            continue
        window = list(history)[-need:]
        if all(window[i][1] == window[i % length][1] for i in range(need)):
            return [t for t, _ in window[:length]], cap
    return None


__all__ = ["CYCLE_LENGTHS", "ProgressWatch", "find_cycle", "newest_results", "result_key"]
