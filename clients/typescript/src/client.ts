/** One user's client: the protocol's schedule, ledger and randomised reports. */

import { ClientLedger, LedgerRefusal, type Spend } from "./ledger.js";
import {
  checkEps,
  grrCell,
  grrKeepThreshold,
  oueHex,
  oueThreshold,
  plbuUsesGrr,
  type WordSource,
} from "./oracles.js";
import { PROTOCOLS, type Protocol, reportBudget, Schedule } from "./schedule.js";
import { checkInteger, checkText, formatString, MAX_CELLS, MAX_SLOT, WIRE_VERSION } from "./wire.js";
import { CryptoWords } from "./words.js";

/** The library's name and version, written into every report. */
export const CLIENT_NAME = "pwevent-ldp-ts/0.1.0";
/** The reports' topic under the stream's prefix: `<prefix>.ldp-reports`. */
export const TOPIC = "ldp-reports";

/**
 * What a client needs: the protocol, the user id, the domain's d cells, the window w and budget
 * E (the stream's for lbu/lsp/lpu, the user's own for plbu), the stream's first slot, and LPU's
 * public key and rotation (epochs of `rotate` blocks; 0: one group for good).
 */
export interface ReportConfig {
  protocol: Protocol;
  user: string;
  d: number;
  w: number;
  E: number;
  start?: number;
  lpuKey?: string;
  rotate?: number;
}

/** The ledger as JSON-ready data, for the app to keep between runs. */
export interface LedgerState {
  protocol: Protocol;
  user: string;
  w: number;
  E: number;
  spends: Spend[];
}

export interface ClientOptions {
  /** The word source; the platform CSPRNG unless a test gives its own. */
  words?: WordSource;
  /** The name written into reports. */
  client?: string;
  /** A ledger `state()` gave earlier. */
  state?: LedgerState;
}

/** The reports' topic of a stream whose topics are named `<prefix>.<topic>`. */
export function topicName(prefix: string): string {
  return `${prefix}.${TOPIC}`;
}

/** The job's slot holding `timeMs`: floor((time - origin) / slot). */
export function slotOf(timeMs: number, originMs: number, slotMs: number): number {
  return Math.floor((timeMs - originMs) / slotMs);
}

/** `config` checked, with its defaults; a RangeError or TypeError names the wrong field. */
export function checkConfig(config: ReportConfig): Required<ReportConfig> {
  if (!PROTOCOLS.includes(config.protocol)) {
    throw new RangeError(`unknown protocol ${String(config.protocol)}; choose from ${PROTOCOLS.join(", ")}`);
  }
  const full: Required<ReportConfig> = { start: 0, lpuKey: "", rotate: 0, ...config };
  checkText("user", full.user);
  checkInteger("d", full.d, 1, MAX_CELLS);
  checkInteger("w", full.w, 1, 2147483647);
  checkInteger("start", full.start, 0, MAX_SLOT);
  checkInteger("rotate", full.rotate, 0, 2147483647);
  if (typeof full.E !== "number" || !Number.isFinite(full.E) || full.E <= 0) {
    throw new RangeError(`E must be a finite number > 0, got ${String(full.E)}`);
  }
  checkEps(reportBudget(full.protocol, full.w, full.E));
  if (full.protocol === "lpu") checkText("lpuKey", full.lpuKey);
  return full;
}

/**
 * One user's client: `report(slot, value)` gives the report's bytes, or null when the user does
 * not report at that slot (or has no value); it throws a LedgerRefusal rather than overspend.
 */
export class LdpClient {
  readonly config: Required<ReportConfig>;
  readonly ledger: ClientLedger;
  readonly eps: number;
  readonly oracle: "oue" | "grr";
  private readonly words: WordSource;
  private readonly schedule: Schedule;
  private readonly threshold: number;
  private readonly head: string;
  private readonly middle: string;
  private readonly tail: string;
  private readonly encoder = new TextEncoder();

  constructor(config: ReportConfig, options: ClientOptions = {}) {
    const c = checkConfig(config);
    this.config = c;
    this.words = options.words ?? new CryptoWords();
    const client = checkText("client", options.client ?? CLIENT_NAME);
    this.eps = reportBudget(c.protocol, c.w, c.E);
    this.oracle = c.protocol === "plbu" && plbuUsesGrr(this.eps, c.d) ? "grr" : "oue";
    this.threshold = this.oracle === "grr" ? grrKeepThreshold(this.eps, c.d) : oueThreshold(this.eps);
    this.schedule = new Schedule(c.protocol, c.start, c.w, c.lpuKey, c.user, c.rotate);
    this.ledger = new ClientLedger(c.w, c.E);
    this.head = `{"v":${WIRE_VERSION},"protocol":"${c.protocol}","user":${formatString(c.user)},"slot":`;
    this.middle =
      `,"eps":${String(this.eps)},"E":${String(c.E)},"w":${c.w},"d":${c.d},` +
      (this.oracle === "grr" ? `"oracle":"grr","cell":` : `"oracle":"oue","bits":"`);
    this.tail = (this.oracle === "grr" ? "" : '"') + `,"client":${formatString(client)}}`;
    if (options.state !== undefined) this.loadState(options.state);
  }

  /** Whether the user reports at `slot` (when it has a value there). */
  due(slot: number): boolean {
    return this.schedule.due(slot);
  }

  /** The report's JSON text, or null; see report(). */
  reportText(slot: number, value: number | null | undefined): string | null {
    const c = this.config;
    checkInteger("slot", slot, 0, MAX_SLOT);
    if (value === null || value === undefined) return null;
    checkInteger("value", value, 0, c.d - 1);
    if (!this.schedule.due(slot)) return null;
    this.ledger.check(slot, this.eps);
    const payload =
      this.oracle === "grr"
        ? String(grrCell(value, c.d, this.threshold, this.words))
        : oueHex(value, c.d, this.threshold, this.words);
    this.ledger.commit(slot, this.eps);
    return this.head + slot + this.middle + payload + this.tail;
  }

  /**
   * The randomised report of cell `value` at `slot` as UTF-8 bytes, or null (not due, or no
   * value); throws LedgerRefusal when the budget does not allow it or the slot is not after
   * the last report's. Produce it keyed by `userKey()`.
   */
  report(slot: number, value: number | null | undefined): Uint8Array | null {
    const text = this.reportText(slot, value);
    return text === null ? null : this.encoder.encode(text);
  }

  /** The Kafka key of this user's reports: the user id in UTF-8. */
  userKey(): Uint8Array {
    return this.encoder.encode(this.config.user);
  }

  /** The ledger as JSON-ready data, for the app to keep between runs. */
  state(): LedgerState {
    const c = this.config;
    return { protocol: c.protocol, user: c.user, w: c.w, E: c.E, spends: this.ledger.dump() };
  }

  /** Load a ledger state() gave; LedgerRefusal (bad_state) if it is not this user's. */
  loadState(state: LedgerState): void {
    if (typeof state !== "object" || state === null || state.user !== this.config.user) {
      throw new LedgerRefusal("bad_state", "the state is not this user's ledger");
    }
    this.ledger.load(state.spends);
  }
}
