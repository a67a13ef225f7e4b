/**
 * Spans with the names and attributes of Python's telemetry/recorder.py: `invoke_agent {run}` per run,
 * `chat {model}` per model request (the AI SDK's own span of it when its telemetry is on: peers.ts),
 * `execute_tool {tool}` per tool execution; and their metrics (metrics.ts). Telemetry never breaks the agent:
 * every failure here is swallowed. No content (prompts, completions, arguments, results) is recorded.
 */
import { type Attributes, type Context, type Span, SpanKind, SpanStatusCode, type Tracer, context, trace } from "@opentelemetry/api";
import { StopReason } from "../model/budget.js";
import { pyRound } from "../model/format.js";
import { argumentsSignature, resultSignature } from "../model/signatures.js";
import { type RunOutcome, errorLabel } from "../model/outcome.js";
import { VERSION, latestGenAiMetrics, recordCall, runEnded, runStarted } from "./metrics.js";
import { peerSpan, peerToolSpan } from "./peers.js";
import * as sc from "./semconv.js";

/** What the recorder reads of a run (core's RunNode): telemetry sits below the core and knows only this. */
export interface RunView {
  readonly name: string;
  readonly depth: number;
  readonly parent: RunView | null;
  span: Span | null;
  traceId: string | null;
  spanId: string | null;
  readonly outcome: RunOutcome | null;
  /** The wrap-up to record, when it is not the outcome's (a model-written one is content). */
  readonly recordedWrapUp?: string | null;
  readonly toolCallsRefused: number;
  /** Calls a shared ledger let through without its cap (fail "open" while unreachable). */
  readonly unenforced: number;
  spanLimits(): Record<string, number>;
  utilization(): Record<string, number>;
  utilizationMax(): number;
}

type TracerSource = { getTracer(name: string, version?: string): Tracer };
let tracerSource: TracerSource | null = null;
let cachedTracer: Tracer | null = null;
let twins: boolean | null = null;
/** Tool spans adopted from the SDK (its own wrapper ends them). */
const adoptedTools = new WeakSet<Span>();

/** Whether spans also carry the OpenInference twins (Arize AX, Phoenix before 15.10): `instrument({
 * openinference })`, else OTEL_BUDGET_OPENINFERENCE; off by default, as in Python. */
export function setOpenInference(on: boolean | null): void {
  twins = on;
}

function oi(): boolean {
  if (twins !== null) return twins;
  return ["1", "true", "yes", "on"].includes((process.env[sc.ENV_OPENINFERENCE] ?? "").trim().toLowerCase());
}

/** The tracer provider to use (`instrument({ tracerProvider })`); null: @opentelemetry/api's global one. */
export function setTracerProvider(provider: TracerSource | null): void {
  tracerSource = provider;
  cachedTracer = null;
}

function tracer(): Tracer {
  // the global tracer is looked up on use, so a provider registered after instrument() still gets the spans
  if (tracerSource === null) return trace.getTracer(sc.TRACER_NAME, VERSION);
  return (cachedTracer ??= tracerSource.getTracer(sc.TRACER_NAME, VERSION));
}

function safe<T>(fn: () => T, fallback: T): T {
  try {
    return fn();
  } catch {
    return fallback;
  }
}

export function startRun(node: RunView): Span | null {
  runStarted(node);
  return safe(() => {
    const attrs: Attributes = {
      [sc.GEN_AI_OPERATION_NAME]: sc.OP_INVOKE_AGENT,
      [sc.GEN_AI_AGENT_NAME]: node.name,
      [sc.RUN_DEPTH]: node.depth,
    };
    if (oi()) attrs[sc.OI_SPAN_KIND] = sc.OI_KIND_AGENT;
    for (const [dim, limit] of Object.entries(node.spanLimits())) attrs[sc.LIMIT_PREFIX + dim] = limit;
    const parent = node.parent !== null ? spanContext(node.parent.span) : context.active();
    const span = tracer().startSpan(`${sc.OP_INVOKE_AGENT} ${node.name}`,
      { kind: SpanKind.INTERNAL, attributes: attrs }, parent);
    node.span = span;
    const ctx = span.spanContext();
    if (trace.isSpanContextValid(ctx)) {
      node.traceId = ctx.traceId;
      node.spanId = ctx.spanId;
    }
    return span;
  }, null);
}

export function spanContext(span: Span | null): Context {
  return span !== null ? trace.setSpan(context.active(), span) : context.active();
}

export function endRun(node: RunView, span: Span | null): void {
  const outcome = node.outcome;
  runEnded(node, outcome?.stopReason ?? null);
  if (span === null || outcome === null) return;
  try {
    const u = outcome.usage;
    const used: Record<string, number> = {
      steps: u.modelCalls, tool_calls: u.toolCalls, seconds: u.seconds, input_tokens: u.inputTokens,
      output_tokens: u.outputTokens, total_tokens: u.inputTokens + u.outputTokens, usd: pyRound(u.costUsd, 10),
    };
    const attrs: Attributes = { [sc.STOP_REASON]: outcome.stopReason, [sc.UNPRICED_CALLS]: u.unpricedCalls };
    for (const [dim, value] of Object.entries(used)) attrs[sc.USED_PREFIX + dim] = value;
    attrs[sc.UTILIZATION] = node.utilizationMax();
    if (outcome.limit) attrs[sc.STOP_LIMIT] = outcome.limit;
    if (node.unenforced) attrs[sc.LEDGER_UNENFORCED_CALLS] = node.unenforced;
    if (node.toolCallsRefused) attrs[sc.TOOL_CALLS_REFUSED] = node.toolCallsRefused;
    const wrapUp = node.recordedWrapUp ?? outcome.wrapUp;
    if (wrapUp) attrs[sc.WRAP_UP] = wrapUp;
    span.setAttributes(attrs);
    if (outcome.stopReason !== StopReason.DONE) {
      const event: Attributes = { [sc.STOP_REASON]: outcome.stopReason, [sc.STOP_DETAIL]: outcome.detail };
      if (outcome.limit) event[sc.STOP_LIMIT] = outcome.limit;
      span.addEvent(sc.EVENT_STOP, event);
    }
    if (outcome.stopReason === StopReason.ERROR) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.detail || "error" });
    }
  } catch {
    // telemetry never breaks the run
  } finally {
    safe(() => span.end(), undefined);
  }
}

export interface CallRecord {
  provider: string;
  model: string;
  maxOutputTokens: number | null;
  turn: number;
  responseModel?: string;
  responseId?: string;
  finishReasons?: string[];
  usage?: { input: number; output: number; cacheRead: number; cacheWrite: number; reasoning: number };
  costUsd: number | null;
  /** Some of `usage` was estimated, not reported (a stream left, aborted or cut): marked on the span. */
  usageEstimated?: boolean;
  toolCalls?: [string, unknown][];
  error?: unknown;
  /** The root run's name (the run_name of the call's metrics). */
  runName?: string;
  /** False: a shared ledger let the call through without its cap; undefined: no shared scope. */
  ledgerEnforced?: boolean;
  /** When the call started (performance.now(), set by startCall). */
  startedAt?: number;
  /** Whether the span is the SDK's own span of the call, adopted (its owner ends it). */
  adopted?: boolean;
}

/** The cache-write attribute: the released name, or the newest one when the opt-in asks for it (as Python). */
function cacheWriteAttr(): string {
  return latestGenAiMetrics() ? sc.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS : sc.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS;
}

export function startCall(call: CallRecord, parent: Context): Span | null {
  call.startedAt = performance.now();
  return safe(() => {
    const attrs: Attributes = {
      [sc.GEN_AI_OPERATION_NAME]: sc.OP_CHAT,
      [sc.GEN_AI_PROVIDER_NAME]: call.provider,
      [sc.GEN_AI_REQUEST_MODEL]: call.model,
    };
    if (oi()) {
      attrs[sc.OI_SPAN_KIND] = sc.OI_KIND_LLM;
      attrs[sc.OI_LLM_PROVIDER] = (sc.OI_PROVIDERS as Record<string, string>)[call.provider] ?? call.provider;
    }
    if (call.maxOutputTokens !== null) attrs[sc.GEN_AI_REQUEST_MAX_TOKENS] = call.maxOutputTokens;
    if (call.ledgerEnforced !== undefined) attrs[sc.LEDGER_ENFORCED] = call.ledgerEnforced;
    const peer = peerSpan(call.model); // the SDK's own span of this very call: one LLM span, ours in content
    if (peer !== null) {
      call.adopted = true;
      peer.updateName(`${sc.OP_CHAT} ${call.model}`);
      peer.setAttributes(attrs);
      return peer;
    }
    return tracer().startSpan(`${sc.OP_CHAT} ${call.model}`, { kind: SpanKind.CLIENT, attributes: attrs },
      parent);
  }, null);
}

export function endCall(call: CallRecord, span: Span | null): void {
  const errorType = call.error !== undefined ? (call.error as Error)?.name || "Error" : undefined;
  recordCall({ operation: sc.OP_CHAT, provider: call.provider, model: call.model, responseModel: call.responseModel,
    errorType, runName: call.runName ?? null, usage: call.usage, costUsd: call.costUsd,
    seconds: call.startedAt === undefined ? 0 : (performance.now() - call.startedAt) / 1000 });
  if (span === null) return;
  try {
    const attrs: Attributes = { [sc.COST_SOURCE]: call.costUsd === null ? sc.COST_UNPRICED : sc.COST_PRICED };
    if (call.turn) attrs[sc.TURN] = call.turn;
    if (call.responseModel) attrs[sc.GEN_AI_RESPONSE_MODEL] = call.responseModel;
    if (call.responseId) attrs[sc.GEN_AI_RESPONSE_ID] = call.responseId;
    if (call.finishReasons) attrs[sc.GEN_AI_RESPONSE_FINISH_REASONS] = call.finishReasons;
    const u = call.usage;
    if (u !== undefined) {
      attrs[sc.GEN_AI_USAGE_INPUT_TOKENS] = u.input;
      attrs[sc.GEN_AI_USAGE_OUTPUT_TOKENS] = u.output;
      if (u.cacheRead) attrs[sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = u.cacheRead;
      if (u.cacheWrite) attrs[cacheWriteAttr()] = u.cacheWrite;
      if (u.reasoning) attrs[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = u.reasoning;
    }
    if (call.usageEstimated) attrs[sc.USAGE_ESTIMATED] = true;
    if (call.costUsd !== null) attrs[sc.COST_USD] = pyRound(call.costUsd, 10);
    if (oi()) twinAttributes(attrs, call);
    if (call.toolCalls && call.toolCalls.length > 0) {
      attrs[sc.ACTIONS] = call.toolCalls.map(([name, args]) => `${name}:${argumentsSignature(args)}`);
    }
    if (errorType !== undefined) {
      attrs[sc.ERROR_TYPE] = errorType;
      span.setStatus({ code: SpanStatusCode.ERROR, message: errorLabel(call.error) }); // never the message
    }
    span.setAttributes(attrs);
  } catch {
    // telemetry never breaks the agent
  } finally {
    if (!call.adopted) safe(() => span.end(), undefined);
  }
}

/** The OpenInference twins of a finished call's GenAI attributes (telemetry/openinference.py `call_attributes`). */
function twinAttributes(attrs: Attributes, call: CallRecord): void {
  attrs[sc.OI_LLM_MODEL_NAME] = call.responseModel || call.model;
  const u = call.usage;
  if (u !== undefined) {
    attrs[sc.OI_TOKEN_PROMPT] = u.input;
    attrs[sc.OI_TOKEN_COMPLETION] = u.output;
    attrs[sc.OI_TOKEN_TOTAL] = u.input + u.output;
    if (u.cacheRead) attrs[sc.OI_TOKEN_CACHE_READ] = u.cacheRead;
    if (u.cacheWrite) attrs[sc.OI_TOKEN_CACHE_WRITE] = u.cacheWrite;
    if (u.reasoning) attrs[sc.OI_TOKEN_REASONING] = u.reasoning;
  }
  if (call.costUsd !== null) attrs[sc.OI_COST_TOTAL] = attrs[sc.COST_USD];
}

export function startTool(name: string, callId: string | null, args: unknown, parent: Context): Span | null {
  return safe(() => {
    const attrs: Attributes = {
      [sc.GEN_AI_OPERATION_NAME]: sc.OP_EXECUTE_TOOL,
      [sc.GEN_AI_TOOL_NAME]: name,
      [sc.GEN_AI_TOOL_TYPE]: sc.TOOL_TYPE_FUNCTION,
      [sc.TOOL_ARGUMENTS_SIGNATURE]: argumentsSignature(args),
    };
    if (oi()) {
      attrs[sc.OI_SPAN_KIND] = sc.OI_KIND_TOOL;
      attrs[sc.OI_TOOL_NAME] = name;
    }
    if (callId) attrs[sc.GEN_AI_TOOL_CALL_ID] = callId;
    const peer = peerToolSpan(name); // the SDK's span of this tool execution: one tool span, ours in content
    if (peer !== null) {
      adoptedTools.add(peer);
      peer.updateName(`${sc.OP_EXECUTE_TOOL} ${name}`);
      peer.setAttributes(attrs);
      return peer;
    }
    return tracer().startSpan(`${sc.OP_EXECUTE_TOOL} ${name}`, { kind: SpanKind.INTERNAL,
      attributes: attrs }, parent);
  }, null);
}

export function endTool(span: Span | null, result: unknown, error: unknown, refused: string | null): void {
  if (span === null) return;
  try {
    if (error !== undefined) {
      span.setAttribute(sc.ERROR_TYPE, (error as Error)?.name || "Error");
      span.setStatus({ code: SpanStatusCode.ERROR });
    } else if (refused !== null) {
      span.setAttribute(sc.STOP_REASON, refused);
    } else {
      span.setAttribute(sc.TOOL_RESULT_SIGNATURE, resultSignature(result));
    }
  } catch {
    // telemetry never breaks the agent
  } finally {
    if (!adoptedTools.has(span)) safe(() => span.end(), undefined);
  }
}
