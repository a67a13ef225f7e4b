/**
 * The tool gate: tools do not pass through the model middleware, so `budgetedTools` wraps each tool's `execute`.
 * A tool call is checked before it runs (repeats, cycles, the tool-call cap, time, pending stops, approvals); a
 * refused call does not run and the model receives the reason as the tool's output. The next model call is then
 * refused by the budgeted model, which answers with the wrap-up. On ai@7 with `toolApproval: budgetApproval()` the
 * call was checked already (approval.ts): the wrapper takes that admission over and only records the execution.
 */
import { GATED_EXECUTE, refusalReason, takeAdmission } from "./approval.js";
import { currentNode } from "../core/run.js";
import type { Amounts } from "../core/ledger.js";
import type { RunNode } from "../core/node.js";
import { pausable } from "../core/approval.js";
import { admitTool, admitToolShared, noteToolResult, settleTool } from "../core/watch.js";
import { BudgetExceeded } from "../model/outcome.js";
import { endTool, spanContext, startTool } from "../telemetry/recorder.js";

/* eslint-disable @typescript-eslint/no-explicit-any */
type Execute = (input: any, options?: any) => any;

function gate(name: string, execute: Execute): Execute {
  const budgetedExecute = function budgetedExecute(this: unknown, input: any, options?: any): any {
    const node = currentNode();
    if (node === undefined) return execute.call(this, input, options);
    const replayed = node.root.approval?.replay(name, input);
    if (replayed) return Promise.resolve(replayed[0]); // ran before the pause: its recorded result, not a second run
    const callId = typeof options?.toolCallId === "string" ? options.toolCallId : null;
    // admitted already by ai@7's toolApproval (budgetApproval): counted once
    let reserved = takeAdmission(node, callId) as Amounts | undefined;
    if (reserved === undefined) {
      try {
        reserved = admitTool(node, name, input);
      } catch (exc) {
        if (exc instanceof BudgetExceeded) return Promise.resolve(refusalReason(exc));
        throw exc;
      }
    }
    const held = reserved;
    if (node.scopes.length > 0 && Object.keys(held).length > 0) {
      // a fleet-wide maxToolCalls: the shared ledger answers asynchronously, so the tool runs after it said yes
      return admitToolShared(node, name, held).then(() => run.call(this, node, input, options, held),
        (exc: unknown) => (exc instanceof BudgetExceeded ? refusalReason(exc) : Promise.reject(exc)));
    }
    return run.call(this, node, input, options, held);
  };
  (budgetedExecute as any)[GATED_EXECUTE] = true;
  return budgetedExecute;

  function run(this: unknown, node: RunNode, input: any, options: any, reserved: Amounts): any {
    const callId = typeof options?.toolCallId === "string" ? options.toolCallId : null;
    const span = startTool(name, callId, input, spanContext(node.span));
    const ran = (result: unknown): unknown => {
      settleTool(node, name, reserved);
      if (pausable(node)) node.approvalState().record(name, input, result);
      try {
        noteToolResult(node, name, callId, result);
      } catch {
        // our bug must not break the agent
      }
      endTool(span, result, undefined, null);
      return result;
    };
    const failed = (exc: unknown): never => {
      settleTool(node, name, reserved);
      endTool(span, undefined, exc, null);
      throw exc;
    };
    let result: any;
    try {
      result = execute.call(this, input, options);
    } catch (exc) {
      return failed(exc);
    }
    if (result !== null && typeof result === "object" && Symbol.asyncIterator in result) {
      // a streaming tool (preliminary results): counted when it starts, its results are not read
      settleTool(node, name, reserved);
      endTool(span, undefined, undefined, null);
      return result;
    }
    if (result !== null && typeof result?.then === "function") return result.then(ran, failed);
    return ran(result);
  }
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
