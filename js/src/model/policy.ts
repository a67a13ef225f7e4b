/** Which tool calls need a person's approval (model/policy.py): `Budget({ approve })` carries one. */

/** (tool name, arguments as an object) -> true, or an operation name, when the call needs approval. */
export type ApprovalPredicate = (tool: string, args: Record<string, unknown>) => unknown;

export interface ApprovalPolicyOptions {
  /** Tool names that need approval; each is its own operation. */
  tools?: string | readonly string[];
  /** Operation name -> the tools that perform it; all need approval, a denial covers all. */
  operations?: Record<string, string | readonly string[]>;
  /** True, or an operation name, when a call needs approval. Not kept in a paused run: pass the budget again. */
  when?: ApprovalPredicate | null;
  /** What the run does after a rejection, told to the model; none: a rejection ends the run with `denied`. */
  alternative?: string | null;
}

/** Argument names whose value is shown as the target of a pending call (the first one present wins). */
export const TARGET_KEYS = ["target", "to", "recipient", "recipients", "remote", "branch", "repo", "url", "path",
  "table"];

function names(value: unknown, field: string): string[] {
  const list = typeof value === "string" ? [value] : value;
  if (!Array.isArray(list) || !list.every((t) => typeof t === "string")) {
    throw new TypeError(`approve ${field}: give tool names (strings), not ${JSON.stringify(value)}`);
  }
  return [...list];
}

/** Which tool calls need a person's yes: a tool in `tools` or `operations`, or one `when` says so. */
export class ApprovalPolicy {
  readonly tools: readonly string[];
  readonly operations: readonly (readonly [string, readonly string[]])[];
  readonly when: ApprovalPredicate | null;
  readonly alternative: string | null;

  constructor(options: ApprovalPolicyOptions = {}) {
    const known = new Set(["tools", "operations", "when", "alternative"]);
    for (const key of Object.keys(options)) {
      if (!known.has(key)) throw new TypeError(`ApprovalPolicy has no field ${key}; the fields are ${[...known].join(", ")}`);
    }
    this.tools = Object.freeze(names(options.tools ?? [], "tools"));
    const ops = options.operations ?? {};
    const pairs = Array.isArray(ops) ? ops as [string, unknown][] : Object.entries(ops);
    this.operations = Object.freeze(pairs.map(([op, tools]) => [String(op), Object.freeze(names(tools,
      `operations[${JSON.stringify(op)}]`))] as const));
    if (options.when != null && typeof options.when !== "function") {
      throw new TypeError("approve when: give a function (tool, args) => true or an operation name");
    }
    this.when = options.when ?? null;
    if (options.alternative != null && typeof options.alternative !== "string") {
      throw new TypeError("approve alternative: give the text to tell the model after a rejection");
    }
    this.alternative = options.alternative ?? null;
    Object.freeze(this);
  }

  /** A policy from what `Budget({ approve })` takes: tool names, a predicate, options or a policy. */
  static coerce(value: unknown): ApprovalPolicy | null {
    if (value === null || value === undefined) return null;
    if (value instanceof ApprovalPolicy) return value;
    if (typeof value === "string" || Array.isArray(value)) return new ApprovalPolicy({ tools: value as string[] });
    if (typeof value === "function") return new ApprovalPolicy({ when: value as ApprovalPredicate });
    if (typeof value === "object") return new ApprovalPolicy(value as ApprovalPolicyOptions);
    throw new TypeError(`approve takes tool names, a predicate or an ApprovalPolicy, not ${typeof value}`);
  }

  /** The operation a call performs when it needs approval, else null. */
  operation(tool: string, args: unknown): string | null {
    for (const [op, tools] of this.operations) if (tools.includes(tool)) return op;
    if (this.tools.includes(tool)) return tool;
    if (this.when !== null) {
      let verdict: unknown;
      try {
        verdict = this.when(tool, asDict(args));
      } catch {
        process.emitWarning(`otel-budget: the approval predicate failed for ${tool}; asking for approval`,
          { code: "OTEL_BUDGET_APPROVAL" });
        return tool;
      }
      if (typeof verdict === "string" && verdict) return verdict;
      if (verdict) return tool;
    }
    return null;
  }

  /** As Python's `model_dump(mode="json")` (the predicate is not data). */
  dump(): { tools: string[]; operations: [string, string[]][]; alternative: string | null } {
    return { tools: [...this.tools], operations: this.operations.map(([op, t]) => [op, [...t]]),
      alternative: this.alternative };
  }
}

/** Tool arguments as an object: JSON text parsed, anything else under "input" (Python's `_as_dict`). */
export function asDict(args: unknown): Record<string, unknown> {
  if (args !== null && typeof args === "object" && !Array.isArray(args)) return { ...(args as object) };
  if (typeof args === "string") {
    if (!args.trim()) return {};
    try {
      const value: unknown = JSON.parse(args);
      return value !== null && typeof value === "object" && !Array.isArray(value)
        ? value as Record<string, unknown> : { input: value };
    } catch {
      return { input: args };
    }
  }
  return { input: args };
}
