/**
 * MTSP-LDP's budget-free queries (papers/002 M4) over the local-DP collector's releases
 * (`<prefix>.ldp-releases`, docs/ldp-reports.md), as `range_queries` in
 * streams/releases/ldp.py computes them and `pwevent releases --ldp --range A:B --delta N
 * --event RATIO` prints them.
 *
 * The queries only read what was released: they are post-processing and spend no privacy budget.
 * Every sum runs left to right from 0.0, as the Python reference adds, so the results are the
 * same doubles bit for bit.
 */

import { checkInteger } from "./wire.js";

/** An mtsp release's publication intervals: their first cells and each interval's std. */
export interface ReleaseIntervals {
  /** The intervals' first cells, strictly increasing, the first 0. */
  readonly starts: readonly number[];
  /** Each interval's count (not read by the queries). */
  readonly counts?: readonly number[];
  /** Each interval's count's standard deviation. */
  readonly std: readonly number[];
}

/** One release of the local-DP collector, as read back (only the fields the queries read). */
export interface LdpRelease {
  /** The release's slot (not read by the queries). */
  readonly slot?: number;
  /** The estimated count of each value cell. */
  readonly counts: readonly number[];
  /** Each cell's standard deviation, null at a cell sharing its mtsp interval; or null (none). */
  readonly std?: readonly (number | null)[] | null;
  /** An mtsp release's intervals, whose stds give a range of whole intervals its bars. */
  readonly intervals?: ReleaseIntervals | null;
}

/** Options of rangeQueries(). */
export interface RangeQueryOptions {
  /** The period: how many slots' counts each period sums (in [1, releases.length]; 1). */
  readonly delta?: number;
  /** The event ratio: with it, each range carries `event` (none when null or undefined). */
  readonly ratio?: number | null;
  /** What the period must exceed ratio times the previous period by (0). */
  readonly margin?: number;
}

/** One release's answer to a range query. */
export interface RangeQuery {
  /** The range's first value cell. */
  readonly from: number;
  /** The range's last value cell. */
  readonly to: number;
  /** The range's count at the release's slot: its cells' counts, summed left to right. */
  readonly count: number;
  /** The count's standard deviation when the release's bars cover the range, else null. */
  readonly std: number | null;
  /** The counts of the delta releases ending here, summed oldest first; null for the first delta - 1. */
  readonly period: number | null;
  /**
   * With a ratio only: 1 when the period exceeds ratio times the previous period (delta releases
   * back), clipped at 0, plus the margin; 0 without a previous period.
   */
  readonly event?: 0 | 1;
}

/** The values' sum, left to right from 0.0. */
function sum(values: Iterable<number>): number {
  let total = 0.0;
  for (const x of values) total += x;
  return total;
}

/** The squares of `values`, in order. */
function* squares(values: readonly number[]): Iterable<number> {
  for (const s of values) yield s * s;
}

/**
 * The standard deviation of the sum of cells [a, b] of one release, or null. Cells are estimated
 * from independent bits, so the variances add; an mtsp range adds its whole intervals'.
 */
function rangeStd(release: LdpRelease, a: number, b: number): number | null {
  const intervals = release.intervals;
  let chosen: readonly number[];
  if (intervals !== undefined && intervals !== null) {
    const starts = intervals.starts;
    const first = starts.indexOf(a);
    const end = starts.indexOf(b + 1); // cells past b share b's interval unless b + 1 starts one
    if (first < 0 || end < 0) return null;
    chosen = intervals.std.slice(first, end);
  } else {
    const std = release.std;
    if (std === undefined || std === null) return null;
    const cells = std.slice(a, b + 1);
    if (cells.some((s) => s === null)) return null;
    chosen = cells as number[];
  }
  return Math.sqrt(sum(squares(chosen)));
}

/**
 * MTSP-LDP's budget-free range and event-monitoring queries over one stream's releases, oldest
 * first: one {@link RangeQuery} per release, for the value cells [a, b].
 *
 * - `count`: the release's counts[a..b] summed left to right (the released tree's minimum cover).
 * - `std`: with mtsp `intervals`, only for a range of whole intervals (a and b + 1 both starts):
 *   the root of the intervals' summed variances; otherwise the root of the cells' summed variances
 *   when every cell of the range has a std; else null.
 * - `period`: the counts of the `delta` releases ending there, summed oldest first (null for the
 *   first delta - 1).
 * - `event` (with `ratio` only): 1 when period[i] > ratio * max(period[i - delta], 0) + margin,
 *   0 when there is no previous period (i < delta, or period[i - delta] null).
 *
 * This is post-processing of the releases: no privacy budget is spent. It mirrors
 * `pwevent releases --ldp --range A:B --delta N --event RATIO` (streams/releases/ldp.py,
 * `range_queries`), bit for bit.
 *
 * @throws RangeError unless 0 <= a <= b < counts.length (the first release's value cells) and
 *   delta lies in [1, releases.length]; an empty release list gives [].
 */
export function rangeQueries(
  releases: readonly LdpRelease[],
  a: number,
  b: number,
  options: RangeQueryOptions = {},
): RangeQuery[] {
  if (!Array.isArray(releases)) throw new TypeError("releases must be an array");
  if (releases.length === 0) return [];
  const { delta = 1, ratio = null, margin = 0.0 } = options;
  const d = releases[0].counts.length;
  if (
    typeof a !== "number" || typeof b !== "number" || !Number.isInteger(a) || !Number.isInteger(b) ||
    !(0 <= a && a <= b && b < d)
  ) {
    throw new RangeError(`the range must satisfy 0 <= A <= B < ${d} (the value cells), got ${String(a)}:${String(b)}`);
  }
  checkInteger("delta", delta, 1, releases.length);
  if (ratio !== null && typeof ratio !== "number") throw new TypeError(`ratio must be a number or null, got ${String(ratio)}`);
  if (typeof margin !== "number") throw new TypeError(`margin must be a number, got ${String(margin)}`);
  const counts = releases.map((release) => sum(release.counts.slice(a, b + 1)));
  const periods = counts.map((_, i) => (i + 1 < delta ? null : sum(counts.slice(i + 1 - delta, i + 1))));
  return releases.map((release, i) => {
    const period = periods[i];
    const range: { -readonly [K in keyof RangeQuery]: RangeQuery[K] } = {
      from: a,
      to: b,
      count: counts[i],
      std: rangeStd(release, a, b),
      period,
    };
    if (ratio !== null) {
      const before = i >= delta ? periods[i - delta] : null;
      // max(before, 0.0) as Python takes it: before unless 0.0 is greater.
      range.event = before !== null && period !== null && period > ratio * (0.0 > before ? 0.0 : before) + margin ? 1 : 0;
    }
    return range;
  });
}
