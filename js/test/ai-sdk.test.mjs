// The brake against the real AI SDK (`ai` and `@ai-sdk/openai`, whichever major is installed next to this file)
// talking to the Python ScriptedLLM over loopback. What reached the server is counted at the server.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ToolLoopAgent, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";
import { UnknownPriceError, budgeted, budgetedTools, instrument, run } from "otel-budget";
import { portalTools, scriptedAI } from "./scripted-ai.mjs";

const { llm, openai, exporter, tracerProvider } = await scriptedAI();

const modelRequests = async () => (await llm.requests()).filter((r) => r.api.startsWith("openai"));
const toolTurn = (name, args, extra = {}) => ({ tool_calls: [{ name, arguments: args }], input_tokens: 400,
  output_tokens: 20, ...extra });
const spans = (prefix) => exporter.getFinishedSpans().filter((s) => s.name.startsWith(prefix));


test("a stuck loop (same tool, same arguments) ends `repeat` with the wrap-up as result.text", async () => {
  await llm.script(...Array.from({ length: 6 }, () => toolTurn("open_portal", { page: 2 })), { text: "never" });
  const visits = [];
  const model = budgeted(openai.chat("gpt-4o"));
  const { result, outcome } = await run("stuck-portal", { budget: { maxSteps: 20 } }, () => generateText({
    model, tools: portalTools(visits), stopWhen: stepCountIs(20), maxRetries: 0, prompt: "Pay the open invoices.",
  }));
  assert.equal(outcome.stopReason, "repeat");
  assert.equal(outcome.limit, "max_repeats");
  assert.equal(await modelRequests().then((r) => r.length), 3); // the 4th call was never sent
  assert.deepEqual(visits, [2, 2]); // the third identical tool call did not run
  assert.equal(result.text, outcome.wrapUp);
  assert.ok(result.text.startsWith("Stopped at a limit: max_repeats (the same tool call 3 times in a row). "
    + "The task is NOT complete"), result.text);
  assert.equal(result.finishReason, "stop");
  const [runSpan] = spans("invoke_agent stuck-portal");
  assert.equal(runSpan.attributes["stop.reason"], "repeat");
  assert.equal(runSpan.attributes["otel_budget.stop.limit"], "max_repeats");
  assert.equal(runSpan.attributes["otel_budget.wrap_up"], outcome.wrapUp);
  const chats = spans("chat ");
  assert.equal(chats.length, 3); // one LLM span per request that reached the server, none for the refused one
  assert.ok(chats.every((s) => s.name === "chat gpt-4o" && s.parentSpanContext?.spanId === runSpan.spanContext().spanId));
  assert.equal(chats[0].attributes["gen_ai.usage.input_tokens"], 400);
  assert.equal(chats[0].attributes["gen_ai.usage.output_tokens"], 20);
  assert.equal(chats[0].attributes["gen_ai.provider.name"], "openai");
  assert.equal(spans("execute_tool open_portal").length, 2);
});

test("a ToolLoopAgent stuck on a portal whose next page never changes ends `stalled` with the wrap-up", async () => {
  await llm.script(...[1, 2, 3, 4, 5].map((n) => toolTurn("next_page", { page: n })), { text: "never" });
  const pages = [];
  const agent = new ToolLoopAgent({
    model: budgeted(openai.chat("gpt-4o")),
    instructions: "Collect every open invoice.",
    tools: budgetedTools({
      next_page: tool({
        description: "The next page of the invoice list.",
        inputSchema: z.object({ page: z.number() }),
        execute: async ({ page }) => {
          pages.push(page);
          // the portal never advances (a page, not an acknowledgment: longer than 64 characters)
          return "Invoices: INV-2026-0412 OPEN, INV-2026-0419 OPEN, INV-2026-0433 OPEN (page 1 of 1)";
        },
      }),
    }),
    stopWhen: stepCountIs(20),
    maxRetries: 0,
  });
  const { result, outcome } = await run("stuck-agent", { budget: { maxSteps: 20 } }, () =>
    agent.generate({ prompt: "Collect them." }));
  assert.equal(outcome.stopReason, "stalled");
  assert.equal(outcome.limit, "max_stalls");
  assert.deepEqual(pages, [1, 2, 3]); // three unchanged results; the 4th model call was never sent
  assert.equal(await modelRequests().then((r) => r.length), 3);
  assert.equal(result.text, outcome.wrapUp);
  assert.ok(result.text.startsWith("Stopped: no progress (max_stalls). next_page returned the same result 3 times "
    + "in a row."), result.text);
  assert.ok(!result.text.includes("INV-2026"), "counts and tool names, never content");
  assert.equal(spans("invoke_agent stuck-agent")[0].attributes["stop.reason"], "stalled");
});

test("maxSteps stops before the call: the server sees exactly maxSteps requests", async () => {
  await llm.script(...[1, 2, 3, 4].map((n) => toolTurn("open_portal", { page: n })), { text: "done" });
  const visits = [];
  const { result, outcome } = await run("capped", { budget: { maxSteps: 2 } }, () => generateText({
    model: budgeted(openai.chat("gpt-4o")), tools: portalTools(visits), stopWhen: stepCountIs(20), maxRetries: 0,
    prompt: "Read every page.",
  }));
  assert.equal(await modelRequests().then((r) => r.length), 2);
  assert.equal(outcome.stopReason, "steps");
  assert.equal(outcome.limit, "max_steps");
  assert.equal(outcome.usage.modelCalls, 2);
  assert.equal(outcome.usage.inputTokens, 800); // settled to what the server reported
  assert.equal(result.text, outcome.wrapUp);
  assert.ok(result.text.startsWith("Stopped at a limit: max_steps (2 of 2 model calls used)."), result.text);
  assert.equal(result.totalUsage.inputTokens, 800); // the refusal adds a step of zero usage
});

test("the Responses API model is braked the same way", async () => {
  await llm.script(...[1, 2, 3].map((n) => toolTurn("open_portal", { page: n })), { text: "done" });
  const { result, outcome } = await run("responses", { budget: { maxSteps: 2 } }, () => generateText({
    model: budgeted(openai.responses("gpt-4o")), tools: portalTools([]), stopWhen: stepCountIs(20), maxRetries: 0,
    prompt: "Read every page.",
  }));
  const sent = await modelRequests();
  assert.equal(sent.length, 2);
  assert.ok(sent.every((r) => r.api === "openai.responses"), JSON.stringify(sent.map((r) => r.api)));
  assert.equal(outcome.stopReason, "steps");
  assert.equal(result.text, outcome.wrapUp);
  assert.equal(spans("chat gpt-4o")[0].attributes["gen_ai.provider.name"], "openai");
});

test("maxUsd with a model of unknown price is refused before sending", async () => {
  await llm.script({ text: "should never be sent" });
  let error;
  try {
    await run("unpriced", { budget: { maxUsd: 0.5 } }, () => generateText({
      model: budgeted(openai.chat("my-private-model-7b")), maxRetries: 0, prompt: "hi" }));
  } catch (exc) {
    error = exc;
  }
  assert.ok(error instanceof UnknownPriceError, String(error));
  assert.match(error.message, /^otel-budget: no price is known for model 'my-private-model-7b' \(provider 'openai'\)/);
  assert.equal(error.outcome.stopReason, "error");
  assert.equal(await modelRequests().then((r) => r.length), 0);
});

test("a price override makes the same model usable under maxUsd, and the cap stops it at `cost`", async () => {
  instrument({ tracerProvider, prices: { "my-private-model-7b": { inputPerMtok: 10, outputPerMtok: 30 } } });
  await llm.script(...[1, 2, 3, 4, 5].map((n) => toolTurn("open_portal", { page: n }, { input_tokens: 1000,
    output_tokens: 100 })));
  const { result, outcome } = await run("priced", { budget: { maxUsd: 0.03 } }, () => generateText({
    model: budgeted(openai.chat("my-private-model-7b")), tools: portalTools([]), stopWhen: stepCountIs(20),
    maxRetries: 0, prompt: "Read every page.",
  }));
  assert.equal(outcome.stopReason, "cost");
  const sent = await modelRequests().then((r) => r.length);
  assert.ok(outcome.usage.costUsd <= 0.03, String(outcome.usage.costUsd));
  assert.equal(outcome.usage.costUsd, Math.round(sent * 0.013 * 1e10) / 1e10); // 1000 x $10 + 100 x $30 per M
  assert.ok(sent >= 1 && sent < 5, String(sent));
  assert.equal(result.text, outcome.wrapUp);
});

test("a 50-call Promise.all storm never passes maxUsd by more than one call's input estimate", async () => {
  await llm.setDefault({ text: "ok", input_tokens: 2000, output_tokens: 50 });
  const prompt = "Summarize the invoice. ".repeat(400); // 9,200 bytes: at least the 2,000 tokens reported
  const model = budgeted(openai.chat("gpt-4o"));
  const cap = 0.05;
  const { result, outcome } = await run("storm", { budget: { maxUsd: cap } }, () => Promise.all(
    Array.from({ length: 50 }, () => generateText({ model, maxRetries: 0, maxOutputTokens: 50, prompt })),
  ));
  const sent = await modelRequests().then((r) => r.length);
  assert.equal(outcome.stopReason, "cost");
  assert.equal(outcome.usage.modelCalls, sent);
  // calls refused only for what calls in flight held waited for them (without waiting: 2 were sent)
  assert.ok(sent >= 4 && sent < 50, String(sent));
  const oneInput = 2000 * 2.5 / 1e6; // gpt-4o's input price in genai-prices: $2.50 per million tokens
  assert.ok(outcome.usage.costUsd <= cap + oneInput, `${outcome.usage.costUsd} > ${cap} + ${oneInput}`);
  const refused = result.filter((r) => r.text === outcome.wrapUp || r.text.startsWith("Stopped at a limit: max_usd"));
  assert.equal(refused.length, 50 - sent); // every refused call answered with a wrap-up, none threw
});

test("a healthy loop writing five files ends `done` with the model's own text", async () => {
  const paths = [1, 2, 3, 4, 5].map((n) => `out/report-${n}.md`);
  await llm.script(...paths.map((path) => toolTurn("write_file", { path, content: "# Report\n" })),
    { text: "All five reports written.", input_tokens: 900, output_tokens: 12 });
  const written = [];
  const tools = budgetedTools({
    write_file: tool({
      description: "Write a file.",
      inputSchema: z.object({ path: z.string(), content: z.string() }),
      execute: async ({ path, content }) => {
        written.push(path);
        return `wrote ${path} (${content.length} bytes)`;
      },
    }),
  });
  const { result, outcome } = await run("writer", { budget: { maxSteps: 10, maxUsd: 1 } }, () => generateText({
    model: budgeted(openai.chat("gpt-4o")), tools, stopWhen: stepCountIs(20), maxRetries: 0, prompt: "Write them.",
  }));
  assert.equal(outcome.stopReason, "done");
  assert.equal(result.text, "All five reports written.");
  assert.deepEqual(written, paths);
  assert.equal(await modelRequests().then((r) => r.length), 6);
  assert.equal(outcome.usage.modelCalls, 6);
  assert.equal(outcome.usage.toolCalls, 5);
  assert.ok(outcome.wrapUp.startsWith("Completed: 6 model calls, 2,900 input and 112 output tokens"), outcome.wrapUp);
});

test("a refused stream answers with the wrap-up as its text, with no stream error", async () => {
  await llm.script(toolTurn("open_portal", { page: 1 }), toolTurn("open_portal", { page: 2 }), { text: "never" });
  const errors = [];
  const { result, outcome } = await run("streaming", { budget: { maxSteps: 1 } }, async () => {
    const stream = streamText({
      model: budgeted(openai.chat("gpt-4o")), tools: portalTools([]), stopWhen: stepCountIs(10), maxRetries: 0,
      prompt: "Read page one.", onError: ({ error }) => errors.push(error),
    });
    return { text: await stream.text, finishReason: await stream.finishReason };
  });
  assert.deepEqual(errors, []);
  assert.equal(await modelRequests().then((r) => r.length), 1);
  assert.equal(outcome.stopReason, "steps");
  assert.equal(result.text, outcome.wrapUp);
  assert.equal(result.finishReason, "stop");
  assert.equal(outcome.usage.inputTokens, 400); // the streamed call settled to the usage the server reported
});

test("a stuck loop in a stream ends `repeat` too (tool calls are counted as they stream)", async () => {
  await llm.script(...Array.from({ length: 5 }, () => toolTurn("open_portal", { page: 7 })));
  const visits = [];
  const { result, outcome } = await run("stuck-stream", { budget: { maxSteps: 20 } }, async () => {
    const stream = streamText({ model: budgeted(openai.chat("gpt-4o")), tools: portalTools(visits),
      stopWhen: stepCountIs(20), maxRetries: 0, prompt: "Pay the open invoices." });
    return { text: await stream.text };
  });
  assert.equal(outcome.stopReason, "repeat");
  assert.equal(await modelRequests().then((r) => r.length), 3);
  assert.deepEqual(visits, [7, 7]);
  assert.equal(result.text, outcome.wrapUp);
});

test("maxSeconds cuts a call in flight and answers with the wrap-up (time)", async () => {
  await llm.script({ text: "too late", delay: 20 });
  const { result, outcome } = await run("slow", { budget: { maxSeconds: 1 } }, () => generateText({
    model: budgeted(openai.chat("gpt-4o")), maxRetries: 0, prompt: "hi" }));
  assert.equal(outcome.stopReason, "time");
  assert.equal(outcome.limit, "max_seconds");
  assert.equal(result.text, outcome.wrapUp);
  assert.ok(outcome.wrapUp.endsWith("The run's time ran out while a call was in flight."), outcome.wrapUp);
  assert.notEqual(result.text, "too late"); // the 20 s answer was not awaited
  assert.equal(await modelRequests().then((r) => r.length), 1);
});

test("maxSeconds cuts a stream in flight: it ends with the wrap-up as its text, with no stream error", async () => {
  await llm.script({ text: "one two three four five six seven eight", chunks: 8, chunk_delay: 0.4 });
  const errors = [];
  const { result, outcome } = await run("slow-stream", { budget: { maxSeconds: 1 } }, async () => {
    const stream = streamText({ model: budgeted(openai.chat("gpt-4o")), maxRetries: 0, prompt: "count",
      onError: ({ error }) => errors.push(error) });
    return { text: await stream.text, finishReason: await stream.finishReason };
  });
  assert.deepEqual(errors, []);
  assert.equal(outcome.stopReason, "time");
  assert.ok(result.text.endsWith(outcome.wrapUp), result.text); // what streamed before the cut, then the wrap-up
  // cut while streaming (the usual case), or before the first byte on a loaded machine: the same graceful end
  assert.match(outcome.detail, /^the run's time ran out while (an answer was streaming; the stream was closed|a call was in flight)\.$/);
  assert.equal(result.finishReason, "stop");
});

test("a nested run draws from its parent's budget", async () => {
  await llm.script(...[1, 2, 3, 4].map(() => ({ text: "ok", input_tokens: 10, output_tokens: 2 })));
  const model = budgeted(openai.chat("gpt-4o"));
  const { outcome } = await run("parent", { budget: { maxSteps: 2 } }, async () => {
    await generateText({ model, maxRetries: 0, prompt: "one" });
    const child = await run("child", {}, async () => {
      await generateText({ model, maxRetries: 0, prompt: "two" });
      return generateText({ model, maxRetries: 0, prompt: "three" });
    });
    assert.equal(child.outcome.stopReason, "steps");
    assert.equal(child.result.text, child.outcome.wrapUp);
    assert.ok(child.outcome.wrapUp.startsWith("Stopped at a limit: max_steps (set by an enclosing run)."));
    return child;
  });
  assert.equal(await modelRequests().then((r) => r.length), 2);
  assert.equal(outcome.stopReason, "steps");
  assert.equal(outcome.usage.modelCalls, 2);
  const [childSpan] = spans("invoke_agent child");
  const [parentSpan] = spans("invoke_agent parent");
  assert.equal(childSpan.parentSpanContext?.spanId, parentSpan.spanContext().spanId);
  assert.equal(childSpan.attributes["otel_budget.run.depth"], 2);
});

test("outside a run a budgeted model is not braked, and its calls pass through", async () => {
  await llm.script({ text: "free", input_tokens: 5, output_tokens: 1 });
  const out = await generateText({ model: budgeted(openai.chat("gpt-4o")), maxRetries: 0, prompt: "hi" });
  assert.equal(out.text, "free");
  assert.equal(await modelRequests().then((r) => r.length), 1);
});

test("a run whose tools are gated but whose model is not budgeted warns when it ends", async () => {
  await llm.script(toolTurn("open_portal", { page: 1 }), { text: "done", input_tokens: 10, output_tokens: 1 });
  const warnings = [];
  const listen = (w) => warnings.push(w);
  process.on("warning", listen);
  try {
    const { outcome } = await run("unwrapped", { budget: { maxSteps: 1 } }, () => generateText({
      model: openai.chat("gpt-4o"), tools: portalTools([]), stopWhen: stepCountIs(5), maxRetries: 0, prompt: "go" }));
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(outcome.stopReason, "done"); // not braked: maxSteps 1, and both calls were sent
    assert.equal(await modelRequests().then((r) => r.length), 2);
    assert.ok(warnings.some((w) => w.code === "OTEL_BUDGET_UNBUDGETED_MODEL" && /budgeted\(model\)/.test(w.message)),
      warnings.map(String).join("; "));
  } finally {
    process.off("warning", listen);
  }
});

test("budgeted() and budgetedTools() name what they need on bad input", () => {
  assert.throws(() => budgeted("openai/gpt-4o"), /budgeted\(model\): give a language model object.*model id string/);
  assert.throws(() => budgetedTools(null), /budgetedTools\(tools\)/);
});

function writerTools(written, answer) {
  return budgetedTools({
    write_file: tool({
      description: "Write a file.",
      inputSchema: z.object({ path: z.string(), content: z.string() }),
      execute: async ({ path }) => {
        written.push(path);
        return answer;
      },
    }),
  });
}

test("a loop writing five files, each answered \"ok\", ends `done` (an acknowledgment is no stall)", async () => {
  const paths = [1, 2, 3, 4, 5].map((n) => `out/report-${n}.md`);
  await llm.script(...paths.map((path) => toolTurn("write_file", { path, content: "# Report\n" })),
    { text: "All five reports written.", input_tokens: 900, output_tokens: 12 });
  const written = [];
  const { result, outcome } = await run("ok-writer", { budget: { maxSteps: 10 } }, () => generateText({
    model: budgeted(openai.chat("gpt-4o")), tools: writerTools(written, "ok"), stopWhen: stepCountIs(20),
    maxRetries: 0, prompt: "Write them.",
  }));
  assert.equal(outcome.stopReason, "done", outcome.wrapUp);
  assert.equal(result.text, "All five reports written.");
  assert.deepEqual(written, paths);
  assert.equal(await modelRequests().then((r) => r.length), 6);
});

for (const mode of ["generateText", "streamText"]) {
  test(`maxToolCalls used up: the next call reaches the server without tools and the run ends done (${mode})`,
    async () => {
      await llm.script(toolTurn("write_file", { path: "a.md", content: "a" }),
        toolTurn("write_file", { path: "b.md", content: "b" }),
        { text: "Wrote a.md and b.md; c.md is left for later.", input_tokens: 900, output_tokens: 12 });
      const written = [];
      const options = { model: budgeted(openai.chat("gpt-4o")), tools: writerTools(written, "ok"),
        toolChoice: "auto", stopWhen: stepCountIs(20), maxRetries: 0, prompt: "Write a.md, b.md and c.md." };
      const { result, outcome } = await run("capped-tools", { budget: { maxToolCalls: 2 } }, async () => {
        if (mode === "generateText") return generateText(options);
        const stream = streamText(options);
        return { text: await stream.text };
      });
      assert.equal(outcome.stopReason, "done", outcome.wrapUp);
      assert.equal(result.text, "Wrote a.md and b.md; c.md is left for later.");
      assert.deepEqual(written, ["a.md", "b.md"]);
      assert.equal(outcome.usage.toolCalls, 2);
      const sent = await modelRequests();
      assert.equal(sent.length, 3);
      assert.ok(Array.isArray(sent[1].body.tools) && sent[1].body.tools.length === 1, "one call left: tools sent");
      assert.ok(!("tools" in sent[2].body), JSON.stringify(Object.keys(sent[2].body)));
      assert.ok(!("tool_choice" in sent[2].body), JSON.stringify(Object.keys(sent[2].body)));
      assert.equal(spans("invoke_agent capped-tools")[0].attributes["otel_budget.tool_calls.refused"], undefined);
    });
}

test("tool calls beyond maxToolCalls in one response are refused (not run, not counted) and counted apart",
  async () => {
    await llm.script({ tool_calls: [1, 2, 3, 4].map((n) => ({ name: "write_file",
      arguments: { path: `f${n}.md`, content: "x" } })), input_tokens: 400, output_tokens: 40 }, { text: "never" });
    const written = [];
    const { result, outcome } = await run("over-cap", { budget: { maxToolCalls: 3 } }, () => generateText({
      model: budgeted(openai.chat("gpt-4o")), tools: writerTools(written, "ok"), stopWhen: stepCountIs(20),
      maxRetries: 0, prompt: "Write four files.",
    }));
    assert.deepEqual(written, ["f1.md", "f2.md", "f3.md"]); // the fourth did not run
    assert.equal(await modelRequests().then((r) => r.length), 1); // the next call was refused with the wrap-up
    assert.equal(outcome.stopReason, "tool_calls");
    assert.equal(outcome.usage.toolCalls, 3);
    assert.equal(result.text, outcome.wrapUp);
    assert.ok(outcome.wrapUp.startsWith("Stopped at a limit: max_tool_calls (3 of 3 tool calls used)."), outcome.wrapUp);
    assert.equal(spans("invoke_agent over-cap")[0].attributes["otel_budget.tool_calls.refused"], 1);
    assert.equal(spans("execute_tool write_file").length, 3);
  });

test("a failed call is recorded by its type and HTTP status, never by its message", async () => {
  await llm.script({ status: 500, error_message: "upstream saw jane@example.com" });
  let error;
  try {
    await run("failing-call", {}, () => generateText({ model: budgeted(openai.chat("gpt-4o")), maxRetries: 0,
      prompt: "hi" }));
  } catch (exc) {
    error = exc;
  }
  assert.equal(error?.outcome?.stopReason, "error", String(error));
  const [call] = spans("chat ");
  assert.match(call.status.message, /^AI_APICallError \(HTTP 500\)$|^\w+ \(HTTP 500\)$/);
  const runSpan = spans("invoke_agent failing-call")[0];
  for (const span of [call, runSpan]) {
    assert.ok(!JSON.stringify([span.status, span.attributes]).includes("jane@example.com"), span.name);
  }
  assert.equal(error.outcome.detail, call.status.message);
});
