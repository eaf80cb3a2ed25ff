/**
 * When a user reports, with what budget; LPU's keyed group hash. LBD and LBA (two rounds a slot,
 * rounds.ts) report a dissimilarity round every slot from the stream's first, at E/(2w), and a
 * publication round at the budget the collector's decision names.
 */

import { hmacSha256 } from "./sha256.js";

/** The protocols with two rounds a slot, the second at the budget the collector decides. */
export const ROUND_PROTOCOLS = ["lbd", "lba"] as const;
export type RoundProtocol = (typeof ROUND_PROTOCOLS)[number];
export const PROTOCOLS = ["lbu", "lsp", "lpu", "plbu", ...ROUND_PROTOCOLS] as const;
export type Protocol = (typeof PROTOCOLS)[number];
/** The protocols whose w and E are the stream's, the same for every user. */
export const HOMOGENEOUS = ["lbu", "lsp", "lpu", ...ROUND_PROTOCOLS] as const;
const PREFIX = "pwevent-lpu-v1";

/** Whether `protocol` has two rounds a slot (lbd, lba). */
export function isRoundProtocol(protocol: unknown): protocol is RoundProtocol {
  return protocol === "lbd" || protocol === "lba";
}

/**
 * The budget one report spends: E/w (lbu, plbu), E (lsp, lpu) or, for a dissimilarity report,
 * E/(2w) (lbd, lba).
 */
export function reportBudget(protocol: Protocol, w: number, E: number): number {
  if (protocol === "lbu" || protocol === "plbu") return E / w;
  if (isRoundProtocol(protocol)) return E / (2 * w);
  if (protocol === "lsp" || protocol === "lpu") return E;
  throw new RangeError(`unknown protocol ${String(protocol)}; choose from ${PROTOCOLS.join(", ")}`);
}

/**
 * The user's LPU group in an epoch, in [0, w): HMAC-SHA256 under the stream's public LPU key
 * over "pwevent-lpu-v1" and, for each of the user, w and the epoch (decimal), its UTF-8 length
 * as 4 big-endian bytes and its bytes; the tag's first 8 bytes big-endian, modulo w.
 */
export function lpuPhase(key: string, user: string, w: number, epoch: number): number {
  const encoder = new TextEncoder();
  const parts = [encoder.encode(PREFIX)];
  for (const part of [user, String(w), String(epoch)]) {
    const data = encoder.encode(part);
    const length = new Uint8Array(4);
    new DataView(length.buffer).setUint32(0, data.length);
    parts.push(length, data);
  }
  const message = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    message.set(p, at);
    at += p.length;
  }
  const tag = new DataView(hmacSha256(encoder.encode(key), message).buffer);
  const value = (BigInt(tag.getUint32(0)) << 32n) | BigInt(tag.getUint32(4));
  return Number(value % BigInt(w));
}

/** Where a protocol has a user report; LPU's groups are cached per epoch. */
export class Schedule {
  private epoch = -1;
  private group = 0;
  private previous = 0;

  constructor(
    readonly protocol: Protocol,
    readonly start: number,
    readonly w: number,
    readonly key: string,
    readonly user: string,
    readonly rotate: number,
  ) {}

  /** Whether the user reports at `slot` (never before the stream's first slot). */
  due(slot: number): boolean {
    if (slot < this.start) return false;
    if (this.protocol === "lbu" || this.protocol === "plbu" || isRoundProtocol(this.protocol)) return true;
    const offset = slot - this.start;
    const w = this.w;
    if (this.protocol === "lsp") return offset % w === 0;
    const block = Math.floor(offset / w);
    const position = offset - block * w;
    const epoch = this.rotate > 0 ? Math.floor(block / this.rotate) : 0;
    if (epoch !== this.epoch) {
      this.group = lpuPhase(this.key, this.user, w, epoch);
      this.previous = epoch > 0 ? lpuPhase(this.key, this.user, w, epoch - 1) : 0;
      this.epoch = epoch;
    }
    if (position !== this.group) return false;
    if (this.rotate > 0 && block > 0 && block % this.rotate === 0) return this.group >= this.previous;
    return true;
  }
}
