/**
 * What a paused run is trusted with when it comes back (core/trust.py): its signature, and with a shared ledger
 * its record. With a secret (`instrument({ secret })` or OTEL_BUDGET_SECRET) a pause is signed and `resume`
 * refuses one whose signature is missing or does not match; without one it is accepted with one warning per
 * process (shared with run tokens). With a store that keeps records (`RedisLedger`) the pause also writes its
 * quota used, its limits and its policy under its `runId`; `resume` reads them back, and the paused run can only
 * narrow them. A paused run the store does not know is refused.
 */
import { randomBytes } from "node:crypto";
import { LIMITS, type Usage } from "../model/budget.js";
import { PausedRun, budgetOf } from "../model/paused.js";
import { ApprovalPolicy } from "../model/policy.js";
import { Num } from "../model/signatures.js";
import { InvalidRunState, canonical, sign, signedBy } from "../model/trust.js";
import { getSettings } from "./config.js";
import type { Ledger } from "./ledger.js";

/** Record kind of a paused run in the store: key `{<prefix>:paused:<run_id>}:paused`. */
export const PAUSED_RECORD = "paused";
let warned = false;

export function secret(): Buffer | null {
  return getSettings().secret;
}

/** Say once per process that state from outside is accepted without a signature. */
export function warnUnsigned(what: string): void {
  if (warned) return;
  warned = true;
  process.emitWarning(`otel-budget: ${what} accepted without a signature: no secret is configured, so one edited `
    + "outside this process would be accepted too. Give every process the same instrument({ secret }) or "
    + "OTEL_BUDGET_SECRET (see docs/security.md). This is said once per process.", { code: "OTEL_BUDGET_UNSIGNED" });
}

/** @internal For tests: warn again. */
export function resetUnsignedWarning(): void {
  warned = false;
}

type RecordStore = Ledger & Required<Pick<Ledger, "putRecord" | "getRecord">>;

export function recordStore(): RecordStore | null {
  const store = getSettings().ledger;
  return typeof store.putRecord === "function" && typeof store.getRecord === "function" ? store as RecordStore : null;
}

function usageDoc(u: Usage): Record<string, unknown> {
  return { model_calls: u.modelCalls, tool_calls: u.toolCalls, input_tokens: u.inputTokens,
    output_tokens: u.outputTokens, cache_read_tokens: u.cacheReadTokens, cache_write_tokens: u.cacheWriteTokens,
    reasoning_tokens: u.reasoningTokens, cost_usd: Num.float(u.costUsd), seconds: Num.float(u.seconds),
    unpriced_calls: u.unpricedCalls };
}

/** Give a new pause its id, its record in the store (when it keeps records) and its signature. */
export async function seal(paused: PausedRun): Promise<PausedRun> {
  const runId = randomBytes(16).toString("hex");
  let out = paused.with({ run_id: runId });
  const store = recordStore();
  if (store !== null) {
    const doc = JSON.parse(out.json()) as Record<string, unknown>;
    const text = canonical({ budget: doc.budget, policy: out.policy?.dump() ?? null, usage: usageDoc(out.usage) })
      .toString("utf8");
    try {
      await store.putRecord(`${PAUSED_RECORD}:${runId}`, PAUSED_RECORD, text);
    } catch (exc) {
      process.emitWarning(`otel-budget: the paused run '${paused.runName}' could not be recorded in the shared `
        + `ledger (${(exc as Error).message}); resuming it will be refused while the ledger fails closed`,
      { code: "OTEL_BUDGET_LEDGER" });
    }
  }
  const key = secret();
  if (key !== null) out = out.with({ signature: sign(out.signedContent(), key) });
  return out;
}

/** The paused run as `resume` may trust it: validated again, its signature checked, narrowed to its record. */
export async function check(paused: PausedRun): Promise<PausedRun> {
  const key = secret();
  if (key === null) {
    warnUnsigned("a paused run was");
  } else if (paused.signature === null) {
    throw new InvalidRunState(`resume(): the paused run '${paused.runName}' is not signed, and a secret is `
      + "configured: it was paused without the secret, or its signature was removed. Pause it again with the same "
      + "secret.", "signature");
  } else if (!signedBy(paused.signedContent(), paused.signature, key)) {
    throw new InvalidRunState(`resume(): the paused run '${paused.runName}' was changed after it was signed (or `
      + "signed with another secret): refused. Resume the paused run as it was saved, with the secret it was paused "
      + "with.", "signature");
  }
  return narrowed(paused);
}

async function narrowed(paused: PausedRun): Promise<PausedRun> {
  const store = recordStore();
  if (store === null) return paused;
  let text: string | null;
  try {
    text = paused.runId ? await store.getRecord(`${PAUSED_RECORD}:${paused.runId}`, PAUSED_RECORD) : null;
  } catch (exc) {
    if (store.fail === "open") {
      process.emitWarning(`otel-budget: the shared ledger is unreachable (${(exc as Error).message}); paused run `
        + `'${paused.runName}' resumed as given (fail "open")`, { code: "OTEL_BUDGET_LEDGER" });
      return paused;
    }
    throw new InvalidRunState(`resume(): the shared ledger cannot be read to check the paused run `
      + `'${paused.runName}' (fail "closed"): ${(exc as Error).message}`);
  }
  if (text === null) {
    throw new InvalidRunState(`resume(): the paused run '${paused.runName}' (run_id '${paused.runId}') is not `
      + "recorded in the shared ledger: it was edited, paused without this ledger, or its record expired.", "run_id");
  }
  let record: { budget: Record<string, unknown>; policy: unknown; usage: Record<string, unknown> };
  let policy: ApprovalPolicy | null;
  let used: PausedRun;
  try {
    record = JSON.parse(text);
    budgetOf(record.budget, null);
    policy = record.policy === null ? null : ApprovalPolicy.coerce(record.policy);
    used = PausedRun.fromFields({ run_name: paused.runName, usage: record.usage });
  } catch (exc) {
    throw new InvalidRunState(`resume(): the shared ledger's record of the paused run is damaged: `
      + `${(exc as Error).message}`);
  }
  const given = JSON.parse(paused.json()) as Record<string, Record<string, unknown>>;
  const usage: Record<string, unknown> = {};
  const mine = usageDoc(used.usage) as Record<string, unknown>;
  for (const [name, value] of Object.entries(mine)) {
    const a = value instanceof Num ? value.value : value as number;
    const b = Number(given.usage[name] ?? 0);
    usage[name] = value instanceof Num ? Num.float(Math.max(a, b)) : Math.max(a, b);
  }
  const limits: Record<string, unknown> = { ...record.budget };
  for (const [name, value] of Object.entries(paused.budget)) { // the paused run can only lower a limit or add one
    if (name in LIMITS && typeof value === "number" && (limits[name] == null || value < Number(limits[name]))) {
      limits[name] = value;
    }
  }
  return paused.with({ usage, budget: limits, policy: (policy ?? paused.policy)?.dump() ?? null });
}
