/** Budget and its limits, stop reasons, prices and usage: the data a run is given and counts (model/budget.py). */
import { pyFixed, pyInt, pyRound } from "./format.js";
import { ApprovalPolicy, type ApprovalPolicyOptions, type ApprovalPredicate } from "./policy.js";
import { Num } from "./signatures.js";

/** Why a run ended. `done` is the only reason that means the work is complete. Same strings as Python. */
export const StopReason = {
  DONE: "done",
  STEPS: "steps",
  TOOL_CALLS: "tool_calls",
  TIME: "time",
  TOKENS: "tokens",
  COST: "cost",
  REPEAT: "repeat",
  DEPTH: "depth",
  ERROR: "error",
  CANCELLED: "cancelled",
  AWAITING_APPROVAL: "awaiting_approval",
  DENIED: "denied",
  STALLED: "stalled",
  INCOMPLETE: "incomplete",
} as const;
export type StopReason = (typeof StopReason)[keyof typeof StopReason];

/** A limit as the contract names it (the Python Budget field), e.g. `max_usd`: in outcomes, spans and wrap-ups. */
export type LimitName =
  | "max_steps" | "max_tool_calls" | "max_seconds" | "max_input_tokens" | "max_output_tokens" | "max_total_tokens"
  | "max_usd";

/** Budget limit -> [ledger dimension, stop reason, unit for messages, TypeScript field]. */
export const LIMITS: Record<LimitName, readonly [string, StopReason, string, keyof BudgetLimits]> = {
  max_steps: ["steps", StopReason.STEPS, "model calls", "maxSteps"],
  max_tool_calls: ["tool_calls", StopReason.TOOL_CALLS, "tool calls", "maxToolCalls"],
  max_seconds: ["seconds", StopReason.TIME, "seconds", "maxSeconds"],
  max_input_tokens: ["input_tokens", StopReason.TOKENS, "input tokens", "maxInputTokens"],
  max_output_tokens: ["output_tokens", StopReason.TOKENS, "output tokens", "maxOutputTokens"],
  max_total_tokens: ["total_tokens", StopReason.TOKENS, "tokens", "maxTotalTokens"],
  max_usd: ["usd", StopReason.COST, "USD", "maxUsd"],
};

export function isLimitName(value: unknown): value is LimitName {
  return typeof value === "string" && Object.prototype.hasOwnProperty.call(LIMITS, value);
}

interface BudgetLimits {
  maxSteps: number | null;
  maxToolCalls: number | null;
  maxSeconds: number | null;
  maxInputTokens: number | null;
  maxOutputTokens: number | null;
  maxTotalTokens: number | null;
  maxUsd: number | null;
}

/** What `new Budget({...})` takes. Every limit is optional; `null`, `undefined` or `Infinity` mean unlimited. */
export interface BudgetOptions {
  /** Model calls in the run tree (each call, retries included, is one step). */
  maxSteps?: number | null;
  /** Tool calls requested by the model or executed through `budgetedTools`. */
  maxToolCalls?: number | null;
  /** Wall-clock seconds since the run started. */
  maxSeconds?: number | null;
  /** Input tokens, cached tokens included, summed over the run tree. */
  maxInputTokens?: number | null;
  /** Output tokens, reasoning tokens included, summed over the run tree. */
  maxOutputTokens?: number | null;
  /** Input plus output tokens, summed over the run tree. */
  maxTotalTokens?: number | null;
  /** Money in US dollars, priced from the usage the API reports. */
  maxUsd?: number | null;
  /** The same tool with the same canonical arguments this many times in a row stops the run (default 3). */
  maxRepeats?: number | null;
  /** The same tool returning the same result this many times in a row stops the run: `stalled` (default 3). */
  maxStalls?: number | null;
  /** Nesting depth of runs: the top run has depth 1. */
  maxDepth?: number | null;
  /** Utilization (used / limit) at which a run counts as near its cap (default 0.8; 0 < near <= 1). */
  near?: number;
  /** Tools that legitimately repeat (polling): tool name -> identical calls in a row allowed. */
  polls?: Record<string, number> | null;
  /** A run ends `done` only after `run.complete()`; otherwise `incomplete`. */
  confirmDone?: boolean;
  /** Reserve one input token per character of the request, so money and token caps are never exceeded. */
  strict?: boolean;
  /** Set the request's output limit to what the budget leaves when the caller set none (default true). */
  autoMaxTokens?: boolean;
  /** "template" (default; no call) or "model": one short tool-less call, from a slice held back at the start. */
  wrapUp?: "template" | "model";
  /** A budget shared by many runs (a fleet), held in the ledger given to `instrument({ ledger })`. */
  scope?: Scope | ScopeOptions | null;
  /** "pause": a call refused by one of this run's limits pauses the run (`awaiting_approval`) for a person. */
  onLimit?: "stop" | "pause";
  /** Tool calls that need a person's yes before they run: tool names, a predicate or an ApprovalPolicy. */
  approve?: string | readonly string[] | ApprovalPredicate | ApprovalPolicy | ApprovalPolicyOptions | null;
}

/** What `new Scope({...})` takes (Python's `Scope`, camelCase). */
export interface ScopeOptions {
  /** The scope's key in the store, e.g. "nightly-invoices". */
  name: string;
  maxSteps?: number | null;
  maxToolCalls?: number | null;
  maxInputTokens?: number | null;
  maxOutputTokens?: number | null;
  maxTotalTokens?: number | null;
  maxUsd?: number | null;
  /** Counters start anew every `windowSeconds` (aligned to the epoch), e.g. 86400 for "per day". */
  windowSeconds?: number | null;
}

const SCOPE_INTS = ["maxSteps", "maxToolCalls", "maxInputTokens", "maxOutputTokens", "maxTotalTokens"] as const;
const SCOPE_FIELDS = new Set<string>(["name", ...SCOPE_INTS, "maxUsd", "windowSeconds"]);

/**
 * A named budget shared by many runs (Python's `Scope`): every run whose Budget names it draws from it in
 * addition to its own limits, in this process and, with `RedisLedger`, in every process (Python's included)
 * that uses the same Redis.
 */
export class Scope {
  readonly name: string;
  readonly maxSteps: number | null;
  readonly maxToolCalls: number | null;
  readonly maxInputTokens: number | null;
  readonly maxOutputTokens: number | null;
  readonly maxTotalTokens: number | null;
  readonly maxUsd: number | null;
  readonly windowSeconds: number | null;

  constructor(options: ScopeOptions) {
    if (options === null || typeof options !== "object" || Array.isArray(options)) {
      throw new BudgetValidationError("scope", `Scope(${show(options)}): give an object with a name and limits, `
        + `e.g. new Scope({ name: "nightly-invoices", maxUsd: 50 })`);
    }
    const given = options as unknown as Record<string, unknown>;
    for (const key of Object.keys(given)) {
      if (!SCOPE_FIELDS.has(key)) {
        throw new BudgetValidationError(key, `Scope has no field ${key}; the fields are ${[...SCOPE_FIELDS].join(", ")}`);
      }
    }
    if (typeof given.name !== "string" || given.name === "") {
      throw new BudgetValidationError("name", `Scope name=${show(given.name)}: give the scope's key in the store, `
        + `a non-empty string, e.g. "nightly-invoices"`);
    }
    this.name = given.name;
    const ints: Record<string, number | null> = {};
    for (const field of SCOPE_INTS) ints[field] = limitValue(field, given[field], true, "Scope");
    this.maxSteps = ints.maxSteps;
    this.maxToolCalls = ints.maxToolCalls;
    this.maxInputTokens = ints.maxInputTokens;
    this.maxOutputTokens = ints.maxOutputTokens;
    this.maxTotalTokens = ints.maxTotalTokens;
    this.maxUsd = limitValue("maxUsd", given.maxUsd, false, "Scope");
    this.windowSeconds = limitValue("windowSeconds", given.windowSeconds, false, "Scope");
    Object.freeze(this);
  }

  /** The ledger dimensions this scope limits, with their limits. */
  limits(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [, [dim, , , field]] of Object.entries(LIMITS)) {
      const value = dim === "seconds" ? null : this[field as Exclude<keyof BudgetLimits, "maxSeconds">];
      if (value !== null) out[dim] = value;
    }
    return out;
  }
}

const INT_FIELDS = ["maxSteps", "maxToolCalls", "maxInputTokens", "maxOutputTokens", "maxTotalTokens", "maxRepeats",
  "maxStalls", "maxDepth"] as const;
const FLOAT_FIELDS = ["maxSeconds", "maxUsd"] as const;
const BOOL_FIELDS = ["confirmDone", "strict", "autoMaxTokens"] as const;
const KNOWN = new Set<string>([...INT_FIELDS, ...FLOAT_FIELDS, ...BOOL_FIELDS, "near", "polls", "scope", "onLimit",
  "approve", "wrapUp"]);

/** The Python spelling of a TypeScript field, as the contract (and Python's errors) name it: maxUsd -> max_usd. */
export function snakeCase(field: string): string {
  return field.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** Invalid Budget or price input: the message names the field and what to give instead. */
export class BudgetValidationError extends TypeError {
  readonly field: string;
  constructor(field: string, message: string) {
    super(message);
    this.name = "BudgetValidationError";
    this.field = field;
  }
}

export function show(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number" || typeof value === "boolean" || value === null || value === undefined) {
    return String(value);
  }
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

function limitValue(field: string, value: unknown, integer: boolean, owner = "Budget"): number | null {
  if (value === undefined || value === null) return null;
  if (typeof value === "boolean") {
    throw new BudgetValidationError(field, `${owner} ${field}=${value}: a bool is not a limit; give a positive number, `
      + "or null for unlimited");
  }
  if (typeof value !== "number") {
    throw new BudgetValidationError(field, `${owner} ${field}=${show(value)} is not a number; give a positive `
      + `${integer ? "whole number" : "number"}, or null for unlimited`);
  }
  if (value === Infinity) return null;
  if (Number.isNaN(value) || !Number.isFinite(value)) {
    throw new BudgetValidationError(field, `${owner} ${field}=${value} is not a limit; give a finite positive number, `
      + "or null (or Infinity) for unlimited");
  }
  if (integer && !Number.isInteger(value)) {
    throw new BudgetValidationError(field, `${owner} ${field}=${value} is not a whole number; give a whole number >= 1, `
      + "or null for unlimited");
  }
  if (value <= 0) {
    throw new BudgetValidationError(field, `${owner} ${field}=${value} must be greater than 0; give a positive `
      + `${integer ? "whole number" : "number"}, or null for unlimited`);
  }
  return value;
}

/**
 * The limits of one run tree (Python's `Budget`, camelCase). All limits are checked BEFORE each model or tool
 * call; a call that does not fit is not sent. Invalid values throw a `BudgetValidationError` naming the field.
 */
export class Budget implements BudgetLimits {
  readonly maxSteps: number | null;
  readonly maxToolCalls: number | null;
  readonly maxSeconds: number | null;
  readonly maxInputTokens: number | null;
  readonly maxOutputTokens: number | null;
  readonly maxTotalTokens: number | null;
  readonly maxUsd: number | null;
  readonly maxRepeats: number | null;
  readonly maxStalls: number | null;
  readonly maxDepth: number | null;
  readonly near: number;
  readonly polls: Readonly<Record<string, number>>;
  readonly confirmDone: boolean;
  readonly strict: boolean;
  readonly autoMaxTokens: boolean;
  readonly wrapUp: "template" | "model";
  readonly scope: Scope | null;
  readonly onLimit: "stop" | "pause";
  readonly approve: ApprovalPolicy | null;
  /** The fields given (Python's `model_fields_set`): a resume keeps `onLimit: "pause"` unless it was given. */
  readonly given: ReadonlySet<string>;

  constructor(options: BudgetOptions = {}) {
    if (options === null || typeof options !== "object" || Array.isArray(options)) {
      throw new BudgetValidationError("options", `Budget(${show(options)}): give an object of limits, `
        + "e.g. new Budget({ maxSteps: 25, maxUsd: 0.8 })");
    }
    const given = options as Record<string, unknown>;
    for (const key of Object.keys(given)) {
      if (KNOWN.has(key)) continue;
      throw new BudgetValidationError(key, `Budget has no field ${key}; the fields are ${[...KNOWN].join(", ")}`);
    }
    const ints: Record<string, number | null> = {};
    for (const field of INT_FIELDS) ints[field] = limitValue(field, given[field], true);
    this.maxSteps = ints.maxSteps;
    this.maxToolCalls = ints.maxToolCalls;
    this.maxInputTokens = ints.maxInputTokens;
    this.maxOutputTokens = ints.maxOutputTokens;
    this.maxTotalTokens = ints.maxTotalTokens;
    this.maxRepeats = given.maxRepeats === undefined ? 3 : ints.maxRepeats;
    this.maxStalls = given.maxStalls === undefined ? 3 : ints.maxStalls;
    this.maxDepth = ints.maxDepth;
    this.maxSeconds = limitValue("maxSeconds", given.maxSeconds, false);
    this.maxUsd = limitValue("maxUsd", given.maxUsd, false);
    this.near = checkNear(given.near);
    this.polls = Object.freeze(checkPolls(given.polls));
    for (const field of BOOL_FIELDS) {
      const value = given[field];
      if (value !== undefined && typeof value !== "boolean") {
        throw new BudgetValidationError(field, `Budget ${field}=${show(value)}: give true or false`);
      }
    }
    this.confirmDone = given.confirmDone === true;
    this.strict = given.strict === true;
    this.autoMaxTokens = given.autoMaxTokens !== false;
    const scope = given.scope;
    this.scope = scope === undefined || scope === null ? null
      : scope instanceof Scope ? scope : new Scope(scope as ScopeOptions);
    if (given.onLimit !== undefined && given.onLimit !== "stop" && given.onLimit !== "pause") {
      throw new BudgetValidationError("onLimit", `Budget onLimit=${show(given.onLimit)}: give "stop" (the default) `
        + `or "pause" (a call refused by a limit pauses the run for a person's decision)`);
    }
    this.onLimit = given.onLimit === "pause" ? "pause" : "stop";
    if (given.wrapUp !== undefined && given.wrapUp !== "template" && given.wrapUp !== "model") {
      throw new BudgetValidationError("wrapUp", `Budget wrapUp=${show(given.wrapUp)}: give "template" (the default, `
        + `no call) or "model" (one short tool-less call from a slice held back at the start)`);
    }
    this.wrapUp = given.wrapUp === "model" ? "model" : "template";
    try {
      this.approve = ApprovalPolicy.coerce(given.approve);
    } catch (exc) {
      throw new BudgetValidationError("approve", `Budget ${(exc as Error).message}`);
    }
    this.given = new Set(Object.keys(given).filter((k) => given[k] !== undefined));
    const total = this.maxTotalTokens;
    if (total !== null) {
      for (const field of ["maxInputTokens", "maxOutputTokens"] as const) {
        const part = this[field];
        if (part !== null && part > total) {
          throw new BudgetValidationError(field, `Budget ${field}=${part} is larger than maxTotalTokens=${total}; `
            + "lower it or raise maxTotalTokens");
        }
      }
    }
    Object.freeze(this);
  }

  /** The ledger dimensions this budget limits, with their limits (time is the clock's, not the ledger's). */
  limits(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [, [dim, , , field]] of Object.entries(LIMITS)) {
      const value = this[field];
      if (value !== null && dim !== "seconds") out[dim] = value;
    }
    return out;
  }

  /**
   * The fields that differ from the defaults, as Python names and types them (`model_dump(mode="json",
   * exclude_defaults=True)` without `approve` and `scope`): what a paused run keeps.
   */
  dump(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    for (const field of INT_FIELDS) {
      const value = this[field];
      const dflt = field === "maxRepeats" || field === "maxStalls" ? 3 : null;
      if (value !== dflt) out[snakeCase(field)] = value;
    }
    for (const field of FLOAT_FIELDS) if (this[field] !== null) out[snakeCase(field)] = Num.float(this[field] as number);
    if (Object.keys(this.polls).length > 0) out.polls = { ...this.polls };
    if (this.confirmDone) out.confirm_done = true;
    if (this.onLimit !== "stop") out.on_limit = this.onLimit;
    if (this.near !== 0.8) out.near = Num.float(this.near);
    if (this.wrapUp !== "template") out.wrap_up = this.wrapUp;
    if (!this.autoMaxTokens) out.auto_max_tokens = false;
    if (this.strict) out.strict = true;
    return out;
  }

  /** The same budget with `options` replaced. */
  with(options: BudgetOptions): Budget {
    const base: Record<string, unknown> = {};
    for (const key of this.given) base[key] = (this as unknown as Record<string, unknown>)[key];
    return new Budget({ ...base, ...options } as BudgetOptions);
  }

  /** The value of a limit by its contract name (`max_usd`). */
  limit(name: LimitName): number | null {
    return this[LIMITS[name][3]];
  }
}

function checkNear(value: unknown): number {
  if (value === undefined) return 0.8;
  if (typeof value !== "number" || Number.isNaN(value) || value <= 0 || value > 1) {
    throw new BudgetValidationError("near", `Budget near=${show(value)}: give the utilization at which a run counts `
      + "as near its cap, a number with 0 < near <= 1 (default 0.8)");
  }
  return value;
}

function checkPolls(value: unknown): Record<string, number> {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) {
    throw new BudgetValidationError("polls", `Budget polls=${show(value)}: give an object of tool name -> how many `
      + "identical calls in a row are allowed, e.g. polls: { wait_for_ci: 20 }");
  }
  const out: Record<string, number> = {};
  for (const [tool, limit] of Object.entries(value as Record<string, unknown>)) {
    if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1) {
      throw new BudgetValidationError("polls", `Budget polls[${JSON.stringify(tool)}]=${show(limit)}: give a whole `
        + "number >= 1 of identical calls in a row, e.g. polls: { wait_for_ci: 20 }");
    }
    out[tool] = limit;
  }
  return out;
}

/** What a run tree consumed (Python's Usage, camelCase). */
export interface Usage {
  modelCalls: number;
  toolCalls: number;
  /** Includes cached tokens. */
  inputTokens: number;
  /** Includes reasoning tokens. */
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  reasoningTokens: number;
  costUsd: number;
  seconds: number;
  unpricedCalls: number;
}

/** `1 model call`, `2 model calls`, with thousands separators. */
export function plural(count: number, noun: string): string {
  return `${pyInt(count)} ${noun}${count === 1 ? "" : "s"}`;
}

/** Money with as many decimals as the cap (or the value) needs to show exactly, 2 to 6: $0.80, $0.005. */
export function usd(value: number, cap: number | null = null): string {
  const ref = cap !== null ? cap : value;
  let digits = 2;
  for (; digits < 7; digits++) {
    if (Math.abs(pyRound(ref, digits) - ref) < 1e-12) break;
  }
  if (digits === 7) digits = 6;
  return `$${pyFixed(value, digits, true)}`;
}
