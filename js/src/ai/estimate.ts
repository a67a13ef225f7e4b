/**
 * The best estimate of a call whose usage was never reported (a stream the caller left, aborted or cut, or one
 * the run outlived): input from the admission, or the request's size when the admission did not measure it; output
 * from the text seen (4 characters a token), as Python's calls.py estimates it. Never zero for a stream.
 */
import type { Admission } from "../core/admission.js";

export interface EstimatedUsage { input: number; output: number; cacheRead: number; cacheWrite: number;
  reasoning: number }

/** `requestBytes` measures the request (called only when the admission has no estimate). */
export function leftStreamUsage(adm: Admission, requestBytes: () => number, outputChars: number): EstimatedUsage {
  const input = adm.inputEstimate > 0 ? adm.inputEstimate : Math.floor(requestBytes() / 4);
  return { input, output: Math.ceil(outputChars / 4), cacheRead: 0, cacheWrite: 0, reasoning: 0 };
}
