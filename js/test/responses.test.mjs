// The brake with the OpenAI Responses model (`openai.responses(...)`) against ScriptedLLM's /v1/responses route:
// metering (cached input, reasoning output, cost) and the stops, through generateText and streamText.
import assert from "node:assert/strict";
import { test } from "node:test";
import { calcPrice } from "@pydantic/genai-prices";
import { generateText, stepCountIs, streamText } from "ai";
import { budgeted, run } from "otel-budget";
import { portalTools, scriptedAI } from "./scripted-ai.mjs";

const { llm, openai, exporter } = await scriptedAI();

const sent = async () => (await llm.requests()).filter((r) => r.api.startsWith("openai"));
const chats = () => exporter.getFinishedSpans().filter((s) => s.name.startsWith("chat "));
const price = (input, output, cacheRead) => calcPrice({ input_tokens: input, output_tokens: output,
  cache_read_tokens: cacheRead }, "gpt-4o", { providerId: "openai" }).total_price;
const toolTurn = (page) => ({ tool_calls: [{ name: "open_portal", arguments: { page } }], input_tokens: 400,
  output_tokens: 20 });


async function ask(mode, options) {
  if (mode === "generateText") return generateText(options);
  const errors = [];
  const stream = streamText({ ...options, onError: ({ error }) => errors.push(error) });
  const out = { text: await stream.text, finishReason: await stream.finishReason, steps: await stream.steps };
  assert.deepEqual(errors, []);
  return out;
}

for (const mode of ["generateText", "streamText"]) {
  test(`responses ${mode}: cached input and reasoning output are counted, and priced as genai-prices prices them`,
    async () => {
      const turn = { text: "Two invoices are open.", input_tokens: 1000, cache_read_tokens: 600, output_tokens: 40,
        reasoning_tokens: 25 };
      await llm.script(turn);
      const { result, outcome } = await run("responses-meter", { budget: { maxUsd: 1 } }, () => ask(mode, {
        model: budgeted(openai.responses("gpt-4o")), maxRetries: 0, prompt: "Which are open?" }));
      assert.equal(result.text, turn.text);
      const requests = await sent();
      assert.deepEqual(requests.map((r) => [r.api, r.stream]), [["openai.responses", mode === "streamText"]]);
      const u = outcome.usage;
      assert.deepEqual([u.modelCalls, u.inputTokens, u.outputTokens, u.cacheReadTokens, u.reasoningTokens],
        [1, 1000, 40, 600, 25]);
      assert.equal(u.costUsd, Math.round(price(1000, 40, 600) * 1e10) / 1e10);
      assert.ok(u.costUsd < price(1000, 40, 0), "cached input is cheaper");
      const [span] = chats();
      assert.equal(span.attributes["gen_ai.usage.input_tokens"], 1000);
      assert.equal(span.attributes["gen_ai.usage.output_tokens"], 40);
      assert.equal(span.attributes["gen_ai.provider.name"], "openai");
    });

  test(`responses ${mode}: a stuck loop ends \`repeat\` before the 4th request, with the wrap-up as text`,
    async () => {
      await llm.script(...Array.from({ length: 6 }, () => toolTurn(3)), { text: "never" });
      const visits = [];
      const { result, outcome } = await run("responses-stuck", { budget: { maxSteps: 20 } }, () => ask(mode, {
        model: budgeted(openai.responses("gpt-4o")), tools: portalTools(visits), stopWhen: stepCountIs(20),
        maxRetries: 0, prompt: "Pay the open invoices." }));
      assert.equal(outcome.stopReason, "repeat");
      assert.equal((await sent()).length, 3);
      assert.deepEqual(visits, [3, 3]);
      assert.equal(result.text, outcome.wrapUp);
      assert.equal(result.finishReason, "stop");
      assert.equal(result.steps.length, 4); // the refusal adds one zero-usage step
      assert.equal(result.steps[3].usage.outputTokens, 0);
      assert.equal(outcome.usage.inputTokens, 1200);
      assert.equal(chats().length, 3);
    });

  test(`responses ${mode}: maxSteps refuses the next call with the wrap-up, counted at the server`, async () => {
    await llm.script(toolTurn(1), toolTurn(2), toolTurn(3), { text: "done" });
    const { result, outcome } = await run("responses-steps", { budget: { maxSteps: 2 } }, () => ask(mode, {
      model: budgeted(openai.responses("gpt-4o")), tools: portalTools([]), stopWhen: stepCountIs(20), maxRetries: 0,
      prompt: "Read every page." }));
    assert.equal((await sent()).length, 2);
    assert.equal(outcome.stopReason, "steps");
    assert.equal(outcome.usage.inputTokens, 800);
    assert.equal(outcome.usage.outputTokens, 40);
    assert.equal(result.text, outcome.wrapUp);
    assert.ok(result.text.startsWith("Stopped at a limit: max_steps (2 of 2 model calls used)."), result.text);
  });
}
