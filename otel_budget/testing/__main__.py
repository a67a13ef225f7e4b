"""`python -m otel_budget.testing`: a ScriptedLLM driven over stdin/stdout, for test suites in other languages.

The first line printed is a JSON object with the server's addresses (`base_url`, `openai_base_url`,
`anthropic_base_url`). Then each line read is one JSON command, answered by one JSON line:

- `{"op": "script", "turns": [{...Turn fields, "tool_calls": [{"name": ..., "arguments": {...}}]}]}`
- `{"op": "default", "turn": {...} | null}`: the turn served when the queue is empty
- `{"op": "requests"}`: `{"requests": [{"path", "api", "model", "stream", "body"}, ...]}` in arrival order
- `{"op": "reset"}`: clear the queue, the default and the recorded requests

End of input stops the server. A bad command is answered with `{"error": "..."}` and the server goes on.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from .server import ScriptedLLM
from .turns import ToolCall, Turn


def _turn(spec: dict[str, Any]) -> Turn:
    fields = dict(spec)
    calls = [ToolCall(**call) for call in fields.pop("tool_calls", [])]
    return Turn(tool_calls=calls, **fields)


def _handle(llm: ScriptedLLM, command: dict[str, Any]) -> dict[str, Any]:
    op = command.get("op")
    if op == "script":
        llm.script(*(_turn(t) for t in command.get("turns", [])))
        return {"ok": True, "pending": llm.pending}
    if op == "default":
        spec = command.get("turn")
        llm.default = _turn(spec) if spec is not None else None
        return {"ok": True}
    if op == "requests":
        return {"requests": [{"path": r.path, "api": r.api, "model": r.model, "stream": r.stream, "body": r.body}
                             for r in list(llm.requests)]}
    if op == "reset":
        llm.reset()
        return {"ok": True}
    raise ValueError(f"unknown op {op!r}: use script, default, requests or reset")


def main() -> None:
    with ScriptedLLM() as llm:
        print(json.dumps({"base_url": llm.base_url, "openai_base_url": llm.openai_base_url,
                          "anthropic_base_url": llm.anthropic_base_url}), flush=True)
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                answer = _handle(llm, json.loads(line))
            except Exception as exc:  # noqa: BLE001 - a bad command is answered, the server goes on
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
