/**
 * What a run watches between calls (core/watch.py): the tools the model asked for, repeated calls and cycles,
 * unchanged results (stalls), and the admission of a tool execution.
 */
import { StopReason, plural } from "../model/budget.js";
import { canonicalArguments } from "../model/signatures.js";
import { type Amounts, reserve, settle, take } from "./ledger.js";
import { checkNear } from "./near.js";
import { chargeShared, reserveShared, settleShared } from "./shared.js";
import type { RunNode } from "./node.js";
import { ApprovalState } from "./approval.js";

/** The tree's approval state when a policy or a decision applies (null: no approvals in this run). */
function approvals(node: RunNode): ApprovalState | null {
  if (node.root.approval === null && ApprovalState.policies(node).length === 0) return null;
  return node.approvalState();
}
import { findCycle } from "./progress.js";

/** A tool call the model asked for: name, arguments (JSON text or value), call id. */
export type ToolRequest = [name: string, args: unknown, callId?: string | null];

function cycle(node: RunNode, history: [string, string][]): [string[], number] | null {
  if (node.budget.maxRepeats === null && Object.keys(node.budget.polls).length === 0) return null;
  return findCycle(history, { "": node.budget.maxRepeats ?? 2 ** 30, ...node.budget.polls });
}

function checkCycle(node: RunNode, history: [string, string][], who: string, then: string): void {
  if (node.stopState !== null) return;
  const found = cycle(node, history.slice(-64));
  if (found !== null) {
    const [tools, cap] = found;
    node.stopState = [StopReason.REPEAT, "max_repeats", `${who} the cycle ${tools.join(" -> ")} (the same actions `
      + `with the same arguments) ${cap} times in a row (${node.allowance(tools, "max_repeats", cap)}); ${then}.`];
  }
}

/**
 * The model asked for these tools: count them, watch for repetition (a stop refuses the next call). Only what
 * fits under maxToolCalls is counted as used; the requests beyond it are refused (never run, never counted).
 */
export function recordToolRequests(node: RunNode, calls: ToolRequest[]): void {
  if (calls.length === 0) return;
  const counted = take(node.accounts, "tool_calls", calls.length);
  const refused = calls.length - counted;
  if (counted > 0) chargeShared(node, { tool_calls: counted });
  // the tools of a child count in every ancestor's record (the wrap-up lists the tree's)
  for (const n of node.chain) for (const [name] of calls.slice(0, counted)) n.toolsRequested.add(name);
  if (refused > 0) for (const n of node.chain) n.toolCallsRefused += refused;
  const approval = approvals(node);
  for (const [index, [name, args, callId]] of calls.entries()) {
    approval?.onRequest(node, name, args, callId ?? null);
    if (index < counted) node.pendingTools.add(name); // counted: its execution is not counted again
    const key = `${name}\u0000${canonicalArguments(args)}`;
    node.requestStreak = key === node.lastRequest ? node.requestStreak + 1 : 1;
    node.lastRequest = key;
    const limit = node.repeatLimit(name);
    node.progress.requested(name, callId ?? null);
    node.progress.requests.push([name, key]);
    checkCycle(node, node.progress.requests.items, "the model requested", "the next model call was not sent");
    if (limit !== null && node.requestStreak >= limit && node.stopState === null) {
      node.stopState = [StopReason.REPEAT, "max_repeats", `the model requested ${name} with the same arguments `
        + `${node.requestStreak} times in a row (${node.allowance([name], "max_repeats", limit)}); the next model `
        + "call was not sent."];
    }
  }
  if (refused > 0) {
    node.stop(StopReason.TOOL_CALLS, "max_tool_calls", `the model requested ${plural(refused, "more tool call")} `
      + "than max_tool_calls allows (refused, not run and not counted); the next call was not sent.",
    node.exhausted("tool_calls"));
  }
}

/** Check a tool execution before it runs (throws BudgetExceeded); returns what it reserved. */
export function admitTool(node: RunNode, name: string, args: unknown): Amounts {
  const what = `the tool ${name}`;
  // a request counted within maxToolCalls still runs when others of its response went over the cap
  node.checkGates(what, (node.pendingTools.get(name) ?? 0) > 0);
  approvals(node)?.onExecute(node, name, args);
  const key = `${name}\u0000${canonicalArguments(args)}`;
  const streak = key === node.lastExec ? node.execStreak + 1 : 1;
  const limit = node.repeatLimit(name);
  const found = cycle(node, [...node.progress.executions.tail(64), [name, key]]);
  if (found !== null) {
    const [tools, cap] = found;
    throw node.stop(StopReason.REPEAT, "max_repeats", `${what} was not run: it would complete the cycle `
      + `${tools.join(" -> ")} (the same actions with the same arguments) ${cap} times in a row `
      + `(${node.allowance(tools, "max_repeats", cap)}).`);
  }
  if (limit !== null && streak >= limit) {
    throw node.stop(StopReason.REPEAT, "max_repeats", `${what} was not run: it would run with the same arguments `
      + `${streak} times in a row (${node.allowance([name], "max_repeats", limit)}).`);
  }
  const amounts: Amounts = {};
  if ((node.pendingTools.get(name) ?? 0) > 0) node.pendingTools.add(name, -1);
  else amounts.tool_calls = 1;
  if (Object.keys(amounts).length > 0) {
    const refusal = reserve(node.accounts, amounts);
    if (refusal !== null) throw node.refusalError(refusal, what);
  }
  node.execStreak = streak;
  node.lastExec = key;
  node.progress.executions.push([name, key]);
  return amounts;
}

/**
 * The fleet check of a tool execution admitted by `admitTool`: what it reserved must fit in every shared scope
 * of the chain too (a fleet-wide maxToolCalls); throws BudgetExceeded after giving the reservation back. The
 * execution is charged there when it settles.
 */
export async function admitToolShared(node: RunNode, name: string, reserved: Amounts): Promise<void> {
  if (node.scopes.length === 0 || Object.keys(reserved).length === 0) return;
  try {
    settleShared(node, await reserveShared(node, reserved, `the tool ${name}`), {});
  } catch (exc) {
    settle(node.accounts, reserved, {});
    throw exc;
  }
}

/** A tool admitted by `admitTool` ran (or failed): count it. */
export function settleTool(node: RunNode, name: string, reserved: Amounts): void {
  settle(node.accounts, reserved, reserved);
  if (Object.keys(reserved).length > 0) chargeShared(node, reserved);
  for (const n of node.chain) n.toolsExecuted.add(name);
  checkNear(node);
}

/** A tool executed here returned `result`: the same result maxStalls times in a row records `stalled`. */
export function noteToolResult(node: RunNode, name: string, callId: string | null, result: unknown): void {
  const counted = node.progress.result(name, callId, result);
  if (counted === null) return;
  const [tool, streak] = counted;
  const limit = node.stallLimit(tool);
  if (limit !== null && streak >= limit && node.stopState === null) {
    node.stopState = [StopReason.STALLED, "max_stalls", `${tool} returned the same result ${streak} times in a row, `
      + `whatever its arguments (${node.allowance([tool], "max_stalls", limit)}); the next call was not sent.`];
  }
}
