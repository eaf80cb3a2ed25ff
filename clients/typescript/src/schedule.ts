/**
 * When a user reports, with what budget; LPU's keyed group hash. LBD and LBA (two rounds a slot,
 * rounds.ts) report a dissimilarity round every slot from the stream's first, at E/(2w), and a
 * publication round at the budget the collector's decision names. MTSP (two rounds a slot over a
 * tree, tree.ts) does likewise, round 1 over the user's level of the tree and round 2 over the
 * decision's intervals. LPD and LPA (two rounds a slot over a divided population, population.ts)
 * report a dissimilarity round at E once every w slots (the user's phase) and publication rounds
 * at E where the slot's decision names the user's position; both checked against the decisions
 * (client.ts), not here.
 */

import { phase, position } from "./population.js";
import { framedHmac } from "./sha256.js";
import { isTreeProtocol } from "./tree.js";

/**
 * The protocols with two rounds a slot, the second as the collector decides: at the budget it
 * names (lbd, lba; mtsp over the intervals it names) or by the users it names (lpd, lpa:
 * population division).
 */
export const ROUND_PROTOCOLS = ["lbd", "lba", "lpd", "lpa", "mtsp"] as const;
export type RoundProtocol = (typeof ROUND_PROTOCOLS)[number];
/** The two-round protocols that divide the population, every report at E. */
export const POPULATION_PROTOCOLS = ["lpd", "lpa"] as const;
export type PopulationProtocol = (typeof POPULATION_PROTOCOLS)[number];
/**
 * The protocols that need the stream's public key (LPU's groups, LPD's, LPA's and MTSP's
 * positions).
 */
export const KEYED = ["lpu", ...POPULATION_PROTOCOLS, "mtsp"] as const;
export const PROTOCOLS = ["lbu", "lsp", "lpu", "plbu", ...ROUND_PROTOCOLS] as const;
export type Protocol = (typeof PROTOCOLS)[number];
/** The protocols whose w and E are the stream's, the same for every user. */
export const HOMOGENEOUS = ["lbu", "lsp", "lpu", ...ROUND_PROTOCOLS] as const;
const PREFIX = "pwevent-lpu-v1";

/** Whether `protocol` has two rounds a slot (lbd, lba, lpd, lpa, mtsp). */
export function isRoundProtocol(protocol: unknown): protocol is RoundProtocol {
  return (ROUND_PROTOCOLS as readonly unknown[]).includes(protocol);
}

/** Whether `protocol` divides the population (lpd, lpa). */
export function isPopulationProtocol(protocol: unknown): protocol is PopulationProtocol {
  return protocol === "lpd" || protocol === "lpa";
}

/** Whether `protocol` needs the stream's public key (lpu, lpd, lpa, mtsp). */
export function isKeyed(protocol: unknown): boolean {
  return protocol === "lpu" || isPopulationProtocol(protocol) || isTreeProtocol(protocol);
}

/**
 * The budget one report spends: E/w (lbu, plbu), E (lsp, lpu, and every report of lpd, lpa) or,
 * for a dissimilarity report, E/(2w) (lbd, lba, mtsp).
 */
export function reportBudget(protocol: Protocol, w: number, E: number): number {
  if (protocol === "lbu" || protocol === "plbu") return E / w;
  if (protocol === "lbd" || protocol === "lba" || isTreeProtocol(protocol)) return E / (2 * w);
  if (protocol === "lsp" || protocol === "lpu" || isPopulationProtocol(protocol)) return E;
  throw new RangeError(`unknown protocol ${String(protocol)}; choose from ${PROTOCOLS.join(", ")}`);
}

/**
 * The user's LPU group in an epoch, in [0, w): HMAC-SHA256 under the stream's public LPU key
 * over "pwevent-lpu-v1" and, for each of the user, w and the epoch (decimal), its UTF-8 length
 * as 4 big-endian bytes and its bytes; the tag's first 8 bytes big-endian, modulo w.
 */
export function lpuPhase(key: string, user: string, w: number, epoch: number): number {
  const tag = framedHmac(key, PREFIX, [user, String(w), String(epoch)]);
  const view = new DataView(tag.buffer, tag.byteOffset, tag.byteLength);
  const value = (BigInt(view.getUint32(0)) << 32n) | BigInt(view.getUint32(4));
  return Number(value % BigInt(w));
}

/**
 * Where a protocol has a user report; LPU's groups are cached per epoch. For lpd and lpa this is
 * the dissimilarity round (round 1) at the user's phase, when the slot asks one; their
 * publication rounds name their users (the decisions' intervals).
 */
export class Schedule {
  /** The user's public position for lpd and lpa (population.ts), null for the others. */
  readonly position: number | null;
  /** The user's dissimilarity phase for lpd and lpa: in [0, w) or, a publication user, null. */
  readonly phase: number | null;
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
  ) {
    this.position = isPopulationProtocol(protocol) ? position(key, user) : null;
    this.phase = this.position === null ? null : phase(this.position, w);
  }

  /** Whether the user reports at `slot` (never before the stream's first slot). */
  due(slot: number): boolean {
    if (slot < this.start) return false;
    if (this.position !== null) return this.phase !== null && (slot - this.start) % this.w === this.phase;
    if (this.protocol === "lbu" || this.protocol === "plbu" || isRoundProtocol(this.protocol)) return true;
    const offset = slot - this.start;
    const w = this.w;
    if (this.protocol === "lsp") return offset % w === 0;
    const block = Math.floor(offset / w);
    const at = offset - block * w;
    const epoch = this.rotate > 0 ? Math.floor(block / this.rotate) : 0;
    if (epoch !== this.epoch) {
      this.group = lpuPhase(this.key, this.user, w, epoch);
      this.previous = epoch > 0 ? lpuPhase(this.key, this.user, w, epoch - 1) : 0;
      this.epoch = epoch;
    }
    if (at !== this.group) return false;
    if (this.rotate > 0 && block > 0 && block % this.rotate === 0) return this.group >= this.previous;
    return true;
  }
}
