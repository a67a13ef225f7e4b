// The brake with `@ai-sdk/anthropic` (the Messages API) against ScriptedLLM's /v1/messages route, on whichever ai
// major is installed next to this file: metering (cache reads and writes, cost), a stuck loop, streams.
import assert from "node:assert/strict";
import { test } from "node:test";
import { calcPrice } from "@pydantic/genai-prices";
import { generateText, stepCountIs, streamText } from "ai";
import { budgeted, run } from "otel-budget";
import { portalTools, scriptedAI } from "./scripted-ai.mjs";

const MODEL = "claude-sonnet-4-5";
const { llm, anthropic, exporter } = await scriptedAI();

const sent = async () => (await llm.requests()).filter((r) => r.api === "anthropic.messages");
const chats = () => exporter.getFinishedSpans().filter((s) => s.name.startsWith("chat "));
// the price genai-prices itself computes for one call (input includes the cached tokens, as Python counts them)
const price = (input, output, cacheRead, cacheWrite) => calcPrice({ input_tokens: input, output_tokens: output,
  cache_read_tokens: cacheRead, cache_write_tokens: cacheWrite }, MODEL, { providerId: "anthropic" }).total_price;
const cached = { text: "Three invoices are open.", input_tokens: 1200, cache_read_tokens: 800, cache_write_tokens: 200,
  output_tokens: 50 };

const toolTurn = (page) => ({ tool_calls: [{ name: "open_portal", arguments: { page } }], input_tokens: 400,
  output_tokens: 20 });

for (const mode of ["generateText", "streamText"]) {
  test(`anthropic ${mode}: input counts cache reads and writes, and the cost prices each part (as Python)`,
    async () => {
      await llm.script(cached, cached);
      const model = budgeted(anthropic(MODEL));
      const ask = async () => {
        if (mode === "generateText") return (await generateText({ model, maxRetries: 0, prompt: "Which are open?" })).text;
        const stream = streamText({ model, maxRetries: 0, prompt: "Which are open?" });
        return stream.text;
      };
      const { result, outcome } = await run("anthropic-meter", { budget: { maxUsd: 1 } }, async () => [await ask(),
        await ask()]);
      assert.deepEqual(result, [cached.text, cached.text]);
      assert.equal((await sent()).length, 2);
      assert.equal(outcome.stopReason, "done");
      const u = outcome.usage;
      // the wire says input_tokens 200 (without the cache); the run counts 1,200 per call
      assert.deepEqual([u.modelCalls, u.inputTokens, u.outputTokens, u.cacheReadTokens, u.cacheWriteTokens],
        [2, 2400, 100, 1600, 400]);
      const one = price(1200, 50, 800, 200);
      assert.ok(one > 0 && one < price(1200, 50, 0, 0), `${one}: cache reads are cheaper than plain input`);
      assert.equal(u.costUsd, Math.round(2 * one * 1e10) / 1e10);
      const spans = chats();
      assert.equal(spans.length, 2);
      for (const span of spans) {
        assert.equal(span.name, `chat ${MODEL}`);
        assert.equal(span.attributes["gen_ai.provider.name"], "anthropic");
        assert.equal(span.attributes["gen_ai.usage.input_tokens"], 1200);
        assert.equal(span.attributes["gen_ai.usage.output_tokens"], 50);
        assert.equal(span.attributes["otel_budget.usage.estimated"], undefined); // reported, not estimated
        assert.equal(span.attributes["otel_budget.cost.usd"], one);
      }
    });
}

test("anthropic: a money cap stops the loop at `cost`, and the spend stays under it", async () => {
  await llm.script(...[1, 2, 3, 4, 5, 6].map((page) => ({ ...toolTurn(page), input_tokens: 3000, output_tokens: 200 })));
  const { result, outcome } = await run("anthropic-cost", { budget: { maxUsd: 0.04 } }, () => generateText({
    model: budgeted(anthropic(MODEL)), tools: portalTools([]), stopWhen: stepCountIs(20), maxRetries: 0,
    prompt: "Read every page of the invoice portal. ".repeat(300), // 12,000 bytes: about the 3,000 tokens reported
  }));
  const n = (await sent()).length;
  const one = price(3000, 200, 0, 0); // $0.012
  assert.equal(outcome.stopReason, "cost");
  assert.equal(n, 3);
  assert.equal(outcome.usage.costUsd, Math.round(n * one * 1e10) / 1e10);
  assert.ok(outcome.usage.costUsd <= 0.04);
  assert.equal(result.text, outcome.wrapUp);
  assert.ok(result.text.startsWith("Stopped at a limit: max_usd"), result.text);
});

for (const mode of ["generateText", "streamText"]) {
  test(`anthropic ${mode}: a stuck loop ends \`repeat\` with the wrap-up as result.text`, async () => {
    await llm.script(...Array.from({ length: 6 }, () => toolTurn(2)), { text: "never" });
    const visits = [];
    const errors = [];
    const options = { model: budgeted(anthropic(MODEL)), tools: portalTools(visits), stopWhen: stepCountIs(20),
      maxRetries: 0, prompt: "Pay the open invoices." };
    const { result, outcome } = await run("anthropic-stuck", { budget: { maxSteps: 20 } }, async () => {
      if (mode === "generateText") return generateText(options);
      const stream = streamText({ ...options, onError: ({ error }) => errors.push(error) });
      return { text: await stream.text, finishReason: await stream.finishReason, steps: await stream.steps };
    });
    assert.deepEqual(errors, []);
    assert.equal(outcome.stopReason, "repeat");
    assert.equal(outcome.limit, "max_repeats");
    assert.equal((await sent()).length, 3); // the 4th call was never sent
    assert.deepEqual(visits, [2, 2]);
    assert.equal(result.text, outcome.wrapUp);
    assert.ok(result.text.startsWith("Stopped at a limit: max_repeats (the same tool call 3 times in a row)."),
      result.text);
    assert.equal(result.finishReason, "stop");
    assert.equal(result.steps.length, 4); // three answered steps and the refusal's zero-usage step
    assert.equal(result.steps[3].usage.inputTokens, 0);
    assert.equal(outcome.usage.inputTokens, 1200);
    const [runSpan] = exporter.getFinishedSpans().filter((s) => s.name === "invoke_agent anthropic-stuck");
    assert.equal(runSpan.attributes["stop.reason"], "repeat");
    assert.equal(chats().length, 3);
  });
}

test("anthropic streamText: a refused stream answers with the wrap-up, and the streamed call was metered", async () => {
  await llm.script({ ...toolTurn(1), cache_read_tokens: 300 }, toolTurn(2), { text: "never" });
  const errors = [];
  const { result, outcome } = await run("anthropic-steps", { budget: { maxSteps: 1 } }, async () => {
    const stream = streamText({ model: budgeted(anthropic(MODEL)), tools: portalTools([]), stopWhen: stepCountIs(10),
      maxRetries: 0, prompt: "Read page one.", onError: ({ error }) => errors.push(error) });
    return { text: await stream.text, finishReason: await stream.finishReason };
  });
  assert.deepEqual(errors, []);
  assert.equal((await sent()).length, 1);
  assert.equal(outcome.stopReason, "steps");
  assert.equal(result.text, outcome.wrapUp);
  assert.equal(result.finishReason, "stop");
  assert.equal(outcome.usage.inputTokens, 400);
  assert.equal(outcome.usage.cacheReadTokens, 300);
  assert.equal(outcome.usage.outputTokens, 20);
  assert.equal(outcome.usage.costUsd, Math.round(price(400, 20, 300, 0) * 1e10) / 1e10);
});
