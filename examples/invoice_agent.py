"""The invoice agent of our docs, runnable offline: `python examples/invoice_agent.py [--stuck]`.

The agent itself lives in `otel_budget/demo/agent.py` (the `otel-budget demo` command runs it too): a small
hand-written tool loop over the openai SDK, against the built-in ScriptedLLM.
"""

from otel_budget.demo.agent import main

if __name__ == "__main__":
    raise SystemExit(main())
