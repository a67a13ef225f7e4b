/**
 * Shared (fleet) scopes in a run (core/admission.py `_reserve_shared`, core/settlement.py `_settle_shared`):
 * a model call reserves in every scope of its chain after its own accounts, and is settled there to what it used.
 * The store answers asynchronously (Redis); settles are sent at once, in order on the store's connection, and
 * the run awaits the ones not answered yet when it ends.
 */
import { ledgerFailOpen } from "../telemetry/metrics.js";
import { getSettings } from "./config.js";
import { type Amounts, Refusal, type Reservation } from "./ledger.js";
import type { RunNode } from "./node.js";

/** Reserve `amounts` in every shared scope of the chain; on a refusal give back what was held and throw. */
export async function reserveShared(node: RunNode, amounts: Amounts, what: string): Promise<Reservation[]> {
  const ledger = getSettings().ledger;
  const held: Reservation[] = [];
  for (const scope of node.scopes) {
    let result: Reservation | Refusal;
    try {
      result = await ledger.reserve(scope.name, amounts, scope.limits(), scope.windowSeconds);
    } catch (exc) {
      const text = exc instanceof Error ? exc.message : String(exc);
      result = new Refusal("ledger", 0, 0, 0, scope.name, `the shared ledger failed: ${text}`);
    }
    if (result instanceof Refusal) {
      settleShared(node, held, {});
      result.scope = result.scope || scope.name;
      throw node.refusalError(result, what, true);
    }
    if (!result.enforced) {
      node.root.unenforced += 1;
      ledgerFailOpen(node.root.name, scope.name);
    }
    held.push(result);
  }
  return held;
}

/** Replace the reservations by `actual` (a release when empty); sent now, awaited when the run ends. */
export function settleShared(node: RunNode, held: readonly Reservation[], actual: Amounts): void {
  const ledger = getSettings().ledger;
  for (const reservation of held) track(node, () => ledger.settle(reservation, actual));
}

/** Add `actual` to every shared scope of the chain (what is counted, not reserved: requested tool calls). */
export function chargeShared(node: RunNode, actual: Amounts): void {
  if (node.scopes.length === 0) return;
  const held = node.scopes.map((scope) => ({ scope: scope.name, id: "", amounts: {}, enforced: true }));
  settleShared(node, held, actual);
}

function track(node: RunNode, send: () => Promise<void> | void): void {
  const pending = node.root.sharedPending;
  let answer: Promise<void> | void;
  try {
    answer = send();
  } catch (exc) {
    warn(exc);
    return;
  }
  if (!(answer instanceof Promise)) return;
  const done: Promise<void> = answer.catch(warn).finally(() => pending.delete(done));
  pending.add(done);
}

function warn(exc: unknown): void {
  const text = exc instanceof Error ? exc.message : String(exc);
  process.emitWarning(`otel-budget: settling in the shared ledger failed: ${text}`, { code: "OTEL_BUDGET_LEDGER" });
}

/** Wait until the shared ledger answered every settle of the tree sent so far. */
export async function sharedSettled(node: RunNode): Promise<void> {
  const pending = node.root.sharedPending;
  while (pending.size > 0) await Promise.allSettled([...pending]);
}
