package org.pwevent.ldp;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The collector's decision for {@code slot} of {@code stream} in a two-round protocol (lbd, lba,
 * lpd, lpa, mtsp): {@code eps} is the publication round's budget (0: no publication round),
 * {@code next} the dissimilarity budget of slot + 1 (0: none). An lpd or lpa decision also names
 * the publication round's users: the upper-half positions [from, from + size) (offsets from 2^31,
 * modulo 2^31: {@link Schedule#inInterval}); {@code size} is 0 exactly when {@code eps} is. Both
 * are 0 for the others. An mtsp decision names the publication round's partition of the cells by
 * the intervals' first cells, {@code starts} ({@link Tree}: strictly increasing from 0, at most
 * 65536 integers below 65536), empty exactly when {@code eps} is 0; empty for the others. The
 * constructor checks every field.
 *
 * <p>Slot t of a two-round stream runs a dissimilarity round, then the collector's decision, then
 * a publication round at the decision's eps. In lbd and lba every user holding a value reports
 * round 1 at E/(2w), and a client keeps its ledger over virtual slots ({@link #virtualSlot}:
 * round r of slot t is 2t + r - 1) against a window of 2w and budget E, so a forged decision
 * cannot make it overspend; so does mtsp, its round 1 over the user's level of the tree and
 * round 2 over the decision's intervals. In lpd and lpa a user reports round 1 at its phase only
 * and round 2 when the interval holds its position, every report at E, and a client keeps its
 * ledger over real slots against a window of w and budget E: a user reports at most once in any
 * w slots.
 *
 * <p>On the wire a decision is one JSON object, keys in this order, numbers as the reports write
 * them: {@code {"v":1,"stream":"app","protocol":"lbd","slot":1042,"eps":0.025,"next":0.05}}, and
 * for lpd and lpa the interval after them:
 * {@code {"v":1,"stream":"app","protocol":"lpd","slot":1042,"eps":1,"next":1,"from":0,"size":4096}},
 * and for mtsp the partition's first cells:
 * {@code {"v":1,"stream":"app","protocol":"mtsp","slot":1042,"eps":0.25,"next":0.05,"starts":[0,4,6]}}.
 */
public record Decision(
    String stream, String protocol, long slot, double eps, double next, long from, long size,
    List<Integer> starts) {
  /** The decision format's version. */
  public static final int VERSION = 1;
  /** A decision's keys, in their order (lbd, lba; lpd, lpa and mtsp add theirs). */
  public static final List<String> KEYS = List.of("v", "stream", "protocol", "slot", "eps", "next");
  /** An lpd or lpa decision's keys, in their order: the publication interval after the budgets. */
  public static final List<String> POPULATION_KEYS =
      List.of("v", "stream", "protocol", "slot", "eps", "next", "from", "size");
  /** The largest {@code from} of an lpd or lpa decision: 2^31 - 1. */
  public static final long MAX_FROM = Schedule.HALF - 1;
  /** The largest {@code size} of an lpd or lpa decision: 2^31, the whole upper half. */
  public static final long MAX_SIZE = Schedule.HALF;
  /** An mtsp decision's keys, in their order: the publication partition after the budgets. */
  public static final List<String> TREE_KEYS =
      List.of("v", "stream", "protocol", "slot", "eps", "next", "starts");

  /**
   * Every field checked; IllegalArgumentException names the wrong one. A null {@code starts} is
   * taken as none; {@link #starts()} is an unmodifiable copy.
   */
  public Decision {
    Wire.checkText("stream", stream);
    if (protocol == null || !Schedule.isRounds(protocol)) {
      throw new IllegalArgumentException(
          "protocol must be one of " + Schedule.ROUND_PROTOCOLS + ", got " + protocol);
    }
    Wire.checkRange("slot", slot, 0, Wire.MAX_SLOT);
    checkBudget("eps", eps);
    checkBudget("next", next);
    boolean population = Schedule.isPopulation(protocol);
    Wire.checkRange("from", from, 0, population ? MAX_FROM : 0);
    Wire.checkRange("size", size, 0, population ? MAX_SIZE : 0);
    if (population && (size > 0) != (eps > 0.0)) {
      throw new IllegalArgumentException("an lpd or lpa decision names users (size > 0) exactly "
          + "when it names a publication budget (eps > 0)");
    }
    starts = Tree.checkStarts(starts);
    if (starts.isEmpty() == (Tree.isTree(protocol) && eps > 0.0)) {
      throw new IllegalArgumentException("an mtsp decision names a partition (starts) exactly "
          + "when it names a publication budget (eps > 0); the others name none");
    }
  }

  /**
   * A decision without a partition (starts empty): any but an mtsp decision with a publication
   * round.
   */
  public Decision(String stream, String protocol, long slot, double eps, double next, long from,
      long size) {
    this(stream, protocol, slot, eps, next, from, size, List.of());
  }

  /**
   * A decision without a publication interval (from and size 0) or partition: any lbd or lba
   * decision, and an lpd, lpa or mtsp decision without a publication round.
   */
  public Decision(String stream, String protocol, long slot, double eps, double next) {
    this(stream, protocol, slot, eps, next, 0, 0, List.of());
  }

  /** An mtsp decision naming the partition {@code starts} (empty exactly when eps is 0). */
  public Decision(String stream, String protocol, long slot, double eps, double next,
      List<Integer> starts) {
    this(stream, protocol, slot, eps, next, 0, 0, starts);
  }

  private static void checkBudget(String what, double value) {
    if (!(Double.isFinite(value) && value >= 0.0 && value <= Oracles.MAX_EPS)) {
      throw new IllegalArgumentException(what + " must be a number in [0, 500], got " + value);
    }
  }

  /** Where round {@code round} (1 or 2) of {@code slot} lies on a client's ledger: 2 slot + round - 1. */
  public static long virtualSlot(long slot, int round) {
    return 2 * slot + round - 1;
  }

  /** The budget of a dissimilarity report: E/(2w). */
  public static double dissimilarityBudget(int w, double budget) {
    return budget / (2.0 * (double) w);
  }

  /**
   * The decision's JSON text, keys in order ({@link #KEYS}, {@link #POPULATION_KEYS} for lpd
   * and lpa, or {@link #TREE_KEYS} for mtsp: {@code "starts":[0,4,6]}, no spaces), numbers as the
   * reports write them.
   */
  public String text() {
    String interval = "";
    if (Schedule.isPopulation(protocol)) {
      interval = ",\"from\":" + from + ",\"size\":" + size;
    } else if (Tree.isTree(protocol)) {
      StringBuilder out = new StringBuilder(",\"starts\":[");
      for (int i = 0; i < starts.size(); i++) {
        out.append(i > 0 ? "," : "").append(starts.get(i));
      }
      interval = out.append(']').toString();
    }
    return "{\"v\":" + VERSION + ",\"stream\":" + Wire.formatString(stream) + ",\"protocol\":\""
        + protocol + "\",\"slot\":" + slot + ",\"eps\":" + Wire.formatNumber(eps) + ",\"next\":"
        + Wire.formatNumber(next) + interval + "}";
  }

  /** The decision's bytes: {@link #text()} in UTF-8. */
  public byte[] encode() {
    return text().getBytes(StandardCharsets.UTF_8);
  }

  /**
   * Read and check a decision's UTF-8 bytes as the Python reference does (json.loads, then the
   * checks): an object with exactly the keys v, stream, protocol, slot, eps, next in this order,
   * and from, size after them when the protocol is lpd or lpa, starts when it is mtsp (JSON's
   * rules otherwise: whitespace between tokens, escapes, a repeated key's last value at its first
   * place), v the integer 1, stream 1 to 256 UTF-8 bytes without a lone surrogate, protocol lbd,
   * lba, lpd, lpa or mtsp, slot an integer in [0, 2^53 - 1], eps and next numbers in [0, 500];
   * for lpd and lpa from an integer in [0, 2^31 - 1] and size one in [0, 2^31], size > 0 exactly
   * when eps > 0; for mtsp starts an array of at most 65536 integers in [0, 65535] (not floats
   * nor booleans), strictly increasing, the first 0, non-empty exactly when eps > 0.
   * IllegalArgumentException for anything else, malformed UTF-8 among it (a leading byte order
   * mark is skipped).
   */
  public static Decision parse(byte[] data) {
    return read(Reader.utf8(data));
  }

  /**
   * {@link #parse(byte[])} of the text's UTF-8 bytes: IllegalArgumentException for a text with a
   * lone surrogate (it has no UTF-8 bytes) or that is not a decision.
   */
  public static Decision parse(String text) {
    int[] points = text.codePoints().toArray();
    int from = points.length > 0 && points[0] == 0xfeff ? 1 : 0; // as the bytes' BOM
    for (int p : points) {
      if (p >= 0xd800 && p <= 0xdfff) {
        throw new IllegalArgumentException("a decision's text holds a lone surrogate");
      }
    }
    return read(new Reader(points, from));
  }

  private static Decision read(Reader reader) {
    Map<String, Value> record = reader.document();
    Value named = record.get("protocol");
    boolean population = named != null && named.kind == Value.STRING
        && Schedule.isPopulation(named.string);
    boolean tree = named != null && named.kind == Value.STRING && Tree.isTree(named.string);
    List<String> keys = population ? POPULATION_KEYS : tree ? TREE_KEYS : KEYS;
    if (!List.copyOf(record.keySet()).equals(keys)) {
      throw new IllegalArgumentException("a decision is an object with the keys " + keys);
    }
    Value v = record.get("v");
    if (v.kind != Value.INTEGER || !v.integer.equals(BigInteger.ONE)) {
      throw new IllegalArgumentException("unknown decision version");
    }
    Value stream = record.get("stream");
    if (stream.kind != Value.STRING) {
      throw new IllegalArgumentException("stream must be a string");
    }
    if (stream.surrogate) {
      throw new IllegalArgumentException("stream holds a lone surrogate");
    }
    Value protocol = record.get("protocol");
    if (protocol.kind != Value.STRING || !Schedule.isRounds(protocol.string)) {
      throw new IllegalArgumentException("protocol must be one of " + Schedule.ROUND_PROTOCOLS);
    }
    Value slot = record.get("slot");
    if (slot.kind != Value.INTEGER || slot.integer.signum() < 0
        || slot.integer.compareTo(BigInteger.valueOf(Wire.MAX_SLOT)) > 0) {
      throw new IllegalArgumentException("slot must be an integer in [0, " + Wire.MAX_SLOT + "]");
    }
    double eps = budget("eps", record.get("eps"));
    double next = budget("next", record.get("next"));
    long from = population ? whole("from", record.get("from"), MAX_FROM) : 0;
    long size = population ? whole("size", record.get("size"), MAX_SIZE) : 0;
    List<Integer> starts = tree ? starts(record.get("starts")) : List.of();
    return new Decision(stream.string, protocol.string, slot.integer.longValueExact(), eps, next,
        from, size, starts);
  }

  /**
   * An mtsp decision's starts: an array of integers in [0, 65535] (ints of json.loads, not
   * floats nor bools); their order and the rest checked by the constructor.
   */
  private static List<Integer> starts(Value value) {
    if (value.kind != Value.ARRAY) {
      throw new IllegalArgumentException("starts must be a list of integers");
    }
    if (value.items.size() > Wire.MAX_CELLS) {
      throw new IllegalArgumentException(
          "starts holds at most " + Wire.MAX_CELLS + " cells, got " + value.items.size());
    }
    List<Integer> out = new ArrayList<>(value.items.size());
    for (Value item : value.items) {
      out.add((int) whole("starts", item, Wire.MAX_CELLS - 1));
    }
    return out;
  }

  /** An integer in [0, high] (an int of json.loads, not a float nor a bool). */
  private static long whole(String what, Value value, long high) {
    if (value.kind != Value.INTEGER || value.integer.signum() < 0
        || value.integer.compareTo(BigInteger.valueOf(high)) > 0) {
      throw new IllegalArgumentException(what + " must be an integer in [0, " + high + "]");
    }
    return value.integer.longValueExact();
  }

  private static double budget(String what, Value value) {
    if (value.kind == Value.INTEGER) {
      if (value.integer.signum() < 0 || value.integer.compareTo(BigInteger.valueOf(500)) > 0) {
        throw new IllegalArgumentException(what + " must be a number in [0, 500]");
      }
      return value.integer.doubleValue(); // exact
    }
    if (value.kind != Value.NUMBER) {
      throw new IllegalArgumentException(what + " must be a number in [0, 500]");
    }
    return value.number; // checked by the constructor
  }

  /**
   * One JSON value as json.loads reads it: a string, an int, a float, an array of values, or
   * anything else.
   */
  private static final class Value {
    static final int STRING = 0;
    static final int INTEGER = 1;
    static final int NUMBER = 2;
    static final int OTHER = 3;
    static final int ARRAY = 4;
    static final Value ANY = new Value(OTHER, null, false, null, 0.0);

    final int kind;
    final String string;
    /** Whether the string holds a surrogate code point (which has no UTF-8). */
    final boolean surrogate;
    final BigInteger integer;
    final double number;
    /** An array's values, in order (null for the other kinds). */
    final List<Value> items;

    Value(int kind, String string, boolean surrogate, BigInteger integer, double number) {
      this(kind, string, surrogate, integer, number, null);
    }

    private Value(int kind, String string, boolean surrogate, BigInteger integer, double number,
        List<Value> items) {
      this.kind = kind;
      this.string = string;
      this.surrogate = surrogate;
      this.integer = integer;
      this.number = number;
      this.items = items;
    }

    static Value array(List<Value> items) {
      return new Value(ARRAY, null, false, null, 0.0, items);
    }
  }

  /**
   * JSON over code points as Python's json module reads it (strict strings; NaN, Infinity and
   * -Infinity as numbers; integers of at most 4300 digits; repeated keys keep their first place
   * and take the last value; nesting up to 1000 deep). Surrogate code points stay apart, as in a
   * Python string, so an escaped pair joins but a lone escape does not join a neighbour.
   */
  private static final class Reader {
    private static final int MAX_DEPTH = 1000;
    private static final int MAX_DIGITS = 4300;
    private final int[] text;
    private int at;

    Reader(int[] text, int from) {
      this.text = text;
      this.at = from;
    }

    /** The code points of UTF-8 {@code data} (Python's utf-8-sig with surrogatepass). */
    static Reader utf8(byte[] data) {
      int[] out = new int[data.length];
      int n = 0;
      int i = data.length >= 3 && (data[0] & 0xff) == 0xef && (data[1] & 0xff) == 0xbb
          && (data[2] & 0xff) == 0xbf ? 3 : 0;
      while (i < data.length) {
        int b = data[i] & 0xff;
        int more;
        int low = 0x80;
        int high = 0xbf;
        int cp;
        if (b < 0x80) {
          more = 0;
          cp = b;
        } else if (b >= 0xc2 && b <= 0xdf) {
          more = 1;
          cp = b & 0x1f;
        } else if (b >= 0xe0 && b <= 0xef) {
          more = 2;
          cp = b & 0x0f;
          low = b == 0xe0 ? 0xa0 : 0x80; // no overlong forms; ED A0..BF: surrogates, passed
        } else if (b >= 0xf0 && b <= 0xf4) {
          more = 3;
          cp = b & 0x07;
          low = b == 0xf0 ? 0x90 : 0x80;
          high = b == 0xf4 ? 0x8f : 0xbf;
        } else {
          throw new IllegalArgumentException("a decision is UTF-8: bad byte at " + i);
        }
        if (i + more >= data.length) {
          throw new IllegalArgumentException("a decision is UTF-8: truncated at " + i);
        }
        for (int k = 1; k <= more; k++) {
          int c = data[i + k] & 0xff;
          if (c < (k == 1 ? low : 0x80) || c > (k == 1 ? high : 0xbf)) {
            throw new IllegalArgumentException("a decision is UTF-8: bad byte at " + (i + k));
          }
          cp = (cp << 6) | (c & 0x3f);
        }
        out[n++] = cp;
        i += more + 1;
      }
      return new Reader(Arrays.copyOf(out, n), 0);
    }

    private IllegalArgumentException error(String what) {
      return new IllegalArgumentException("not a decision: " + what + " at " + at);
    }

    private int peek() {
      if (at >= text.length) {
        throw error("unexpected end");
      }
      return text[at];
    }

    private void space() {
      while (at < text.length
          && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r')) {
        at++;
      }
    }

    /** The top-level object, its values read; anything but one object is refused. */
    Map<String, Value> document() {
      space();
      if (peek() != '{') {
        throw error("a decision is a JSON object");
      }
      Map<String, Value> record = object(1);
      space();
      if (at != text.length) {
        throw error("extra data");
      }
      return record;
    }

    private Map<String, Value> object(int depth) {
      if (depth > MAX_DEPTH) {
        throw error("too deep");
      }
      Map<String, Value> out = new LinkedHashMap<>();
      at++; // {
      space();
      if (peek() == '}') {
        at++;
        return out;
      }
      while (true) {
        if (peek() != '"') {
          throw error("expected a key");
        }
        String key = string().string;
        space();
        if (peek() != ':') {
          throw error("expected ':'");
        }
        at++;
        space();
        out.put(key, value(depth));
        space();
        int c = peek();
        at++;
        if (c == '}') {
          return out;
        }
        if (c != ',') {
          throw error("expected ',' or '}'");
        }
        space();
      }
    }

    private Value array(int depth) {
      if (depth > MAX_DEPTH) {
        throw error("too deep");
      }
      List<Value> items = new ArrayList<>();
      at++; // [
      space();
      if (peek() == ']') {
        at++;
        return Value.array(items);
      }
      while (true) {
        items.add(value(depth));
        space();
        int c = peek();
        at++;
        if (c == ']') {
          return Value.array(items);
        }
        if (c != ',') {
          throw error("expected ',' or ']'");
        }
        space();
      }
    }

    private Value value(int depth) {
      int c = peek();
      switch (c) {
        case '"':
          return string();
        case '{':
          object(depth + 1);
          return Value.ANY;
        case '[':
          return array(depth + 1);
        case 'n':
          return word("null", Value.ANY);
        case 't':
          return word("true", Value.ANY);
        case 'f':
          return word("false", Value.ANY);
        case 'N':
          return word("NaN", new Value(Value.NUMBER, null, false, null, Double.NaN));
        case 'I':
          return word("Infinity", new Value(Value.NUMBER, null, false, null, Double.POSITIVE_INFINITY));
        default:
          if (c == '-' && at + 1 < text.length && text[at + 1] == 'I') {
            return word("-Infinity", new Value(Value.NUMBER, null, false, null, Double.NEGATIVE_INFINITY));
          }
          return number();
      }
    }

    private Value word(String word, Value value) {
      for (int k = 0; k < word.length(); k++) {
        if (at + k >= text.length || text[at + k] != word.charAt(k)) {
          throw error("expected a value");
        }
      }
      at += word.length();
      return value;
    }

    private static boolean digit(int c) {
      return c >= '0' && c <= '9';
    }

    private boolean digitAt(int i) {
      return i < text.length && digit(text[i]);
    }

    private Value number() {
      int begin = at;
      if (text[at] == '-') {
        at++;
      }
      if (!digitAt(at)) {
        throw error("expected a value");
      }
      if (text[at] == '0') {
        at++;
      } else {
        while (digitAt(at)) {
          at++;
        }
      }
      int digits = at - begin - (text[begin] == '-' ? 1 : 0);
      boolean fraction = false;
      if (at < text.length && text[at] == '.' && digitAt(at + 1)) {
        fraction = true;
        at++;
        while (digitAt(at)) {
          at++;
        }
      }
      if (at < text.length && (text[at] == 'e' || text[at] == 'E')) {
        int mark = at;
        at++;
        if (at < text.length && (text[at] == '+' || text[at] == '-')) {
          at++;
        }
        if (digitAt(at)) {
          fraction = true;
          while (digitAt(at)) {
            at++;
          }
        } else {
          at = mark; // not an exponent: what follows is refused as it stands
        }
      }
      String token = new String(text, begin, at - begin);
      if (fraction) {
        return new Value(Value.NUMBER, null, false, null, Double.parseDouble(token));
      }
      if (digits > MAX_DIGITS) {
        throw error("an integer of more than " + MAX_DIGITS + " digits");
      }
      return new Value(Value.INTEGER, null, false, new BigInteger(token), 0.0);
    }

    private int hex4(int from) {
      if (from + 4 > text.length) {
        throw error("a bad \\u escape");
      }
      int v = 0;
      for (int k = from; k < from + 4; k++) {
        int c = text[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
          throw error("a bad \\u escape");
        }
        v = (v << 4) | d;
      }
      return v;
    }

    private Value string() {
      at++; // "
      StringBuilder out = new StringBuilder();
      boolean surrogate = false;
      while (true) {
        int c = peek();
        at++;
        if (c == '"') {
          return new Value(Value.STRING, out.toString(), surrogate, null, 0.0);
        }
        if (c < 0x20) {
          throw error("a control character in a string");
        }
        if (c != '\\') {
          surrogate |= c >= 0xd800 && c <= 0xdfff;
          out.appendCodePoint(c);
          continue;
        }
        int e = peek();
        at++;
        switch (e) {
          case '"', '\\', '/' -> out.append((char) e);
          case 'b' -> out.append('\b');
          case 'f' -> out.append('\f');
          case 'n' -> out.append('\n');
          case 'r' -> out.append('\r');
          case 't' -> out.append('\t');
          case 'u' -> {
            int u = hex4(at);
            at += 4;
            if (u >= 0xd800 && u <= 0xdbff && at + 1 < text.length && text[at] == '\\'
                && text[at + 1] == 'u') {
              int low = hex4(at + 2);
              if (low >= 0xdc00 && low <= 0xdfff) {
                at += 6;
                u = Character.toCodePoint((char) u, (char) low);
              }
            }
            surrogate |= u >= 0xd800 && u <= 0xdfff;
            out.appendCodePoint(u);
          }
          default -> throw error("a bad escape");
        }
      }
    }
  }
}
