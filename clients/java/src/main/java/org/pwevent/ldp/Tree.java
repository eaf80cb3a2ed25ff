package org.pwevent.ldp;

import java.util.Collections;
import java.util.List;

/**
 * MTSP-LDP on devices (mtsp, docs/ldp-reports.md, "Tree rounds"): the tree's levels, who reports
 * which, and the publication intervals.
 *
 * <p>The tree runs over the oracle's c = d + 1 cells (cell d: "no value"), padded to 2^h leaves,
 * h = max(1, bitLength(c - 1)) ({@link #height}); level l in [1, h] holds ceil(c / 2^(h - l))
 * real nodes ({@link #levelCells}) and cell x lies in its node x >> (h - l) ({@link #nodeOf}).
 *
 * <p>Round 1: a user's level comes from its public position ({@link Schedule#position}, LPD's,
 * under the stream's public key): 1 + floor(position h / 2^32) ({@link #level}), so any party can
 * check it. The user reports its level's node through OUE over the level's real nodes, at
 * E/(2w), at the stream's first slot and where the previous slot's decision asks for it. Round 2:
 * the decision names a partition of the cells into intervals by their first cells,
 * {@link Decision#starts()} (strictly increasing, the first 0); a user answers with its cell's
 * interval ({@link #intervalOf}) through OUE over the intervals at the decision's budget, at most
 * E/2. The client keeps its ledger over virtual slots (window 2w), as for lbd and lba, so a
 * forged decision cannot make it overspend; the partition decides nothing about privacy, only
 * which cells share a bit.
 */
public final class Tree {
  /** The protocol whose rounds run over a tree. */
  public static final String PROTOCOL = "mtsp";

  private Tree() {}

  /** Whether {@code protocol} runs its rounds over a tree (mtsp). */
  public static boolean isTree(String protocol) {
    return PROTOCOL.equals(protocol);
  }

  /** The tree's height over {@code cells} oracle cells: the smallest h >= 1 with 2^h >= cells. */
  public static int height(int cells) {
    Wire.checkRange("cells", cells, 1, Wire.MAX_CELLS);
    return Math.max(1, 32 - Integer.numberOfLeadingZeros(cells - 1));
  }

  /**
   * The level in [1, h] of a user at public position {@code position} (in [0, 2^32)):
   * 1 + floor(position h / 2^32).
   */
  public static int level(long position, int height) {
    Wire.checkRange("position", position, 0, Schedule.POSITIONS - 1);
    Wire.checkRange("height", height, 1, 31);
    return 1 + (int) ((position * height) >>> 32); // position * h < 2^37: exact in a long
  }

  /**
   * The real nodes of {@code level} over {@code cells} oracle cells: ceil(cells / 2^(h - level)).
   */
  public static int levelCells(int cells, int height, int level) {
    Wire.checkRange("level", level, 1, height);
    int shift = height - level;
    return (int) ((cells + (1L << shift) - 1) >> shift);
  }

  /** The node of {@code level} that holds {@code cell}, counted from the level's left end. */
  public static int nodeOf(int cell, int height, int level) {
    Wire.checkRange("level", level, 1, height);
    return cell >> (height - level);
  }

  /**
   * The interval of the partition {@code starts} (first cells, strictly increasing, the first 0)
   * holding {@code cell}: the index of the last start at or below it.
   */
  public static int intervalOf(int cell, List<Integer> starts) {
    int at = Collections.binarySearch(starts, cell);
    return at >= 0 ? at : -at - 2;
  }

  /**
   * {@code starts} as an unmodifiable list, or IllegalArgumentException unless it holds at most
   * 65536 integers in [0, 65535], strictly increasing, the first 0 (or none: no publication).
   * Null is taken as none.
   */
  public static List<Integer> checkStarts(List<Integer> starts) {
    if (starts == null) {
      return List.of();
    }
    if (starts.size() > Wire.MAX_CELLS) {
      throw new IllegalArgumentException(
          "starts holds at most " + Wire.MAX_CELLS + " cells, got " + starts.size());
    }
    long previous = -1;
    for (Integer x : starts) {
      if (x == null || !(previous < x && x < Wire.MAX_CELLS)) {
        throw new IllegalArgumentException("starts must be integers in [0, " + (Wire.MAX_CELLS - 1)
            + "], strictly increasing, got " + x + " after " + previous);
      }
      previous = x;
    }
    if (!starts.isEmpty() && starts.get(0) != 0) {
      throw new IllegalArgumentException(
          "the first interval starts at cell 0, not " + starts.get(0));
    }
    return List.copyOf(starts);
  }
}
