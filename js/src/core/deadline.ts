/**
 * The run-wide abort signal (`run.signal`): aborted when the run's time is up (the tightest `maxSeconds` of its
 * chain). The SDK's retry waits happen outside the model middleware, and only the `abortSignal` given to
 * `generateText` / `streamText` / an agent cuts them; passing `run.signal` there ends a run whose deadline passes
 * while the SDK waits to retry a failed call at the deadline (`time`), and the retry is never sent.
 */
import { StopReason } from "../model/budget.js";
import type { BudgetExceeded } from "../model/outcome.js";
import type { RunNode } from "./node.js";

interface Deadline { controller: AbortController; timer: ReturnType<typeof setTimeout> | null }

/** Created the first time a run's signal is asked for: no timer for runs that never use it. */
const deadlines = new WeakMap<RunNode, Deadline>();
/** The last model call of a run failed with an error the SDK retries (what failed), or null. */
const failedAttempts = new WeakMap<RunNode, string>();

/** The run's abort signal (never aborted when no run of the chain has a time limit). */
export function runSignal(node: RunNode): AbortSignal {
  let entry = deadlines.get(node);
  if (entry === undefined) {
    const controller = new AbortController();
    entry = { controller, timer: null };
    deadlines.set(node, entry);
    if (node.deadline !== Infinity && !node.closed) {
      const expire = (): void => controller.abort(new DOMException("the run's time (maxSeconds) is up",
        "TimeoutError"));
      const left = node.timeLeft();
      if (left <= 0) {
        expire();
      } else {
        entry.timer = setTimeout(expire, left * 1000);
        entry.timer.unref?.();
      }
    }
  }
  return entry.controller.signal;
}

/** The run ended: its signal no longer fires. */
export function releaseSignal(node: RunNode): void {
  const entry = deadlines.get(node);
  if (entry?.timer != null) clearTimeout(entry.timer);
}

/**
 * A model call of the run failed (`error`) or was answered (null). A failure the SDK retries is remembered, so a
 * deadline that passes before the next attempt is described as a cut retry wait.
 */
export function noteAttempt(node: RunNode, error: unknown): void {
  const e = error as { isRetryable?: unknown; statusCode?: unknown } | null;
  if (e !== null && typeof e === "object" && e.isRetryable === true) {
    failedAttempts.set(node, typeof e.statusCode === "number" ? `HTTP ${e.statusCode}` : "a retryable error");
  } else {
    failedAttempts.delete(node);
  }
}

function abortLike(error: unknown): boolean {
  const name = (error as { name?: unknown } | null)?.name;
  return name === "AbortError" || name === "TimeoutError" || name === "ResponseAborted";
}

/**
 * The run's function failed with `error`: when that is the run's own signal aborting at the deadline, the time
 * stop to end the run with (graceful, `time`); otherwise null.
 */
export function deadlineStop(node: RunNode, error: unknown): BudgetExceeded | null {
  const entry = deadlines.get(node);
  if (entry === undefined || !entry.controller.signal.aborted || !abortLike(error)) return null;
  const failed = failedAttempts.get(node);
  const detail = failed !== undefined
    ? `the call failed (${failed}) and the run's time ran out while the SDK waited to retry it; the retry was not `
      + "sent (max_seconds)."
    : "the run's time ran out and run.signal aborted the work in progress (max_seconds).";
  // the run whose maxSeconds set the deadline records the stop too (an ancestor's limit, as checkGates does)
  const timed = node.chain.filter((n) => n.budget.maxSeconds !== null);
  const end = (n: RunNode): number => n.started + (n.budget.maxSeconds ?? Infinity);
  const owner = timed.reduce((a, b) => (end(b) < end(a) ? b : a), timed[0] ?? node);
  return node.stop(StopReason.TIME, "max_seconds", detail, owner);
}
