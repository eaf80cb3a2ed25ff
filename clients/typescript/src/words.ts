/** Word sources: the platform's CSPRNG, and the vectors' SHA-256 counter words. */

import type { WordSource } from "./oracles.js";
import { sha256 } from "./sha256.js";

/** Uniform words from `crypto.getRandomValues` (browsers, Node >= 20), drawn 4096 at a time. */
export class CryptoWords implements WordSource {
  private readonly pool: Uint32Array;
  private next: number;

  constructor(size = 4096) {
    if (typeof crypto === "undefined" || typeof crypto.getRandomValues !== "function") {
      throw new Error("pwevent-ldp-client needs globalThis.crypto.getRandomValues (browsers, Node >= 20)");
    }
    this.pool = new Uint32Array(Math.min(Math.max(1, size), 16384)); // 64 KiB per call at most
    this.next = this.pool.length;
  }

  nextWord(): number {
    if (this.next === this.pool.length) {
      crypto!.getRandomValues(this.pool);
      this.next = 0;
    }
    return this.pool[this.next++];
  }
}

/**
 * The test vectors' words: block i (from 0) is SHA-256 over the seed's UTF-8 bytes and i as 8
 * big-endian bytes, read as 8 big-endian words, in order.
 */
export class CounterWords implements WordSource {
  private readonly seed: Uint8Array;
  private block = 0;
  private words: number[] = [];
  private at = 0;
  /** The words drawn so far. */
  drawn = 0;

  constructor(seed: string) {
    this.seed = new TextEncoder().encode(seed);
  }

  nextWord(): number {
    if (this.at === this.words.length) {
      const input = new Uint8Array(this.seed.length + 8);
      input.set(this.seed);
      const view = new DataView(input.buffer);
      view.setUint32(this.seed.length, Math.floor(this.block / 4294967296));
      view.setUint32(this.seed.length + 4, this.block >>> 0);
      const digest = new DataView(sha256(input).buffer);
      this.words = [];
      for (let i = 0; i < 8; i++) this.words.push(digest.getUint32(4 * i));
      this.at = 0;
      this.block++;
    }
    this.drawn++;
    return this.words[this.at++];
  }
}
