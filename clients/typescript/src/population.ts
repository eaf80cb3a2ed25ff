/**
 * Population division on devices: LPD and LPA (docs/ldp-reports.md, "Population rounds").
 *
 * Each user has a public position in [0, 2^32): 32 bits of HMAC-SHA256 under the stream's public
 * key (position()), so that any party can check who was asked and no server keeps a list of
 * users.
 *
 * - The lower half, [0, 2^31), holds the dissimilarity users, cut into w phases of equal width:
 *   a user at phase k (phase()) reports round 1 at the slots start + k, start + k + w, ... whose
 *   dissimilarity round the decisions ask (inRound1()).
 * - The upper half, [2^31, 2^32), serves the publication rounds: the decision of slot t names an
 *   interval [from, from + size) of it (offsets from 2^31, modulo 2^31: inInterval()), whose
 *   users answer round 2.
 *
 * Every report spends the stream's whole E, and a client keeps its ledger over real slots
 * (window w, budget E), so that whatever a forged decision asks, a user reports at most once in
 * any w slots. The two halves never meet: a user answers one round kind only.
 */

import { framedHmac } from "./sha256.js";
import { checkInteger } from "./wire.js";

/** The number of positions: 2^32. */
export const POSITIONS = 2 ** 32;
/** Half the positions, 2^31: below it the dissimilarity users, from it the publication users. */
export const HALF = 2 ** 31;
const PREFIX = "pwevent-lpd-v1";

/**
 * The user's public position in [0, 2^32): HMAC-SHA256 keyed with the stream's public key
 * (UTF-8) over "pwevent-lpd-v1", the user id's UTF-8 length as 4 big-endian bytes and its UTF-8
 * bytes; the tag's first 4 bytes as a big-endian unsigned integer.
 */
export function position(key: string, user: string): number {
  const tag = framedHmac(key, PREFIX, [user]);
  return new DataView(tag.buffer, tag.byteOffset, tag.byteLength).getUint32(0);
}

/**
 * The dissimilarity phase in [0, w) of a user at position `at` (an integer in [0, 2^32)):
 * floor(at w / 2^31) in the lower half (computed exactly); null in the upper half (a
 * publication user).
 */
export function phase(at: number, w: number): number | null {
  checkInteger("position", at, 0, POSITIONS - 1);
  checkInteger("w", w, 1, 2147483647);
  if (at >= HALF) return null;
  return Number((BigInt(at) * BigInt(w)) >> 31n);
}

/**
 * Whether a user at position `at` is one of `slot`'s dissimilarity users (when the slot asks a
 * dissimilarity round): slot >= start, `at` in the lower half and (slot - start) mod w its phase.
 */
export function inRound1(at: number, slot: number, start: number, w: number): boolean {
  const k = phase(at, w);
  return k !== null && slot >= start && (slot - start) % w === k;
}

/**
 * Whether a user at position `at` lies in the publication interval [from, from + size) of the
 * upper half (offsets from 2^31, modulo 2^31: an interval may wrap around the half's end).
 */
export function inInterval(at: number, from: number, size: number): boolean {
  if (at < HALF) return false;
  const offset = (((at - HALF - from) % HALF) + HALF) % HALF;
  return offset < size;
}
