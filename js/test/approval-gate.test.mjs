// The tool gate on each ai major: ai@7's `toolApproval: budgetApproval()` denies a tool call the budget refuses (it
// does not run, and the model's messages carry the reason as an `execution-denied` output); on ai@6, which has no
// `toolApproval`, the `execute` wrapper of budgetedTools refuses it with the same reason as the tool's output.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ToolLoopAgent, generateText, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";
import { budgetApproval, budgeted, budgetedTools, run } from "otel-budget";
import { installedMajor } from "./helpers.mjs";
import { scriptedAI } from "./scripted-ai.mjs";

const AI7 = installedMajor("ai") >= 7;
const { llm, openai, exporter } = await scriptedAI();

const sent = async () => (await llm.requests()).filter((r) => r.api.startsWith("openai"));
const toolSpans = () => exporter.getFinishedSpans().filter((s) => s.name.startsWith("execute_tool "));
const call = (name, args) => ({ name, arguments: args });
const turn = (...calls) => ({ tool_calls: calls, input_tokens: 400, output_tokens: 20 });

function writeTool(written, answer = "ok") {
  return tool({
    description: "Write a file.",
    inputSchema: z.object({ path: z.string() }),
    execute: async ({ path }) => {
      written.push(path);
      return answer;
    },
  });
}

/** The tool outputs the model's next request would carry, in call order (ai@6 steps repeat earlier messages). */
function outputsFor(result) {
  const out = new Map();
  for (const message of result.steps.flatMap((s) => s.response.messages)) {
    if (message.role !== "tool") continue;
    for (const part of message.content) if (part.type === "tool-result") out.set(part.toolCallId, part.output);
  }
  return [...out.values()];
}

for (const mode of ["generateText", "streamText"]) {
  test(`a repeated tool call is refused before it runs; the model's messages carry the reason (${mode})`, async () => {
    await llm.script(...Array.from({ length: 3 }, () => turn(call("write_file", { path: "same.md" }))),
      { text: "never" });
    const written = [];
    const options = { model: budgeted(openai.chat("gpt-4o")), tools: budgetedTools({ write_file: writeTool(written,
      "Wrote same.md, now 120 bytes long, overwriting what was there before (checksum 8d1f).") }),
    toolApproval: budgetApproval(), stopWhen: stepCountIs(20), maxRetries: 0, prompt: "Write same.md." };
    const { result, outcome } = await run("approval-repeat", { budget: { maxSteps: 20, maxRepeats: 3 } },
      async () => {
        if (mode === "generateText") return generateText(options);
        const stream = streamText(options);
        return { text: await stream.text, response: await stream.response, steps: await stream.steps };
      });
    // the model requested it a third time: the request itself records `repeat`, and the gate refuses the run
    assert.equal(outcome.stopReason, "repeat");
    assert.deepEqual(written, ["same.md", "same.md"]); // the third did not run
    assert.equal((await sent()).length, 3);
    assert.equal(result.text, outcome.wrapUp);
    assert.equal(toolSpans().length, 2);
    const last = outputsFor(result).at(-1);
    if (AI7) {
      // ai@7: a denial, as a person's would be, with the budget's reason
      assert.equal(last.type, "execution-denied", JSON.stringify(last));
      assert.match(last.reason, /^Not run \(otel-budget, repeat\): the model requested write_file with the same arguments 3 times in a row/);
      const responses = result.steps.flatMap((s) => s.content).filter((p) => p.type === "tool-approval-response");
      assert.equal(responses.length, 1); // the calls it let run were not-applicable: no approval parts
      assert.equal(responses[0].approved, false);
      assert.equal(responses[0].reason, last.reason);
    } else {
      // ai@6: the execute wrapper answers with the same reason as the tool's output
      assert.match(JSON.stringify(last), /Not run \(otel-budget, repeat\): the model requested write_file/);
    }
  });
}

test("tool calls beyond maxToolCalls in one response are refused one by one, each counted once", async () => {
  await llm.script(turn(...[1, 2, 3, 4].map((n) => call("write_file", { path: `f${n}.md` }))), { text: "never" });
  const written = [];
  const { result, outcome } = await run("approval-cap", { budget: { maxToolCalls: 3 } }, () => generateText({
    model: budgeted(openai.chat("gpt-4o")), tools: budgetedTools({ write_file: writeTool(written) }),
    toolApproval: budgetApproval(), stopWhen: stepCountIs(20), maxRetries: 0, prompt: "Write four files." }));
  assert.deepEqual(written, ["f1.md", "f2.md", "f3.md"]);
  assert.equal(outcome.stopReason, "tool_calls");
  assert.equal(outcome.usage.toolCalls, 3); // admitted by the approval, executed by the wrapper: counted once
  assert.equal(toolSpans().length, 3);
  assert.equal((await sent()).length, 1);
  assert.equal(result.text, outcome.wrapUp);
  const outputs = outputsFor(result);
  assert.equal(outputs.length, 4);
  const refused = JSON.stringify(outputs[3]);
  assert.match(refused, /Not run \(otel-budget, tool_calls\)/);
  if (AI7) assert.equal(outputs[3].type, "execution-denied");
});

test("a call admitted by the approval is not checked again by the wrapper (two identical calls still run)",
  async () => {
    await llm.script(turn(call("write_file", { path: "a.md" })), turn(call("write_file", { path: "a.md" })),
      { text: "Wrote a.md twice.", input_tokens: 400, output_tokens: 10 });
    const written = [];
    const { result, outcome } = await run("approval-once", { budget: { maxRepeats: 3 } }, () => generateText({
      model: budgeted(openai.chat("gpt-4o")), tools: budgetedTools({ write_file: writeTool(written) }),
      toolApproval: budgetApproval(), stopWhen: stepCountIs(20), maxRetries: 0, prompt: "Write a.md." }));
    // checked twice per call, the second call would be the 4th execution in a row: refused at max_repeats=3
    assert.equal(outcome.stopReason, "done", outcome.detail);
    assert.equal(result.text, "Wrote a.md twice.");
    assert.deepEqual(written, ["a.md", "a.md"]);
    assert.equal(outcome.usage.toolCalls, 2);
    assert.equal(toolSpans().length, 2);
  });

test("your own approval is asked first: what it denies stays denied, what it approves is still budgeted", async () => {
  await llm.script(turn(call("delete_file", { path: "x.md" }), call("write_file", { path: "y.md" })),
    turn(call("write_file", { path: "y.md" })), turn(call("write_file", { path: "y.md" })), { text: "never" });
  const written = [];
  const deleted = [];
  const tools = budgetedTools({
    write_file: writeTool(written, "Wrote y.md, now 120 bytes long, overwriting what was there (checksum 8d1f)."),
    delete_file: tool({ description: "Delete a file.", inputSchema: z.object({ path: z.string() }),
      execute: async ({ path }) => deleted.push(path) }),
  });
  const theirs = { delete_file: { type: "denied", reason: "deleting is not allowed here" }, write_file: "approved" };
  const { outcome, result } = await run("approval-theirs", { budget: { maxRepeats: 3 } }, () => generateText({
    model: budgeted(openai.chat("gpt-4o")), tools, toolApproval: budgetApproval(theirs), stopWhen: stepCountIs(20),
    maxRetries: 0, prompt: "Clean up." }));
  assert.equal(outcome.stopReason, "repeat");
  if (AI7) {
    assert.deepEqual(deleted, []);
    assert.deepEqual(written, ["y.md", "y.md"]);
    const outputs = outputsFor(result);
    assert.deepEqual(outputs[0], { type: "execution-denied", reason: "deleting is not allowed here" });
    assert.equal(outputs.at(-1).type, "execution-denied");
    assert.match(outputs.at(-1).reason, /^Not run \(otel-budget, repeat\)/);
  } else {
    assert.deepEqual(deleted, ["x.md"]); // ai@6 has no toolApproval: the SDK ignores it
    assert.deepEqual(written, ["y.md", "y.md"]);
  }
});

test("ai@7: toolApproval gates a ToolLoopAgent's plain tools too (no budgetedTools)", { skip: !AI7 && "ai@6 has no "
  + "toolApproval" }, async () => {
  await llm.script(...Array.from({ length: 4 }, () => turn(call("open_portal", { page: 2 }))), { text: "never" });
  const pages = [];
  const agent = new ToolLoopAgent({
    model: budgeted(openai.chat("gpt-4o")),
    tools: { open_portal: tool({ description: "Open a page.", inputSchema: z.object({ page: z.number() }),
      execute: async ({ page }) => {
        pages.push(page);
        return `Invoices, page ${page} (visit ${pages.length}): INV-2026-0412 OPEN, INV-2026-0419 OPEN`;
      } }) },
    toolApproval: budgetApproval(),
    stopWhen: stepCountIs(20),
    maxRetries: 0,
  });
  const { result, outcome } = await run("approval-agent", { budget: { maxSteps: 20 } }, () =>
    agent.generate({ prompt: "Pay the open invoices." }));
  assert.equal(outcome.stopReason, "repeat");
  assert.deepEqual(pages, [2, 2]); // the plain tool's third identical call was denied, not run
  assert.equal(outcome.usage.toolCalls, 3);
  assert.equal(result.text, outcome.wrapUp);
});

test("ai@7: a run whose tool calls went through budgetApproval() but whose model is not budgeted warns when it ends",
  { skip: !AI7 && "ai@6 has no toolApproval" }, async () => {
    await llm.script(turn(call("write_file", { path: "a.md" })), { text: "done", input_tokens: 10, output_tokens: 1 });
    const warnings = [];
    const listen = (w) => warnings.push(w);
    process.on("warning", listen);
    try {
      const written = [];
      const { outcome } = await run("approval-unwrapped", { budget: { maxSteps: 1 } }, () => generateText({
        model: openai.chat("gpt-4o"), tools: { write_file: writeTool(written) }, toolApproval: budgetApproval(),
        stopWhen: stepCountIs(5), maxRetries: 0, prompt: "go" }));
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(outcome.stopReason, "done"); // not braked: maxSteps 1, and both calls were sent
      assert.equal((await sent()).length, 2);
      assert.ok(warnings.some((w) => w.code === "OTEL_BUDGET_UNBUDGETED_MODEL" && /budgetApproval\(\)/.test(w.message)),
        warnings.map(String).join("; "));
    } finally {
      process.off("warning", listen);
    }
  });

test("budgetApproval() names what it takes on bad input", () => {
  assert.throws(() => budgetApproval("yes"), /budgetApproval\(theirs\): give your toolApproval function/);
});
