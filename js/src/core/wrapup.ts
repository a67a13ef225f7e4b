/**
 * The honest wrap-up (core/wrapup.py): what a run did, what is missing, and which limit stopped it. The text is
 * byte-identical to Python's for the same state (tests/vectors pin it in both packages).
 */
import { LIMITS, StopReason, isLimitName, plural, usd, type LimitName } from "../model/budget.js";
import { pyFixed, pyInt, pyRound } from "../model/format.js";
import type { RunOutcome } from "../model/outcome.js";
import type { RunNode } from "./node.js";

const ALLOWANCE = /\((?:max_repeats|polls\[.*?\])=(\d+)\)/;

const REASON_TEXT: Partial<Record<StopReason, string>> = {
  [StopReason.INCOMPLETE]: "Stopped: the model stopped, but the work is not confirmed done (incomplete).",
  [StopReason.CANCELLED]: "Stopped: the run was cancelled before it finished.",
  [StopReason.ERROR]: "Stopped by an error before the run finished.",
  [StopReason.AWAITING_APPROVAL]: "Paused: the run is waiting for a person's approval before it goes on.",
  [StopReason.DENIED]: "Stopped: a person denied a tool call the run needed.",
};

function number(value: number, dim: string, cap: number | null): string {
  if (dim === "usd") return usd(value, cap);
  if (Number.isInteger(value)) return pyInt(value);
  return pyFixed(value, 1, true);
}

function usedOf(node: RunNode, outcome: RunOutcome, limit: LimitName): string {
  const u = outcome.usage;
  const [dim, , unit] = LIMITS[limit];
  const cap = node.budget.limit(limit);
  const values: Record<string, number> = {
    steps: u.modelCalls,
    tool_calls: u.toolCalls,
    seconds: pyRound(u.seconds, 1),
    input_tokens: u.inputTokens,
    output_tokens: u.outputTokens,
    total_tokens: u.inputTokens + u.outputTokens,
    usd: u.costUsd,
  };
  if (cap === null) return "set by an enclosing run";
  return `${number(values[dim], dim, cap)} of ${number(cap, dim, cap)} ${unit} used`;
}

function repeatCap(detail: string, node: RunNode): number | null {
  const found = ALLOWANCE.exec(detail);
  return found ? Number(found[1]) : node.budget.maxRepeats;
}

function limitLine(node: RunNode, outcome: RunOutcome): string {
  const limit = outcome.limit;
  if (isLimitName(limit)) return `Stopped at a limit: ${limit} (${usedOf(node, outcome, limit)}).`;
  if (outcome.stopReason === StopReason.REPEAT) {
    const what = outcome.detail.includes(" the cycle ") ? "cycle of actions" : "tool call";
    return `Stopped at a limit: max_repeats (the same ${what} ${pyNone(repeatCap(outcome.detail, node))} times in `
      + "a row).";
  }
  if (outcome.stopReason === StopReason.DEPTH) {
    return "Stopped at a limit: max_depth (delegation deeper than the budget allows).";
  }
  return `Stopped at a limit: ${limit || outcome.stopReason}.`;
}

function pyNone(value: number | null): string {
  return value === null ? "None" : String(value);
}

function capitalized(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/** The wrap-up text. A stopped run's text always starts by saying so; partial work is never called done. */
export function templateWrapUp(node: RunNode, outcome: RunOutcome, modelText: string | null = null): string {
  const u = outcome.usage;
  const tools = node.toolsExecuted.mostCommon(1).length > 0 ? node.toolsExecuted : node.toolsRequested;
  const toolText = tools.mostCommon(8).map(([name, count]) => `${name} x${count}`).join(", ") || "none";
  const cost = `$${pyFixed(u.costUsd, 4)}` + (u.unpricedCalls ? ` (+${u.unpricedCalls} unpriced calls)` : "");
  const done = `${plural(u.modelCalls, "model call")}, ${pyInt(u.inputTokens)} input and ${pyInt(u.outputTokens)} `
    + `output tokens, ${cost}, ${pyFixed(u.seconds, 1)} s; tools: ${toolText}.`;
  if (outcome.stopReason === StopReason.DONE) return `Completed: ${done}`;
  if (outcome.stopReason === StopReason.STALLED) return stalled(node, outcome, done, modelText);
  let head = REASON_TEXT[outcome.stopReason] ?? limitLine(node, outcome);
  if (outcome.stopReason === StopReason.AWAITING_APPROVAL && isLimitName(outcome.limit)) {
    head = `Paused: the run reached ${outcome.limit} (${usedOf(node, outcome, outcome.limit)}) and waits for a `
      + `person's decision: resume it with a larger ${outcome.limit} to go on, or decline to end it.`;
  }
  const parts = [head, "The task is NOT complete; whatever the run produced so far is partial.",
    `Done so far: ${done}`];
  if (outcome.stopReason === StopReason.INCOMPLETE && outcome.detail) {
    parts.push(`Missing: ${capitalized(outcome.detail)}`);
  } else if (outcome.detail) {
    parts.push(`Missing: the rest of the task. ${capitalized(outcome.detail)}`);
  } else {
    parts.push("Missing: the rest of the task.");
  }
  if (modelText) parts.push(`Summary: ${modelText.trim()}`);
  return parts.join(" ");
}

function stalled(node: RunNode, outcome: RunOutcome, done: string, modelText: string | null): string {
  const detail = outcome.detail.split(", whatever")[0].split(" (max_stalls")[0];
  const tool = detail ? detail.split(" ")[0] : "";
  const [kinds, exact] = node.progress.distinctCount(tool);
  const parts = [detail ? `Stopped: no progress (max_stalls). ${detail}.` : "Stopped: no progress (max_stalls).",
    "The task is NOT complete; whatever the run produced so far is partial.", `Done: ${done}`];
  if (tool) {
    const calls = node.toolsExecuted.get(tool) || node.toolsRequested.get(tool) || 0;
    const gave = exact ? plural(kinds, "distinct result") : `at least ${plural(kinds, "distinct result")}`;
    parts.push(`Missing: what ${tool} should have returned next (it gave ${gave} in ${plural(calls, "call")}); `
      + "the rest of the task.");
  } else {
    parts.push("Missing: the rest of the task.");
  }
  if (modelText) parts.push(`Summary: ${modelText.trim()}`);
  return parts.join(" ");
}
