/**
 * Two rounds a slot: LBD and LBA on devices (docs/ldp-reports.md, "Two rounds a slot").
 *
 * Slot t of a two-round stream runs a dissimilarity round (every user reports at E/(2w), with a
 * value or without one: cell d, "no value"), then the collector's decision for t (the publication
 * budget of t, 0: none, and the dissimilarity budget of t + 1, 0: none), then a publication round
 * at the decision's budget, answered by every user alike, with a value or without.
 *
 * An LBD or LBA client keeps its ledger over virtual slots: round r of slot t is virtual slot
 * 2t + r - 1, against a window of 2w and budget E, so a forged decision cannot make it overspend.
 * It answers only what was asked: round 1 at the stream's first slot and where the previous
 * slot's decision names one, round 2 where its slot's decision names a budget.
 *
 * LPD and LPA (population.ts) divide the users by their public positions: round 1 is asked of the
 * lower half's users at their phase only, round 2 of the upper half's users in the interval
 * [from, from + size) the slot's decision names; every report spends E, and the client keeps its
 * ledger over real slots against a window of w and budget E.
 *
 * MTSP (tree.ts) keeps LBD's ledger and rounds; its round 1 runs over the user's level of a tree
 * over the cells, and its decision names the publication round's partition of the cells into
 * intervals (`starts`), which round 2 runs over.
 */

import { MAX_EPS } from "./oracles.js";
import { HALF } from "./population.js";
import { isPopulationProtocol, isRoundProtocol, ROUND_PROTOCOLS, type RoundProtocol } from "./schedule.js";
import { checkStarts, isTreeProtocol } from "./tree.js";
import { checkInteger, checkText, formatString, MAX_CELLS, MAX_SLOT } from "./wire.js";

export const DECISION_VERSION = 1;
const DECISION_KEYS = ["v", "stream", "protocol", "slot", "eps", "next"] as const;
/** An lpd or lpa decision's keys: its publication interval after the budgets. */
const POPULATION_KEYS = [...DECISION_KEYS, "from", "size"] as const;
/** An mtsp decision's keys: its publication partition after the budgets. */
const TREE_KEYS = [...DECISION_KEYS, "starts"] as const;
const INTEGER_LITERAL = /^-?(?:0|[1-9][0-9]*)$/;

/**
 * The largest slot a two-round client reports at: its virtual slots, up to 2 slot + 1, stay
 * exact doubles (at most 2^53 - 1). LPD and LPA clients, whose ledgers hold real slots, keep the
 * same cap.
 */
export const MAX_ROUND_SLOT = (MAX_SLOT - 1) / 2;

/** Where round `round` (1 or 2) of `slot` lies on a client's ledger: 2 slot + round - 1. */
export function virtualSlot(slot: number, round: number): number {
  return 2 * slot + (round - 1);
}

/** The budget of an lbd, lba or mtsp dissimilarity report: E/(2w) (lpd and lpa spend E). */
export function dissimilarityBudget(w: number, E: number): number {
  return E / (2 * w);
}

function checkBudget(what: string, value: unknown): number {
  if (typeof value !== "number" || !Number.isFinite(value) || !(value >= 0 && value <= MAX_EPS)) {
    throw new RangeError(`${what} must be a number in [0, ${MAX_EPS}], got ${String(value)}`);
  }
  return value;
}

function checkWhole(what: string, value: unknown, high: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || !(value >= 0 && value <= high)) {
    throw new RangeError(`${what} must be an integer in [0, ${high}], got ${String(value)}`);
  }
  return value + 0; // -0 reads as 0
}

/**
 * The collector's decision for `slot` of `stream`: `eps` is the publication round's budget (0:
 * no publication round), `next` the dissimilarity budget of slot + 1 (0: none). An lpd or lpa
 * decision also names the publication round's users: the upper-half positions
 * [from, from + size) (offsets from 2^31, modulo 2^31: inInterval()), `from` an integer in
 * [0, 2^31 - 1] and `size` one in [0, 2^31], size > 0 exactly when eps > 0; both are 0 for the
 * others. An mtsp decision names the publication round's partition of the cells by the intervals'
 * first cells, `starts` (tree.ts: integers in [0, 65535], strictly increasing, the first 0), empty
 * exactly when eps is 0; empty for the others. The constructor checks every field (a RangeError or
 * TypeError names the wrong one); a decision is frozen, its `starts` too.
 */
export class Decision {
  readonly stream: string;
  readonly protocol: RoundProtocol;
  readonly slot: number;
  readonly eps: number;
  readonly next: number;
  /** Where the publication interval starts in the upper half (lpd, lpa; 0 for the others). */
  readonly from: number;
  /** How many positions the publication interval holds (lpd, lpa; 0 for the others). */
  readonly size: number;
  /** The first cell of each publication interval, from 0 up (mtsp; empty for the others). */
  readonly starts: readonly number[];

  constructor(
    stream: string,
    protocol: RoundProtocol,
    slot: number,
    eps: number,
    next: number,
    from: number = 0,
    size: number = 0,
    starts: readonly number[] = [],
  ) {
    this.stream = checkText("stream", stream);
    if (!isRoundProtocol(protocol)) {
      throw new RangeError(`protocol must be one of ${ROUND_PROTOCOLS.join(", ")}, got ${String(protocol)}`);
    }
    this.protocol = protocol;
    this.slot = checkInteger("slot", slot, 0, MAX_SLOT) + 0; // -0 reads as slot 0
    this.eps = checkBudget("eps", eps);
    this.next = checkBudget("next", next);
    const population = isPopulationProtocol(protocol);
    this.from = checkWhole("from", from, population ? HALF - 1 : 0);
    this.size = checkWhole("size", size, population ? HALF : 0);
    if (population && this.size > 0 !== this.eps > 0) {
      throw new RangeError(
        "an lpd or lpa decision names users (size > 0) exactly when it names a publication budget (eps > 0)",
      );
    }
    this.starts = checkStarts(starts);
    if (this.starts.length > 0 !== (isTreeProtocol(protocol) && this.eps > 0)) {
      throw new RangeError(
        "an mtsp decision names a partition (starts) exactly when it names a publication budget (eps > 0); the others name none",
      );
    }
    Object.freeze(this);
  }
}

/**
 * A decision's JSON text, keys in this order, numbers as the reports write them:
 * `{"v":1,"stream":"app","protocol":"lbd","slot":1042,"eps":0.025,"next":0.05}`; for lpd and
 * lpa the interval after them:
 * `{"v":1,"stream":"app","protocol":"lpd","slot":1042,"eps":1,"next":1,"from":0,"size":4096}`,
 * and for mtsp the partition's first cells:
 * `{"v":1,"stream":"app","protocol":"mtsp","slot":1042,"eps":0.25,"next":0.05,"starts":[0,4,6]}`.
 */
export function decisionText(decision: Decision): string {
  const d = decision;
  const interval = isPopulationProtocol(d.protocol)
    ? `,"from":${d.from},"size":${d.size}`
    : isTreeProtocol(d.protocol)
      ? `,"starts":[${d.starts.join(",")}]`
      : "";
  return (
    `{"v":${DECISION_VERSION},"stream":${formatString(d.stream)},"protocol":"${d.protocol}",` +
    `"slot":${d.slot},"eps":${String(d.eps)},"next":${String(d.next)}${interval}}`
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
 * exactly v, stream, protocol, slot, eps and next in this order, then from and size when the
 * protocol is lpd or lpa, or starts when it is mtsp (any other decision holding them is refused);
 * v is the integer 1, slot an integer (no fraction, no exponent) in [0, 2^53 - 1], eps and next
 * numbers in [0, 500]; for lpd and lpa from is an integer in [0, 2^31 - 1] and size one in
 * [0, 2^31], size > 0 exactly when eps > 0; for mtsp starts is an array of at most 65536 integers
 * (no fraction, no exponent) in [0, 65535], strictly increasing, the first 0, non-empty exactly
 * when eps > 0.
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
  const isObject = typeof record === "object" && record !== null && !Array.isArray(record);
  const keys = isObject ? Object.keys(record) : [];
  const protocol = isObject ? (record as Record<string, unknown>).protocol : undefined;
  const population = isPopulationProtocol(protocol);
  const tree = isTreeProtocol(protocol);
  const expected: readonly string[] = population ? POPULATION_KEYS : tree ? TREE_KEYS : DECISION_KEYS;
  if (keys.length !== expected.length || keys.some((k, i) => k !== expected[i])) {
    throw new RangeError(`a decision is an object with the keys ${expected.join(", ")}`);
  }
  const r = record as Record<(typeof POPULATION_KEYS)[number] | (typeof TREE_KEYS)[number], unknown>;
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
  // from and size: integers as json.loads reads them (1.0 is a float there, refused)
  const whole = (key: "from" | "size") => {
    if (!population) return 0;
    if (!isInteger(key)) {
      const high = key === "from" ? HALF - 1 : HALF;
      throw new RangeError(`${key} must be an integer in [0, ${high}], got ${(raw.get(key) ?? "").slice(0, 100)}`);
    }
    return r[key] as number;
  };
  // starts: an array of integers as json.loads reads them (no 1.0, no true)
  const starts = () => {
    if (!tree) return [];
    const value = r.starts;
    const items = (raw.get("starts") ?? "").slice(1, -1);
    const integers =
      Array.isArray(value) &&
      value.every((x) => typeof x === "number") &&
      (value.length === 0 || items.split(",").every((x) => INTEGER_LITERAL.test(x.trim())));
    if (!integers) {
      throw new RangeError(
        `starts must be an array of integers in [0, ${MAX_CELLS - 1}], got ${(raw.get("starts") ?? "").slice(0, 100)}`,
      );
    }
    return value as number[];
  };
  return new Decision(
    r.stream as string,
    r.protocol,
    r.slot as number,
    budget("eps"),
    budget("next"),
    whole("from"),
    whole("size"),
    starts(),
  );
}
