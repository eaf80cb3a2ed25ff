package org.pwevent.ldp;

/**
 * OUE and GRR from uniform 32-bit words against integer thresholds, and the portable exp every
 * client language computes bit for bit alike (docs/ldp-reports.md). Their {@code d} is the
 * number of cells they run over: a client's d value cells and one for "no value", d + 1
 * ({@link Wire#oracleCells(int)}).
 */
public final class Oracles {
  /** 2^32. */
  public static final long WORD = 1L << 32;
  /** 2^31: the true cell's OUE bit is 1 below it. */
  public static final long HALF_WORD = 1L << 31;
  /** The largest budget one report may spend. */
  public static final double MAX_EPS = 500.0;

  private static final double LN2_HI = 6.93147180369123816490e-01;
  private static final double LN2_LO = 1.90821492927058770002e-10;
  private static final double INV_LN2 = 1.44269504088896338700e00;
  private static final int DEGREE = 13;
  private static final double[] COEFFICIENTS = new double[DEGREE + 1];
  private static final char[] HEX = "0123456789abcdef".toCharArray();

  static {
    double factorial = 1.0;
    for (int n = 0; n <= DEGREE; n++) {
      if (n > 0) {
        factorial *= n; // exact: 13! < 2^53
      }
      COEFFICIENTS[n] = 1.0 / factorial;
    }
  }

  private Oracles() {}

  /** e^x for 0 <= x <= 500: range reduction and a degree-13 Taylor polynomial in doubles. */
  public static double portableExp(double x) {
    if (!(x >= 0.0 && x <= MAX_EPS)) {
      throw new IllegalArgumentException("portableExp takes 0 <= x <= 500, got " + x);
    }
    double k = Math.floor(x * INV_LN2 + 0.5);
    double r = (x - k * LN2_HI) - k * LN2_LO;
    double p = COEFFICIENTS[DEGREE];
    for (int n = DEGREE - 1; n >= 0; n--) {
      p = p * r + COEFFICIENTS[n];
    }
    return Math.scalb(p, (int) k);
  }

  /** {@code eps} if it lies in (0, 500], else IllegalArgumentException. */
  public static double checkEps(double eps) {
    if (!(eps > 0.0 && eps <= MAX_EPS)) {
      throw new IllegalArgumentException("a report's budget must lie in (0, 500], got " + eps);
    }
    return eps;
  }

  /** OUE's threshold for the other cells' bits: ceil(q 2^32), q = 1/(e^eps + 1). */
  public static long oueThreshold(double eps) {
    double q = 1.0 / (portableExp(checkEps(eps)) + 1.0);
    return Math.max(1L, (long) Math.ceil(q * 4294967296.0));
  }

  /** GRR's threshold for keeping the true cell: floor(p 2^32), p = e^eps/(e^eps + d - 1). */
  public static long grrKeepThreshold(double eps, int d) {
    double e = portableExp(checkEps(eps));
    return (long) Math.floor(e / (e + (double) (d - 1)) * 4294967296.0);
  }

  /** Whether PLBU reports through GRR: when e^eps + d - 2 < 4 e^eps (GRR's variance lower). */
  public static boolean plbuUsesGrr(double eps, int d) {
    double e = portableExp(checkEps(eps));
    return e + (double) (d - 2) < 4.0 * e;
  }

  /** GRR's report of {@code cell} over {@code d} cells (no word drawn over one cell). */
  public static int grrCell(int cell, int d, long keep, WordSource words) {
    if (d == 1) {
      return cell;
    }
    if (words.nextWord() < keep) {
      return cell;
    }
    long others = d - 1;
    long limit = WORD - WORD % others;
    while (true) {
      long u = words.nextWord();
      if (u < limit) {
        return (int) ((cell + 1 + u % others) % d);
      }
    }
  }

  /**
   * OUE's report of {@code cell} over {@code d} cells as lowercase hex of the packed bits (bit j
   * is bit j mod 8 of byte j/8), appended to {@code out}; bit j from word j.
   */
  public static void oueHex(int cell, int d, long threshold, WordSource words, StringBuilder out) {
    int b = 0;
    for (int j = 0; j < d; j++) {
      long u = words.nextWord();
      if (j == cell ? u < HALF_WORD : u < threshold) {
        b |= 1 << (j & 7);
      }
      if ((j & 7) == 7) {
        out.append(HEX[b >> 4]).append(HEX[b & 15]);
        b = 0;
      }
    }
    if ((d & 7) != 0) {
      out.append(HEX[b >> 4]).append(HEX[b & 15]);
    }
  }
}
