// Money caps against the real AI SDK and ScriptedLLM: what a run spends is summed from the usage the server was
// scripted to report for the requests it received (never from our counters). Without `strict` a cap is passed by at
// most one call's input-estimate error (DESIGN, "Overshoot"); with `strict` not at all. The scripted input is always
// larger than the library's first estimate (chars / 4 * 1.05 + 8), and never larger than the request's bytes.
import assert from "node:assert/strict";
import { after, before, beforeEach, test } from "node:test";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, tool, wrapLanguageModel } from "ai";
import { z } from "zod";
import { budgeted, budgetedTools, instrument, run } from "otel-budget";
import { startScriptedLLM } from "./helpers.mjs";

const MODEL = "gpt-4o";
const bytesOf = (params) => Buffer.byteLength(JSON.stringify({ prompt: params.prompt, tools: params.tools }), "utf8");
/** A model that records the size of every request sent (as the budget measures it) into `sizes`. */
const measured = (model, sizes) => wrapLanguageModel({ model, middleware: { specificationVersion: "v3",
  transformParams: async ({ params }) => {
    sizes.push(bytesOf(params));
    return params;
  } } });
const PRICE = { inputPerMtok: 2.5, outputPerMtok: 10 }; // explicit, so the test prices usage itself
const PROMPT = "Summarize the open invoices of the portal, page by page. ".repeat(40);
const MAX_OUT = 50;
const RATIOS = [0.3, 0.95, 0.4, 0.9, 0.35, 0.8]; // real input tokens per byte of the request: all above 1/4
const OUTPUTS = [3, 50, 20, 50, 7, 41];
const STORM = 50;
let llm;
let openai;
let chars; // the request's size as the budget measures it (UTF-8 bytes of the SDK's prompt)

const cost = (input, output) => (input * PRICE.inputPerMtok + output * PRICE.outputPerMtok) / 1e6;
const firstEstimate = (n) => Math.trunc(n / 4 * 1.05) + 8;
/** Request i: each one differs (an identical request has the identical token count) and has the same size. */
const prompt = (i) => `Request ${String(i).padStart(3, "0")}. ${PROMPT}`;

before(async () => {
  llm = await startScriptedLLM();
  openai = createOpenAI({ baseURL: llm.openai_base_url, apiKey: "test-key" });
  // measure the request once, outside any run, as the model sees it under our middleware
  await llm.setDefault({ text: "ok", input_tokens: 1, output_tokens: 1 });
  const sizes = [];
  await generateText({ model: measured(openai.chat(MODEL), sizes), maxRetries: 0, maxOutputTokens: MAX_OUT,
    prompt: prompt(0) });
  chars = sizes[0];
  assert.ok(chars > 2000, String(chars));
});
after(async () => llm.stop());
beforeEach(async () => {
  await llm.reset();
  instrument({ prices: { [MODEL]: PRICE } });
});

/** Script `n` turns whose usage varies; return what the server charges for the first k requests. */
async function scriptVaried(n) {
  const turns = Array.from({ length: n }, (_, i) => ({ text: `answer ${i}`,
    input_tokens: Math.floor(RATIOS[i % RATIOS.length] * chars), output_tokens: OUTPUTS[i % OUTPUTS.length] }));
  await llm.script(...turns);
  await llm.setDefault({ text: "past the script", input_tokens: 10 * chars, output_tokens: 10 * MAX_OUT });
  const sent = async () => (await llm.requests()).filter((r) => r.api.startsWith("openai")).length;
  return {
    sent,
    /** Dollars the server charged for the requests it received (each takes the next scripted turn). */
    spent: async (k) => turns.slice(0, k).reduce((sum, t) => sum + cost(t.input_tokens, t.output_tokens), 0),
    /** DESIGN's bound: the largest input-estimate error of one call. Every ratio is above 1/4, so the calibrated
     * estimates are never below the first one; the first one's error bounds them all. */
    bound: (k) => Math.max(...turns.slice(0, k).map((t) => cost(t.input_tokens - firstEstimate(chars), 0))),
  };
}

const ask = (model, i) => generateText({ model, maxRetries: 0, maxOutputTokens: MAX_OUT, prompt: prompt(i) });
const refusedText = (text) => text.startsWith("Stopped at a limit: max_usd");

async function sequential(budget) {
  const server = await scriptVaried(100);
  const model = budgeted(openai.chat(MODEL));
  const texts = [];
  const { outcome } = await run("money-loop", { budget }, async () => {
    for (let i = 0; i < 100; i += 1) {
      const { text } = await ask(model, i);
      texts.push(text);
      if (refusedText(text)) break;
    }
  });
  const sent = await server.sent();
  return { outcome, texts, sent, spent: await server.spent(sent), bound: server.bound(sent) };
}

async function storm(budget) {
  const server = await scriptVaried(STORM);
  const model = budgeted(openai.chat(MODEL));
  const { result, outcome } = await run("money-storm", { budget }, () =>
    Promise.all(Array.from({ length: STORM }, (_, i) => ask(model, i))));
  const sent = await server.sent();
  return { outcome, texts: result.map((r) => r.text), sent, spent: await server.spent(sent), bound: server.bound(sent) };
}

function report(name, cap, r) {
  const over = Math.max(0, r.spent - cap);
  process.stdout.write(`# ${name}: ${r.sent} requests, spent $${r.spent.toFixed(6)} of $${cap}, overshoot `
    + `$${over.toFixed(6)}, bound $${r.bound.toFixed(6)}\n`);
}

test("a sequential loop passes maxUsd by at most one call's input-estimate error", async () => {
  const cap = 0.03;
  const r = await sequential({ maxUsd: cap });
  report("sequential", cap, r);
  assert.equal(r.outcome.stopReason, "cost");
  assert.ok(r.spent <= cap + r.bound, `${r.spent} > ${cap} + ${r.bound}`);
  // the premise of the strict tests: admitted on its estimate, the last call (0.95 tokens a byte, after one of
  // 0.3) costs more than the cap had left ($0.00126 over here)
  assert.ok(r.spent > cap, `${r.spent} <= ${cap}`);
  assert.equal(r.texts.length, r.sent + 1); // the last call was refused and never sent
  assert.ok(refusedText(r.texts.at(-1)));
  assert.ok(Math.abs(r.outcome.usage.costUsd - r.spent) < 1e-9, `${r.outcome.usage.costUsd} vs ${r.spent}`);
  assert.ok(r.sent >= 5, String(r.sent)); // the cap was used
});

test("a sequential loop with strict never passes maxUsd", async () => {
  const cap = 0.03;
  const r = await sequential({ maxUsd: cap, strict: true });
  report("sequential strict", cap, r);
  assert.equal(r.outcome.stopReason, "cost");
  assert.ok(r.spent <= cap, `${r.spent} > ${cap}`);
  assert.equal(r.texts.length, r.sent + 1);
  assert.ok(refusedText(r.texts.at(-1)));
  assert.ok(Math.abs(r.outcome.usage.costUsd - r.spent) < 1e-9);
  assert.ok(r.sent >= 3, String(r.sent));
});

test("a 50-call Promise.all storm passes maxUsd by at most one call's input-estimate error", async () => {
  const cap = 0.03;
  const r = await storm({ maxUsd: cap });
  report("storm", cap, r);
  assert.equal(r.outcome.stopReason, "cost");
  assert.ok(r.spent <= cap + r.bound, `${r.spent} > ${cap} + ${r.bound}`);
  assert.equal(r.texts.filter(refusedText).length, STORM - r.sent); // refused calls never reached the server
  assert.ok(r.sent >= 8 && r.sent < STORM, String(r.sent));
  assert.ok(Math.abs(r.outcome.usage.costUsd - r.spent) < 1e-9);
});

test("a 50-call Promise.all storm with strict never passes maxUsd", async () => {
  const cap = 0.03;
  const r = await storm({ maxUsd: cap, strict: true });
  report("storm strict", cap, r);
  assert.equal(r.outcome.stopReason, "cost");
  assert.ok(r.spent <= cap, `${r.spent} > ${cap}`);
  assert.equal(r.texts.filter(refusedText).length, STORM - r.sent);
  assert.ok(r.sent >= 5 && r.sent < STORM, String(r.sent));
  assert.ok(Math.abs(r.outcome.usage.costUsd - r.spent) < 1e-9);
});

test("with strict, a request that extends the previous one is bounded by its reported count plus the new bytes", async () => {
  // A tool loop: each request repeats the last one and appends the tool call and its result. Each step's real
  // input grows by 60 tokens, less than the appended messages' bytes (so the bound is a true upper bound).
  const first = Math.floor(0.3 * chars);
  const real = Array.from({ length: 12 }, (_, k) => first + 60 * k);
  await llm.script(...real.map((input, k) => ({ tool_calls: [{ name: "open_page", arguments: { page: k + 1 } }],
    input_tokens: input, output_tokens: 20 })));
  const sizes = [];
  const cap = 6000;
  const tools = budgetedTools({ open_page: tool({ description: "Open a page of the invoice portal.",
    inputSchema: z.object({ page: z.number() }), execute: async ({ page }) => `page ${page}: 3 invoices` }) });
  const { outcome } = await run("history", { budget: { maxInputTokens: cap, strict: true } }, () => generateText({
    model: budgeted(measured(openai.chat(MODEL), sizes)), tools, stopWhen: stepCountIs(20), maxRetries: 0,
    maxOutputTokens: MAX_OUT, prompt: prompt(0) }));
  const sent = sizes.length;
  const used = real.slice(0, sent).reduce((a, b) => a + b, 0);
  assert.equal(outcome.stopReason, "tokens");
  assert.equal(outcome.limit, "max_input_tokens");
  assert.equal(outcome.usage.inputTokens, used);
  assert.ok(used <= cap, `${used} > ${cap}`);
  // one token per byte of the whole request would have refused an earlier call
  let wholeBody = 0;
  while (wholeBody < sent && real.slice(0, wholeBody).reduce((a, b) => a + b, 0) + sizes[wholeBody] <= cap) {
    wholeBody += 1;
  }
  process.stdout.write(`# history: ${sent} requests (one token per byte: ${wholeBody}), ${used} of ${cap} tokens\n`);
  assert.ok(sent > wholeBody, `${sent} <= ${wholeBody}`);
});
