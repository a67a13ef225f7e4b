/**
 * `run(name, { budget }, fn)`: a run of the tree on AsyncLocalStorage (core/run.py). Nested runs are children
 * that draw from their ancestors' budgets too; a refused call ends the run gracefully with its outcome.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { type Context, context } from "@opentelemetry/api";
import { Budget, type BudgetOptions, StopReason, type Usage } from "../model/budget.js";
import { BudgetExceeded, type RunOutcome, errorLabel } from "../model/outcome.js";
import { endRun, spanContext, startRun } from "../telemetry/recorder.js";
import { deadlineStop, releaseSignal, runSignal } from "./deadline.js";
import { RunNode } from "./node.js";
import { seal } from "./trust.js";
import { sharedSettled } from "./shared.js";
import { templateWrapUp } from "./wrapup.js";
import { closingWrapUp, holdBack, releaseHoldback } from "./wrapup_model.js";

const storage = new AsyncLocalStorage<RunNode>();
const nodes = new WeakMap<object, RunNode>();

/** The node of a run handle (undefined for anything else). @internal */
export function nodeOf(run: Run): RunNode | undefined {
  return nodes.get(run);
}

/** The run the calling code is in (undefined outside any run). */
export function currentNode(): RunNode | undefined {
  return storage.getStore();
}

/** What `run()` hands to its function: the run's live state. */
export interface Run {
  readonly name: string;
  readonly budget: Budget;
  readonly depth: number;
  /** What the run tree below this run used so far. */
  usage(): Usage;
  /** Whether one more minimal model call fits (records the stop when it does not). */
  allows(): boolean;
  /** Confirm the work is done (for `confirmDone`), with optional evidence. */
  complete(evidence?: unknown): void;
  /**
   * Aborted when the run's time (`maxSeconds`, the tightest of the chain) is up. Pass it as `abortSignal` to
   * `generateText`, `streamText` or an agent: the SDK's retry waits are cut at the deadline too (the run ends
   * `time`, and no retry is sent past it).
   */
  readonly signal: AbortSignal;
  /** Keep `state` (JSON data, e.g. the messages so far) for a resume: a pause carries it as `paused.state`. */
  checkpoint(state: unknown): void;
}

/** How a run starts besides its name and budget (a resumed or attached run). @internal */
export interface RunStart {
  /** Seconds of run time already spent. */
  offset?: number;
  /** Called with the new node before its span starts; may return the span's parent context (a root run). */
  prepare?: (node: RunNode) => Context | undefined;
  /** Fields added to the handle given to `fn`. */
  extras?: Record<string, unknown>;
}

export interface RunOptions {
  /** The run's limits: a Budget or its options. A nested run without one is bounded by its ancestors only. */
  budget?: Budget | BudgetOptions;
}

/** The function's return value (undefined when a limit stopped the run) and how the run ended. */
export interface RunResult<T> {
  result: T | undefined;
  outcome: RunOutcome;
}


/**
 * Run `fn` as the run `name` with `budget`. A call a limit refuses ends the run gracefully: the model answers
 * with the wrap-up (budgeted models), and `outcome.stopReason` says why. Any other error is rethrown after the
 * run is closed, with the outcome attached as `error.outcome`.
 */
export async function run<T>(name: string, options: RunOptions | Budget | undefined,
  fn: (run: Run) => Promise<T> | T): Promise<RunResult<T>> {
  if (typeof name !== "string" || name === "") {
    throw new TypeError(`run(name, ...): give the run a non-empty name, e.g. run("invoice-agent", { budget }, fn)`);
  }
  if (typeof fn !== "function") {
    throw new TypeError(`run("${name}", options, fn): fn must be a function, e.g. async (run) => generateText(...)`);
  }
  const given = options instanceof Budget ? options : options?.budget;
  const budget = given instanceof Budget ? given : new Budget(given ?? {});
  return runTree(name, budget, fn, {});
}

/** @internal `run()` with a start of its own (resume, attachRun). */
export async function runTree<T, R extends Run>(name: string, budget: Budget, fn: (run: R) => Promise<T> | T,
  start: RunStart): Promise<RunResult<T>> {
  const parent = storage.getStore() ?? null;
  const node = new RunNode(name, budget, parent, start.offset ?? 0);
  const parentContext = start.prepare?.(node);
  const span = parentContext !== undefined && parent === null
    ? context.with(parentContext, () => startRun(node)) : startRun(node);
  holdBack(node); // wrapUp "model": the slice its wrap-up call draws from
  const handle = {
    name, budget, depth: node.depth,
    usage: () => node.usage(),
    allows: () => node.allows(),
    complete: (evidence?: unknown) => {
      node.completion = [true, evidence ?? null];
    },
    get signal() {
      return runSignal(node);
    },
    checkpoint: (state: unknown) => {
      node.savedState = state;
    },
    ...start.extras,
  } as unknown as R;
  nodes.set(handle, node);
  let result: T | undefined;
  let error: unknown;
  let failed = false;
  try {
    result = await storage.run(node, () => context.with(spanContext(span), () => fn(handle)));
  } catch (exc) {
    failed = true;
    error = deadlineStop(node, exc) ?? exc; // run.signal cut the work at the deadline: a time stop
  }
  releaseSignal(node);
  const ours = failed && error instanceof BudgetExceeded && error.runPath.has(node.id);
  for (const abandon of [...node.openCalls]) abandon(); // a stream left open still counts, before the wrap-up
  await closingWrapUp(node, reasonFor(node, error, failed, ours));
  const outcome = close(node, failed ? error : undefined, failed, ours);
  if (outcome.stopReason === StopReason.AWAITING_APPROVAL) {
    outcome.paused = await seal(node.approvalState().pausedRun(node));
  }
  await sharedSettled(node);
  endRun(node, span);
  warnUnbudgeted(node);
  if (failed && !ours) {
    if (error !== null && typeof error === "object") {
      try {
        (error as { outcome?: RunOutcome }).outcome = outcome;
      } catch {
        // a frozen error keeps its shape
      }
    }
    throw error;
  }
  return { result, outcome };
}

function reasonFor(node: RunNode, exc: unknown, failed: boolean, ours: boolean): StopReason {
  if (ours) return (exc as BudgetExceeded).reason;
  if (failed) {
    const name = (exc as Error | undefined)?.name;
    if (name === "AbortError") return StopReason.CANCELLED;
    return StopReason.ERROR;
  }
  if (node.stopState !== null) return node.stopState[0];
  if (node.budget.confirmDone && node.completion === null) {
    node.stopState = [StopReason.INCOMPLETE, null, "the run ended without run.complete() (confirm_done=True): the "
      + "model stopped, but the code did not confirm the work is done."];
    return StopReason.INCOMPLETE;
  }
  return StopReason.DONE;
}

function close(node: RunNode, exc: unknown, failed: boolean, ours: boolean): RunOutcome {
  for (const abandon of [...node.openCalls]) abandon();
  const reason = reasonFor(node, exc, failed, ours);
  node.closed = true;
  releaseHoldback(node);
  let limit: RunOutcome["limit"] = null;
  let detail = "";
  if (node.stopState !== null && node.stopState[0] === reason) {
    [, limit, detail] = node.stopState;
  } else if (exc instanceof BudgetExceeded) {
    limit = exc.limit;
    detail = exc.message;
  } else if (failed && reason === StopReason.ERROR) {
    detail = errorLabel(exc); // the type and HTTP status, never the message (content)
  } else if (reason === StopReason.CANCELLED) {
    detail = "the run was cancelled.";
  }
  const outcome = node.snapshot(reason, limit, detail);
  const refused = node.refused;
  // the text a refused call answered with is the run's wrap-up when nothing was used since
  outcome.wrapUp = refused !== null && refused.reason === reason && refused.key === usageKey(outcome.usage)
    ? refused.text : templateWrapUp(node, outcome, node.modelWrapUp);
  // a model-written wrap-up carries content: the run span records the template (counts, limits, tool names)
  node.recordedWrapUp = node.modelWrapUp !== null ? templateWrapUp(node, outcome) : outcome.wrapUp;
  node.outcome = outcome;
  return outcome;
}

/** Usage without the clock: equal keys, equal state for the wrap-up. */
export function usageKey(u: Usage): string {
  return JSON.stringify({ ...u, seconds: 0 });
}

function warnUnbudgeted(node: RunNode): void {
  if (node.parent !== null || node.budgetedCalls > 0 || node.toolsExecuted.size === 0) return;
  process.emitWarning(`otel-budget: the run '${node.name}' ran tools through budgetedTools or budgetApproval() but `
    + "made no model call through a budgeted model, so its model calls were not braked: wrap the model with "
    + "budgeted(model).",
  { code: "OTEL_BUDGET_UNBUDGETED_MODEL" });
}
