/**
 * The AI SDK's own span of the same model call, adopted so each request has one LLM span (Python's
 * telemetry/peers.py and DESIGN "Exactly one LLM span per model request in a trace").
 *
 * With the SDK's telemetry on, the SDK opens a span around every model call before our middleware runs, and
 * makes it the active span: `ai.generateText.doGenerate` / `ai.streamText.doStream` (ai@6's
 * `experimental_telemetry`, and `LegacyOpenTelemetry` of `@ai-sdk/otel` on ai@7), or `chat {model}` (ai@7's
 * `@ai-sdk/otel` `OpenTelemetry` integration). It records the call's token counts itself. A span of ours beside
 * it would be a second LLM span with the same tokens, so a backend would count the call twice: we open none, and
 * write our name, attributes and status on theirs instead; its owner ends it. A call the budget refuses is marked
 * on their span (`refused chat {model}`, `stop.reason`): it carries the SDK's zero usage, and no span of ours.
 */
import { type Attributes, type Span, trace } from "@opentelemetry/api";
import * as sc from "./semconv.js";

/** The names of the SDK's per-call spans (its operation ids): ai.<function>.doGenerate / ai.<function>.doStream. */
const AI_SDK_CALL = /^ai\.[A-Za-z]+\.do(Generate|Stream)$/;
/** The attribute holding the SDK's operation id on its spans. */
const AI_SDK_OPERATION_ID = "ai.operationId";
/** ai@6's (and LegacyOpenTelemetry's) span of one tool execution, and its attribute naming the tool. */
const AI_SDK_TOOL_CALL = "ai.toolCall";
const AI_SDK_TOOL_NAME = "ai.toolCall.name";
const MODEL_OPERATIONS: ReadonlySet<unknown> = new Set(sc.MODEL_OPERATIONS);

/** Another instrumentation's open span of this very tool execution (the SDK's `ai.toolCall` or `execute_tool
 * {name}`), adopted as the tool's one span. */
export function peerToolSpan(name: string): Span | null {
  try {
    const span = trace.getActiveSpan();
    if (span === undefined || !span.isRecording()) return null;
    const s = span as unknown as ReadableSpan;
    const scope = s.instrumentationScope?.name ?? s.instrumentationLibrary?.name;
    if (scope === sc.TRACER_NAME) return null;
    const attrs = s.attributes ?? {};
    if ((s.name === AI_SDK_TOOL_CALL || attrs[AI_SDK_OPERATION_ID] === AI_SDK_TOOL_CALL)
      && attrs[AI_SDK_TOOL_NAME] === name) return span;
    if (attrs[sc.GEN_AI_OPERATION_NAME] === sc.OP_EXECUTE_TOOL && attrs[sc.GEN_AI_TOOL_NAME] === name) return span;
  } catch {
    // telemetry never breaks the agent
  }
  return null;
}

/** An SDK span read through the OpenTelemetry SDK's Span class (the API does not expose names and attributes). */
interface ReadableSpan {
  name?: unknown;
  attributes?: Attributes;
  instrumentationScope?: { name?: string };
  instrumentationLibrary?: { name?: string };
}

/** Another instrumentation's open span of this very call to `model` (the active span), or null. */
export function peerSpan(model: string): Span | null {
  try {
    const span = trace.getActiveSpan();
    if (span === undefined || !span.isRecording()) return null;
    const s = span as unknown as ReadableSpan;
    const scope = s.instrumentationScope?.name ?? s.instrumentationLibrary?.name;
    if (scope === sc.TRACER_NAME) return null; // ours (a budgeted model inside another budgeted one)
    const attrs = s.attributes ?? {};
    if (AI_SDK_CALL.test(String(s.name ?? "")) || AI_SDK_CALL.test(String(attrs[AI_SDK_OPERATION_ID] ?? ""))) {
      return span;
    }
    if (MODEL_OPERATIONS.has(attrs[sc.GEN_AI_OPERATION_NAME]) && attrs[sc.GEN_AI_REQUEST_MODEL] === model) return span;
  } catch {
    // telemetry never breaks the agent
  }
  return null;
}

/** The budget refused this call before it was sent: another instrumentation's open span of it says so. */
export function markRefused(model: string, reason: string, limit: string | null | undefined): void {
  const peer = peerSpan(model);
  if (peer === null) return;
  try {
    peer.updateName(`refused ${sc.OP_CHAT} ${model}`);
    peer.setAttributes({ [sc.OI_SPAN_KIND]: sc.OI_KIND_GUARDRAIL, [sc.STOP_REASON]: reason,
      ...(limit ? { [sc.STOP_LIMIT]: limit } : {}) });
  } catch {
    // telemetry never breaks the agent
  }
}
