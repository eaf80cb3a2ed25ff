package org.pwevent.ldp;

import java.util.ArrayList;
import java.util.List;

/**
 * One user's per-window budget ledger, kept on the device: the spends of the reports within the
 * last w slots, against budget E. A report at slot s is refused unless the reports in (s - w, s]
 * plus it spend at most E (times 1 + 1e-9 for rounding), summed oldest first.
 */
public final class ClientLedger {
  /** The relative slack on E a window's sum may use, for rounding. */
  public static final double SLACK = 1.000000001;

  /** One report's slot and budget. */
  public record Spend(long slot, double eps) {}

  private final long w;
  private final double budget;
  private List<Spend> spends = new ArrayList<>();

  /**
   * An empty ledger of window {@code w} and budget {@code E}: a long, since lbd, lba and mtsp keep
   * theirs over 2w virtual slots (w up to 2^31 - 1); lpd and lpa keep theirs over real slots,
   * window w.
   */
  public ClientLedger(long w, double budget) {
    this.w = w;
    this.budget = budget;
  }

  /** What the reports in (slot - w, slot] spent, oldest first. */
  public double spent(long slot) {
    double total = 0.0;
    for (Spend s : spends) {
      if (slot - w < s.slot() && s.slot() <= slot) {
        total += s.eps();
      }
    }
    return total;
  }

  /** Throw a {@link LedgerRefusal} unless a report at {@code slot} keeps every window within E. */
  public void check(long slot, double eps) {
    if (!spends.isEmpty()) {
      long last = spends.get(spends.size() - 1).slot();
      if (slot <= last) {
        throw new LedgerRefusal("not_after_last", "slot " + slot
            + " is not after the last report's slot " + last + ": one report per slot, in slot order");
      }
    }
    double total = spent(slot) + eps;
    if (!(total <= budget * SLACK)) {
      throw new LedgerRefusal("over_budget", "a report at slot " + slot + " spending " + eps
          + " would make the window of " + w + " slots ending there spend " + total
          + ", over E = " + budget);
    }
  }

  /** Record a report {@link #check} allows; forget spends no window reaches. */
  public void commit(long slot, double eps) {
    check(slot, eps);
    spends.removeIf(s -> s.slot() <= slot - w);
    spends.add(new Spend(slot, eps));
  }

  /** Replace the spends with kept ones (kept as spent, even over E); bad_state if malformed. */
  public void load(List<Spend> kept) {
    List<Spend> loaded = new ArrayList<>();
    for (Spend s : kept) {
      if (s.slot() < 0 || !(s.eps() > 0.0 && s.eps() <= Oracles.MAX_EPS)) {
        throw new LedgerRefusal("bad_state", "a spend must be [slot >= 0, 0 < eps <= 500], got " + s);
      }
      if (!loaded.isEmpty() && s.slot() <= loaded.get(loaded.size() - 1).slot()) {
        throw new LedgerRefusal("bad_state", "spends must be in increasing slot order");
      }
      loaded.add(s);
    }
    if (!loaded.isEmpty()) {
      long last = loaded.get(loaded.size() - 1).slot();
      loaded.removeIf(s -> s.slot() <= last - w);
    }
    spends = loaded;
  }

  /** The spends, oldest first. */
  public List<Spend> dump() {
    return List.copyOf(spends);
  }
}
