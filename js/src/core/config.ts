/** What `instrument()` sets for the whole process: prices, the shared ledger, the tracer (core/config.py). */
import type { MeterProvider, Tracer } from "@opentelemetry/api";
import type { Price } from "../model/price.js";
import { setMeterProvider } from "../telemetry/metrics.js";
import { setOpenInference, setTracerProvider } from "../telemetry/recorder.js";
import { type Ledger, MemoryLedger } from "./ledger.js";
import { PriceBook } from "./pricing.js";

export interface InstrumentOptions {
  /** Prices that win over the bundled table: model (or `provider/model`) -> Price per million tokens. */
  prices?: Record<string, Price>;
  /** Where shared (fleet) budgets live; the in-process `MemoryLedger` when none is given. */
  ledger?: Ledger;
  /** The tracer provider to use; @opentelemetry/api's global one when none is given. */
  tracerProvider?: { getTracer(name: string, version?: string): Tracer };
  /** The meter provider to use; @opentelemetry/api's global one when none is given. */
  meterProvider?: MeterProvider;
  /** Also write the OpenInference twins of the GenAI attributes (Arize AX, Phoenix before 15.10); default: the
   * OTEL_BUDGET_OPENINFERENCE environment variable, else off. */
  openinference?: boolean;
  /**
   * Signs paused runs and run tokens with HMAC-SHA256 (default: OTEL_BUDGET_SECRET); one edited after it left
   * the process is refused. Give every process that resumes or attaches the same secret, Python's included.
   */
  secret?: string | Uint8Array | null;
}

export interface Settings {
  prices: PriceBook;
  ledger: Ledger;
  /** The signing secret, or null (then state from outside is accepted with one warning per process). */
  secret: Buffer | null;
}

let settings: Settings = defaults();

/** OTEL_BUDGET_SECRET as bytes, or null when unset or empty. */
export function secretFromEnv(): Buffer | null {
  const value = process.env.OTEL_BUDGET_SECRET ?? "";
  return value ? Buffer.from(value, "utf8") : null;
}

function secretOf(value: unknown): Buffer | null {
  if (value === undefined || value === null) return secretFromEnv();
  if ((typeof value === "string" || value instanceof Uint8Array) && value.length > 0) {
    return typeof value === "string" ? Buffer.from(value, "utf8") : Buffer.from(value);
  }
  throw new TypeError(`instrument({ secret }) must be a non-empty string or Uint8Array, not ${JSON.stringify(value)}; `
    + "give every process that resumes or attaches the same secret");
}

function defaults(options: InstrumentOptions = {}): Settings {
  return { prices: new PriceBook(options.prices), ledger: options.ledger ?? new MemoryLedger(),
    secret: secretOf(options.secret) };
}

/** Set prices, the shared ledger and the tracer and meter providers for every run of this process (optional). */
export function instrument(options: InstrumentOptions = {}): void {
  settings = defaults(options);
  setTracerProvider(options.tracerProvider ?? null);
  setMeterProvider(options.meterProvider ?? null);
  setOpenInference(options.openinference ?? null);
}

export function getSettings(): Settings {
  return settings;
}
