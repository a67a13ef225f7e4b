/** What `instrument()` sets for the whole process: prices, the shared ledger, the tracer (core/config.py). */
import type { MeterProvider, Tracer } from "@opentelemetry/api";
import type { Price } from "../model/budget.js";
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
}

export interface Settings {
  prices: PriceBook;
  ledger: Ledger;
}

let settings: Settings = defaults();

function defaults(options: InstrumentOptions = {}): Settings {
  return { prices: new PriceBook(options.prices), ledger: options.ledger ?? new MemoryLedger() };
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
