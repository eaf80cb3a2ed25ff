/**
 * MTSP-LDP on devices: the tree's levels, who reports which, and the publication intervals
 * (docs/ldp-reports.md, "Tree rounds").
 *
 * The tree runs over the oracle's c = d + 1 cells (cell d: "no value"), padded to 2^h leaves,
 * h = max(1, bitLength(c - 1)) (treeHeight()); level l in [1, h] holds ceil(c / 2^(h - l)) real
 * nodes (levelCells()) and cell x lies in its node x >> (h - l) (nodeOf()).
 *
 * - Round 1 (M1): a user's level comes from its public position (population.ts, LPD's, under the
 *   stream's public key): 1 + floor(position h / 2^32) (treeLevel()), so any party can check it.
 *   The user reports its level's node through OUE over the level's real nodes, at E/(2w), at the
 *   stream's first slot and where the previous slot's decision asks for it.
 * - Round 2 (M3): the decision names a partition of the cells into intervals by their first cells,
 *   `starts` (strictly increasing, the first 0); a user answers with its cell's interval
 *   (intervalOf()) through OUE over the intervals at the decision's budget, at most E/2.
 *
 * The client keeps its ledger over virtual slots (window 2w), as for lbd and lba (rounds.ts), so
 * a forged decision cannot make it overspend; the partition decides nothing about privacy, only
 * which cells share a bit.
 */

import { POSITIONS } from "./population.js";
import { checkInteger, MAX_CELLS } from "./wire.js";

/** The protocol whose rounds run over a tree. */
export const TREE_PROTOCOL = "mtsp";
/** The greatest height: the tree over MAX_CELLS = 2^16 cells. */
const MAX_HEIGHT = 16;

/** Whether `protocol` runs its rounds over a tree (mtsp). */
export function isTreeProtocol(protocol: unknown): protocol is typeof TREE_PROTOCOL {
  return protocol === TREE_PROTOCOL;
}

/** The tree's height over `cells` oracle cells (1 to 65536): the smallest h >= 1 with 2^h >= cells. */
export function treeHeight(cells: number): number {
  checkInteger("cells", cells, 1, MAX_CELLS);
  return Math.max(1, 32 - Math.clz32(cells - 1));
}

/**
 * The level in [1, h] of a user at public position `at` (an integer in [0, 2^32)):
 * 1 + floor(at h / 2^32), exact (at h < 2^37).
 */
export function treeLevel(at: number, h: number): number {
  checkInteger("position", at, 0, POSITIONS - 1);
  checkInteger("height", h, 1, MAX_HEIGHT);
  return 1 + Math.floor((at * h) / POSITIONS);
}

/** The real nodes of `level` (in [1, h]) over `cells` oracle cells: ceil(cells / 2^(h - level)). */
export function levelCells(cells: number, h: number, level: number): number {
  checkInteger("level", level, 1, h);
  return Math.ceil(cells / 2 ** (h - level)); // exact: a division by a power of two
}

/** The node of `level` (in [1, h]) that holds `cell`, counted from the level's left end. */
export function nodeOf(cell: number, h: number, level: number): number {
  checkInteger("level", level, 1, h);
  return cell >> (h - level);
}

/**
 * The interval of the partition `starts` (first cells, strictly increasing, the first 0) holding
 * `cell`: the index of the last start at or below it.
 */
export function intervalOf(cell: number, starts: readonly number[]): number {
  let lo = 0;
  let hi = starts.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (starts[mid] <= cell) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

/**
 * `starts` as a frozen copy, or an error unless it is an array of at most 65536 integers in
 * [0, 65535], strictly increasing, the first 0 (or empty: no publication).
 */
export function checkStarts(starts: unknown): readonly number[] {
  if (!Array.isArray(starts)) throw new TypeError("starts must be an array of integers");
  if (starts.length > MAX_CELLS) {
    throw new RangeError(`starts holds at most ${MAX_CELLS} cells, got ${starts.length}`);
  }
  let previous = -1;
  for (const x of starts as unknown[]) {
    if (typeof x !== "number" || !Number.isInteger(x) || !(previous < x && x < MAX_CELLS)) {
      throw new RangeError(
        `starts must be integers in [0, ${MAX_CELLS - 1}], strictly increasing, got ${String(x).slice(0, 100)} after ${previous}`,
      );
    }
    previous = x;
  }
  if (starts.length > 0 && starts[0] !== 0) {
    throw new RangeError(`the first interval starts at cell 0, not ${String(starts[0])}`);
  }
  return Object.freeze(starts.map((x: number) => x + 0)); // -0 reads as 0
}
