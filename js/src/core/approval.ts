/**
 * Soft stops (core/approval.py): tool calls that wait for a person's yes, pauses at a limit (`onLimit: "pause"`),
 * and a person's decision on resume. Shared by the run tree (the root's state).
 */
import { LIMITS, StopReason, isLimitName } from "../model/budget.js";
import { type PendingCall, PausedRun, type ToolRecord } from "../model/paused.js";
import { type ApprovalPolicy, TARGET_KEYS, asDict } from "../model/policy.js";
import { pyRound } from "../model/format.js";
import { Num, argumentsSignature, canonicalArguments } from "../model/signatures.js";
import type { RunNode } from "./node.js";

function key(tool: string, args: unknown): string {
  return `${tool}\u0000${canonicalArguments(args)}`;
}

/** A tool call as stop details name it: its argument signature, never its values. */
export function describeCall(tool: string, args: unknown): string {
  return `${tool}(arguments ${argumentsSignature(args)})`;
}

/** Plain JSON data of `value` (what a paused run can keep), never throwing. */
export function jsonable(value: unknown): unknown {
  if (value === undefined) return null;
  try {
    return JSON.parse(JSON.stringify(value) ?? "null");
  } catch {
    return String(value);
  }
}

function pendingCall(tool: string, args: unknown, callId: string | null, op: string): PendingCall {
  const dict = asDict(args);
  const hit = TARGET_KEYS.find((k) => dict[k] !== undefined && dict[k] !== null && dict[k] !== "");
  let value = args;
  if (typeof args === "string" && !(Object.keys(dict).length === 1 && dict.input === args)) value = dict;
  return { kind: "tool", tool, arguments: jsonable(value), callId, operation: op,
    target: hit === undefined ? null : String(dict[hit]), limit: null, used: null, cap: null };
}

/** Tool calls kept for a later pause at most (the oldest are not kept beyond). */
const MAX_RECORDS = 1000;

/** Whether a run keeps what it may pause with: a policy or `onLimit: "pause"` in its chain, or a decision. */
export function pausable(node: RunNode): boolean {
  return node.root.approval !== null || node.chain.some((n) => n.budget.approve !== null || n.budget.onLimit === "pause");
}

/** Approvals, denials, the pending call and the tool record of one run tree. */
export class ApprovalState {
  readonly grants = new Map<string, Set<string>>();
  readonly denied = new Set<string>();
  pending: PendingCall | null = null;
  readonly completed: ToolRecord[] = [];
  readonly replays = new Map<string, ToolRecord[]>();

  /** Keep a finished tool call (the work done) for a later pause. */
  record(tool: string, args: unknown, result: unknown): void {
    if (this.completed.length >= MAX_RECORDS) return;
    let replayable = false;
    try {
      replayable = result !== undefined && JSON.stringify(JSON.parse(JSON.stringify(result))) === JSON.stringify(result);
    } catch {
      replayable = false;
    }
    this.completed.push({ tool, arguments: jsonable(args), result: replayable ? result : null, replayable });
  }

  /** The recorded result of this call when it ran before the pause (each record answers once). */
  replay(tool: string, args: unknown): [unknown] | null {
    const records = this.replays.get(key(tool, args));
    if (records === undefined || records.length === 0) return null;
    return [(records.shift() as ToolRecord).result];
  }

  /** Take over the decisions and the work record of a paused run. */
  load(paused: PausedRun): void {
    for (const op of paused.denied) this.denied.add(op);
    for (const rec of paused.completed) {
      this.completed.push(rec);
      if (!rec.replayable) continue;
      const k = key(rec.tool, rec.arguments);
      this.replays.set(k, [...(this.replays.get(k) ?? []), rec]);
    }
  }

  static policies(node: RunNode): ApprovalPolicy[] {
    return node.chain.map((n) => n.budget.approve).filter((p): p is ApprovalPolicy => p !== null);
  }

  operation(node: RunNode, tool: string, args: unknown): string | null {
    for (const policy of ApprovalState.policies(node)) {
      const op = policy.operation(tool, args);
      if (op !== null) return op;
    }
    return null;
  }

  /** The model asked for a tool: a gated call without a grant pauses the run (before anything runs). */
  onRequest(node: RunNode, tool: string, args: unknown, callId: string | null): void {
    const op = this.operation(node, tool, args);
    if (op === null) return;
    let stop: [StopReason, string];
    if (this.denied.has(op)) {
      stop = [StopReason.DENIED, `the model asked for ${tool}, which performs '${op}': a person denied that `
        + "operation in this run, so nothing more was sent."];
    } else {
      const passes = this.grants.get(key(tool, args));
      if (passes?.has("request")) {
        passes.delete("request");
        return;
      }
      if (node.stopState === null) this.pending = pendingCall(tool, args, callId, op);
      stop = [StopReason.AWAITING_APPROVAL, `the model asked for ${describeCall(tool, args)}, which needs a `
        + "person's approval; the run paused before it ran."];
    }
    if (node.stopState === null) node.stopState = [stop[0], null, stop[1]];
  }

  /** A tool is about to run: throw BudgetExceeded (awaiting_approval or denied) unless it may. */
  onExecute(node: RunNode, tool: string, args: unknown): void {
    const op = this.operation(node, tool, args);
    if (op === null) return;
    if (this.denied.has(op)) {
      throw node.stop(StopReason.DENIED, null, `the tool ${tool} was not run: it performs '${op}', which a person `
        + "denied in this run.");
    }
    const passes = this.grants.get(key(tool, args));
    if (passes?.has("execute")) {
      passes.delete("execute");
      return;
    }
    if (node.stopState === null) this.pending = pendingCall(tool, args, null, op);
    throw node.stop(StopReason.AWAITING_APPROVAL, null, `the tool ${describeCall(tool, args)} needs a person's `
      + "approval; it was not run.");
  }

  /** A person's decision on `call`: approval grants exactly that call once; a rejection denies its operation. */
  decide(node: RunNode, call: PendingCall, approved: boolean | null): void {
    if (call.kind === "limit") {
      if (approved !== false || node.stopState !== null || !isLimitName(call.limit)) return;
      node.limitDeclined = true;
      node.stopState = [LIMITS[call.limit][1], call.limit, `a person declined to raise ${call.limit} after the run `
        + "reached it; the run ended there."];
      return;
    }
    if (approved === null || this.operation(node, call.tool, call.arguments) === null) return;
    if (approved) {
      this.grants.set(key(call.tool, call.arguments), new Set(["request", "execute"]));
      return;
    }
    this.denied.add(call.operation);
    if (!ApprovalState.policies(node).some((p) => p.alternative) && node.stopState === null) {
      node.stopState = [StopReason.DENIED, null, `a person denied ${call.tool}(arguments `
        + `${argumentsSignature(call.arguments)}); the run ended there.`];
    }
  }

  /** The pause of `node` as data (unsigned, without its id: `seal` gives both). */
  pausedRun(node: RunNode): PausedRun {
    const policy = ApprovalState.policies(node)[0] ?? null;
    const p = this.pending;
    const positive = (c: Map<string, number>) => Object.fromEntries([...c].filter(([, v]) => v > 0));
    const u = node.usage();
    return PausedRun.fromFields({
      run_name: node.name,
      pending: p === null ? null : { kind: p.kind, tool: p.tool, arguments: p.arguments, call_id: p.callId,
        operation: p.operation, target: p.target, limit: p.limit, used: p.used, cap: p.cap },
      usage: { model_calls: u.modelCalls, tool_calls: u.toolCalls, input_tokens: u.inputTokens,
        output_tokens: u.outputTokens, cache_read_tokens: u.cacheReadTokens, cache_write_tokens: u.cacheWriteTokens,
        reasoning_tokens: u.reasoningTokens, cost_usd: Num.float(u.costUsd), seconds: Num.float(u.seconds),
        unpriced_calls: u.unpricedCalls },
      budget: node.budget.dump(),
      policy: policy === null ? null : policy.dump(),
      completed: this.completed.map((r) => ({ tool: r.tool, arguments: r.arguments, result: r.result,
        replayable: r.replayable })),
      state: jsonable(node.savedState),
      tools_requested: Object.fromEntries(node.toolsRequested),
      tools_executed: Object.fromEntries(node.toolsExecuted),
      pending_tools: positive(node.pendingTools),
      denied: [...this.denied].sort(),
      trace_id: node.traceId,
      span_id: node.spanId,
      paused_at: Num.float(Date.now() / 1000),
      detail: node.stopState?.[2] ?? "",
    });
  }
}

/** A pause at one of `owner`'s own limits under `onLimit: "pause"`: the pending limit and the pause's detail. */
export function pauseAtLimit(node: RunNode, reason: StopReason, limit: string | null, detail: string,
  owner: RunNode): [StopReason, string] {
  if (!isLimitName(limit) || LIMITS[limit][1] !== reason || owner.budget.onLimit !== "pause"
    || owner.budget.limit(limit) === null) {
    return [reason, detail];
  }
  const dim = LIMITS[limit][0];
  const used = dim === "seconds" ? owner.elapsed() : owner.account.used[dim];
  const state = node.approvalState();
  state.pending = { kind: "limit", tool: "", arguments: null, callId: null, operation: limit, target: null, limit,
    used: pyRound(used, 10), cap: owner.budget.limit(limit) };
  return [StopReason.AWAITING_APPROVAL, `${detail.replace(/\.+$/, "")}; the run paused for a person's decision `
    + `(on_limit="pause"): resume it with a larger ${limit} to go on.`];
}
