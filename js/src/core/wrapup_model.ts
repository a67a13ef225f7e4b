/**
 * The model-written wrap-up (`wrapUp: "model"`; Python's core/run.py `_model_wrap_up_*`): a slice held back from the
 * budget when the run starts pays for one short tool-less call when a limit stops the run, so even the wrap-up never
 * breaks the cap. The text is the template followed by `Summary: ` and what the model wrote; the template alone when
 * the slice is too small, or the call is refused or fails. The adapter makes the call; this decides.
 */
import { StopReason, type Usage } from "../model/budget.js";
import type { BudgetExceeded, RunOutcome } from "../model/outcome.js";
import { type Amounts, reserve, settle } from "./ledger.js";
import type { RunNode } from "./node.js";
import { templateWrapUp } from "./wrapup.js";

/** The output limit of the call that writes a stopped run's wrap-up. */
export const WRAP_UP_MAX_TOKENS = 300;
const HOLDBACK_INPUT = 800;
const NO_MODEL_WRAP_UP: ReadonlySet<StopReason> = new Set([StopReason.DONE, StopReason.AWAITING_APPROVAL]);

/** Makes the one wrap-up call (admitted before it first awaits) and returns its text, or null. */
export type WrapUpCall = (prompt: string, maxOutputTokens: number) => Promise<string | null>;

/** At the start of a run with `wrapUp: "model"`: reserve the slice in the chain's accounts, if it fits. */
export function holdBack(node: RunNode): void {
  if (node.budget.wrapUp !== "model") return;
  const amounts: Amounts = { steps: 1, input_tokens: HOLDBACK_INPUT, output_tokens: WRAP_UP_MAX_TOKENS,
    total_tokens: HOLDBACK_INPUT + WRAP_UP_MAX_TOKENS };
  if (node.budget.maxUsd !== null) amounts.usd = Math.min(node.budget.maxUsd * 0.05, 0.05);
  node.holdback = reserve(node.accounts, amounts) === null ? amounts : null;
}

/** Give the slice back (the wrap-up call is about to draw from it, or the run ends). */
export function releaseHoldback(node: RunNode): void {
  if (node.holdback === null) return;
  settle(node.accounts, node.holdback, {});
  node.holdback = null;
}

function wrapUpPrompt(draft: string): string {
  return "An agent run was stopped by its budget before it finished. In at most 120 words, write its final report "
    + "for the user: what was done, what is missing, and that the task is NOT complete. Do not claim anything the "
    + `record does not show. The record:\n${draft}`;
}

/** Spend the slice on the one call (past the recorded stop) for the state `outcome`: its text, or null. */
async function written(node: RunNode, outcome: RunOutcome, call: WrapUpCall): Promise<string | null> {
  releaseHoldback(node);
  const saved = node.stopState;
  node.stopState = null; // the one wrap-up call goes past the stop; it is admitted before `call` first awaits
  let pending: Promise<string | null>;
  try {
    pending = call(wrapUpPrompt(templateWrapUp(node, outcome)), WRAP_UP_MAX_TOKENS);
  } finally {
    node.stopState = saved;
  }
  try {
    const text = await pending;
    return text && text.trim() ? text : null;
  } catch {
    return null; // refused (the slice was too small) or failed: the template
  }
}

/**
 * The wrap-up a call refused with `exc` answers with. With `wrapUp: "model"` and the slice still held (the first
 * refusal of the run), the slice pays for one short call; later refusals repeat the model's text after their own
 * template. Returns the text and the usage it describes.
 */
export async function refusalWrapUp(node: RunNode, exc: BudgetExceeded, call: WrapUpCall):
  Promise<{ text: string; usage: Usage }> {
  const outcome = exc.outcome;
  if (node.budget.wrapUp !== "model" || NO_MODEL_WRAP_UP.has(outcome.stopReason) || node.holdback === null) {
    return { text: templateWrapUp(node, outcome, node.modelWrapUp), usage: outcome.usage };
  }
  const text = await written(node, outcome, call);
  if (text !== null) node.modelWrapUp = text;
  const after = node.snapshot(outcome.stopReason, outcome.limit, outcome.detail); // the wrap-up call counted
  return { text: templateWrapUp(node, after, text), usage: after.usage };
}

/**
 * A run that ends stopped with its slice unspent (no refused call wrote the wrap-up: `incomplete`, an error, a
 * stop recorded after the last call): the one call at the end, through the model of the run's last budgeted call.
 */
export async function closingWrapUp(node: RunNode, reason: StopReason): Promise<void> {
  const call = node.wrapUpCall;
  if (node.budget.wrapUp !== "model" || NO_MODEL_WRAP_UP.has(reason) || node.holdback === null || call === null) {
    return;
  }
  const [limit, detail] = node.stopState !== null && node.stopState[0] === reason
    ? [node.stopState[1], node.stopState[2]] : [null, ""];
  const text = await written(node, node.snapshot(reason, limit, detail), call);
  if (text !== null) node.modelWrapUp = text;
}
