/** How a run ended (RunOutcome) and the errors a refused call carries (model/outcome.py). */
import type { LimitName, StopReason, Usage } from "./budget.js";
import type { PausedRun } from "./paused.js";

/** How a run ended: the reason, the limit that stopped it, what it used, and an honest wrap-up. */
export interface RunOutcome {
  runName: string;
  stopReason: StopReason;
  /** The limit that stopped the run as the contract names it (`max_usd`, `max_repeats`), or null. */
  limit: LimitName | "max_repeats" | "max_stalls" | "max_depth" | null;
  usage: Usage;
  /** The wrap-up text: what was done, what is missing, which limit stopped the run. */
  wrapUp: string;
  traceId: string | null;
  /** One sentence on the stop: the limit, the value it would have reached, what was refused. */
  detail: string;
  /** Whether the run ended `done`. */
  completed: boolean;
  /** For `awaiting_approval`: the paused run to give to `resume()` (store it with `paused.json()`). */
  paused?: PausedRun | null;
}

/** A model or tool call refused before it was sent: `run()` ends its run gracefully with this outcome. */
export class BudgetExceeded extends Error {
  readonly reason: StopReason;
  readonly limit: RunOutcome["limit"];
  readonly outcome: RunOutcome;
  /** Ids of the runs this stop belongs to (the run that refused and its ancestors up to the limit's owner). */
  runPath: ReadonlySet<number> = new Set();
  runId: number | null = null;
  constructor(reason: StopReason, message: string, limit: RunOutcome["limit"], outcome: RunOutcome) {
    super(message);
    this.name = "BudgetExceeded";
    this.reason = reason;
    this.limit = limit;
    this.outcome = outcome;
  }
}

/** A model has no known price while the run has a money cap; the call is not sent. */
export class UnknownPriceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UnknownPriceError";
  }
}

/**
 * What telemetry, a stop detail or a wrap-up says of an exception: `APICallError (HTTP 429)`, its type and HTTP
 * status, never its message, which may carry what a user or a model wrote (model/_text.py `error_label`).
 */
export function errorLabel(exc: unknown): string {
  const name = exc instanceof Error && exc.name ? exc.name : "Error";
  const e = exc as { statusCode?: unknown; status?: unknown } | null | undefined;
  const status = typeof e?.statusCode === "number" ? e.statusCode : typeof e?.status === "number" ? e.status : null;
  return status !== null ? `${name} (HTTP ${status})` : name;
}
