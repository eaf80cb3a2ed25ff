package org.pwevent.ldp;

import java.util.List;

/**
 * What a client needs: the protocol (lbu, lsp, lpu, plbu, or lbd, lba, lpd, lpa, mtsp with two
 * rounds a slot), the user id, the domain's d value cells (1 to 65535; the oracle runs over
 * d + 1, cell d meaning "no value": {@link Wire#oracleCells(int)}), the window w and budget E
 * (the stream's for all but plbu, the user's own for plbu), the stream's first slot, the stream's
 * public key ({@code lpuKey}: LPU's groups, LPD's, LPA's and MTSP's positions, required for lpu,
 * lpd, lpa and mtsp) and LPU's rotation (epochs of {@code rotate} blocks; 0: one group for good).
 * The constructor checks every field.
 */
public record ReportConfig(
    String protocol, String user, int d, int w, double budget, long start, String lpuKey,
    int rotate) {
  /** The protocols of this version. */
  public static final List<String> PROTOCOLS = List.of(
      "lbu", "lsp", "lpu", "plbu", "lbd", "lba", "lpd", "lpa", "mtsp");
  /** The protocols whose w and E are the stream's, the same for every user. */
  public static final List<String> HOMOGENEOUS = List.of(
      "lbu", "lsp", "lpu", "lbd", "lba", "lpd", "lpa", "mtsp");

  /** Every field checked; IllegalArgumentException names the wrong one. */
  public ReportConfig {
    if (protocol == null || !PROTOCOLS.contains(protocol)) {
      throw new IllegalArgumentException("unknown protocol " + protocol + "; choose from " + PROTOCOLS);
    }
    Wire.checkText("user", user);
    Wire.checkRange("d", d, 1, Wire.MAX_VALUE_CELLS);
    Wire.checkRange("w", w, 1, Integer.MAX_VALUE);
    Wire.checkRange("start", start, 0, Wire.MAX_SLOT);
    Wire.checkRange("rotate", rotate, 0, Integer.MAX_VALUE);
    if (!(Double.isFinite(budget) && budget > 0.0)) {
      throw new IllegalArgumentException("E must be a finite number > 0, got " + budget);
    }
    Oracles.checkEps(Schedule.reportBudget(protocol, w, budget));
    if (lpuKey == null) {
      lpuKey = "";
    }
    if (Schedule.isKeyed(protocol)) {
      Wire.checkText("lpuKey", lpuKey);
    }
  }

  /** A config without the public key and LPU's rotation (lbu, lsp, plbu, lbd, lba). */
  public ReportConfig(String protocol, String user, int d, int w, double budget, long start) {
    this(protocol, user, d, w, budget, start, "", 0);
  }

  /**
   * The budget one report spends (a dissimilarity report's, E/(2w), for lbd, lba and mtsp; E for
   * every report of lpd and lpa).
   */
  public double eps() {
    return Schedule.reportBudget(protocol, w, budget);
  }

  /** Whether the protocol has two rounds a slot (lbd, lba, lpd, lpa, mtsp: {@link Decision}). */
  public boolean rounds() {
    return Schedule.isRounds(protocol);
  }

  /** Whether the protocol divides the population by public positions (lpd, lpa). */
  public boolean population() {
    return Schedule.isPopulation(protocol);
  }

  /** Whether the protocol runs its two rounds over a tree (mtsp: {@link Tree}). */
  public boolean tree() {
    return Tree.isTree(protocol);
  }
}
