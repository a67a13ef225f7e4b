"""A LangGraph pager graph with a checkpointer kept in files (LangGraph's `PersistentDict`), and, run as a script,
a new process that resumes a thread paused at a limit.

Usage: python _langgraph_limit_child.py BASE_URL CHECKPOINT_DIR THREAD RESUME_JSON [MAX_STEPS]. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import otel_budget

if __name__ == "__main__":
    otel_budget.instrument()  # before the frameworks are imported: patched on their import

from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver, PersistentDict  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def file_saver(directory: Path) -> InMemorySaver:
    """LangGraph's in-memory checkpointer over files: `saver.stack.close()` writes them, a new saver reads them."""
    names = iter(("storage", "writes", "blobs"))

    def factory(*args: Any) -> PersistentDict:
        d = PersistentDict(*args, filename=str(directory / f"{next(names)}.pickle"))
        if os.path.exists(d.filename):
            d.load()
        return d

    make: Callable[..., Any] = factory
    return InMemorySaver(factory=make)  # type: ignore[arg-type]


def pager_graph(base_url: str, checkpointer: Any) -> Any:
    model = ChatOpenAI(model="graph-test-model", base_url=base_url, api_key="x", max_retries=0,
                       max_tokens=300).bind_tools([lookup])

    def agent(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(name="pager", checkpointer=checkpointer)


def main(base_url: str, directory: str, thread: str, resume: str, max_steps: str | None) -> None:
    from langgraph.types import Command

    saver = file_saver(Path(directory))
    graph = pager_graph(base_url, saver)
    configurable: dict[str, Any] = {"thread_id": thread}
    if max_steps:
        configurable["otel_budget"] = otel_budget.Budget(max_steps=int(max_steps))
    out = graph.invoke(Command(resume=json.loads(resume)), {"configurable": configurable})
    saver.stack.close()
    interrupts = out.get("__interrupt__") or ()
    print(json.dumps({
        "interrupts": [{k: v for k, v in i.value.items() if k != "paused"} for i in interrupts],
        "last": str(out["messages"][-1].content),
    }))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None)
