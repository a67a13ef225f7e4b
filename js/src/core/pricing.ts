/**
 * Model prices: the user's overrides first, then the `@pydantic/genai-prices` table (offline), the same data as
 * Python's `genai-prices` (core/pricing.py). Lookups are cached per (provider, model). Unknown is `null`, never $0.
 */
import { calcPrice } from "@pydantic/genai-prices";
import { type Price, checkPrice, priceCost } from "../model/price.js";

/** Our provider names -> genai-prices provider ids. */
const PROVIDER_IDS: Record<string, string> = { openai: "openai", anthropic: "anthropic", "gcp.gemini": "google",
  "gcp.vertex_ai": "google", google: "google" };

/** A model's price, with input-size tiers (the tier whose start the prompt exceeds applies). */
export class ModelPricing {
  constructor(readonly base: Price, readonly tiers: readonly [number, Price][] = []) {}

  cost(input: number, output: number, cacheRead = 0, cacheWrite = 0): number {
    let price = this.base;
    for (const [start, tier] of this.tiers) if (input > start) price = tier;
    return priceCost(price, input, output, cacheRead, cacheWrite);
  }
}

export class PriceBook {
  private readonly overrides = new Map<string, Price>();
  private readonly cache = new Map<string, ModelPricing | null>();

  /** `overrides`: model (or `provider/model`) -> Price in US dollars per million tokens. */
  constructor(overrides: Record<string, Price> = {}) {
    for (const [model, price] of Object.entries(overrides)) this.overrides.set(model, checkPrice(price, `prices["${model}"]`));
  }

  lookup(provider: string, model: string): ModelPricing | null {
    const key = `${provider}\u0000${model}`;
    if (this.cache.has(key)) return this.cache.get(key) ?? null;
    const override = this.overrides.get(model) ?? this.overrides.get(`${provider}/${model}`);
    const found = override !== undefined ? new ModelPricing(override) : fromGenaiPrices(provider, model);
    this.cache.set(key, found);
    return found;
  }
}

type Raw = number | { base: number; tiers: { start: number; price: number }[] } | undefined;

function fromGenaiPrices(provider: string, model: string): ModelPricing | null {
  let calc: ReturnType<typeof calcPrice> = null;
  try {
    const providerId = PROVIDER_IDS[provider];
    calc = providerId !== undefined ? calcPrice({ input_tokens: 1, output_tokens: 1 }, model, { providerId }) : null;
  } catch {
    calc = null;
  }
  try {
    if (calc === null) calc = calcPrice({ input_tokens: 1, output_tokens: 1 }, model);
  } catch {
    return null; // price data problems must not break the agent
  }
  if (calc === null) return null;
  const mp = calc.model_price as Record<string, Raw>;
  const raw = { input: mp.input_mtok, output: mp.output_mtok, read: mp.cache_read_mtok, write: mp.cache_write_mtok };
  const starts = [...new Set(Object.values(raw).flatMap((v) => (typeof v === "object" ? v.tiers.map((t) => t.start)
    : [])))].sort((a, b) => a - b);
  const at = (value: Raw, tokens: number): number | null => {
    if (value === undefined || value === null) return null;
    if (typeof value === "object") {
      let chosen = value.base;
      for (const tier of value.tiers) if (tokens > tier.start) chosen = tier.price;
      return chosen;
    }
    return value;
  };
  const priceAt = (tokens: number): Price => ({
    inputPerMtok: at(raw.input, tokens) || 0,
    outputPerMtok: at(raw.output, tokens) || 0,
    cacheReadPerMtok: at(raw.read, tokens),
    cacheWritePerMtok: at(raw.write, tokens),
  });
  return new ModelPricing(priceAt(0), starts.map((s) => [s, priceAt(s + 1)] as [number, Price]));
}
