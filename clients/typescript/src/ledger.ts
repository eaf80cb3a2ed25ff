/** One user's per-window budget ledger, kept on the device (docs/ldp-reports.md). */

/** The relative slack on E a window's sum may use, for rounding. */
export const SLACK = 1.000000001;
const MAX_SPEND = 500;

/** A refused report or state: `code` is not_after_last, over_budget or bad_state. */
export class LedgerRefusal extends Error {
  constructor(
    readonly code: "not_after_last" | "over_budget" | "bad_state",
    message: string,
  ) {
    super(message);
    this.name = "LedgerRefusal";
  }
}

/** [slot, eps] of one report. */
export type Spend = [number, number];

/** The spends of one user's reports within its last w slots, against budget E. */
export class ClientLedger {
  spends: Spend[] = [];

  constructor(
    readonly w: number,
    readonly E: number,
  ) {}

  /** The slot of the last report, or null. */
  get last(): number | null {
    return this.spends.length ? this.spends[this.spends.length - 1][0] : null;
  }

  /** What the reports in (slot - w, slot] spent, oldest first. */
  spent(slot: number): number {
    let total = 0;
    for (const [s, eps] of this.spends) if (slot - this.w < s && s <= slot) total += eps;
    return total;
  }

  /** Throw a LedgerRefusal unless a report at `slot` spending `eps` keeps every window within E. */
  check(slot: number, eps: number): void {
    const last = this.last;
    if (last !== null && slot <= last) {
      throw new LedgerRefusal(
        "not_after_last",
        `slot ${slot} is not after the last report's slot ${last}: one report per slot, in slot order`,
      );
    }
    const total = this.spent(slot) + eps;
    if (!(total <= this.E * SLACK)) {
      throw new LedgerRefusal(
        "over_budget",
        `a report at slot ${slot} spending ${eps} would make the window of ${this.w} slots ending there spend ${total}, over E = ${this.E}`,
      );
    }
  }

  /** Record a report check allows; forget spends no window reaches. */
  commit(slot: number, eps: number): void {
    this.check(slot, eps);
    this.spends = this.spends.filter(([s]) => s > slot - this.w);
    this.spends.push([slot, eps]);
  }

  /** Replace the spends with a kept list of [slot, eps] (kept as spent, even over E). */
  load(spends: unknown): void {
    if (!Array.isArray(spends)) throw new LedgerRefusal("bad_state", "spends must be a list of [slot, eps] pairs");
    const loaded: Spend[] = [];
    for (const pair of spends) {
      const ok =
        Array.isArray(pair) &&
        pair.length === 2 &&
        Number.isSafeInteger(pair[0]) &&
        pair[0] >= 0 &&
        typeof pair[1] === "number" &&
        pair[1] > 0 &&
        pair[1] <= MAX_SPEND;
      if (!ok) throw new LedgerRefusal("bad_state", `a spend must be [slot >= 0, 0 < eps <= ${MAX_SPEND}]`);
      if (loaded.length && pair[0] <= loaded[loaded.length - 1][0]) {
        throw new LedgerRefusal("bad_state", "spends must be in increasing slot order");
      }
      loaded.push([pair[0], pair[1]]);
    }
    const last = loaded.length ? loaded[loaded.length - 1][0] : 0;
    this.spends = loaded.filter(([s]) => s > last - this.w);
  }

  /** The spends as [slot, eps] pairs, oldest first. */
  dump(): Spend[] {
    return this.spends.map(([s, e]) => [s, e]);
  }
}
