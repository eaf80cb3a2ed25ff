package org.pwevent.ldp;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.util.List;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Where a protocol has a user report, with what budget; LPU's keyed group hash and LPD's, LPA's
 * and MTSP's keyed positions. The two-round protocols ({@link Decision}) lbd and lba have a
 * dissimilarity report every slot from the stream's first, at E/(2w), and a publication report
 * at the budget the collector's decision for the slot names, when it names one; so has mtsp, its
 * rounds over a tree ({@link Tree}: round 1 over the user's level, its level given by its
 * position, round 2 over the decision's intervals). The population ones, lpd and lpa, divide the
 * users by a public position ({@link #position}): a user in the lower half ([0, 2^31)) has a
 * dissimilarity report once every w slots, at its phase ({@link #phase}), and a user in the upper
 * half answers the publication rounds whose decision names an interval holding its position
 * ({@link #inInterval}); every report at E.
 */
public final class Schedule {
  /**
   * The protocols with two rounds a slot, the second as the collector decides: at the budget it
   * names (lbd, lba; mtsp over the intervals it names) or by the users it names (lpd, lpa:
   * population division).
   */
  public static final List<String> ROUND_PROTOCOLS = List.of("lbd", "lba", "lpd", "lpa", "mtsp");
  /** The two-round protocols that divide the population, every report at E. */
  public static final List<String> POPULATION_PROTOCOLS = List.of("lpd", "lpa");
  /**
   * The protocols that need the stream's public key (LPU's groups, LPD's, LPA's and MTSP's
   * positions).
   */
  public static final List<String> KEYED = List.of("lpu", "lpd", "lpa", "mtsp");
  /** The positions' upper half begins here, 2^31: below it dissimilarity users, above it publication users. */
  public static final long HALF = 1L << 31;
  /** The number of positions, 2^32. */
  public static final long POSITIONS = 1L << 32;
  private static final byte[] PREFIX = "pwevent-lpu-v1".getBytes(StandardCharsets.UTF_8);
  private static final byte[] POSITION_PREFIX = "pwevent-lpd-v1".getBytes(StandardCharsets.UTF_8);
  private final String protocol;
  private final long start;
  private final int w;
  private final String key;
  private final String user;
  private final int rotate;
  /** The user's position (lpd, lpa), -1 for the other protocols. */
  private final long position;
  private long epoch = -1;
  private int group;
  private int previous;

  /** The schedule of one user. */
  public Schedule(String protocol, long start, int w, String key, String user, int rotate) {
    this.protocol = protocol;
    this.start = start;
    this.w = w;
    this.key = key;
    this.user = user;
    this.rotate = rotate;
    this.position = isPopulation(protocol) ? position(key, user) : -1;
  }

  /**
   * The budget one report spends: E/w (lbu, plbu), E (lsp, lpu, and every report of lpd, lpa)
   * or, for a dissimilarity report, E/(2w) (lbd, lba, mtsp); IllegalArgumentException for an
   * unknown protocol.
   */
  public static double reportBudget(String protocol, int w, double budget) {
    if (protocol.equals("lbu") || protocol.equals("plbu")) {
      return budget / (double) w;
    }
    if (protocol.equals("lbd") || protocol.equals("lba") || Tree.isTree(protocol)) {
      return budget / (2.0 * (double) w);
    }
    if (protocol.equals("lsp") || protocol.equals("lpu") || isPopulation(protocol)) {
      return budget;
    }
    throw new IllegalArgumentException("unknown protocol " + protocol);
  }

  /** Whether {@code protocol} has two rounds a slot (lbd, lba, lpd, lpa, mtsp). */
  public static boolean isRounds(String protocol) {
    return ROUND_PROTOCOLS.contains(protocol);
  }

  /** Whether {@code protocol} divides the population (lpd, lpa). */
  public static boolean isPopulation(String protocol) {
    return POPULATION_PROTOCOLS.contains(protocol);
  }

  /** Whether {@code protocol} needs the stream's public key (lpu, lpd, lpa, mtsp). */
  public static boolean isKeyed(String protocol) {
    return KEYED.contains(protocol);
  }

  /**
   * HMAC-SHA256 under {@code key}'s UTF-8 bytes over {@code prefix} and, for each part, its
   * UTF-8 length as 4 big-endian bytes and its UTF-8 bytes.
   */
  private static byte[] tag(String key, byte[] prefix, String... parts) {
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(key.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
      mac.update(prefix);
      for (String part : parts) {
        byte[] data = part.getBytes(StandardCharsets.UTF_8);
        mac.update(ByteBuffer.allocate(4).putInt(data.length).array());
        mac.update(data);
      }
      return mac.doFinal();
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("HMAC-SHA256 is missing", e);
    }
  }

  /**
   * The user's LPU group in an epoch, in [0, w): HMAC-SHA256 under the stream's public LPU key
   * (non-empty) over "pwevent-lpu-v1" and, for each of the user, w and the epoch (decimal), its
   * UTF-8 length as 4 big-endian bytes and its bytes; the tag's first 8 bytes, unsigned, mod w.
   */
  public static int lpuPhase(String key, String user, int w, long epoch) {
    byte[] tag = tag(key, PREFIX, user, Integer.toString(w), Long.toString(epoch));
    long head = ByteBuffer.wrap(tag).getLong();
    return (int) Long.remainderUnsigned(head, w);
  }

  /**
   * The user's public position (lpd, lpa; mtsp's level: {@link Tree#level}) in [0, 2^32):
   * HMAC-SHA256 under the stream's public key (non-empty) over "pwevent-lpd-v1", the user id's
   * UTF-8 length as 4 big-endian bytes and its UTF-8 bytes; the tag's first 4 bytes as a
   * big-endian unsigned integer.
   */
  public static long position(String key, String user) {
    return Integer.toUnsignedLong(ByteBuffer.wrap(tag(key, POSITION_PREFIX, user)).getInt());
  }

  /**
   * The dissimilarity phase in [0, w) of a user at {@code position} (in [0, 2^32)):
   * floor(position w / 2^31) in the lower half; null in the upper half (a publication user).
   */
  public static Integer phase(long position, int w) {
    if (position < 0 || position >= POSITIONS) {
      throw new IllegalArgumentException("a position lies in [0, 2^32), got " + position);
    }
    if (w < 1) {
      throw new IllegalArgumentException("w must be >= 1, got " + w);
    }
    if (position >= HALF) {
      return null;
    }
    return (int) ((position * w) >>> 31); // position * w < 2^62: exact in a long
  }

  /**
   * Whether a user at {@code position} is one of {@code slot}'s dissimilarity users (when the
   * slot asks a dissimilarity round): in the lower half, slot >= start and (slot - start) mod w
   * its phase.
   */
  public static boolean inRound1(long position, long slot, long start, int w) {
    Integer k = phase(position, w);
    return k != null && slot >= start && (slot - start) % w == k;
  }

  /**
   * Whether a user at {@code position} lies in the publication interval [from, from + size) of
   * the upper half (offsets from 2^31, modulo 2^31): position >= 2^31 and
   * (position - 2^31 - from) mod 2^31 < size.
   */
  public static boolean inInterval(long position, long from, long size) {
    return position >= HALF && Math.floorMod(position - HALF - from, HALF) < size;
  }

  /** The user's position (lpd, lpa), -1 for the other protocols. */
  public long position() {
    return position;
  }

  /**
   * Whether the user reports at {@code slot} (never before the stream's first slot); for lpd and
   * lpa whether it is one of the slot's dissimilarity users (when the slot asks a dissimilarity
   * round; the publication rounds name their users).
   */
  public boolean due(long slot) {
    if (slot < start) {
      return false;
    }
    if (position >= 0) {
      return inRound1(position, slot, start, w);
    }
    if (protocol.equals("lbu") || protocol.equals("plbu") || isRounds(protocol)) {
      return true;
    }
    long offset = slot - start;
    if (protocol.equals("lsp")) {
      return offset % w == 0;
    }
    long block = offset / w;
    long position = offset - block * w;
    long e = rotate > 0 ? block / rotate : 0;
    if (e != epoch) {
      group = lpuPhase(key, user, w, e);
      previous = e > 0 ? lpuPhase(key, user, w, e - 1) : 0;
      epoch = e;
    }
    if (position != group) {
      return false;
    }
    if (rotate > 0 && block > 0 && block % rotate == 0) {
      return group >= previous;
    }
    return true;
  }
}
