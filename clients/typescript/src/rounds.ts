/**
 * Two rounds a slot: LBD and LBA on devices (docs/ldp-reports.md, "Two rounds a slot").
 *
 * Slot t of a two-round stream runs a dissimilarity round (every user reports at E/(2w), with a
 * value or without one: cell d, "no value"), then the collector's decision for t (the publication
 * budget of t, 0: none, and the dissimilarity budget of t + 1, 0: none), then a publication round
 * at the decision's budget, answered by every user alike, with a value or without.
 *
 * A client keeps its ledger over virtual slots: round r of slot t is virtual slot 2t + r - 1,
 * against a window of 2w and budget E, so a forged decision cannot make it overspend. It answers
 * only what was asked: round 1 at the stream's first slot and where the previous slot's decision
 * names one, round 2 where its slot's decision names a budget.
 */

import { MAX_EPS } from "./oracles.js";
import { isRoundProtocol, ROUND_PROTOCOLS, type RoundProtocol } from "./schedule.js";
import { checkInteger, checkText, formatString, MAX_SLOT } from "./wire.js";

export const DECISION_VERSION = 1;
const DECISION_KEYS = ["v", "stream", "protocol", "slot", "eps", "next"] as const;
const INTEGER_LITERAL = /^-?(?:0|[1-9][0-9]*)$/;

/**
 * The largest slot a two-round client reports at: its virtual slots, up to 2 slot + 1, stay
 * exact doubles (at most 2^53 - 1).
 */
export const MAX_ROUND_SLOT = (MAX_SLOT - 1) / 2;

/** Where round `round` (1 or 2) of `slot` lies on a client's ledger: 2 slot + round - 1. */
export function virtualSlot(slot: number, round: number): number {
  return 2 * slot + (round - 1);
}

/** The budget of a dissimilarity report: E/(2w). */
export function dissimilarityBudget(w: number, E: number): number {
  return E / (2 * w);
}

function checkBudget(what: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value) || !(value >= 0 && value <= MAX_EPS)) {
    throw new RangeError(`${what} must be a number in [0, ${MAX_EPS}], got ${String(value)}`);
  }
  return value;
}

/**
 * The collector's decision for `slot` of `stream`: `eps` is the publication round's budget (0:
 * no publication round), `next` the dissimilarity budget of slot + 1 (0: none). The constructor
 * checks every field (a RangeError or TypeError names the wrong one); a decision is frozen.
 */
export class Decision {
  readonly stream: string;
  readonly protocol: RoundProtocol;
  readonly slot: number;
  readonly eps: number;
  readonly next: number;

  constructor(stream: string, protocol: RoundProtocol, slot: number, eps: number, next: number) {
    this.stream = checkText("stream", stream);
    if (!isRoundProtocol(protocol)) {
      throw new RangeError(`protocol must be one of ${ROUND_PROTOCOLS.join(", ")}, got ${String(protocol)}`);
    }
    this.protocol = protocol;
    this.slot = checkInteger("slot", slot, 0, MAX_SLOT) + 0; // -0 reads as slot 0
    this.eps = checkBudget("eps", eps);
    this.next = checkBudget("next", next);
    Object.freeze(this);
  }
}

/**
 * A decision's JSON text, keys in this order, numbers as the reports write them:
 * `{"v":1,"stream":"app","protocol":"lbd","slot":1042,"eps":0.025,"next":0.05}`.
 */
export function decisionText(decision: Decision): string {
  const d = decision;
  return (
    `{"v":${DECISION_VERSION},"stream":${formatString(d.stream)},"protocol":"${d.protocol}",` +
    `"slot":${d.slot},"eps":${String(d.eps)},"next":${String(d.next)}}`
  );
}

/** A decision's bytes: decisionText() in UTF-8. */
export function encodeDecision(decision: Decision): Uint8Array {
  return new TextEncoder().encode(decisionText(decision));
}

function skipSpace(text: string, i: number): number {
  while (i < text.length && " \t\n\r".includes(text[i])) i++;
  return i;
}

/** Where the JSON value starting at text[i] ends (the text is valid JSON). */
function valueEnd(text: string, i: number): number {
  if (text[i] === '"') {
    let j = i + 1;
    while (text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
    return j + 1;
  }
  if (text[i] === "{" || text[i] === "[") {
    let depth = 0;
    let j = i;
    do {
      if (text[j] === '"') {
        j = valueEnd(text, j);
        continue;
      }
      if (text[j] === "{" || text[j] === "[") depth++;
      else if (text[j] === "}" || text[j] === "]") depth--;
      j++;
    } while (depth > 0);
    return j;
  }
  let j = i;
  while (j < text.length && /[-+.0-9a-zA-Z]/.test(text[j])) j++;
  return j;
}

/**
 * The raw text of the value each key of a JSON object holds last (duplicate keys: the last one,
 * as JSON.parse reads them), for text JSON.parse has read as an object.
 */
function rawValues(text: string): Map<string, string> {
  const values = new Map<string, string>();
  let i = skipSpace(text, 0) + 1; // past "{"
  for (;;) {
    i = skipSpace(text, i);
    if (text[i] === "}") return values;
    const keyEnd = valueEnd(text, i);
    const key = JSON.parse(text.slice(i, keyEnd)) as string;
    i = skipSpace(text, skipSpace(text, keyEnd) + 1); // past ":"
    const end = valueEnd(text, i);
    values.set(key, text.slice(i, end));
    i = skipSpace(text, end);
    if (text[i] === ",") i++;
  }
}

/**
 * Read and check a decision's bytes (UTF-8) or text; an error says what is wrong. The keys are
 * exactly v, stream, protocol, slot, eps and next in this order; v is the integer 1, slot an
 * integer (no fraction, no exponent) in [0, 2^53 - 1], eps and next numbers in [0, 500].
 */
export function parseDecision(data: Uint8Array | string): Decision {
  let text: string;
  if (typeof data === "string") {
    text = data.charCodeAt(0) === 0xfeff ? data.slice(1) : data; // as its UTF-8 bytes would read
  } else if (data instanceof Uint8Array) {
    text = new TextDecoder("utf-8", { fatal: true }).decode(data);
  } else {
    throw new TypeError("a decision is read from a string or a Uint8Array");
  }
  const record: unknown = JSON.parse(text);
  const keys = typeof record === "object" && record !== null && !Array.isArray(record) ? Object.keys(record) : [];
  if (keys.length !== DECISION_KEYS.length || keys.some((k, i) => k !== DECISION_KEYS[i])) {
    throw new RangeError(`a decision is an object with the keys ${DECISION_KEYS.join(", ")}`);
  }
  const r = record as Record<(typeof DECISION_KEYS)[number], unknown>;
  // JSON.parse reads 1.0 and 1e0 as 1: v and slot must be written as integers
  const raw = rawValues(text);
  const isInteger = (key: string) => INTEGER_LITERAL.test(raw.get(key) ?? "");
  if (r.v !== DECISION_VERSION || !isInteger("v")) {
    throw new RangeError(`unknown decision version ${(raw.get("v") ?? "").slice(0, 100)}`);
  }
  checkText("stream", r.stream);
  if (!isRoundProtocol(r.protocol)) {
    throw new RangeError(`protocol must be one of ${ROUND_PROTOCOLS.join(", ")}, got ${String(r.protocol)}`);
  }
  if (!isInteger("slot")) {
    throw new RangeError(`slot must be an integer in [0, ${MAX_SLOT}], got ${(raw.get("slot") ?? "").slice(0, 100)}`);
  }
  // an integer's -0 is 0 (a Python int), a fraction's -0.0 stays -0
  const budget = (key: "eps" | "next") => (isInteger(key) ? (r[key] as number) + 0 : r[key]) as number;
  return new Decision(r.stream as string, r.protocol, r.slot as number, budget("eps"), budget("next"));
}
