/**
 * One run in the tree (core/node_state.py and core/stops.py): its budget, account and counters, its place in
 * the tree, how it stops, and the gates every call passes first (run open, depth, time, pending stops).
 */
import type { Span } from "@opentelemetry/api";
import { Budget, LIMITS, StopReason, isLimitName, type LimitName, type Usage } from "../model/budget.js";
import { pyRound } from "../model/format.js";
import { BudgetExceeded, type RunOutcome } from "../model/outcome.js";
import { ApprovalState, pauseAtLimit } from "./approval.js";
import { Account, type Amounts, type Refusal, headroom } from "./ledger.js";
import { ProgressWatch } from "./progress.js";

let ids = 0;

/** Ledger dimension -> [stop reason, limit name]. */
export const DIM_REASON: Record<string, [StopReason, LimitName]> = Object.fromEntries(
  (Object.entries(LIMITS) as [LimitName, (typeof LIMITS)[LimitName]][]).map(([f, [dim, reason]]) => [dim, [reason, f]]),
);
/** Stops recorded between calls that refuse the next model or tool call. */
const GATED: ReadonlySet<string> = new Set([StopReason.REPEAT, StopReason.STALLED, StopReason.TOOL_CALLS,
  StopReason.AWAITING_APPROVAL, StopReason.DENIED]);
/** Headroom at or below which an account counts as used up (a step or a tool call needs a whole one). */
const EXHAUSTED_AT: Record<string, number> = { steps: 0.5, tool_calls: 0.5 };

export type StopState = [StopReason, RunOutcome["limit"], string];

/** A shared (fleet) scope as a run draws from it: a `Scope`, or a run tree's scope (propagation). */
export interface SharedScope {
  readonly name: string;
  limits(): Amounts;
  readonly windowSeconds: number | null;
}

/** A counter that keeps first-seen order, as Python's Counter (most_common breaks ties by that order). */
export class Counter extends Map<string, number> {
  add(key: string, n = 1): void {
    this.set(key, (this.get(key) ?? 0) + n);
  }
  mostCommon(n: number): [string, number][] {
    return [...this.entries()].filter(([, c]) => c > 0).sort((a, b) => b[1] - a[1]).slice(0, n);
  }
}

export function now(): number {
  return performance.now() / 1000;
}

export class RunNode {
  readonly id = ++ids;
  readonly root: RunNode;
  readonly depth: number;
  readonly account: Account;
  readonly chain: readonly RunNode[];
  readonly accounts: readonly Account[];
  readonly path: ReadonlySet<number>;
  readonly started: number;
  readonly deadline: number;
  readonly stats = { modelCalls: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0, unpriced: 0 };
  readonly toolsRequested = new Counter();
  readonly toolsExecuted = new Counter();
  readonly pendingTools = new Counter();
  /** Tool calls the model requested beyond maxToolCalls (never counted as used, never run). */
  toolCallsRefused = 0;
  readonly progress = new ProgressWatch();
  readonly depthRefused: string | null;
  lastRequest: string | null = null;
  requestStreak = 0;
  lastExec: string | null = null;
  execStreak = 0;
  stopState: StopState | null = null;
  outcome: RunOutcome | null = null;
  closed = false;
  turns = 0;
  charsPerToken = 4.0;
  estimateInFlight = false;
  /** The last request whose input count was reported: digest of all but its messages, theirs, and the count. */
  lastPrompt: { head: string; digests: string[]; tokens: number } | null = null;
  /** (root) Admitted model calls not settled yet, settlements so far, and calls waiting for one. */
  inFlight = 0;
  settledCount = 0;
  readonly roomWaiters = new Set<() => void>();
  completion: [boolean, unknown] | null = null;
  /** Model calls that went through a budgeted model, in this tree (at the root). */
  budgetedCalls = 0;
  traceId: string | null = null;
  spanId: string | null = null;
  /** The run's span (`invoke_agent {name}`): the parent of its calls' spans. */
  span: Span | null = null;
  /** Calls in flight (streams) to settle with the best estimate when the run ends before they do. */
  readonly openCalls = new Set<() => void>();
  /** The shared (fleet) scopes of the chain's budgets, each once (the nearest run's definition). */
  scopes: readonly SharedScope[] = [];
  /** Scopes added to a started run (a run tree across processes: propagation). */
  extraScopes: readonly SharedScope[] = [];
  /** (root) Approvals, denials and the pending call of the tree (see approval.ts). */
  approval: ApprovalState | null = null;
  /** A person declined to raise the limit the run paused at: nothing more is sent. */
  limitDeclined = false;
  /** What the code keeps for a resume (`run.checkpoint`). */
  savedState: unknown = null;
  /** (root) Settles and releases in the shared ledger not answered yet: the run awaits them when it ends. */
  readonly sharedPending = new Set<Promise<void>>();
  /** (root) Reservations a shared ledger let through without its cap (fail "open" while unreachable). */
  unenforced = 0;
  /** (`wrapUp: "model"`) The slice held back for the wrap-up call, and what the model wrote. */
  holdback: Amounts | null = null;
  modelWrapUp: string | null = null;
  /** Makes the wrap-up call through the model of the run's last budgeted call (set by the adapter). */
  wrapUpCall: ((prompt: string, maxOutputTokens: number) => Promise<string | null>) | null = null;
  /** The wrap-up the run span records (the template when the model wrote the outcome's). */
  recordedWrapUp: string | null = null;
  /** The wrap-up a refused call answered with, and the state it described (see run.ts close()). */
  refused: { reason: StopReason; key: string; text: string } | null = null;

  /** `offset`: seconds of run time already spent (a resumed run goes on counting its time). */
  constructor(readonly name: string, readonly budget: Budget, readonly parent: RunNode | null, offset = 0) {
    this.started = now() - offset;
    this.root = parent !== null ? parent.root : this;
    this.depth = parent !== null ? parent.depth + 1 : 1;
    this.account = new Account(budget.limits(), name);
    this.chain = [this, ...(parent !== null ? parent.chain : [])];
    this.accounts = this.chain.map((n) => n.account);
    this.path = new Set(this.chain.map((n) => n.id));
    let deadline = Infinity;
    for (const n of this.chain) {
      if (n.budget.maxSeconds !== null) deadline = Math.min(deadline, n.started + n.budget.maxSeconds);
    }
    this.deadline = deadline;
    this.depthRefused = this.depthExceeded();
    this.addScopes([]);
  }

  /** Draw from more shared scopes from now on (the chain's own scopes first, each name once). */
  addScopes(extra: readonly SharedScope[]): void {
    this.extraScopes = [...this.extraScopes, ...extra];
    const scopes = new Map<string, SharedScope>();
    for (const n of this.chain) {
      for (const scope of [n.budget.scope, ...n.extraScopes]) {
        if (scope !== null && !scopes.has(scope.name)) scopes.set(scope.name, scope);
      }
    }
    this.scopes = [...scopes.values()];
  }

  /** The tree's approval state, made on first use. */
  approvalState(): ApprovalState {
    const root = this.root;
    if (root.approval === null) root.approval = new ApprovalState();
    return root.approval;
  }

  private depthExceeded(): string | null {
    for (const anc of this.chain.slice(1)) {
      const limit = anc.budget.maxDepth;
      if (limit !== null && this.depth - anc.depth + 1 > limit) {
        return `max_depth ${limit} of run '${anc.name}' allows no run at depth ${this.depth - anc.depth + 1}`;
      }
    }
    return null;
  }

  elapsed(): number {
    return now() - this.started;
  }

  timeLeft(): number {
    return this.deadline - now();
  }

  /** used / limit per limited dimension of this run, seconds included. */
  utilization(): Record<string, number> {
    const util = this.account.utilization();
    if (this.budget.maxSeconds !== null) util.seconds = this.elapsed() / this.budget.maxSeconds;
    return util;
  }

  utilizationMax(): number {
    return Math.max(0, ...Object.values(this.utilization()));
  }

  /** The limits recorded on the run span (otel_budget.limit.<dim>). */
  spanLimits(): Record<string, number> {
    const out = { ...this.account.limits };
    if (this.budget.maxSeconds !== null) out.seconds = this.budget.maxSeconds;
    return out;
  }

  /** The dimensions limited anywhere in the chain. */
  limited(): Set<string> {
    const out = new Set<string>();
    for (const acc of this.accounts) for (const dim of Object.keys(acc.limits)) out.add(dim);
    for (const scope of this.scopes) for (const dim of Object.keys(scope.limits())) out.add(dim);
    return out;
  }

  autoMaxTokens(): boolean {
    return this.chain.every((n) => n.budget.autoMaxTokens);
  }

  /** How many identical calls of `name` in a row stop the run: its poll allowance, else maxRepeats. */
  repeatLimit(name: string): number | null {
    return this.budget.polls[name] ?? this.budget.maxRepeats;
  }

  stallLimit(name: string): number | null {
    return this.budget.polls[name] ?? this.budget.maxStalls;
  }

  /** How a stop's detail names the allowance it met: `polls['wait_for_ci']=20`, else `max_repeats=3`. */
  allowance(tools: string[], field: string, cap: number): string {
    const poll = tools.find((t) => this.budget.polls[t] === cap);
    return poll !== undefined ? `polls[${pyStrRepr(poll)}]=${cap}` : `${field}=${cap}`;
  }

  // --- stops -----------------------------------------------------------------------------------------

  /** Record that the run stops (the first stop wins) and return the BudgetExceeded to throw. */
  stop(reason: StopReason, limit: RunOutcome["limit"], detail: string, by: RunNode | null = null, pausable = true,
  ): BudgetExceeded {
    // under onLimit "pause", a stop at one of the owner's own limits is a pause for a person's decision
    if (pausable && this.stopState === null) [reason, detail] = pauseAtLimit(this, reason, limit, detail, by ?? this);
    if (this.stopState === null) this.stopState = [reason, limit, detail];
    if (by !== null && by !== this) {
      for (const node of this.chain.slice(1)) {
        if (node.stopState === null) node.stopState = [reason, limit, `in run '${this.name}': ${detail}`];
        if (node === by) break;
      }
    }
    const exc = new BudgetExceeded(reason, detail, limit, this.snapshot(reason, limit, detail));
    exc.runId = this.id;
    exc.runPath = this.path;
    return exc;
  }

  /** The nearest run of the chain whose own account is used up on `dim`. */
  exhausted(dim: string): RunNode {
    const floor = EXHAUSTED_AT[dim] ?? 0;
    return this.chain.find((n) => n.account.headroom(dim) <= floor) ?? this;
  }

  refusalError(refusal: Refusal, what: string, shared = false): BudgetExceeded {
    const named = shared ? this.chain.filter((n) => [n.budget.scope, ...n.extraScopes]
      .some((s) => s?.name === refusal.scope)) : [];
    const by = shared ? named[named.length - 1] ?? this : this.chain.find((n) => n.account === refusal.account) ?? this;
    if (!(refusal.dim in DIM_REASON) && refusal.message) {
      return this.stop(StopReason.ERROR, null, `${what} was not sent: ${refusal.message}.`, by);
    }
    const [reason, field] = DIM_REASON[refusal.dim] ?? [StopReason.ERROR, null];
    const where = shared ? ` of the shared budget '${refusal.scope}'`
      : refusal.scope && refusal.scope !== this.name ? ` of run '${refusal.scope}'` : "";
    const detail = `${what} was not sent: it would exceed ${field}${where} (${refusal.describe()}).`;
    return this.stop(reason, field as LimitName, detail, by, !shared);
  }

  /**
   * Throw BudgetExceeded for an ended run, depth, time and pending stops (repeat, stalls, tool calls). `counted`:
   * a tool execution whose request was counted within maxToolCalls, which a tool-call stop does not refuse.
   */
  checkGates(what: string, counted = false): void {
    const ended = this.chain.find((n) => n.closed);
    if (ended !== undefined) {
      const detail = `${what} was not sent: the run '${ended.name}' it belongs to has already ended (the work was `
        + "started in the run and outlived it); await such work before the run ends, or start it outside the run.";
      if (ended === this) {
        const exc = new BudgetExceeded(StopReason.CANCELLED, detail, null, this.outcome as RunOutcome);
        exc.runPath = new Set();
        throw exc;
      }
      throw this.stop(StopReason.CANCELLED, null, detail);
    }
    if (this.depthRefused !== null) {
      throw this.stop(StopReason.DEPTH, "max_depth", `${what} was not sent: ${this.depthRefused}.`);
    }
    if (this.deadline !== Infinity && now() >= this.deadline) {
      const timed = this.chain.filter((n) => n.budget.maxSeconds !== null);
      const owner = timed.reduce((a, b) => (b.started + (b.budget.maxSeconds ?? 0) < a.started
        + (a.budget.maxSeconds ?? 0) ? b : a), timed[0] ?? this);
      throw this.stop(StopReason.TIME, "max_seconds", `${what} was not sent: the run's time is up.`, owner);
    }
    if (this.stopState !== null && (GATED.has(this.stopState[0]) || this.limitDeclined)) {
      const [reason, limit, detail] = this.stopState;
      if (counted && reason === StopReason.TOOL_CALLS && !this.limitDeclined) return;
      throw this.stop(reason, limit, detail);
    }
  }

  /** Whether one more minimal model call fits; records the stop when it does not. */
  allows(): boolean {
    if (this.stopState !== null) return false;
    try {
      this.checkGates("the next model call");
    } catch (exc) {
      if (exc instanceof BudgetExceeded) return false;
      throw exc;
    }
    for (const dim of ["steps", "input_tokens", "output_tokens", "total_tokens", "usd"]) {
      if (headroom(this.accounts, dim) <= (dim !== "steps" ? 0 : 0.5)) {
        const [reason, field] = DIM_REASON[dim];
        this.stop(reason, field, `the run has no ${dim} left (${field}).`, this.exhausted(dim));
        return false;
      }
    }
    return true;
  }

  // --- outcome ----------------------------------------------------------------------------------------

  usage(): Usage {
    const used = this.account.used;
    const st = this.stats;
    return {
      modelCalls: st.modelCalls,
      toolCalls: Math.trunc(used.tool_calls),
      inputTokens: Math.trunc(used.input_tokens),
      outputTokens: Math.trunc(used.output_tokens),
      cacheReadTokens: st.cacheRead,
      cacheWriteTokens: st.cacheWrite,
      reasoningTokens: st.reasoning,
      costUsd: pyRound(used.usd, 10),
      seconds: pyRound(this.elapsed(), 6),
      unpricedCalls: st.unpriced,
    };
  }

  snapshot(reason: StopReason, limit: RunOutcome["limit"], detail: string): RunOutcome {
    return {
      runName: this.name, stopReason: reason, limit, usage: this.usage(), wrapUp: "", traceId: this.traceId, detail,
      completed: reason === StopReason.DONE,
    };
  }
}

/** Python's repr() of a str, for the few messages that quote a name the way Python does ('name'). */
export function pyStrRepr(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  const body = text.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/\r/g, "\\r").replace(/\t/g, "\\t");
  return quote + (quote === "'" ? body.replace(/'/g, "\\'") : body) + quote;
}

export { isLimitName };
