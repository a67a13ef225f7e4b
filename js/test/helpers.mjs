// Shared by the tests: where the repository is, its Python, the shared vectors, and the ScriptedLLM process.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { connect, createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** The repository root: the nearest folder above this file with a pyproject.toml (tests run from js/ or js/ai7/). */
export function repoRoot() {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "pyproject.toml"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("no pyproject.toml above the tests: run them inside the otel-budget repository");
    dir = up;
  }
  return dir;
}

export function vectors(prefix) {
  const dir = join(repoRoot(), "tests", "vectors");
  return readdirSync(dir).filter((f) => f.startsWith(prefix) && f.endsWith(".json")).sort()
    .map((f) => ({ file: f, ...JSON.parse(readFileSync(join(dir, f), "utf8")) }));
}

export function vector(name) {
  return JSON.parse(readFileSync(join(repoRoot(), "tests", "vectors", name), "utf8"));
}

/** `python -m otel_budget.testing` from the repository's venv: one ScriptedLLM for both languages. */
export async function startScriptedLLM() {
  const root = repoRoot();
  const python = process.env.OTEL_BUDGET_PYTHON || join(root, ".venv", "bin", "python");
  if (!existsSync(python)) throw new Error(`no Python at ${python}: run \`make install\` in ${root} first`);
  const child = spawn(python, ["-m", "otel_budget.testing"], { cwd: root, stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout });
  const waiting = [];
  lines.on("line", (line) => waiting.shift()?.(JSON.parse(line)));
  const next = () => new Promise((resolve) => waiting.push(resolve));
  const addresses = await next();
  const send = async (command) => {
    const answer = next();
    child.stdin.write(`${JSON.stringify(command)}\n`);
    const got = await answer;
    if (got.error) throw new Error(`ScriptedLLM: ${got.error}`);
    return got;
  };
  return {
    ...addresses,
    script: (...turns) => send({ op: "script", turns }),
    setDefault: (turn) => send({ op: "default", turn }),
    requests: async () => (await send({ op: "requests" })).requests,
    reset: () => send({ op: "reset" }),
    stop: () => new Promise((resolve) => {
      child.once("exit", resolve);
      child.stdin.end();
    }),
  };
}

/** The major version of the installed package `name`, as resolved from the tests (js/ or js/ai7/). */
export function installedMajor(name) {
  let dir = dirname(fileURLToPath(import.meta.resolve(name)));
  while (!existsSync(join(dir, "package.json")) || JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).name !== name) {
    const up = dirname(dir);
    if (up === dir) throw new Error(`no package.json of ${name}`);
    dir = up;
  }
  return Number(JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version.split(".")[0]);
}

/** A TCP port free on 127.0.0.1 now (nothing listens on it once this resolves). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

/** A throwaway redis-server on a free loopback port (no persistence): `{ url, port, stop() }`. */
export async function startRedis() {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "otel-budget-js-redis-"));
  const child = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
    "no", "--dir", dir], { stdio: "ignore" });
  child.once("error", (exc) => {
    throw new Error(`redis-server could not start (${exc.message}): run scripts/ensure_services.sh`);
  });
  for (let i = 0; i < 200; i += 1) {
    const up = await new Promise((resolve) => {
      const s = connect(port, "127.0.0.1", () => {
        s.end();
        resolve(true);
      });
      s.once("error", () => resolve(false));
    });
    if (up) return { url: `redis://127.0.0.1:${port}/0`, port, stop: () => { child.kill(); rmSync(dir, { recursive: true, force: true }); } };
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill();
  throw new Error(`redis-server did not answer on port ${port}`);
}
