// Exactly one LLM span per model request, whichever of the AI SDK's own telemetry options are on: none, ai@6's
// `experimental_telemetry`, or ai@7's `@ai-sdk/otel` integrations (`OpenTelemetry`, `LegacyOpenTelemetry`). With
// the SDK's telemetry on, its span of each call is adopted (ours in name and attributes), so a backend counts
// each call's tokens and cost once; a refused call is marked on the SDK's span and adds no span of ours.
// A real SDK tracer provider (InMemorySpanExporter) with the AsyncLocalStorage context manager, as Node apps run.
import assert from "node:assert/strict";
import { after, before, beforeEach, test } from "node:test";
import { createOpenAI } from "@ai-sdk/openai";
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";
import { budgeted, budgetedTools, instrument, run } from "otel-budget";
import { semconv as sc } from "otel-budget/internal";
import { installedMajor, startScriptedLLM } from "./helpers.mjs";

const exporter = new InMemorySpanExporter();
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
const PRICES = { "gpt-4o": { inputPerMtok: 1000, outputPerMtok: 1000 } };
const AI_SDK_CALL = /^ai\.[A-Za-z]+\.do(Generate|Stream)$/;
let llm;
let openai;

before(async () => {
  llm = await startScriptedLLM();
  openai = createOpenAI({ baseURL: llm.openai_base_url, apiKey: "test-key" });
});
after(async () => llm.stop());
beforeEach(async () => {
  await llm.reset();
  exporter.reset();
  instrument({ prices: PRICES }); // the global tracer provider, as the SDK's telemetry uses
});

/** The SDK's telemetry options of the installed major: [label, experimental_telemetry]. */
async function telemetryOptions() {
  if (installedMajor("ai") === 6) return [["off", undefined], ["experimental_telemetry", { isEnabled: true }]];
  const { LegacyOpenTelemetry, OpenTelemetry } = await import("@ai-sdk/otel");
  return [["off", undefined], ["@ai-sdk/otel OpenTelemetry", { integrations: new OpenTelemetry() }],
    ["@ai-sdk/otel LegacyOpenTelemetry", { integrations: new LegacyOpenTelemetry() }]];
}

/** A span of one model call: a GenAI model operation, or the SDK's ai.<function>.doGenerate / doStream. */
const isCallSpan = (s) => sc.MODEL_OPERATIONS.includes(s.attributes[sc.GEN_AI_OPERATION_NAME])
  || AI_SDK_CALL.test(String(s.attributes["ai.operationId"] ?? "")) || AI_SDK_CALL.test(s.name);

/** Two tool turns (100 and 200 input tokens) under maxSteps 2: the third call is refused, never sent. */
async function loop(stream, telemetry) {
  await llm.script({ tool_calls: [{ name: "look", arguments: { q: 1 } }], input_tokens: 100, output_tokens: 10 },
    { tool_calls: [{ name: "look", arguments: { q: 2 } }], input_tokens: 200, output_tokens: 20 }, { text: "never" });
  const tools = budgetedTools({ look: tool({ description: "Looks it up.", inputSchema: z.object({ q: z.number() }),
    execute: async ({ q }) => `page ${q}` }) });
  const options = { model: budgeted(openai.chat("gpt-4o")), tools, stopWhen: stepCountIs(5), maxRetries: 0,
    prompt: "Look it up.", experimental_telemetry: telemetry };
  return run("one-span", { budget: { maxSteps: 2 } }, async () => {
    if (!stream) return generateText(options);
    const result = streamText(options);
    await result.consumeStream();
    return { text: await result.text };
  });
}

for (const stream of [false, true]) {
  test(`${stream ? "streamText" : "generateText"}: one span per request carries its tokens (and one per tool `
    + "execution), with every SDK telemetry option", async (t) => {
    for (const [label, telemetry] of await telemetryOptions()) {
      await t.test(label, async () => {
        await llm.reset();
        exporter.reset();
        const { outcome, result } = await loop(stream, telemetry);
        assert.equal(outcome.stopReason, "steps");
        assert.equal(result.text, outcome.wrapUp);
        assert.equal((await llm.requests()).length, 2);
        const spans = exporter.getFinishedSpans();
        const runSpan = spans.find((s) => s.name === "invoke_agent one-span");
        assert.ok(spans.every((s) => s.spanContext().traceId === runSpan.spanContext().traceId), "one trace");
        const withTokens = spans.filter((s) => s.attributes[sc.GEN_AI_USAGE_INPUT_TOKENS] !== undefined);
        const calls = withTokens.filter(isCallSpan);
        // besides call spans, only the SDK's own root span (ai@7's OpenTelemetry) carries tokens: the run's totals
        for (const other of withTokens.filter((s) => !isCallSpan(s))) {
          assert.equal(other.attributes[sc.GEN_AI_OPERATION_NAME], sc.OP_INVOKE_AGENT, other.name);
          assert.notEqual(other.instrumentationScope.name, sc.TRACER_NAME);
          assert.equal(other.attributes[sc.GEN_AI_USAGE_INPUT_TOKENS], 300);
        }
        const sent = calls.filter((s) => s.attributes[sc.STOP_REASON] === undefined);
        assert.deepEqual(sent.map((s) => s.attributes[sc.GEN_AI_USAGE_INPUT_TOKENS]).sort(), [100, 200]);
        assert.deepEqual(sent.map((s) => s.attributes[sc.COST_USD]).sort(), [0.11, 0.22]);
        assert.ok(sent.every((s) => s.name === "chat gpt-4o" && s.attributes[sc.TURN] >= 1), sent.map((s) => s.name));
        const refused = calls.filter((s) => s.attributes[sc.STOP_REASON] !== undefined);
        if (telemetry === undefined) {
          // our own spans only; a refused call opens none
          assert.ok(sent.every((s) => s.instrumentationScope.name === sc.TRACER_NAME));
          assert.equal(refused.length, 0);
        } else {
          // the SDK's spans, adopted: none of ours beside them; the refused call is the SDK's zero-usage span, marked
          assert.ok(calls.every((s) => s.instrumentationScope.name !== sc.TRACER_NAME), calls.map((s) => s.name));
          assert.equal(spans.filter((s) => s.instrumentationScope.name === sc.TRACER_NAME && isCallSpan(s)).length, 0);
          assert.equal(refused.length, 1);
          assert.equal(refused[0].name, "refused chat gpt-4o");
          assert.equal(refused[0].attributes[sc.STOP_REASON], "steps");
          assert.equal(refused[0].attributes[sc.OI_SPAN_KIND], sc.OI_KIND_GUARDRAIL);
          assert.equal(refused[0].attributes[sc.GEN_AI_USAGE_INPUT_TOKENS], 0);
          assert.equal(refused[0].attributes[sc.COST_USD], undefined);
        }
        const total = calls.reduce((sum, s) => sum + s.attributes[sc.GEN_AI_USAGE_INPUT_TOKENS], 0);
        assert.equal(total, 300, "each call's tokens counted once");
        // and one span per tool execution (the SDK's ai.toolCall or execute_tool span, adopted, when it has one)
        const toolSpans = spans.filter((s) => s.name === "ai.toolCall"
          || s.attributes[sc.GEN_AI_OPERATION_NAME] === sc.OP_EXECUTE_TOOL);
        assert.deepEqual(toolSpans.map((s) => s.name), ["execute_tool look", "execute_tool look"]);
        assert.ok(toolSpans.every((s) => s.attributes[sc.TOOL_ARGUMENTS_SIGNATURE] !== undefined
          && s.attributes[sc.TOOL_RESULT_SIGNATURE] !== undefined));
      });
    }
  });
}

test("the OpenInference twins are written only on request, as in Python", async () => {
  const twin = /^(openinference\.|llm\.|tool\.)/;
  for (const openinference of [undefined, true]) {
    await llm.reset();
    exporter.reset();
    instrument({ prices: PRICES, openinference });
    await loop(false, undefined);
    const ours = exporter.getFinishedSpans().filter((s) => s.instrumentationScope.name === sc.TRACER_NAME);
    assert.ok(ours.length >= 5);
    const names = new Set(ours.flatMap((s) => Object.keys(s.attributes)).filter((k) => twin.test(k)));
    if (openinference === undefined) {
      assert.deepEqual([...names], []);
    } else {
      const chat = ours.find((s) => s.name === "chat gpt-4o").attributes;
      assert.equal(chat[sc.OI_SPAN_KIND], sc.OI_KIND_LLM);
      assert.equal(chat[sc.OI_TOKEN_TOTAL], chat[sc.GEN_AI_USAGE_INPUT_TOKENS] + chat[sc.GEN_AI_USAGE_OUTPUT_TOKENS]);
      assert.equal(chat[sc.OI_COST_TOTAL], chat[sc.COST_USD]);
      assert.equal(ours.find((s) => s.name === "execute_tool look").attributes[sc.OI_TOOL_NAME], "look");
      assert.equal(ours.find((s) => s.name === "invoke_agent one-span").attributes[sc.OI_SPAN_KIND], sc.OI_KIND_AGENT);
    }
  }
});
