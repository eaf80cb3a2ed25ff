/**
 * One user's client: the protocol's schedule, ledger and randomised reports. A user reports
 * every slot it is due, with a value or without one (cell d of the oracle's d + 1: "no value"),
 * and every report spends alike, so whether it had a value stays as private as the value. The
 * two-round protocols (lbd, lba) keep the ledger over virtual slots, 2 slot + round - 1, against
 * a window of 2w (rounds.ts): report() sends round 1, asked by the previous slot's decision, and
 * answer() round 2, asked by the slot's own. The population ones (lpd, lpa: population.ts) ask
 * each user one round kind by its public position, every report at E, and keep the ledger over
 * real slots (window w): a user answers at most once in any w slots. mtsp (tree.ts) keeps the
 * ledger as lbd does and reports round 1 over its level's nodes, round 2 over the decision's
 * intervals.
 */

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
import { inInterval, position } from "./population.js";
import { Decision, MAX_ROUND_SLOT, virtualSlot } from "./rounds.js";
import {
  isKeyed,
  isPopulationProtocol,
  isRoundProtocol,
  PROTOCOLS,
  type Protocol,
  reportBudget,
  Schedule,
} from "./schedule.js";
import { intervalOf, isTreeProtocol, levelCells, nodeOf, treeHeight, treeLevel } from "./tree.js";
import { checkInteger, checkText, formatString, MAX_CELLS, MAX_SLOT, oracleCells, WIRE_VERSION } from "./wire.js";
import { CryptoWords } from "./words.js";

/** The library's name and version, written into every report. */
export const CLIENT_NAME = "pwevent-ldp-ts/0.3.0";
/** The reports' topic under the stream's prefix: `<prefix>.ldp-reports`. */
export const TOPIC = "ldp-reports";

/**
 * What a client needs: the protocol, the user id, the domain's d value cells (an integer in
 * [1, 65535]; the oracle runs over d + 1, cell d meaning "no value"), the window w and budget
 * E (the stream's for all but plbu, the user's own for plbu), the stream's first slot, the
 * stream's public key (`lpuKey`, 1 to 256 UTF-8 bytes: LPU's groups, LPD's, LPA's and MTSP's
 * positions; required for lpu, lpd, lpa and mtsp) and LPU's rotation (epochs of `rotate` blocks;
 * 0: one group for good).
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

/**
 * The ledger as JSON-ready data, for the app to keep between runs (for lbd/lba/mtsp the spends'
 * slots are virtual slots, 2 slot + round - 1; for lpd/lpa, as for the one-round protocols, real
 * slots).
 */
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
  checkInteger("d", full.d, 1, MAX_CELLS - 1); // d value cells, and cell d: no value
  checkInteger("w", full.w, 1, 2147483647);
  checkInteger("start", full.start, 0, MAX_SLOT);
  checkInteger("rotate", full.rotate, 0, 2147483647);
  if (typeof full.E !== "number" || !Number.isFinite(full.E) || full.E <= 0) {
    throw new RangeError(`E must be a finite number > 0, got ${String(full.E)}`);
  }
  checkEps(reportBudget(full.protocol, full.w, full.E));
  if (isKeyed(full.protocol)) checkText("lpuKey", full.lpuKey);
  return full;
}

/**
 * One user's client: `report(slot, value)` gives the report's bytes, or null when the user does
 * not report at that slot; it throws a LedgerRefusal rather than overspend. A value of null (or
 * undefined) is "no value": the client still reports a due slot, of cell d (the oracle runs over
 * d + 1 cells), spending what a value's report spends, so that whether the user had a value stays
 * as private as the value itself.
 * For lbd/lba, `report(slot, value, decision)` sends the dissimilarity round (round 1), asked
 * at the stream's first slot and by the previous slot's decision after it, and
 * `answer(decision, value)` the publication round (round 2) at the budget the slot's decision
 * names. For lpd/lpa the same two calls send round 1 only at the user's phase (a lower-half
 * position) and round 2 only where the slot's decision names the user's (upper-half) position,
 * both at E. For mtsp they send what lbd's do, round 1 as the node of the user's level of the
 * tree (its level from its public position) that holds the cell, round 2 as the decision's
 * interval that holds it; each report carries "cells", the cells its bits run over.
 */
export class LdpClient {
  readonly config: Required<ReportConfig>;
  readonly ledger: ClientLedger;
  /** The budget one report spends (a dissimilarity report's for lbd/lba/mtsp: E/(2w); E for lpd/lpa). */
  readonly eps: number;
  readonly oracle: "oue" | "grr";
  /** The cells the oracle runs over: d + 1, cell d meaning "no value". */
  readonly cells: number;
  /** Whether the protocol has two rounds a slot (lbd, lba, lpd, lpa, mtsp). */
  readonly rounds: boolean;
  /** Whether the protocol divides the population (lpd, lpa). */
  readonly population: boolean;
  /** Whether the protocol runs its rounds over a tree (mtsp). */
  readonly tree: boolean;
  /** The user's public position in [0, 2^32) for lpd and lpa (population.ts), null for the others. */
  readonly position: number | null;
  /** mtsp: the tree's height over the d + 1 cells (tree.ts); 0 for the others. */
  readonly height: number;
  /** mtsp: the user's level in [1, height], from its public position; 0 for the others. */
  readonly level: number;
  /** mtsp: the real nodes of the user's level, the cells its round 1 bits run over; 0 for the others. */
  readonly levelCells: number;
  private readonly words: WordSource;
  private readonly schedule: Schedule;
  private readonly threshold: number;
  private readonly head: string;
  private readonly epsText: string;
  private readonly rest: string;
  private readonly oracleKey: string;
  private readonly tail: string;
  private readonly encoder = new TextEncoder();

  constructor(config: ReportConfig, options: ClientOptions = {}) {
    const c = checkConfig(config);
    this.config = c;
    this.words = options.words ?? new CryptoWords();
    const client = checkText("client", options.client ?? CLIENT_NAME);
    this.eps = reportBudget(c.protocol, c.w, c.E);
    this.cells = oracleCells(c.d);
    this.oracle = c.protocol === "plbu" && plbuUsesGrr(this.eps, this.cells) ? "grr" : "oue";
    this.threshold = this.oracle === "grr" ? grrKeepThreshold(this.eps, this.cells) : oueThreshold(this.eps);
    this.schedule = new Schedule(c.protocol, c.start, c.w, c.lpuKey, c.user, c.rotate);
    this.rounds = isRoundProtocol(c.protocol);
    this.population = isPopulationProtocol(c.protocol);
    this.position = this.schedule.position;
    this.tree = isTreeProtocol(c.protocol);
    this.height = this.tree ? treeHeight(this.cells) : 0;
    this.level = this.tree ? treeLevel(position(c.lpuKey, c.user), this.height) : 0;
    this.levelCells = this.tree ? levelCells(this.cells, this.height, this.level) : 0;
    // lbd, lba, mtsp: virtual slots against 2w; the others (lpd and lpa too): real slots against w
    this.ledger = new ClientLedger(this.rounds && !this.population ? 2 * c.w : c.w, c.E);
    this.head = `{"v":${WIRE_VERSION},"protocol":"${c.protocol}","user":${formatString(c.user)},"slot":`;
    this.epsText = String(this.eps);
    this.rest = `,"E":${String(c.E)},"w":${c.w},"d":${c.d},`;
    this.oracleKey = this.oracle === "grr" ? `"oracle":"grr","cell":` : `"oracle":"oue","bits":"`;
    this.tail = (this.oracle === "grr" ? "" : '"') + `,"client":${formatString(client)}}`;
    if (options.state !== undefined) this.loadState(options.state);
  }

  /**
   * Whether the user reports at `slot` (with a value there or without one); for lpd and lpa,
   * whether it is one of the slot's dissimilarity users (its phase), when the slot asks that
   * round: publication rounds name their users in the decision.
   */
  due(slot: number): boolean {
    return this.schedule.due(slot);
  }

  /** The report's JSON text, or null; see report(). */
  reportText(slot: number, value: number | null | undefined, decision?: Decision | null): string | null {
    const c = this.config;
    checkInteger("slot", slot, 0, this.rounds ? MAX_ROUND_SLOT : MAX_SLOT);
    const cell = this.cellOf(value);
    if (!this.schedule.due(slot)) return null;
    const given = decision !== null && decision !== undefined;
    if (!this.rounds) {
      if (given) throw new TypeError(`${c.protocol} has one round a slot: it takes no decision`);
      return this.send(slot, cell, this.eps, slot, 0);
    }
    if (slot > c.start) {
      if (!given) return null;
      this.checkDecision(decision, slot - 1);
      if (decision.next === 0) return null;
      if (decision.next !== this.eps) {
        const what = this.population ? "E" : "E/(2w)";
        throw new RangeError(
          `the decision asks a dissimilarity budget of ${decision.next}, not the stream's ${what} = ${this.eps}`,
        );
      }
    }
    if (this.tree) {
      const node = nodeOf(cell, this.height, this.level);
      return this.send(slot, node, this.eps, virtualSlot(slot, 1), 1, this.levelCells);
    }
    return this.send(slot, cell, this.eps, this.population ? slot : virtualSlot(slot, 1), 1);
  }

  /**
   * The randomised report of cell `value` at `slot` as UTF-8 bytes, or null when the user is not
   * due there; throws LedgerRefusal when the budget does not allow it or the slot is not after
   * the last report's. A `value` of null or undefined (no value) is reported as cell d, "no
   * value", at the same budget: a user reports every slot it is due, with a value or without, so
   * that whether it had one stays as private as the value. Produce it keyed by `userKey()`.
   *
   * For lbd/lba this is the dissimilarity report (round 1): sent at the stream's first slot,
   * and after it only when `decision`, the previous slot's (slot - 1), names a dissimilarity
   * round (its `next`, which must be E/(2w), or 0: none). Without that decision (missed) nothing
   * is sent. For lpd/lpa likewise, at the slots of the user's phase only (due()), `next` being E
   * (or 0), the report spending E at the real slot. For mtsp as for lbd, the report being the
   * node of the user's level (`level`) holding the cell, over the level's `levelCells` nodes (its
   * "cells"). The other protocols take no decision.
   */
  report(slot: number, value: number | null | undefined, decision?: Decision | null): Uint8Array | null {
    const text = this.reportText(slot, value, decision);
    return text === null ? null : this.encoder.encode(text);
  }

  /** The publication report's JSON text, or null; see answer(). */
  answerText(decision: Decision, value: number | null | undefined): string | null {
    const c = this.config;
    if (!this.rounds) throw new TypeError(`${c.protocol} has one round a slot: nothing to answer`);
    if (typeof decision !== "object" || decision === null) {
      throw new TypeError(`a decision must be a Decision, got ${decision === null ? "null" : typeof decision}`);
    }
    const slot = checkInteger("slot", decision.slot, 0, MAX_ROUND_SLOT);
    const cell = this.cellOf(value);
    this.checkDecision(decision, slot);
    if (decision.eps === 0 || slot < c.start) return null;
    if (this.population) {
      if (decision.eps !== c.E) {
        throw new RangeError(`the decision asks ${decision.eps}, not the stream's E = ${c.E}`);
      }
      if (!inInterval(this.position as number, decision.from, decision.size)) return null;
      return this.send(slot, cell, decision.eps, slot, 2);
    }
    if (!(decision.eps <= c.E / 2)) {
      throw new RangeError(`the decision asks ${decision.eps}, over E/2 = ${c.E / 2}`);
    }
    if (this.tree) {
      const starts = decision.starts;
      const last = starts[starts.length - 1];
      if (!(last < this.cells)) {
        throw new RangeError(`the decision's intervals reach cell ${last}, past the ${this.cells} cells of the stream`);
      }
      return this.send(slot, intervalOf(cell, starts), decision.eps, virtualSlot(slot, 2), 2, starts.length);
    }
    return this.send(slot, cell, decision.eps, virtualSlot(slot, 2), 2);
  }

  /**
   * The publication report (round 2 of lbd/lba/lpd/lpa/mtsp) of cell `value` as UTF-8 bytes, at
   * the budget `decision` names for its slot, or null when it names none (eps 0) or the slot is
   * before the stream's first. For lpd/lpa the budget must be E and only a user whose position
   * lies in the decision's interval [from, from + size) of the upper half answers (null for the
   * others), the spend kept at the real slot. For mtsp the report is the index of the decision's
   * interval holding the cell, over its `starts.length` intervals (its "cells"). A `value` of null
   * or undefined (no value) is answered as cell d, "no value", at the same budget. Throws
   * LedgerRefusal when the ledger does not allow it, and an argument error for a one-round
   * protocol, a decision of another protocol or slot, one asking more than E/2 (lbd, lba, mtsp) or
   * other than E (lpd, lpa), or an mtsp partition reaching past the stream's d + 1 cells.
   */
  answer(decision: Decision, value: number | null | undefined): Uint8Array | null {
    const text = this.answerText(decision, value);
    return text === null ? null : this.encoder.encode(text);
  }

  private checkDecision(decision: unknown, slot: number): asserts decision is Decision {
    if (!(decision instanceof Decision)) {
      throw new TypeError("a decision must be a Decision (new Decision(...) or parseDecision(...))");
    }
    if (decision.protocol !== this.config.protocol || decision.slot !== slot) {
      throw new RangeError(
        `the decision is for ${decision.protocol} slot ${decision.slot}, not ${this.config.protocol} slot ${slot}`,
      );
    }
  }

  /** `value` checked as a cell in [0, d), or d ("no value") for null or undefined. */
  private cellOf(value: number | null | undefined): number {
    const d = this.config.d;
    return value === null || value === undefined ? d : checkInteger("value", value, 0, d - 1);
  }

  /**
   * Randomise `cell` (in [0, d], d: no value) over the oracle's d + 1 cells at budget `eps`,
   * spent at ledger slot `at`: the report's text. mtsp gives `width`, the cells its node or
   * interval `cell` lies among (written as "cells"); 0 for the others.
   */
  private send(slot: number, cell: number, eps: number, at: number, round: number, width: number = 0): string {
    this.ledger.check(at, eps);
    const cells = width || this.cells;
    const threshold = eps === this.eps ? this.threshold : oueThreshold(eps);
    const payload =
      this.oracle === "grr"
        ? String(grrCell(cell, cells, threshold, this.words))
        : oueHex(cell, cells, threshold, this.words);
    this.ledger.commit(at, eps);
    const roundKey = round === 0 ? "" : `,"round":${round}`;
    const epsText = eps === this.eps ? this.epsText : String(eps);
    const cellsKey = this.tree ? `"cells":${cells},` : "";
    return this.head + slot + roundKey + `,"eps":` + epsText + this.rest + cellsKey + this.oracleKey + payload + this.tail;
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
