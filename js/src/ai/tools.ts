/**
 * The tool gate: tools do not pass through the model middleware, so `budgetedTools` wraps each tool's `execute`.
 * A tool call is checked before it runs (repeats, cycles, the tool-call cap, time, pending stops); a refused
 * call does not run and the model receives the reason as the tool's output. The next model call is then refused
 * by the budgeted model, which answers with the wrap-up.
 */
import { currentNode } from "../core/run.js";
import { admitTool, noteToolResult, settleTool } from "../core/watch.js";
import { BudgetExceeded } from "../model/outcome.js";
import { endTool, spanContext, startTool } from "../telemetry/recorder.js";

/* eslint-disable @typescript-eslint/no-explicit-any */
type Execute = (input: any, options?: any) => any;

function gate(name: string, execute: Execute): Execute {
  return async function budgetedExecute(this: unknown, input: any, options?: any): Promise<any> {
    const node = currentNode();
    if (node === undefined) return execute.call(this, input, options);
    let reserved;
    try {
      reserved = admitTool(node, name, input);
    } catch (exc) {
      if (exc instanceof BudgetExceeded) return `Not run (otel-budget, ${exc.reason}): ${exc.message}`;
      throw exc;
    }
    const callId = typeof options?.toolCallId === "string" ? options.toolCallId : null;
    const span = startTool(name, callId, input, spanContext(node.span));
    let result: any;
    try {
      result = await execute.call(this, input, options);
    } catch (exc) {
      settleTool(node, name, reserved);
      endTool(span, undefined, exc, null);
      throw exc;
    }
    settleTool(node, name, reserved);
    try {
      noteToolResult(node, name, callId, result);
    } catch {
      // our bug must not break the agent
    }
    endTool(span, result, undefined, null);
    return result;
  };
}

/**
 * The same tools, each `execute` gated by the current run's budget (tools without `execute` are left as they
 * are). Outside a `run()` the tools run as before.
 */
export function budgetedTools<T extends Record<string, any>>(tools: T): T {
  if (tools === null || typeof tools !== "object") {
    throw new TypeError("budgetedTools(tools): give the object of tools you pass to generateText, "
      + "e.g. budgetedTools({ writeFile: tool({...}) })");
  }
  const out: Record<string, any> = {};
  for (const [name, t] of Object.entries(tools)) {
    out[name] = t && typeof t.execute === "function" ? { ...t, execute: gate(name, t.execute) } : t;
  }
  return out as T;
}
