/**
 * Numbers formatted exactly as Python formats them (`f"{x:,}"`, `f"{x:.4f}"`, `f"{x:.6g}"`, `repr(x)`), so
 * that a wrap-up or a canonical argument text is byte-identical in both packages. Python rounds the exact
 * binary value half to even; `Number.prototype.toFixed` rounds ties up, so the rounding is done here on the
 * exact decimal expansion.
 */

interface Decimal {
  neg: boolean;
  /** Significant digits, no leading zero ("0" for zero). */
  digits: string;
  /** The value is 0.d1d2d3... x 10^point. */
  point: number;
}

function exactDecimal(x: number): Decimal {
  const neg = x < 0 || Object.is(x, -0);
  const abs = Math.abs(x);
  if (abs === 0) return { neg, digits: "0", point: 1 };
  const text = abs.toExponential(100); // exact for every double we format (its expansion is shorter)
  const [mantissa, exp] = text.split("e");
  const digits = mantissa.replace(".", "").replace(/0+$/, "") || "0";
  return { neg, digits, point: Number(exp) + 1 };
}

/** Keep `keep` leading digits, rounding half to even on the exact digits; returns digits and the new point. */
function roundDigits(d: Decimal, keep: number): Decimal {
  if (keep >= d.digits.length) return d;
  if (keep < 0) return { neg: d.neg, digits: "0", point: d.point - keep };
  const kept = d.digits.slice(0, keep);
  const rest = d.digits.slice(keep);
  const first = rest.charCodeAt(0) - 48;
  const tail = /[1-9]/.test(rest.slice(1));
  const last = keep > 0 ? kept.charCodeAt(keep - 1) - 48 : 0;
  const up = first > 5 || (first === 5 && (tail || last % 2 === 1));
  if (!up) return { neg: d.neg, digits: kept.replace(/0+$/, "") || "0", point: kept ? d.point : d.point };
  // add one at the last kept position
  const arr = (kept || "0").split("").map((c) => c.charCodeAt(0) - 48);
  let point = kept ? d.point : d.point + 1;
  let i = arr.length - 1;
  while (i >= 0) {
    if (arr[i] < 9) {
      arr[i] += 1;
      break;
    }
    arr[i] = 0;
    i -= 1;
  }
  if (i < 0) {
    arr.unshift(1);
    point += 1;
  }
  return { neg: d.neg, digits: arr.join("").replace(/0+$/, "") || "0", point };
}

function isZero(d: Decimal): boolean {
  return d.digits === "0";
}

/** Digits of `d` as fixed notation with `places` decimals (no sign). */
function fixedText(d: Decimal, places: number): string {
  let intPart: string;
  let frac: string;
  if (isZero(d)) {
    intPart = "0";
    frac = "";
  } else if (d.point <= 0) {
    intPart = "0";
    frac = "0".repeat(-d.point) + d.digits;
  } else {
    intPart = d.digits.slice(0, d.point).padEnd(d.point, "0");
    frac = d.digits.slice(d.point);
  }
  frac = frac.padEnd(places, "0").slice(0, places);
  return places > 0 ? `${intPart}.${frac}` : intPart;
}

function group(intPart: string): string {
  return intPart.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** Python `f"{x:.{places}f}"`, or `f"{x:,.{places}f}"` with `thousands`. */
export function pyFixed(x: number, places: number, thousands = false): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  const d = exactDecimal(x);
  const r = isZero(d) ? d : roundDigits(d, d.point + places);
  const text = fixedText(r, places);
  const [i, f] = text.split(".");
  const body = (thousands ? group(i) : i) + (f !== undefined ? `.${f}` : "");
  return (d.neg ? "-" : "") + body;
}

/** Python `round(x, places)` for a float: the nearest double to the correctly rounded decimal. */
export function pyRound(x: number, places: number): number {
  return Number(pyFixed(x, places));
}

/** Python `f"{n:,}"` of an int. */
export function pyInt(n: number | bigint, thousands = true): string {
  const text = typeof n === "bigint" ? n.toString() : BigInt(Math.trunc(n)).toString();
  const neg = text.startsWith("-");
  const digits = neg ? text.slice(1) : text;
  return (neg ? "-" : "") + (thousands ? group(digits) : digits);
}

/** Python `f"{x:.{p}g}"`. */
export function pyGeneral(x: number, precision = 6): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? "nan" : x > 0 ? "inf" : "-inf";
  const p = precision === 0 ? 1 : precision;
  const d = exactDecimal(x);
  const sign = d.neg ? "-" : "";
  if (isZero(d)) return `${sign}0`;
  const r = roundDigits(d, p);
  const exp = r.point - 1;
  if (exp >= -4 && exp < p) {
    const text = fixedText(r, Math.max(0, p - 1 - exp));
    return sign + (text.includes(".") ? text.replace(/0+$/, "").replace(/\.$/, "") : text);
  }
  const mant = r.digits.length > 1 ? `${r.digits[0]}.${r.digits.slice(1)}` : r.digits;
  return `${sign}${mant}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
}

/** Python `repr(x)` of a float (what `json.dumps` writes for a float). */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return "NaN";
  if (!Number.isFinite(x)) return x > 0 ? "Infinity" : "-Infinity";
  const sign = x < 0 || Object.is(x, -0) ? "-" : "";
  const abs = Math.abs(x);
  if (abs === 0) return `${sign}0.0`;
  const [mantissa, e] = abs.toExponential().split("e"); // the shortest digits that round-trip, as Python's
  const digits = mantissa.replace(".", "");
  const exp = Number(e);
  if (exp >= -4 && exp < 16) {
    const d: Decimal = { neg: false, digits, point: exp + 1 };
    const places = Math.max(1, digits.length - (exp + 1));
    return sign + fixedText(d, places);
  }
  const mant = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${mant}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
}
