package org.pwevent.ldp;

import java.util.List;

/**
 * What a client needs: the protocol (lbu, lsp, lpu, plbu, or lbd, lba with two rounds a slot),
 * the user id, the domain's d value cells (1 to 65535; the oracle runs over d + 1, cell d meaning
 * "no value": {@link Wire#oracleCells(int)}), the window w and budget E (the stream's for
 * lbu/lsp/lpu/lbd/lba, the user's own for plbu), the stream's first slot, and LPU's public key
 * and rotation (epochs of {@code rotate} blocks; 0: one group for good). The constructor checks
 * every field.
 */
public record ReportConfig(
    String protocol, String user, int d, int w, double budget, long start, String lpuKey,
    int rotate) {
  /** The protocols of this version. */
  public static final List<String> PROTOCOLS = List.of("lbu", "lsp", "lpu", "plbu", "lbd", "lba");
  /** The protocols whose w and E are the stream's, the same for every user. */
  public static final List<String> HOMOGENEOUS = List.of("lbu", "lsp", "lpu", "lbd", "lba");

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
    if (protocol.equals("lpu")) {
      Wire.checkText("lpuKey", lpuKey);
    }
  }

  /** A config without LPU's key and rotation (lbu, lsp, plbu, lbd, lba). */
  public ReportConfig(String protocol, String user, int d, int w, double budget, long start) {
    this(protocol, user, d, w, budget, start, "", 0);
  }

  /** The budget one report spends (a dissimilarity report's, E/(2w), for lbd and lba). */
  public double eps() {
    return Schedule.reportBudget(protocol, w, budget);
  }

  /** Whether the protocol has two rounds a slot (lbd, lba: {@link Decision}). */
  public boolean rounds() {
    return Schedule.isRounds(protocol);
  }
}
