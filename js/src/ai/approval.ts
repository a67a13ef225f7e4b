/**
 * ai@7's tool gate: `toolApproval: budgetApproval()` on `generateText`, `streamText` or a `ToolLoopAgent`. The SDK
 * asks it about every tool call before any tool of the step runs; a call the budget refuses (repeats, cycles,
 * maxToolCalls, time, a pending stop) is denied, so it does not run, and the model receives the reason as the
 * tool's `execution-denied` output. The next model call is refused by the budgeted model with the wrap-up.
 *
 * A call the gate admits is counted once: the `execute` of `budgetedTools` takes the admission over (and records
 * the result and the span); a tool outside `budgetedTools` is counted as executed when admitted. Without
 * `toolApproval` (ai@6, or ai@7 without it) the `execute` wrapper of `budgetedTools` gates on its own.
 */
import type { Amounts } from "../core/ledger.js";
import type { RunNode } from "../core/node.js";
import { currentNode } from "../core/run.js";
import { admitTool, settleTool } from "../core/watch.js";
import { BudgetExceeded } from "../model/outcome.js";

/* eslint-disable @typescript-eslint/no-explicit-any */
/** What ai@7 returns from an approval function (`undefined` is `not-applicable`). */
export type ApprovalStatus = undefined | "not-applicable" | "approved" | "denied" | "user-approval"
  | { type: "not-applicable"; reason?: never } | { type: "approved"; reason?: string }
  | { type: "denied"; reason?: string } | { type: "user-approval"; reason?: string };

/** The approval configuration ai@7 takes: one function for every call, or statuses/functions per tool name. */
export type ApprovalConfiguration = ((options: any) => ApprovalStatus | PromiseLike<ApprovalStatus>)
  | Record<string, ApprovalStatus | ((input: any, options: any) => ApprovalStatus | PromiseLike<ApprovalStatus>)>;

/** Marks an `execute` wrapped by budgetedTools (it takes over what the approval gate admitted). */
export const GATED_EXECUTE = Symbol.for("otel-budget.gated-execute");

/** Admissions made by the approval gate, per run, by tool call id, until the tool's execute takes them. */
const admitted = new WeakMap<RunNode, Map<string, Amounts>>();
/** At most this many admissions wait per run (a step's calls; older ones are dropped, never executed twice). */
const MAX_WAITING = 1024;

/** The text a refused tool call answers with (the wrapper's output, the approval's reason): the same on both. */
export function refusalReason(exc: BudgetExceeded): string {
  return `Not run (otel-budget, ${exc.reason}): ${exc.message}`;
}

/** The admission the approval gate made for this call, taken once (undefined: none, gate it yourself). */
export function takeAdmission(node: RunNode, callId: string | null): Amounts | undefined {
  if (callId === null) return undefined;
  const waiting = admitted.get(node);
  const amounts = waiting?.get(callId);
  if (amounts !== undefined) waiting?.delete(callId);
  return amounts;
}

function normalize(status: ApprovalStatus): { type: string; reason?: string } {
  return status === undefined ? { type: "not-applicable" } : typeof status === "string" ? { type: status } : status;
}

async function theirStatus(theirs: ApprovalConfiguration | undefined, options: any): Promise<ApprovalStatus> {
  if (theirs === undefined || theirs === null) return undefined;
  if (typeof theirs === "function") return theirs(options);
  const call = options.toolCall;
  const own = Object.prototype.hasOwnProperty.call(theirs, call.toolName) ? theirs[call.toolName] : undefined;
  if (typeof own !== "function") return own;
  return own(call.input, { toolCallId: call.toolCallId, messages: options.messages,
    toolContext: options.toolsContext?.[call.toolName], runtimeContext: options.runtimeContext });
}

/**
 * The `toolApproval` function for ai@7 that gates each tool call by the current run's budget. `theirs` (your own
 * approval function or per-tool statuses) is asked first: what it denies or sends to a person is left to it; what
 * it lets run is then checked against the budget. Outside a `run()` it answers as `theirs` does.
 */
export function budgetApproval(theirs?: ApprovalConfiguration): (options: any) => Promise<ApprovalStatus> {
  if (theirs !== undefined && theirs !== null && typeof theirs !== "function" && typeof theirs !== "object") {
    throw new TypeError("budgetApproval(theirs): give your toolApproval function or per-tool statuses "
      + `(e.g. budgetApproval({ deleteFile: "user-approval" })), or nothing; got ${typeof theirs}`);
  }
  return async function budgetToolApproval(options: any): Promise<ApprovalStatus> {
    const status = await theirStatus(theirs, options);
    const { type } = normalize(status);
    const call = options?.toolCall;
    const node = currentNode();
    if (node === undefined || type === "denied" || type === "user-approval" || call == null || call.providerExecuted) {
      return status;
    }
    const tool = options.tools?.[call.toolName];
    if (tool == null || typeof tool.execute !== "function") return status; // run by the client, not here
    let amounts: Amounts;
    try {
      amounts = admitTool(node, call.toolName, call.input);
    } catch (exc) {
      if (exc instanceof BudgetExceeded) return { type: "denied", reason: refusalReason(exc) };
      throw exc;
    }
    if (tool.execute[GATED_EXECUTE] === true && typeof call.toolCallId === "string") {
      let waiting = admitted.get(node);
      if (waiting === undefined) admitted.set(node, (waiting = new Map()));
      if (waiting.size >= MAX_WAITING) waiting.delete(waiting.keys().next().value as string);
      waiting.set(call.toolCallId, amounts);
    } else {
      settleTool(node, call.toolName, amounts); // not ours to follow: counted as executed now
    }
    return status;
  };
}
