package org.pwevent.ldp;

/** Uniform 32-bit words, drawn in order: the only randomness a client uses. */
@FunctionalInterface
public interface WordSource {
  /** The next word, in [0, 2^32). */
  long nextWord();
}
