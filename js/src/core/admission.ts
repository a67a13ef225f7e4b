/**
 * How a model call is admitted before it is sent and settled after (core/admission.py, core/settlement.py):
 * the gates, the input estimate or bound, the output limit, and the reservation in every account of the chain.
 */
import { createHash } from "node:crypto";
import { StopReason } from "../model/budget.js";
import { UnknownPriceError } from "../model/outcome.js";
import { getSettings } from "./config.js";
import { type Amounts, type Reservation, headroom, reserve, settle } from "./ledger.js";
import { checkNear } from "./near.js";
import { DIM_REASON, type RunNode } from "./node.js";
import { reserveShared, settleShared } from "./shared.js";

/** Above this many output tokens of headroom a request without an output limit is left as it is. */
export const AUTO_MAX_TOKENS_CEILING = 16384;
const UNBOUNDED_OUTPUT_RESERVE = 4096;
const COUNT_DIMS = new Set(["steps", "tool_calls"]);
/** Dimensions on which what calls in flight hold (their worst case) may come back when they settle. */
const WAIT_DIMS = new Set(["input_tokens", "output_tokens", "total_tokens", "usd"]);
const MAX_ADMISSION_WAIT = 60;

/** A call did not fit only because of what calls in flight hold: wait for one to settle, then admit again. */
export class RoomPending extends Error {
  constructor(readonly seen: number) {
    super("waiting for calls in flight to settle");
  }
}

/** What a call reserved; settle or release it exactly once. */
export class Admission {
  maxOutputTokens: number | null = null;
  setMaxTokens = false;
  boundBy = "output_tokens";
  turn = 0;
  inputEstimate = 0;
  estimated = false;
  priced = false;
  done = false;
  /** No tool call remains (maxToolCalls): the call goes without tools, so the model can answer. */
  noTools = false;
  /** What the call holds in the shared (fleet) scopes of its chain. */
  shared: Reservation[] = [];
  /** The request's shape, when its input was bounded by it: with the reported count, the next request's base. */
  promptShape: PromptShape | null = null;
  constructor(readonly node: RunNode, readonly amounts: Amounts) {}
}

/** A request as the bound of the next one reads it: a digest of all but its messages, each message's digest and
 * UTF-8 bytes (as JSON). */
export interface PromptShape { head: string; digests: string[]; sizes: number[] }

/** What the input bound reads of a request: the fields that change its input besides the messages, and them. */
export interface PromptParts { rest: unknown; messages: unknown }

const sha1 = (text: string): string => createHash("sha1").update(text).digest("hex");

/** The shape of a request, or null when its messages cannot be read so. */
export function promptShape(parts: PromptParts): PromptShape | null {
  if (!Array.isArray(parts.messages)) return null;
  try {
    const texts = parts.messages.map((m) => JSON.stringify(m) ?? "");
    return { head: sha1(JSON.stringify(parts.rest) ?? ""), digests: texts.map(sha1),
      sizes: texts.map((t) => Buffer.byteLength(t, "utf8")) };
  } catch {
    return null; // odd content: the whole request's bound applies
  }
}

/**
 * An upper bound of a call's input tokens: one per byte of the request, or, when its messages extend the previous
 * request's (same tools and settings, the same messages first), that one's reported count plus one per byte of the
 * new messages (chat formats tokenize each message apart). Sets `adm.promptShape` for the settlement.
 */
function inputBound(node: RunNode, adm: Admission, chars: number, prompt: (() => PromptParts) | null): number {
  if (prompt === null) return chars;
  const shape = promptShape(prompt());
  if (shape === null) return chars;
  adm.promptShape = shape;
  const last = node.lastPrompt;
  if (last === null || last.head !== shape.head || last.digests.length > shape.digests.length
    || last.digests.some((d, i) => shape.digests[i] !== d)) return chars;
  const added = shape.sizes.slice(last.digests.length).reduce((a, b) => a + b, 0);
  return Math.min(chars, last.tokens + added + 8);
}

function takeEstimateSlot(node: RunNode): boolean {
  if (node.chain.some((n) => n.budget.strict)) return false;
  if (node.root.estimateInFlight) return false;
  node.root.estimateInFlight = true;
  return true;
}

function freeEstimateSlot(adm: Admission): void {
  if (adm.estimated) {
    adm.estimated = false;
    adm.node.root.estimateInFlight = false;
  }
}

/**
 * Check and reserve one model call, or throw BudgetExceeded / UnknownPriceError; nothing is sent.
 * `inputChars` is the size of the request; the input is reserved at an estimate for one call of the tree at a
 * time, and at an upper bound (one token per character) for a call made while that one is in flight.
 */
export function admit(node: RunNode, provider: string, model: string, maxOutput: number | null,
  inputChars: () => number, choices = 1, mayWait = false, prompt: (() => PromptParts) | null = null): Admission {
  const what = `the call to ${model}`;
  node.checkGates(what);
  const limited = node.limited();
  if (limited.has("tool_calls") && headroom(node.accounts, "tool_calls") < 0) {
    throw node.stop(StopReason.TOOL_CALLS, "max_tool_calls", `${what} was not sent: the model requested more tool `
      + "calls than max_tool_calls allows.", node.exhausted("tool_calls"));
  }
  const amounts: Amounts = { steps: 1 };
  const adm = new Admission(node, amounts);
  if (limited.has("tool_calls") && headroom(node.accounts, "tool_calls") < 1) adm.noTools = true;
  if (![...limited].some((d) => !COUNT_DIMS.has(d))) {
    reserveCall(node, adm, what, false);
    return adm;
  }
  const chars = inputChars();
  let estIn = Math.trunc(chars / node.root.charsPerToken * 1.05) + 8;
  adm.inputEstimate = estIn;
  let pricing = null;
  if (limited.has("usd")) {
    pricing = getSettings().prices.lookup(provider, model);
    if (pricing === null) {
      throw new UnknownPriceError(`otel-budget: no price is known for model '${model}' (provider '${provider}') and `
        + "this run has a money cap (max_usd), so the call was not sent. Add its price, e.g. "
        + `instrument({ prices: { "${model}": { inputPerMtok: ..., outputPerMtok: ... } } }), or remove maxUsd.`);
    }
    adm.priced = true;
  }
  adm.estimated = takeEstimateSlot(node);
  if (!adm.estimated) estIn = inputBound(node, adm, chars, prompt); // one token per byte, or less when it extends
  let out = maxOutput;
  let inputCost = 0;
  let perToken = 0;
  if (pricing !== null) {
    inputCost = pricing.cost(estIn, 0);
    if (!adm.estimated) {
      inputCost = Math.max(inputCost, pricing.cost(estIn, 0, estIn), pricing.cost(estIn, 0, 0, estIn));
    }
    perToken = (pricing.cost(estIn, 1_000_000) - pricing.cost(estIn, 0)) / 1_000_000;
  }
  const n = Math.max(1, choices);
  if (out === null) {
    const rooms: [string, number][] = [
      ["output_tokens", headroom(node.accounts, "output_tokens")],
      ["total_tokens", headroom(node.accounts, "total_tokens") - estIn],
    ];
    if (perToken > 0) rooms.push(["usd", (headroom(node.accounts, "usd") - inputCost) / perToken]);
    let best = rooms[0];
    for (const r of rooms) if (r[1] < best[1]) best = r;
    adm.boundBy = best[0];
    const room = best[1] / n;
    if (room <= AUTO_MAX_TOKENS_CEILING && node.autoMaxTokens()) {
      out = Math.max(0, Math.trunc(room));
      adm.setMaxTokens = out >= 1;
    } else {
      out = room !== Infinity ? Math.min(UNBOUNDED_OUTPUT_RESERVE, Math.trunc(room)) : UNBOUNDED_OUTPUT_RESERVE;
    }
  }
  adm.maxOutputTokens = out;
  amounts.input_tokens = estIn;
  amounts.output_tokens = out * n;
  amounts.total_tokens = estIn + out * n;
  if (pricing !== null) amounts.usd = inputCost + out * n * perToken;
  try {
    reserveCall(node, adm, what, mayWait);
  } catch (exc) {
    freeEstimateSlot(adm);
    throw exc;
  }
  if (maxOutput === null && adm.maxOutputTokens !== null && adm.maxOutputTokens < 1) {
    release(adm);
    const dim = pricing !== null && headroom(node.accounts, "usd") < Infinity ? "usd" : "total_tokens";
    const [reason, field] = DIM_REASON[dim];
    throw node.stop(reason, field, `${what} was not sent: the budget leaves no room for any output (${field}).`);
  }
  return adm;
}

function reserveCall(node: RunNode, adm: Admission, what: string, mayWait: boolean): void {
  const refusal = reserve(node.accounts, adm.amounts);
  if (refusal !== null) {
    if (mayWait && mayWaitFor(node, refusal.dim, refusal.message, adm.amounts)) {
      throw new RoomPending(node.root.settledCount);
    }
    throw node.refusalError(refusal, what);
  }
  node.root.turns += 1;
  adm.turn = node.root.turns;
  node.root.inFlight += 1;
}

/** Whether a refused call may wait: only for what calls in flight hold, and only when it would fit once they
 * settled (what a call in flight holds is its worst case, which its settlement may give back). */
function mayWaitFor(node: RunNode, dim: string, message: string, amounts: Amounts): boolean {
  if (!WAIT_DIMS.has(dim) || message || node.timeLeft() <= 0 || node.root.inFlight <= 0) return false;
  const amount = amounts[dim] ?? 0;
  return node.accounts.every((acc) => (acc.limits[dim] ?? Infinity) >= acc.used[dim] + amount - 1e-12);
}

/** Wait until a call of the tree settles after `seen` settlements; false when none did in time. */
function waitSettled(node: RunNode, seen: number): Promise<boolean> {
  const root = node.root;
  if (root.settledCount !== seen) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      root.roomWaiters.delete(wake);
      resolve(false);
    }, Math.max(0, Math.min(MAX_ADMISSION_WAIT, node.timeLeft())) * 1000);
    const wake = () => {
      clearTimeout(timer);
      resolve(true);
    };
    root.roomWaiters.add(wake);
  });
}

/**
 * `admit` for callers that can await: a call refused only because of what calls in flight hold waits for one
 * of them to settle and is admitted again (a `Promise.all` storm uses the budget instead of stopping early).
 * Then the call reserves in the shared (fleet) scopes of its chain, if any.
 */
export async function admitWaiting(node: RunNode, provider: string, model: string, maxOutput: number | null,
  inputChars: () => number, choices = 1, prompt: (() => PromptParts) | null = null): Promise<Admission> {
  const adm = await admitLocal(node, provider, model, maxOutput, inputChars, choices, prompt);
  if (node.scopes.length > 0) {
    try {
      adm.shared = await reserveShared(node, adm.amounts, `the call to ${model}`);
    } catch (exc) {
      release(adm);
      throw exc;
    }
  }
  return adm;
}

async function admitLocal(node: RunNode, provider: string, model: string, maxOutput: number | null,
  inputChars: () => number, choices: number, prompt: (() => PromptParts) | null): Promise<Admission> {
  for (;;) {
    try {
      return admit(node, provider, model, maxOutput, inputChars, choices, true, prompt);
    } catch (exc) {
      if (!(exc instanceof RoomPending)) throw exc;
      if (!(await waitSettled(node, exc.seen))) {
        return admit(node, provider, model, maxOutput, inputChars, choices, false, prompt);
      }
    }
  }
}

/** The call of `adm` is no longer in flight: free what it held and wake the calls waiting for room. */
function done(adm: Admission): void {
  freeEstimateSlot(adm);
  const root = adm.node.root;
  if (adm.turn > 0) root.inFlight = Math.max(0, root.inFlight - 1);
  root.settledCount += 1;
  const waiters = [...root.roomWaiters];
  root.roomWaiters.clear();
  for (const wake of waiters) wake();
}

/** What a call used, as the API reported it (input includes cached tokens, output includes reasoning). */
export interface CallUsage {
  inputTokens: number;
  outputTokens: number;
  cacheRead?: number;
  cacheWrite?: number;
  reasoning?: number;
}

/** Replace the call's reservation by what it used; `cost` null: unpriced. */
export function settleCall(adm: Admission, usage: CallUsage, cost: number | null, inputChars: number | null = null,
): void {
  if (adm.done) return;
  adm.done = true;
  const node = adm.node;
  const actual: Amounts = {
    steps: 1,
    input_tokens: usage.inputTokens,
    output_tokens: usage.outputTokens,
    total_tokens: usage.inputTokens + usage.outputTokens,
  };
  if (cost !== null) actual.usd = cost;
  settle(node.accounts, adm.amounts, actual);
  if (adm.shared.length > 0) settleShared(node, adm.shared, actual);
  done(adm);
  if (inputChars && usage.inputTokens > 0) {
    node.root.charsPerToken = Math.min(8.0, Math.max(1.0, inputChars / usage.inputTokens));
    if (adm.promptShape !== null) { // a reported count: the base of the next request's bound
      node.lastPrompt = { head: adm.promptShape.head, digests: adm.promptShape.digests, tokens: usage.inputTokens };
    }
  }
  for (const n of node.chain) {
    n.stats.modelCalls += 1;
    n.stats.cacheRead += usage.cacheRead ?? 0;
    n.stats.cacheWrite += usage.cacheWrite ?? 0;
    n.stats.reasoning += usage.reasoning ?? 0;
    if (cost === null) n.stats.unpriced += 1;
  }
  checkNear(node);
}

/** Give back a reservation whose call was never sent. */
export function release(adm: Admission): void {
  if (adm.done) return;
  adm.done = true;
  settle(adm.node.accounts, adm.amounts, {});
  if (adm.shared.length > 0) settleShared(adm.node, adm.shared, {});
  done(adm);
}
