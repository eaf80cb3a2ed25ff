package org.pwevent.ldp;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;

/** The wire format's text rules (docs/ldp-reports.md): numbers, strings and limits. */
public final class Wire {
  /**
   * The report format's version. Version 2 adds the oracle's extra cell for "no value"
   * ({@link #oracleCells(int)}); version 1 had none. Decisions keep their own version
   * ({@link Decision#VERSION}).
   */
  public static final int VERSION = 2;
  /** The largest user id, LPU key or client name, in UTF-8 bytes. */
  public static final int MAX_TEXT_BYTES = 256;
  /** The most cells an oracle runs over: at most MAX_CELLS - 1 value cells and "no value". */
  public static final int MAX_CELLS = 65536;
  /** The most value cells a domain may have, {@code d}: MAX_CELLS - 1. */
  public static final int MAX_VALUE_CELLS = MAX_CELLS - 1;
  /** The largest slot (JavaScript's largest exact integer). */
  public static final long MAX_SLOT = (1L << 53) - 1;
  /**
   * The largest slot of a two-round report (lbd, lba, mtsp: its virtual slot, 2 slot + 1, stays
   * exact; lpd and lpa keep the same cap).
   */
  public static final long MAX_ROUND_SLOT = (1L << 52) - 1;

  private Wire() {}

  /**
   * The cells the oracle runs over for {@code d} value cells: d + 1, the last (cell d) meaning
   * "no value". A report's {@code "d"} is still d; its OUE bits are d + 1, its GRR cell in
   * [0, d].
   */
  public static int oracleCells(int d) {
    return d + 1;
  }

  /**
   * A finite double as JavaScript's String(x) writes it: the shortest digits that read back to
   * it (the closest such), plain from 1e-6 up to 1e21, else with an exponent (1e-7, 1.5e+21).
   */
  public static String formatNumber(double x) {
    if (!Double.isFinite(x)) {
      throw new IllegalArgumentException("the wire holds finite numbers only, got " + x);
    }
    if (x == 0.0) {
      return "0";
    }
    if (x < 0) {
      return "-" + formatNumber(-x);
    }
    BigDecimal exact = new BigDecimal(x);
    BigDecimal shortest = exact;
    for (int p = 1; p <= 17; p++) {
      BigDecimal candidate = exact.round(new MathContext(p, RoundingMode.HALF_EVEN));
      if (Double.parseDouble(candidate.toString()) == x) {
        shortest = candidate;
        break;
      }
    }
    shortest = shortest.stripTrailingZeros();
    String digits = shortest.unscaledValue().toString();
    int k = digits.length();
    int n = k - shortest.scale(); // x = 0.digits * 10^n
    if (k <= n && n <= 21) {
      return digits + "0".repeat(n - k);
    }
    if (0 < n && n <= 21) {
      return digits.substring(0, n) + "." + digits.substring(n);
    }
    if (-6 < n && n <= 0) {
      return "0." + "0".repeat(-n) + digits;
    }
    int e = n - 1;
    String mantissa = k == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
    return mantissa + "e" + (e > 0 ? "+" : "-") + Math.abs(e);
  }

  /**
   * {@code text} as a JSON string: " and \ escaped with a backslash, U+0000..U+001F as six
   * characters (a backslash, u, 4 lowercase hex digits), the rest as is.
   */
  public static String formatString(String text) {
    StringBuilder out = new StringBuilder(text.length() + 2).append('"');
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }

  /** {@code text} if it takes 1 to 256 UTF-8 bytes without a lone surrogate; else an error. */
  public static String checkText(String what, String text) {
    if (text == null) {
      throw new IllegalArgumentException(what + " must be a string");
    }
    int bytes = 0;
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (Character.isHighSurrogate(c)) {
        if (i + 1 >= text.length() || !Character.isLowSurrogate(text.charAt(i + 1))) {
          throw new IllegalArgumentException(what + " holds a lone surrogate");
        }
        bytes += 4;
        i++;
      } else if (Character.isLowSurrogate(c)) {
        throw new IllegalArgumentException(what + " holds a lone surrogate");
      } else {
        bytes += c < 0x80 ? 1 : c < 0x800 ? 2 : 3;
      }
    }
    if (bytes < 1 || bytes > MAX_TEXT_BYTES) {
      throw new IllegalArgumentException(what + " must take 1 to 256 UTF-8 bytes, got " + bytes);
    }
    return text;
  }

  /** {@code value} if it lies in [low, high]; else IllegalArgumentException naming it. */
  public static long checkRange(String what, long value, long low, long high) {
    if (value < low || value > high) {
      throw new IllegalArgumentException(
          what + " must be an integer in [" + low + ", " + high + "], got " + value);
    }
    return value;
  }
}
