package org.pwevent.ldp;

import java.security.SecureRandom;

/** Uniform words from the platform's CSPRNG ({@link SecureRandom}), read 4 KiB at a time. */
public final class SecureWords implements WordSource {
  private final SecureRandom random;
  private final byte[] pool = new byte[4096];
  private int next = pool.length;

  /** Words from a new {@link SecureRandom}. */
  public SecureWords() {
    this(new SecureRandom());
  }

  /** Words from {@code random}. */
  public SecureWords(SecureRandom random) {
    this.random = random;
  }

  @Override
  public long nextWord() {
    if (next == pool.length) {
      random.nextBytes(pool);
      next = 0;
    }
    long word = (pool[next] & 0xffL) << 24 | (pool[next + 1] & 0xffL) << 16
        | (pool[next + 2] & 0xffL) << 8 | (pool[next + 3] & 0xffL);
    next += 4;
    return word;
  }
}
