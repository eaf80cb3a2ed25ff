package org.pwevent.ldp;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * The shared test vectors' words: block i (from 0) is SHA-256 over the seed's UTF-8 bytes and i
 * as 8 big-endian bytes, read as 8 big-endian words, in order.
 */
public final class CounterWords implements WordSource {
  private final byte[] seed;
  private long block;
  private ByteBuffer words = ByteBuffer.allocate(0);
  private long drawn;

  /** Words from {@code seed}, from block 0. */
  public CounterWords(String seed) {
    this.seed = seed.getBytes(StandardCharsets.UTF_8);
  }

  /** The words drawn so far. */
  public long drawn() {
    return drawn;
  }

  @Override
  public long nextWord() {
    if (!words.hasRemaining()) {
      try {
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        sha.update(seed);
        sha.update(ByteBuffer.allocate(8).putLong(block++).array());
        words = ByteBuffer.wrap(sha.digest());
      } catch (NoSuchAlgorithmException e) {
        throw new IllegalStateException("SHA-256 is missing", e);
      }
    }
    drawn++;
    return words.getInt() & 0xffffffffL;
  }
}
