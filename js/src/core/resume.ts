/**
 * Going on with a paused run after a person's decision (core/resume.py): `resume(paused, { approved, budget }, fn)`.
 * The run keeps the quota it used, its trace (the new run span is a child of the paused one) and its decisions.
 */
import { ROOT_CONTEXT, TraceFlags, trace } from "@opentelemetry/api";
import { Budget, type BudgetOptions } from "../model/budget.js";
import type { PendingCall } from "../model/paused.js";
import { PausedRun } from "../model/paused.js";
import { settle } from "./ledger.js";
import type { RunNode } from "./node.js";
import { type Run, type RunResult, runTree } from "./run.js";
import { runResumed } from "../telemetry/metrics.js";
import { check } from "./trust.js";

export interface ResumeOptions {
  /** The person's decision: true approves the pending call (or goes on under a larger budget), false rejects it,
   * null decides nothing (the call pauses again). */
  approved: boolean | null;
  /** Replaces the saved limits; only larger limits let a run paused at a limit send more. A budget that does not
   * set `onLimit` keeps "pause". Pass it to keep an approval predicate across processes. */
  budget?: Budget | BudgetOptions;
  /** Who decided (recorded on the run). */
  by?: string;
}

/** What `resume()` hands to its function: the run, and what the paused run saved. */
export interface ResumedRun extends Run {
  /** What the code saved with `run.checkpoint(...)` before the pause. */
  readonly state: unknown;
  readonly pending: PendingCall | null;
  /** After a rejection: the text to answer the rejected call with (null when approved). */
  readonly rejection: string | null;
}

/** Start `node` with `usage` already consumed: a resumed run keeps the quota its earlier part used. */
function carryOver(node: RunNode, paused: PausedRun): void {
  const u = paused.usage;
  const used: Record<string, number> = { steps: u.modelCalls, tool_calls: u.toolCalls, input_tokens: u.inputTokens,
    output_tokens: u.outputTokens, total_tokens: u.inputTokens + u.outputTokens, usd: u.costUsd };
  settle(node.accounts, {}, Object.fromEntries(Object.entries(used).filter(([, v]) => v)));
  for (const n of node.chain) {
    n.stats.modelCalls += u.modelCalls;
    n.stats.cacheRead += u.cacheReadTokens;
    n.stats.cacheWrite += u.cacheWriteTokens;
    n.stats.reasoning += u.reasoningTokens;
    n.stats.unpriced += u.unpricedCalls;
  }
}

/**
 * Go on with a paused run (`outcome.paused`, its JSON, or Python's) after a person's decision. A run paused at a
 * limit (`onLimit: "pause"`) goes on under `budget`'s limits with the quota used counted, so only larger limits
 * let it send more; `approved: false` ends it with the limit's own stop reason. A run paused before a tool call
 * (`approve`) may make exactly that call once; a rejection ends it with `denied` (or, with an `alternative`,
 * goes on with `run.rejection` to answer the call with). Throws `InvalidRunState` for a paused run that cannot be
 * trusted (edited after it was signed, a bad field, unknown to the shared ledger).
 */
export async function resume<T>(paused: PausedRun | string | object, options: ResumeOptions,
  fn: (run: ResumedRun) => Promise<T> | T): Promise<RunResult<T>> {
  if (options === null || typeof options !== "object" || !("approved" in options)) {
    throw new TypeError("resume(paused, { approved, budget }, fn): say the person's decision, e.g. "
      + "resume(paused, { approved: true, budget: new Budget({ maxUsd: 1.6 }) }, fn)");
  }
  const { approved } = options;
  if (approved !== true && approved !== false && approved !== null) {
    throw new TypeError(`resume(): approved=${JSON.stringify(approved)}: give true, false or null`);
  }
  if (typeof fn !== "function") throw new TypeError("resume(paused, options, fn): fn must be a function");
  const p = await check(PausedRun.parse(paused));
  let budget = options.budget === undefined ? p.makeBudget()
    : options.budget instanceof Budget ? options.budget : new Budget(options.budget);
  if (budget.approve === null && p.policy !== null) budget = budget.with({ approve: p.policy });
  if (!budget.given.has("onLimit") && p.budget.on_limit === "pause") budget = budget.with({ onLimit: "pause" });
  const extras = { state: p.state, pending: p.pending, rejection: approved === false ? p.rejectionMessage() : null };
  runResumed(p.runName); // it waits no more (otel_budget.runs.awaiting_approval); counted in runs when it ends
  return runTree<T, ResumedRun>(p.runName, budget, fn, {
    offset: p.usage.seconds,
    extras,
    prepare: (node) => {
      carryOver(node, p);
      for (const [k, v] of Object.entries(p.toolsRequested)) node.toolsRequested.add(k, v);
      for (const [k, v] of Object.entries(p.toolsExecuted)) node.toolsExecuted.add(k, v);
      for (const [k, v] of Object.entries(p.pendingTools)) node.pendingTools.add(k, v);
      const state = node.approvalState();
      state.load(p);
      if (p.pending !== null) state.decide(node, p.pending, approved);
      node.allows(); // re-check the limits now: a run with nothing left stops before its first call
      if (p.traceId === null || p.spanId === null || node.parent !== null) return undefined;
      const ctx = { traceId: p.traceId, spanId: p.spanId, traceFlags: TraceFlags.SAMPLED, isRemote: true };
      return trace.isSpanContextValid(ctx) ? trace.setSpanContext(ROOT_CONTEXT, ctx) : undefined;
    },
  });
}
