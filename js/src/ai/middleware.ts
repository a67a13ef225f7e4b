/**
 * The AI SDK adapter's brake point: language-model middleware for `wrapLanguageModel` (ai@6 and ai@7). Every
 * call is checked before it is sent; a refused call is answered with a normal final result whose text is the
 * wrap-up (finishReason `stop`, zero usage), never a thrown error, never a silent stream error. Adapters
 * translate, the core decides.
 */
import * as ai from "ai";
import { type Admission, type PromptParts, admitWaiting, settleCall } from "../core/admission.js";
import { getSettings } from "../core/config.js";
import { noteAttempt } from "../core/deadline.js";
import { leftStreamUsage } from "./estimate.js";
import type { RunNode } from "../core/node.js";
import { currentNode, usageKey } from "../core/run.js";
import { recordToolRequests } from "../core/watch.js";
import { refusalWrapUp } from "../core/wrapup_model.js";
import { StopReason } from "../model/budget.js";
import { BudgetExceeded } from "../model/outcome.js";
import { markRefused } from "../telemetry/peers.js";
import { type CallRecord, endCall, startCall, spanContext } from "../telemetry/recorder.js";

/* eslint-disable @typescript-eslint/no-explicit-any */
type Params = { prompt?: unknown; tools?: unknown; maxOutputTokens?: number; [key: string]: unknown };
type Model = { specificationVersion?: string; provider?: string; modelId?: string; doGenerate(p: any): PromiseLike<any>;
  doStream(p: any): PromiseLike<any> };

interface Usage4 { input: number; output: number; cacheRead: number; cacheWrite: number; reasoning: number }

/** Our provider name (`gen_ai.provider.name`) from the SDK's provider id: "openai.chat" -> "openai". */
function providerName(model: Model): string {
  return String(model.provider ?? "unknown").split(".")[0];
}

function inputChars(params: Params): number {
  try {
    // UTF-8 bytes: a token is at least one byte, so this bounds the input tokens of the request's text
    return Buffer.byteLength(JSON.stringify({ prompt: params.prompt, tools: params.tools }) ?? "", "utf8");
  } catch {
    return 0;
  }
}

/** What the input bound of a request that extends the previous one reads: the fields that change the input
 * besides the messages (tools, tool choice, response format), and the messages. */
function promptParts(params: Params): () => PromptParts {
  return () => ({ rest: { tools: params.tools, toolChoice: params.toolChoice, responseFormat: params.responseFormat },
    messages: params.prompt });
}

function num(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) ? value : 0;
}

/** Usage as the SDK reports it (V3/V4 objects, or V2 numbers): input includes cached, output includes reasoning. */
function readUsage(usage: any): Usage4 | null {
  if (usage === null || typeof usage !== "object") return null;
  if (typeof usage.inputTokens === "object" && usage.inputTokens !== null) {
    const input = usage.inputTokens;
    const output = usage.outputTokens ?? {};
    if (input.total === undefined && output.total === undefined) return null;
    return { input: num(input.total), output: num(output.total), cacheRead: num(input.cacheRead),
      cacheWrite: num(input.cacheWrite), reasoning: num(output.reasoning) };
  }
  if (usage.inputTokens === undefined && usage.outputTokens === undefined) return null;
  return { input: num(usage.inputTokens), output: num(usage.outputTokens), cacheRead: num(usage.cachedInputTokens),
    cacheWrite: 0, reasoning: num(usage.reasoningTokens) };
}

function zeroUsage(v2: boolean): unknown {
  return v2 ? { inputTokens: 0, outputTokens: 0, totalTokens: 0 }
    : { inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 },
      outputTokens: { total: 0, text: 0, reasoning: 0 } };
}

function stopReasonPart(v2: boolean): unknown {
  return v2 ? "stop" : { unified: "stop", raw: "otel_budget" };
}

/** The wrap-up a refused call answers with: the run's wrap-up for the state at the refusal (with `wrapUp:
 * "model"`, after one short tool-less call through this model). */
async function refusalText(node: RunNode, exc: BudgetExceeded, model: Model): Promise<string> {
  const { text, usage } = await refusalWrapUp(node, exc, (prompt, max) => wrapUpCall(node, model, prompt, max));
  node.refused = { reason: exc.outcome.stopReason, key: usageKey(usage), text };
  return text;
}

/** The call that writes the wrap-up: no tools, a short output limit, admitted and settled like any call. */
async function wrapUpCall(node: RunNode, model: Model, prompt: string, maxOutputTokens: number):
  Promise<string | null> {
  const { adm, call, chars, params } = await begin(node, model,
    { prompt: [{ role: "user", content: [{ type: "text", text: prompt }] }], maxOutputTokens });
  const span = startCall(call, spanContext(node.span));
  const deadline = deadlineSignal(node, params);
  let result: any;
  try {
    result = await model.doGenerate(deadline !== null ? { ...params, abortSignal: deadline.signal } : params);
  } catch (exc) {
    finish(adm, call, chars, null);
    call.error = exc;
    endCall(call, span);
    throw exc;
  } finally {
    deadline?.clear();
  }
  finish(adm, call, chars, readUsage(result?.usage));
  call.responseModel = result?.response?.modelId;
  call.responseId = result?.response?.id;
  call.finishReasons = [finishReasonText(result?.finishReason)];
  endCall(call, span);
  const parts = Array.isArray(result?.content) ? result.content : [];
  return parts.filter((p: any) => p?.type === "text").map((p: any) => String(p.text ?? "")).join("") || null;
}

function cost(provider: string, modelId: string, u: Usage4): number | null {
  const pricing = getSettings().prices.lookup(provider, modelId);
  return pricing === null ? null : pricing.cost(u.input, u.output, u.cacheRead, u.cacheWrite);
}

async function begin(node: RunNode, model: Model, params: Params):
  Promise<{ adm: Admission; call: CallRecord; chars: number; params: Params }> {
  const provider = providerName(model);
  const modelId = String(model.modelId ?? "unknown");
  let chars = -1;
  const measure = () => (chars = chars < 0 ? inputChars(params) : chars);
  node.root.budgetedCalls += 1; // a call the budget refuses went through the budgeted model too
  for (const n of node.chain) { // wrapUp "model": a run that ends stopped writes it through this model
    if (n.budget.wrapUp === "model") n.wrapUpCall = (prompt, max) => wrapUpCall(n, model, prompt, max);
  }
  const adm = await admitWaiting(node, provider, modelId, params.maxOutputTokens ?? null, measure, 1,
    promptParts(params));
  let callParams = adm.setMaxTokens ? { ...params, maxOutputTokens: adm.maxOutputTokens as number } : params;
  if (adm.noTools && Array.isArray(params.tools) && params.tools.length > 0) {
    // No tool call remains (maxToolCalls): the call goes without tools (as the wrap-up call), so the model
    // answers and the run can end `done`. LanguageModelV2/V3/V4 call options all name them `tools` and
    // `toolChoice`; the SDK's providers drop tools themselves for toolChoice "none".
    callParams = Object.fromEntries(Object.entries(callParams).filter(([k]) => k !== "tools" && k !== "toolChoice"));
  }
  const call: CallRecord = { provider, model: modelId, maxOutputTokens: callParams.maxOutputTokens ?? null,
    turn: adm.turn, costUsd: null, runName: node.root.name,
    ledgerEnforced: adm.shared.length > 0 ? adm.shared.every((r) => r.enforced) : undefined };
  // measured only when a token or money limit needed the request's size (no per-call work for other runs)
  return { adm, call, chars, params: callParams };
}

function finish(adm: Admission, call: CallRecord, chars: number, usage: Usage4 | null): void {
  const u = usage ?? { input: adm.inputEstimate, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 };
  call.usage = u;
  call.costUsd = cost(call.provider, call.model, u);
  settleCall(adm, { inputTokens: u.input, outputTokens: u.output, cacheRead: u.cacheRead, cacheWrite: u.cacheWrite,
    reasoning: u.reasoning }, call.costUsd, usage !== null && chars > 0 ? chars : null);
}

async function wrapGenerate({ doGenerate, params, model }: { doGenerate: () => PromiseLike<any>; params: Params;
  model: Model }): Promise<any> {
  const node = currentNode();
  if (node === undefined) return doGenerate(); // outside any run: not braked
  let started;
  try {
    started = await begin(node, model, params);
  } catch (exc) {
    if (exc instanceof BudgetExceeded) {
      markRefused(String(model.modelId ?? "unknown"), exc.reason, exc.limit);
      return refusedResult(node, exc, model);
    }
    throw exc;
  }
  const { adm, call, chars } = started;
  const span = startCall(call, spanContext(node.span));
  const deadline = deadlineSignal(node, started.params);
  let result: any;
  try {
    result = started.params !== params || deadline !== null
      ? await model.doGenerate(deadline !== null ? { ...started.params, abortSignal: deadline.signal } : started.params)
      : await doGenerate();
  } catch (exc) {
    finish(adm, call, chars, null);
    call.error = exc;
    endCall(call, span);
    noteAttempt(node, exc); // a retryable failure: a deadline before the SDK's retry is a cut retry wait
    if (deadline?.expired()) {
      // the run's time ran out while the call was in flight: the SDK gets the wrap-up, not an abort error
      return refusedResult(node, node.stop(StopReason.TIME, "max_seconds",
        "the run's time ran out while a call was in flight."), model);
    }
    throw exc;
  } finally {
    deadline?.clear();
  }
  noteAttempt(node, null);
  finish(adm, call, chars, readUsage(result?.usage));
  const toolCalls = (Array.isArray(result?.content) ? result.content : [])
    .filter((p: any) => p?.type === "tool-call" && !p.providerExecuted);
  call.responseModel = result?.response?.modelId;
  call.responseId = result?.response?.id;
  call.finishReasons = [finishReasonText(result?.finishReason)];
  call.toolCalls = toolCalls.map((p: any) => [p.toolName, p.input]);
  recordToolRequests(node, toolCalls.map((p: any) => [p.toolName, p.input, p.toolCallId]));
  endCall(call, span);
  return result;
}

/** An abort signal that fires when the run's time (maxSeconds, the tightest of the chain) is up, joined with
 * the caller's own; null when no run of the chain has a time limit. */
function deadlineSignal(node: RunNode, params: Params): { signal: AbortSignal; expired(): boolean; clear(): void }
  | null {
  if (node.deadline === Infinity) return null;
  const ours = new AbortController();
  const timer = setTimeout(() => ours.abort(new DOMException("the run's time (maxSeconds) is up", "TimeoutError")),
    Math.max(1, node.timeLeft() * 1000));
  timer.unref?.();
  const theirs = params.abortSignal as AbortSignal | undefined;
  return {
    signal: theirs !== undefined ? AbortSignal.any([theirs, ours.signal]) : ours.signal,
    expired: () => ours.signal.aborted,
    clear: () => clearTimeout(timer),
  };
}

function finishReasonText(reason: any): string {
  return typeof reason === "string" ? reason : String(reason?.unified ?? "unknown");
}

async function refusedResult(node: RunNode, exc: BudgetExceeded, model: Model): Promise<unknown> {
  const v2 = model.specificationVersion === "v2";
  const text = await refusalText(node, exc, model);
  return {
    content: [{ type: "text", text }],
    finishReason: stopReasonPart(v2),
    usage: zeroUsage(v2),
    warnings: [],
    response: { id: `otel-budget-refused-${node.root.turns}`, modelId: model.modelId, timestamp: new Date() },
    providerMetadata: { otel_budget: { stopReason: exc.reason, limit: exc.limit ?? null } },
  };
}

/** The stream parts of an answer whose text is the wrap-up (finish `stop`, zero usage). */
async function wrapUpParts(node: RunNode, exc: BudgetExceeded, model: Model): Promise<unknown[]> {
  const v2 = model.specificationVersion === "v2";
  const id = `otel-budget-${node.root.turns}`;
  const text = await refusalText(node, exc, model);
  return [
    { type: "text-start", id },
    { type: "text-delta", id, delta: text },
    { type: "text-end", id },
    { type: "finish", finishReason: stopReasonPart(v2), usage: zeroUsage(v2),
      providerMetadata: { otel_budget: { stopReason: exc.reason, limit: exc.limit ?? null } } },
  ];
}

async function refusedStream(node: RunNode, exc: BudgetExceeded, model: Model): Promise<unknown> {
  const parts = [
    { type: "stream-start", warnings: [] },
    { type: "response-metadata", id: `otel-budget-${node.root.turns}`, modelId: model.modelId, timestamp: new Date() },
    ...await wrapUpParts(node, exc, model),
  ];
  return { stream: new ReadableStream({ start(controller) {
    for (const part of parts) controller.enqueue(part);
    controller.close();
  } }) };
}

async function wrapStream({ doStream, params, model }: { doStream: () => PromiseLike<any>; params: Params;
  model: Model }): Promise<any> {
  const node = currentNode();
  if (node === undefined) return doStream();
  let started;
  try {
    started = await begin(node, model, params);
  } catch (exc) {
    if (exc instanceof BudgetExceeded) {
      markRefused(String(model.modelId ?? "unknown"), exc.reason, exc.limit);
      return refusedStream(node, exc, model);
    }
    throw exc;
  }
  const { adm, call, chars } = started;
  const span = startCall(call, spanContext(node.span));
  const deadline = deadlineSignal(node, started.params);
  let inner: any;
  try {
    inner = started.params !== params || deadline !== null
      ? await model.doStream(deadline !== null ? { ...started.params, abortSignal: deadline.signal } : started.params)
      : await doStream();
  } catch (exc) {
    deadline?.clear();
    finish(adm, call, chars, null);
    call.error = exc;
    endCall(call, span);
    noteAttempt(node, exc);
    if (deadline?.expired()) {
      return refusedStream(node, node.stop(StopReason.TIME, "max_seconds",
        "the run's time ran out while a call was in flight."), model);
    }
    throw exc;
  }
  noteAttempt(node, null);
  let usage: Usage4 | null = null;
  let outputChars = 0;
  const toolCalls: [string, unknown][] = [];
  let closed = false;
  const close = (error?: unknown): void => {
    if (closed) return;
    closed = true;
    deadline?.clear();
    node.openCalls.delete(abandon);
    // not reported (left, aborted or cut): the best estimate, never zero
    if (usage === null) {
      usage = leftStreamUsage(adm, () => inputChars(started.params), outputChars);
      call.usageEstimated = true;
    }
    finish(adm, call, chars, usage);
    call.toolCalls = toolCalls;
    if (error !== undefined) call.error = error;
    endCall(call, span);
  };
  const abandon = (): void => close();
  node.openCalls.add(abandon);
  const reader = inner.stream.getReader();
  const stream = new ReadableStream({
    async pull(controller) {
      let step;
      try {
        step = await reader.read();
      } catch (exc) {
        close(exc);
        if (deadline?.expired()) {
          // the run's time ran out while the answer was streaming: it ends with the wrap-up, not a stream error
          const stop = node.stop(StopReason.TIME, "max_seconds", "the run's time ran out while an answer was "
            + "streaming; the stream was closed.");
          for (const wrapUp of await wrapUpParts(node, stop, model)) controller.enqueue(wrapUp);
          controller.close();
          return;
        }
        controller.error(exc);
        return;
      }
      if (step.done) {
        close();
        controller.close();
        return;
      }
      const part = step.value;
      try {
        observe(part);
      } catch {
        // metering never breaks the stream
      }
      // settled at the finish part: the SDK's own span of the call (adopted) may end before the stream does
      if (part?.type === "finish") close();
      controller.enqueue(part);
    },
    async cancel(reason) {
      close();
      await reader.cancel(reason);
    },
  });
  function observe(part: any): void {
    switch (part?.type) {
      case "text-delta":
      case "reasoning-delta":
      case "tool-input-delta":
        outputChars += String(part.delta ?? part.textDelta ?? "").length;
        break;
      case "tool-call":
        if (!part.providerExecuted) {
          toolCalls.push([part.toolName, part.input]);
          // recorded before the SDK sees the part, so before the tool runs (its gate counts it once)
          recordToolRequests(node as RunNode, [[part.toolName, part.input, part.toolCallId]]);
        }
        break;
      case "response-metadata":
        call.responseModel = part.modelId ?? call.responseModel;
        call.responseId = part.id ?? call.responseId;
        break;
      case "finish":
        usage = readUsage(part.usage);
        call.finishReasons = [finishReasonText(part.finishReason)];
        break;
      default:
    }
  }
  return { ...inner, stream };
}

/** The middleware `budgeted()` applies: pass it to `wrapLanguageModel` yourself to combine it with others. */
export const budgetMiddleware = {
  specificationVersion: "v3" as const,
  wrapGenerate,
  wrapStream,
};

/**
 * A model whose every call is checked against the current run's budget before it is sent:
 * `wrapLanguageModel({ model, middleware: budgetMiddleware })`. Outside a `run()` the model is not braked.
 */
export function budgeted<M>(model: M): M {
  if (model === null || typeof model !== "object" || typeof (model as any).doGenerate !== "function") {
    throw new TypeError(`budgeted(model): give a language model object, e.g. budgeted(openai("gpt-4o")); got `
      + `${typeof model === "string" ? JSON.stringify(model) + " (a model id string: resolve it with its provider "
        + "first)" : typeof model}`);
  }
  return (ai.wrapLanguageModel as any)({ model, middleware: budgetMiddleware }) as M;
}


