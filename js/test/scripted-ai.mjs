// The set-up of the tests that drive the real AI SDK against ScriptedLLM: one server for the test file (started
// when the file is imported, stopped after its tests), OpenAI and Anthropic providers pointed at it, and before
// each test a reset server, an empty span exporter and `instrument()` with the file's options and that exporter.
import { after, beforeEach } from "node:test";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { tool } from "ai";
import { budgetedTools, instrument } from "otel-budget";
import { z } from "zod";
import { startScriptedLLM } from "./helpers.mjs";

/** `const { llm, openai, exporter } = await scriptedAI({ prices })`: `options` go to every test's `instrument()`. */
export async function scriptedAI(options = {}) {
  const llm = await startScriptedLLM();
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  after(async () => llm.stop());
  beforeEach(async () => {
    await llm.reset();
    exporter.reset();
    instrument({ tracerProvider, ...options });
  });
  return {
    llm, exporter, tracerProvider,
    openai: createOpenAI({ baseURL: llm.openai_base_url, apiKey: "test-key" }),
    anthropic: createAnthropic({ baseURL: `${llm.anthropic_base_url}/v1`, apiKey: "test-key" }),
  };
}

/**
 * The invoice portal the stuck-agent tests share: `open_portal({ page })`, gated by `budgetedTools`, records each
 * page it is asked for in `visits` and answers `answer(page, visits)` (by default a text that changes with every
 * visit, so only the repeat check can stop a loop on one page).
 */
export function portalTools(visits, answer = (page, seen) =>
  `Invoices, page ${page} (visit ${seen.length}): INV-2026-0412 OPEN`) {
  return budgetedTools({
    open_portal: tool({
      description: "Open a page of the invoice portal.",
      inputSchema: z.object({ page: z.number() }),
      execute: async ({ page }) => {
        visits.push(page);
        return answer(page, visits);
      },
    }),
  });
}
