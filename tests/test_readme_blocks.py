"""The README's blocks that are not Python (those are run by test_docs_snippets.py): the zero-code quick start runs
as written, with an app that never imports otel_budget, and the demo table is what `make demo` prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_budget.demo import rows as demo
from otel_budget.testing import ScriptedLLM, ToolCall, Turn

README = (Path(__file__).parents[1] / "README.md").read_text()

# A LangGraph agent with no line of otel_budget: the budget comes from OTEL_BUDGET_DEFAULT alone.
APP = textwrap.dedent("""
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def search(query: str) -> str:
        \"\"\"Search the archive.\"\"\"
        return f"nothing found for {query}"

    agent = create_agent(ChatOpenAI(model="gpt-4o", max_retries=0), [search], name="archivist")
    out = agent.invoke({"messages": [{"role": "user", "content": "Find the 2019 invoices."}]},
                       {"recursion_limit": 500})
    print("LAST:", out["messages"][-1].content)
""")


def _blocks(lang: str) -> list[str]:
    """The README's fenced blocks of `lang` ("" for those with none), each fence paired with the next one."""
    fences = re.findall(r"^```(\w*)\n(.*?)^```$", README, re.S | re.M)
    return [body for tag, body in fences if tag == lang]


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver on loopback: keeps every span it is sent."""

    spans: list = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path == "/v1/traces":
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    type(self).spans.extend((scope.scope.name, s) for s in scope.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _attributes(span: Any) -> dict[str, Any]:
    return {a.key: getattr(a.value, a.value.WhichOneof("value") or "string_value") for a in span.attributes}


def _is_llm(attrs: dict[str, Any]) -> bool:
    """As Phoenix reads a span: its OpenInference kind when it has one, else the GenAI operation."""
    if "openinference.span.kind" in attrs:
        return attrs["openinference.span.kind"] == "LLM"
    return attrs.get("gen_ai.operation.name") in ("chat", "text_completion", "generate_content")


def _tokens(attrs: dict[str, Any]) -> tuple[int, int]:
    """(input, output) tokens a backend would count on this span, from either convention."""
    return (attrs.get("gen_ai.usage.input_tokens", attrs.get("llm.token_count.prompt", 0)),
            attrs.get("gen_ai.usage.output_tokens", attrs.get("llm.token_count.completion", 0)))


def test_the_zero_code_quick_start_runs_as_written(tmp_path: Path) -> None:
    block = next(b for b in _blocks("bash") if "opentelemetry-instrument python app.py" in b)
    assert "http://localhost:4318" in block and "OTEL_BUDGET_DEFAULT" in block
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    bindir = Path(sys.executable).parent
    script = "\n".join(line for line in block.splitlines() if not line.startswith("pip install"))  # installed here
    script = script.replace("http://localhost:4318", f"http://127.0.0.1:{collector.server_address[1]}")
    script = script.replace("opentelemetry-instrument python", f"{bindir}/opentelemetry-instrument {sys.executable}")
    (tmp_path / "app.py").write_text(APP)
    try:
        with ScriptedLLM() as llm:
            # a search that never finds anything, with a new query every time: no repeat, no stall (each result
            # differs), so only the default budget's max_steps ends it
            llm.responder = lambda request: Turn(
                tool_calls=[ToolCall("search", {"query": f"invoices 2019 page {len(llm.requests)}"})],
                input_tokens=100, output_tokens=7)
            env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "OPENAI_API_KEY": "offline",
                   "OPENAI_BASE_URL": llm.openai_base_url}
            done = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=180)
            sent = len(llm.requests)
    finally:
        collector.shutdown()
    assert done.returncode == 0, done.stderr[-3000:]
    assert sent == 25, sent  # max_steps of OTEL_BUDGET_DEFAULT, counted at the server
    assert "LAST: Stopped at a limit: max_steps" in done.stdout, done.stdout[-2000:]
    runs = [s for _, s in _Collector.spans if s.name == "invoke_agent archivist"]
    assert len(runs) == 1, [s.name for s in _Collector.spans]
    attrs = {a.key: a.value.string_value for a in runs[0].attributes}
    assert attrs["stop.reason"] == "steps", attrs
    # Every OpenAI instrumentation installed here is loaded too (OpenInference, OpenLLMetry, OTel genai-openai):
    # still one token-bearing LLM span per request, and none for the 26th call, which the budget refused.
    llm_spans = [(scope, s) for scope, s in _Collector.spans if _is_llm(_attributes(s))]
    counted = [(scope, s.name, _tokens(_attributes(s))) for scope, s in llm_spans if _tokens(_attributes(s)) != (0, 0)]
    assert len(counted) == len(llm_spans) == sent and {t for _, _, t in counted} == {(100, 7)}, counted
    refused = [_attributes(s) for _, s in _Collector.spans if s.name.startswith("refused ")]
    assert all(a["openinference.span.kind"] == "GUARDRAIL" and _tokens(a) == (0, 0) for a in refused), refused


def test_the_demo_table_is_what_make_demo_prints(capsys) -> None:  # type: ignore[no-untyped-def]
    table = next(b for b in _blocks("") if b.startswith("run ") and "stop reason" in b)
    assert demo.main([]) == 0
    printed = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
    for line in table.splitlines():
        assert line.rstrip() in printed, line
