// The layers mirror Python's (docs/architecture.md): model < telemetry < core < fleet < ai (the adapter).
// A module imports only from its own layer and the layers below it.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const ORDER = ["model", "telemetry", "core", "fleet", "ai"];

test("every module imports only from its own layer or the layers below", () => {
  const dist = join(dirname(fileURLToPath(import.meta.resolve("otel-budget"))));
  let checked = 0;
  for (const layer of ORDER) {
    let files = [];
    try {
      files = readdirSync(join(dist, layer)).filter((f) => f.endsWith(".js"));
    } catch {
      continue; // a layer with no module yet (fleet)
    }
    for (const file of files) {
      const text = readFileSync(join(dist, layer, file), "utf8");
      for (const [, target] of text.matchAll(/from "\.\.\/([a-z]+)\//g)) {
        assert.ok(ORDER.indexOf(target) <= ORDER.indexOf(layer), `${layer}/${file} imports from ${target}`);
      }
      checked += 1;
    }
  }
  assert.ok(checked >= 12, String(checked));
});
