package org.pwevent.ldp;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * MTSP-LDP's budget-free queries (papers/002 M4) over one stream's releases from the local-DP
 * collector ({@code <prefix>.ldp-releases}, docs/ldp-reports.md), as
 * {@code pwevent releases --ldp --stream S --range A:B --delta N --event RATIO} answers them
 * (the Python reference: {@code streams.releases.ldp.range_queries}).
 *
 * <p>This is post-processing of what the collector has already released: it reads no report and
 * spends no privacy budget, so it may be run as often as wanted over any releases.
 *
 * <p>For a range of value cells [a, b] each release, oldest first, gives a {@link Range}: its
 * {@code count} (the cells' counts summed left to right, which is the released tree's minimum
 * cover, every node summing its cells), the count's {@code std} where the release's bars cover
 * the range (every cell estimated alone, or for mtsp a range of whole intervals; null otherwise),
 * the {@code period} (the counts of the delta releases ending there, summed oldest first; null
 * for the first delta - 1) and, with a ratio, the {@code event} flag (1 when the period exceeds
 * ratio times the previous period, clipped at 0, plus the margin; 0 without a previous period).
 * Every sum runs left to right from 0.0, as the other client libraries and the Python reference
 * compute it, so the results agree bit for bit.
 */
public final class RangeQueries {
  private RangeQueries() {}

  /**
   * An mtsp release's publication intervals ({@code "intervals"}): their first cells
   * {@code starts} and, per interval, the estimated {@code counts} and their {@code std}, all of
   * one length. The arrays are copied in and out.
   */
  public record Intervals(int[] starts, double[] counts, double[] std) {
    /** IllegalArgumentException unless the three arrays are non-null and of one length. */
    public Intervals {
      if (starts == null || counts == null || std == null) {
        throw new IllegalArgumentException("intervals need starts, counts and std");
      }
      if (counts.length != starts.length || std.length != starts.length) {
        throw new IllegalArgumentException("intervals' starts, counts and std must be of one "
            + "length, got " + starts.length + ", " + counts.length + " and " + std.length);
      }
      starts = starts.clone();
      counts = counts.clone();
      std = std.clone();
    }

    @Override
    public int[] starts() {
      return starts.clone();
    }

    @Override
    public double[] counts() {
      return counts.clone();
    }

    @Override
    public double[] std() {
      return std.clone();
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Intervals other && Arrays.equals(starts, other.starts)
          && Arrays.equals(counts, other.counts) && Arrays.equals(std, other.std);
    }

    @Override
    public int hashCode() {
      return Objects.hash(Arrays.hashCode(starts), Arrays.hashCode(counts), Arrays.hashCode(std));
    }

    @Override
    public String toString() {
      return "Intervals[starts=" + Arrays.toString(starts) + ", counts=" + Arrays.toString(counts)
          + ", std=" + Arrays.toString(std) + "]";
    }
  }

  /**
   * The part of one release the queries read: the value cells' estimated {@code counts}
   * ({@code "counts"}), their standard deviations {@code std} ({@code "std"}: null when the
   * release has no bars, an entry null at a cell without its own, as an mtsp cell sharing its
   * interval; otherwise of the counts' length) and, for mtsp, its {@code intervals}
   * ({@code "intervals"}, null when absent). The arrays are copied in and out.
   */
  public record Release(double[] counts, Double[] std, Intervals intervals) {
    /** IllegalArgumentException unless counts is non-null and std null or of its length. */
    public Release {
      if (counts == null) {
        throw new IllegalArgumentException("a release needs its counts");
      }
      if (std != null && std.length != counts.length) {
        throw new IllegalArgumentException("a release's std must be of its counts' length "
            + counts.length + ", got " + std.length);
      }
      counts = counts.clone();
      std = std == null ? null : std.clone();
    }

    /** A release without intervals (any protocol but mtsp). */
    public Release(double[] counts, Double[] std) {
      this(counts, std, null);
    }

    @Override
    public double[] counts() {
      return counts.clone();
    }

    @Override
    public Double[] std() {
      return std == null ? null : std.clone();
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Release other && Arrays.equals(counts, other.counts)
          && Arrays.equals(std, other.std) && Objects.equals(intervals, other.intervals);
    }

    @Override
    public int hashCode() {
      return Objects.hash(Arrays.hashCode(counts), Arrays.hashCode(std), intervals);
    }

    @Override
    public String toString() {
      return "Release[counts=" + Arrays.toString(counts) + ", std=" + Arrays.toString(std)
          + ", intervals=" + intervals + "]";
    }
  }

  /**
   * One release's answer, as {@code --json} writes it under {@code "range"}: the value cells
   * [{@code from}, {@code to}], their {@code count}, its {@code std} (null where the release's
   * bars do not cover the range), the {@code period}'s count (null for the first delta - 1
   * releases) and the {@code event} flag, 0 or 1 (null when no ratio was asked for).
   */
  public record Range(int from, int to, double count, Double std, Double period, Integer event) {}

  /**
   * The range [a, b] of value cells queried on every release of one stream, {@code releases}
   * oldest first, with the period of {@code delta} releases and, when {@code ratio} is not null,
   * the event flag against {@code ratio} and {@code margin}: one {@link Range} per release, in
   * their order. Post-processing of the releases: no privacy budget is spent. No releases give
   * an empty list (nothing is checked then). IllegalArgumentException unless
   * 0 <= a <= b < d, d the first release's number of value cells (every release must hold d),
   * and 1 <= delta <= the number of releases.
   */
  public static List<Range> query(List<Release> releases, int a, int b, int delta, Double ratio,
      double margin) {
    if (releases == null) {
      throw new IllegalArgumentException("releases must be a list, not null");
    }
    if (releases.isEmpty()) {
      return List.of();
    }
    for (int i = 0; i < releases.size(); i++) {
      if (releases.get(i) == null) {
        throw new IllegalArgumentException("release " + i + " is null");
      }
    }
    int d = releases.get(0).counts.length;
    if (!(0 <= a && a <= b && b < d)) {
      throw new IllegalArgumentException(
          "the range must satisfy 0 <= A <= B < " + d + " (the value cells), got " + a + ":" + b);
    }
    int n = releases.size();
    if (!(1 <= delta && delta <= n)) {
      throw new IllegalArgumentException(
          "delta must lie in [1, " + n + "] (the releases read), got " + delta);
    }
    double[] counts = new double[n];
    for (int i = 0; i < n; i++) {
      double[] cells = releases.get(i).counts;
      if (cells.length != d) {
        throw new IllegalArgumentException("release " + i + " holds " + cells.length
            + " value cells, the first " + d + ": not one stream's releases");
      }
      counts[i] = sum(cells, a, b + 1);
    }
    Double[] periods = new Double[n];
    for (int i = delta - 1; i < n; i++) {
      periods[i] = sum(counts, i + 1 - delta, i + 1);
    }
    List<Range> out = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      Integer event = null;
      if (ratio != null) {
        Double before = i >= delta ? periods[i - delta] : null;
        // Python's max(before, 0.0): before unless 0.0 > before (so NaN and -0.0 stay)
        event = before != null
            && periods[i] > ratio * (0.0 > before ? 0.0 : before) + margin ? 1 : 0;
      }
      out.add(new Range(a, b, counts[i], rangeStd(releases.get(i), a, b), periods[i], event));
    }
    return List.copyOf(out);
  }

  /** {@link #query(List, int, int, int, Double, double)} with a margin of 0. */
  public static List<Range> query(List<Release> releases, int a, int b, int delta, Double ratio) {
    return query(releases, a, b, delta, ratio, 0.0);
  }

  /** {@link #query(List, int, int, int, Double, double)} without an event flag. */
  public static List<Range> query(List<Release> releases, int a, int b, int delta) {
    return query(releases, a, b, delta, null, 0.0);
  }

  /**
   * The standard deviation of the sum of cells [a, b] of one release, or null. Cells are
   * estimated from independent bits (OUE; GRR's negative covariance only makes the sum of
   * variances larger), so the variances add; an mtsp range adds its whole intervals'. With
   * intervals, the range must start an interval and end just before one (cells past b share b's
   * interval otherwise; a range reaching the last cell never does).
   */
  private static Double rangeStd(Release release, int a, int b) {
    Intervals intervals = release.intervals;
    if (intervals != null) {
      int from = indexOf(intervals.starts, a);
      int to = indexOf(intervals.starts, b + 1);
      if (from < 0 || to < 0) {
        return null;
      }
      return Math.sqrt(sumOfSquares(intervals.std, from, to));
    }
    Double[] std = release.std;
    if (std == null) {
      return null;
    }
    double total = 0.0;
    for (int i = a; i <= b; i++) {
      if (std[i] == null) {
        return null;
      }
    }
    for (int i = a; i <= b; i++) {
      double s = std[i];
      total += s * s;
    }
    return Math.sqrt(total);
  }

  /** The first index of {@code x} in {@code values}, or -1 (Python's list.index). */
  private static int indexOf(int[] values, int x) {
    for (int i = 0; i < values.length; i++) {
      if (values[i] == x) {
        return i;
      }
    }
    return -1;
  }

  /** values[from..to) summed left to right from 0.0 (none when from >= to). */
  private static double sum(double[] values, int from, int to) {
    double total = 0.0;
    for (int i = from; i < to; i++) {
      total += values[i];
    }
    return total;
  }

  /** values[from..to) squared and summed left to right from 0.0 (none when from >= to). */
  private static double sumOfSquares(double[] values, int from, int to) {
    double total = 0.0;
    for (int i = from; i < to; i++) {
      total += values[i] * values[i];
    }
    return total;
  }
}
