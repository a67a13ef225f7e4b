/** Prices of a model and the cost of a call (model/budget.py `Price`): checked like Budget fields. */
import { BudgetValidationError, show } from "./budget.js";

/** A cost in US dollars, or a BudgetValidationError naming `what` (NaN, infinite, negative: no cost). */
export function checkCost(value: unknown, what: string): number {
  if (typeof value !== "number") {
    throw new BudgetValidationError(what, `${what}=${show(value)} is not a number of US dollars; give a finite `
      + "amount >= 0, e.g. 0.002");
  }
  if (!Number.isFinite(value) || value < 0) {
    throw new BudgetValidationError(what, `${what}=${value} is not a cost: give a finite amount of US dollars >= 0 `
      + "(e.g. 0.002); a NaN, infinite or negative cost would switch the money cap off");
  }
  return value;
}

/** Prices of one model in US dollars per million tokens (cache prices default to the input price). */
export interface Price {
  inputPerMtok: number;
  outputPerMtok: number;
  cacheReadPerMtok?: number | null;
  cacheWritePerMtok?: number | null;
}

export function checkPrice(price: unknown, what: string): Price {
  if (price === null || typeof price !== "object") {
    throw new BudgetValidationError(what, `${what}=${show(price)}: give { inputPerMtok, outputPerMtok } in US dollars `
      + "per million tokens");
  }
  const p = price as Record<string, unknown>;
  const out: Price = {
    inputPerMtok: checkCost(p.inputPerMtok, `${what}.inputPerMtok`),
    outputPerMtok: checkCost(p.outputPerMtok, `${what}.outputPerMtok`),
  };
  if (p.cacheReadPerMtok != null) out.cacheReadPerMtok = checkCost(p.cacheReadPerMtok, `${what}.cacheReadPerMtok`);
  if (p.cacheWritePerMtok != null) out.cacheWritePerMtok = checkCost(p.cacheWritePerMtok, `${what}.cacheWritePerMtok`);
  return out;
}

/** Cost of a call (Price.cost in Python, the same arithmetic in the same order); input includes cached tokens. */
export function priceCost(price: Price, input: number, output: number, cacheRead = 0, cacheWrite = 0): number {
  const fresh = Math.max(0, input - cacheRead - cacheWrite);
  const read = price.cacheReadPerMtok ?? price.inputPerMtok;
  const write = price.cacheWritePerMtok ?? price.inputPerMtok;
  return (fresh * price.inputPerMtok + cacheRead * read + cacheWrite * write + output * price.outputPerMtok) / 1e6;
}
