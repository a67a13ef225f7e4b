/** What `instrument()` sets for the whole process: prices, the shared ledger, the tracer (core/config.py). */
import { type Tracer, trace } from "@opentelemetry/api";
import type { Price } from "../model/budget.js";
import { type Ledger, MemoryLedger } from "./ledger.js";
import { PriceBook } from "./pricing.js";

export interface InstrumentOptions {
  /** Prices that win over the bundled table: model (or `provider/model`) -> Price per million tokens. */
  prices?: Record<string, Price>;
  /** Where shared (fleet) budgets live; the in-process `MemoryLedger` when none is given. */
  ledger?: Ledger;
  /** The tracer provider to use; @opentelemetry/api's global one when none is given. */
  tracerProvider?: { getTracer(name: string, version?: string): Tracer };
}

export const VERSION = "0.1.0";
export const TRACER_NAME = "otel_budget";

export interface Settings {
  prices: PriceBook;
  ledger: Ledger;
  tracer: () => Tracer;
}

let settings: Settings = defaults();

function defaults(options: InstrumentOptions = {}): Settings {
  const provider = options.tracerProvider;
  let cached: Tracer | null = null;
  return {
    prices: new PriceBook(options.prices),
    ledger: options.ledger ?? new MemoryLedger(),
    // the global tracer is looked up on use, so a provider registered after instrument() still gets the spans
    tracer: () => provider !== undefined ? (cached ??= provider.getTracer(TRACER_NAME, VERSION))
      : trace.getTracer(TRACER_NAME, VERSION),
  };
}

/** Set prices, the shared ledger and the tracer provider for every run of this process (optional). */
export function instrument(options: InstrumentOptions = {}): void {
  settings = defaults(options);
}

export function getSettings(): Settings {
  return settings;
}
