package org.pwevent.ldp;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.util.List;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Where a protocol has a user report, with what budget; LPU's keyed group hash. The two-round
 * protocols (lbd, lba: {@link Decision}) have a dissimilarity report every slot from the
 * stream's first, at E/(2w), and a publication report at the budget the collector's decision for
 * the slot names, when it names one.
 */
public final class Schedule {
  /** The protocols with two rounds a slot, the second at the budget the collector decides. */
  public static final List<String> ROUND_PROTOCOLS = List.of("lbd", "lba");
  private static final byte[] PREFIX = "pwevent-lpu-v1".getBytes(StandardCharsets.UTF_8);
  private final String protocol;
  private final long start;
  private final int w;
  private final String key;
  private final String user;
  private final int rotate;
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
  }

  /**
   * The budget one report spends: E/w (lbu, plbu), E (lsp, lpu) or, for a dissimilarity report,
   * E/(2w) (lbd, lba); IllegalArgumentException for an unknown protocol.
   */
  public static double reportBudget(String protocol, int w, double budget) {
    if (protocol.equals("lbu") || protocol.equals("plbu")) {
      return budget / (double) w;
    }
    if (isRounds(protocol)) {
      return budget / (2.0 * (double) w);
    }
    if (protocol.equals("lsp") || protocol.equals("lpu")) {
      return budget;
    }
    throw new IllegalArgumentException("unknown protocol " + protocol);
  }

  /** Whether {@code protocol} has two rounds a slot (lbd, lba). */
  public static boolean isRounds(String protocol) {
    return ROUND_PROTOCOLS.contains(protocol);
  }

  /**
   * The user's LPU group in an epoch, in [0, w): HMAC-SHA256 under the stream's public LPU key
   * (non-empty) over "pwevent-lpu-v1" and, for each of the user, w and the epoch (decimal), its
   * UTF-8 length as 4 big-endian bytes and its bytes; the tag's first 8 bytes, unsigned, mod w.
   */
  public static int lpuPhase(String key, String user, int w, long epoch) {
    try {
      Mac mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(key.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
      mac.update(PREFIX);
      for (String part : new String[] {user, Integer.toString(w), Long.toString(epoch)}) {
        byte[] data = part.getBytes(StandardCharsets.UTF_8);
        mac.update(ByteBuffer.allocate(4).putInt(data.length).array());
        mac.update(data);
      }
      long head = ByteBuffer.wrap(mac.doFinal()).getLong();
      return (int) Long.remainderUnsigned(head, w);
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException("HMAC-SHA256 is missing", e);
    }
  }

  /** Whether the user reports at {@code slot} (never before the stream's first slot). */
  public boolean due(long slot) {
    if (slot < start) {
      return false;
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
