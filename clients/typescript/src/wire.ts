/**
 * The wire format's text rules (docs/ldp-reports.md): JSON strings and limits. A report's keys
 * are, in this order, v, protocol, user, slot, round (the two-round protocols lbd, lba, lpd, lpa
 * and mtsp only: 1 or 2), eps, E, w, d, cells (mtsp only: the cells its OUE bits run over, its
 * level's nodes in round 1, the decision's intervals in round 2), oracle, bits (OUE) or cell
 * (GRR), client; numbers as String(x) writes them. eps is E/w for lbu and plbu, E for lsp, lpu
 * and both rounds of lpd and lpa, E/(2w) in round 1 of lbd, lba and mtsp and at most E/2 in their
 * round 2.
 *
 * Version 2: d is the number of value cells, and the oracle runs over d + 1 (oracleCells), cell
 * d meaning "no value", so that a user reports every slot it is due whether it holds a value or
 * not, and a report's presence says nothing (version 1 had no such cell).
 */

/** The largest user id, public key (LPU, LPD, LPA, MTSP) or client name, in UTF-8 bytes. */
export const MAX_TEXT_BYTES = 256;
/** The most cells an oracle runs over: at most MAX_CELLS - 1 value cells (d) and "no value". */
export const MAX_CELLS = 65536;
/** The largest slot. */
export const MAX_SLOT = Number.MAX_SAFE_INTEGER;
/** The reports' version (decisions keep their own, rounds.ts). 2: the "no value" cell. */
export const WIRE_VERSION = 2;

/** The cells the oracle runs over for `d` value cells: d + 1, the last (cell d) "no value". */
export function oracleCells(d: number): number {
  return d + 1;
}

/** `text` as a JSON string: `"` and `\` escaped, U+0000..U+001F as \u00xx, the rest as is. */
export function formatString(text: string): string {
  let out = '"';
  for (const ch of text) {
    const code = ch.charCodeAt(0);
    if (ch === '"' || ch === "\\") out += "\\" + ch;
    else if (code < 0x20) out += "\\u" + code.toString(16).padStart(4, "0");
    else out += ch;
  }
  return out + '"';
}

/** `text` if it is a string of 1 to 256 UTF-8 bytes without a lone surrogate; else an error. */
export function checkText(what: string, text: unknown): string {
  if (typeof text !== "string") throw new TypeError(`${what} must be a string`);
  let bytes = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
      if (!(next >= 0xdc00 && next <= 0xdfff)) throw new RangeError(`${what} holds a lone surrogate`);
      bytes += 4;
      i++;
    } else if (c >= 0xdc00 && c <= 0xdfff) {
      throw new RangeError(`${what} holds a lone surrogate`);
    } else {
      bytes += c < 0x80 ? 1 : c < 0x800 ? 2 : 3;
    }
  }
  if (bytes < 1 || bytes > MAX_TEXT_BYTES) {
    throw new RangeError(`${what} must take 1 to ${MAX_TEXT_BYTES} UTF-8 bytes, got ${bytes}`);
  }
  return text;
}

/** `value` if it is an integer in [low, high]; else a RangeError naming `what`. */
export function checkInteger(what: string, value: unknown, low: number, high: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < low || value > high) {
    throw new RangeError(`${what} must be an integer in [${low}, ${high}], got ${String(value)}`);
  }
  return value;
}
