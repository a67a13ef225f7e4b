/**
 * A paused run as data (model/paused.py): the pending call, the tools already run, the quota used; a JSON round
 * trip that Python reads too. The JSON and the signature are Python's byte for byte: the fields are normalized
 * as pydantic does (defaults filled in, float fields written as floats), then signed over their canonical JSON.
 */
import { Budget, BudgetValidationError, type BudgetOptions, type Usage, snakeCase } from "./budget.js";
import { ApprovalPolicy } from "./policy.js";
import { Num, canonicalArguments, canonicalJson, parseJson } from "./signatures.js";
import { InvalidRunState, amount, canonical, count, show, untag } from "./trust.js";

const WHAT = "the paused run";

/** What a paused run waits on: a tool call that needs approval, or a limit (`onLimit: "pause"`). */
export interface PendingCall {
  kind: "tool" | "limit";
  tool: string;
  arguments: unknown;
  callId: string | null;
  operation: string;
  target: string | null;
  /** For kind "limit": the limit reached, e.g. `max_usd`. */
  limit: string | null;
  /** For kind "limit": what the run had used of it. */
  used: number | null;
  /** For kind "limit": the limit's value when the run paused. */
  cap: number | null;
}

/** A tool call that ran before the pause, with its result when that is plain JSON. */
export interface ToolRecord {
  tool: string;
  arguments: unknown;
  result: unknown;
  replayable: boolean;
}

type Doc = Record<string, unknown>;
const USAGE_INTS = ["model_calls", "tool_calls", "input_tokens", "output_tokens", "cache_read_tokens",
  "cache_write_tokens", "reasoning_tokens", "unpriced_calls"];
const USAGE_FLOATS = ["cost_usd", "seconds"];

function obj(value: unknown, field: string): Doc {
  if (value === null || typeof value !== "object" || Array.isArray(value) || value instanceof Num) {
    throw new InvalidRunState(`${WHAT}: ${field}=${show(value)} is not an object`, field);
  }
  return value as Doc;
}

function str(value: unknown, field: string, fallback: string | null, nullable = false): string | null {
  if (value === undefined) return fallback;
  if (value === null && nullable) return null;
  if (typeof value !== "string") {
    throw new InvalidRunState(`${WHAT}: ${field}=${show(value)} is not a string`, field);
  }
  return value;
}

function int(value: unknown, field: string, fallback = 0): number {
  return value === undefined ? fallback : count(value, field, WHAT);
}

function float(value: unknown, field: string, nullable = false): Num | null {
  if (value === undefined || (value === null && nullable)) return nullable ? null : Num.float(0);
  return Num.float(amount(value, field, WHAT));
}

function counter(value: unknown, field: string): Doc {
  const out: Doc = {};
  for (const [k, v] of Object.entries(value === undefined ? {} : obj(value, field))) out[k] = int(v, `${field}.${k}`);
  return out;
}

function strings(value: unknown, field: string): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new InvalidRunState(`${WHAT}: ${field}=${show(value)} is not a list`, field);
  return value.map((v, i) => str(v, `${field}[${i}]`, null) as string);
}

function pending(value: unknown): Doc | null {
  if (value === null || value === undefined) return null;
  const p = obj(value, "pending");
  const kind = p.kind ?? "tool";
  if (kind !== "tool" && kind !== "limit") {
    throw new InvalidRunState(`${WHAT}: pending.kind=${show(kind)} is not "tool" or "limit"`, "pending.kind");
  }
  return { kind, tool: str(p.tool, "pending.tool", ""), arguments: p.arguments ?? null,
    call_id: str(p.call_id, "pending.call_id", null, true), operation: str(p.operation, "pending.operation", ""),
    target: str(p.target, "pending.target", null, true), limit: str(p.limit, "pending.limit", null, true),
    used: float(p.used, "pending.used", true), cap: float(p.cap, "pending.cap", true) };
}

function usage(value: unknown): Doc {
  const u = value === undefined ? {} : obj(value, "usage");
  const out: Doc = {};
  for (const k of USAGE_INTS) out[k] = int(u[k], `usage.${k}`);
  for (const k of USAGE_FLOATS) out[k] = float(u[k], `usage.${k}`);
  return out;
}

/** `budget` as Budget fields (snake_case, as Python keeps them); checked by building the Budget. */
function budget(value: unknown): Doc {
  const b = value === undefined ? {} : obj(value, "budget");
  for (const key of ["approve", "scope"]) {
    if (key in b) {
      throw new InvalidRunState(`${WHAT}: budget.${key} is not kept in a paused run (the policy is \`policy\`); `
        + "remove it", `budget.${key}`);
    }
  }
  budgetOf(b, null);
  return b;
}

/** The Budget of `fields` (snake_case, as a paused run keeps them), with `policy`. */
export function budgetOf(fields: Doc, policy: ApprovalPolicy | null): Budget {
  const options: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(untag(fields) as Doc)) {
    options[key.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())] = value;
  }
  if (policy !== null) options.approve = policy;
  try {
    return new Budget(options as BudgetOptions);
  } catch (exc) {
    if (!(exc instanceof BudgetValidationError)) throw exc;
    const field = `budget.${snakeCase(exc.field)}`;
    throw new InvalidRunState(`${WHAT}: ${field}: ${exc.message}`, field);
  }
}

function policy(value: unknown): Doc | null {
  if (value === null || value === undefined) return null;
  const p = obj(value, "policy");
  for (const key of Object.keys(p)) {
    if (!["tools", "operations", "alternative"].includes(key)) {
      throw new InvalidRunState(`${WHAT}: policy.${key} is not a field of an approval policy`, `policy.${key}`);
    }
  }
  const ops = p.operations ?? [];
  if (!Array.isArray(ops)) throw new InvalidRunState(`${WHAT}: policy.operations is not a list`, "policy.operations");
  return {
    tools: strings(p.tools, "policy.tools"),
    operations: ops.map((pair, i) => {
      if (!Array.isArray(pair) || pair.length !== 2) {
        throw new InvalidRunState(`${WHAT}: policy.operations[${i}] is not [operation, tools]`, `policy.operations`);
      }
      return [str(pair[0], `policy.operations[${i}]`, null), strings(pair[1], `policy.operations[${i}]`)];
    }),
    alternative: str(p.alternative, "policy.alternative", null, true),
  };
}

function record(value: unknown, i: number): Doc {
  const r = obj(value, `completed[${i}]`);
  if (typeof r.tool !== "string") {
    throw new InvalidRunState(`${WHAT}: completed[${i}].tool=${show(r.tool)} is not a string`, `completed[${i}].tool`);
  }
  const replayable = r.replayable ?? true;
  if (typeof replayable !== "boolean") {
    throw new InvalidRunState(`${WHAT}: completed[${i}].replayable is not true or false`, `completed[${i}].replayable`);
  }
  return { tool: r.tool, arguments: r.arguments ?? null, result: r.result ?? null, replayable };
}

/** Every field checked and filled in as pydantic does; throws InvalidRunState naming the first bad field. */
function normalize(raw: unknown): Doc {
  const d = obj(raw, "paused run");
  const runName = d.run_name;
  if (typeof runName !== "string") {
    throw new InvalidRunState(`${WHAT}: run_name=${show(runName)} is not a string`, "run_name");
  }
  const completed = d.completed ?? [];
  if (!Array.isArray(completed)) throw new InvalidRunState(`${WHAT}: completed is not a list`, "completed");
  return {
    version: int(d.version, "version", 1), run_name: runName, run_id: str(d.run_id, "run_id", ""),
    pending: pending(d.pending), usage: usage(d.usage), budget: budget(d.budget), policy: policy(d.policy),
    completed: completed.map(record), state: d.state ?? null,
    tools_requested: counter(d.tools_requested, "tools_requested"),
    tools_executed: counter(d.tools_executed, "tools_executed"),
    pending_tools: counter(d.pending_tools, "pending_tools"), denied: strings(d.denied, "denied"),
    trace_id: str(d.trace_id, "trace_id", null, true), span_id: str(d.span_id, "span_id", null, true),
    paused_at: float(d.paused_at, "paused_at"), detail: str(d.detail, "detail", ""),
    signature: str(d.signature, "signature", null, true),
  };
}

const num = (v: unknown): number => (v instanceof Num ? v.value : Number(v));

/**
 * A run paused for a person's decision (`outcome.paused`): give it to `resume()`, in this process or another,
 * in either language. Store it with `paused.json()` and read it back with `PausedRun.parse(text)`; with a secret
 * (`instrument({ secret })`) it is signed, and `resume` refuses one edited after it was signed.
 */
export class PausedRun {
  readonly version: number;
  readonly runName: string;
  /** Random id of this pause; with a `RedisLedger` its quota, limits and policy are kept there under it. */
  readonly runId: string;
  readonly pending: PendingCall | null;
  /** The quota consumed before the pause; `seconds` is run time (the wait for a person is not in it). */
  readonly usage: Usage;
  /** The run's limits as Budget fields (snake_case, as Python names them). */
  readonly budget: Readonly<Record<string, unknown>>;
  readonly policy: ApprovalPolicy | null;
  readonly completed: readonly ToolRecord[];
  /** What the code saved with `run.checkpoint(...)`, as JSON. */
  readonly state: unknown;
  readonly toolsRequested: Readonly<Record<string, number>>;
  readonly toolsExecuted: Readonly<Record<string, number>>;
  readonly pendingTools: Readonly<Record<string, number>>;
  readonly denied: readonly string[];
  readonly traceId: string | null;
  readonly spanId: string | null;
  /** Unix time of the pause, in seconds. */
  readonly pausedAt: number;
  readonly detail: string;
  readonly signature: string | null;
  readonly #doc: Doc;

  private constructor(doc: Doc) {
    this.#doc = doc;
    const u = doc.usage as Doc;
    const p = doc.pending as Doc | null;
    this.version = doc.version as number;
    this.runName = doc.run_name as string;
    this.runId = doc.run_id as string;
    this.pending = p === null ? null : {
      kind: p.kind as "tool" | "limit", tool: p.tool as string, arguments: untag(p.arguments),
      callId: p.call_id as string | null, operation: p.operation as string, target: p.target as string | null,
      limit: p.limit as string | null, used: p.used === null ? null : num(p.used), cap: p.cap === null ? null : num(p.cap),
    };
    this.usage = {
      modelCalls: u.model_calls as number, toolCalls: u.tool_calls as number, inputTokens: u.input_tokens as number,
      outputTokens: u.output_tokens as number, cacheReadTokens: u.cache_read_tokens as number,
      cacheWriteTokens: u.cache_write_tokens as number, reasoningTokens: u.reasoning_tokens as number,
      costUsd: num(u.cost_usd), seconds: num(u.seconds), unpricedCalls: u.unpriced_calls as number,
    };
    this.budget = Object.freeze(untag(doc.budget) as Doc);
    const pol = doc.policy as { tools: string[]; operations: [string, string[]][]; alternative: string | null } | null;
    this.policy = pol === null ? null : new ApprovalPolicy({ tools: pol.tools,
      operations: Object.fromEntries(pol.operations), alternative: pol.alternative });
    this.completed = Object.freeze((doc.completed as Doc[]).map((r) => ({ tool: r.tool as string,
      arguments: untag(r.arguments), result: untag(r.result), replayable: r.replayable as boolean })));
    this.state = untag(doc.state);
    this.toolsRequested = Object.freeze({ ...(doc.tools_requested as Record<string, number>) });
    this.toolsExecuted = Object.freeze({ ...(doc.tools_executed as Record<string, number>) });
    this.pendingTools = Object.freeze({ ...(doc.pending_tools as Record<string, number>) });
    this.denied = Object.freeze([...(doc.denied as string[])]);
    this.traceId = doc.trace_id as string | null;
    this.spanId = doc.span_id as string | null;
    this.pausedAt = num(doc.paused_at);
    this.detail = doc.detail as string;
    this.signature = doc.signature as string | null;
    Object.freeze(this);
  }

  /**
   * A paused run from its JSON text (as `paused.json()` or Python's `model_dump_json()` wrote it) or from the
   * parsed object. Every field is checked: a bad one throws `InvalidRunState` naming it.
   */
  static parse(input: string | object): PausedRun {
    if (input instanceof PausedRun) return input;
    let raw: unknown = input;
    if (typeof input === "string") {
      try {
        raw = parseJson(input);
      } catch {
        throw new InvalidRunState(`resume() needs the paused run: outcome.paused, or its JSON (paused.json()); `
          + `${JSON.stringify(input.slice(0, 40))} is not JSON`);
      }
    }
    return new PausedRun(normalize(raw));
  }

  /** @internal A paused run from fields as Python names them (numbers plain or tagged), checked. */
  static fromFields(fields: Doc): PausedRun {
    return new PausedRun(normalize(fields));
  }

  /** The same paused run with `fields` replaced (checked again). */
  with(fields: Doc): PausedRun {
    return new PausedRun(normalize({ ...this.#doc, ...fields }));
  }

  /** The JSON text to store: what `PausedRun.parse` and Python's `PausedRun.model_validate_json` read. */
  json(): string {
    return canonicalJson(this.#doc);
  }

  /** For JSON.stringify: the fields as Python names them (floats lose their `.0`: prefer `json()`). */
  toJSON(): unknown {
    return untag(this.#doc);
  }

  /** What the signature covers: every field but the signature, canonical JSON bytes. */
  signedContent(): Buffer {
    const { signature: _, ...rest } = this.#doc;
    return canonical(rest);
  }

  /** The run's budget (the policy's predicate, not serializable, is not in it: pass the budget to keep it). */
  makeBudget(): Budget {
    return budgetOf(this.#doc.budget as Doc, this.policy);
  }

  /** The text to give the model as the result of the rejected call. */
  rejectionMessage(): string {
    const what = this.pending !== null ? describePending(this.pending) : "the call";
    let text = `A person denied ${what}. Do not try it again, by this or any other tool.`;
    if (this.policy?.alternative) text += ` Instead: ${this.policy.alternative}`;
    return text;
  }
}

/** `more than max_usd=0.05` for a limit; `send_email(arguments <signature>)` for a tool. */
export function describePending(p: PendingCall): string {
  if (p.kind === "limit") return p.cap !== null ? `more than ${p.limit}=${pyG(p.cap)}` : `more than ${p.limit}`;
  const text = canonicalArguments(p.arguments ?? null);
  return `${p.tool}(${text.length <= 200 ? text : `${text.slice(0, 197)}...`})`;
}

/** Python's `format(x, "g")`. */
function pyG(x: number): string {
  if (x === 0) return "0";
  const exp = Math.floor(Math.log10(Math.abs(x)));
  if (exp < -4 || exp >= 6) {
    const [m, e] = x.toExponential(5).split("e");
    const mant = m.includes(".") ? m.replace(/0+$/, "").replace(/\.$/, "") : m;
    return `${mant}e${e[0] === "-" ? "-" : "+"}${e.replace(/^[+-]/, "").padStart(2, "0")}`;
  }
  return String(Number(x.toPrecision(6)));
}
