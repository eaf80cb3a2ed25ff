package org.pwevent.ldp;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Objects;

/**
 * One user's client: {@link #report(long, Integer)} gives the randomised report's UTF-8 bytes,
 * or null when the user does not report at that slot, and throws a {@link LedgerRefusal} rather
 * than spend over the user's budget. Not thread-safe: one client per user, used from one thread
 * at a time.
 *
 * <p>A user reports every slot it is due, with a value or without: a null value is sent as the
 * oracle's extra cell d, "no value" (wire format version 2: the oracle runs over d + 1 cells,
 * {@link Wire#oracleCells(int)}), randomised and charged to the ledger exactly as a value is. So
 * whether the user had a value at a slot stays as private as the value itself: the report's
 * presence says nothing.
 *
 * <p>The two-round protocols lbd and lba (and mtsp, below) keep the ledger over virtual slots,
 * 2 slot + round - 1, against a window of 2w ({@link Decision}):
 * {@link #report(long, Integer, Decision)} sends round 1 (the dissimilarity report at E/(2w)), at
 * the stream's first slot and where the previous slot's decision asks for it, and
 * {@link #answer(Decision, Integer)} round 2 (the publication report) at the budget the slot's
 * decision names.
 *
 * <p>The population protocols lpd and lpa ask each user one round kind by its public position
 * ({@link Schedule#position}, under the stream's public key): a user in the lower half reports
 * round 1 at its phase ({@link #due(long)}), where the previous slot's decision asks for it, a
 * user in the upper half answers round 2 where the slot's decision names an interval holding its
 * position. Every report spends E, and the ledger is kept over real slots against a window of w
 * and budget E: a user reports at most once in any w slots, whatever a forged decision asks.
 *
 * <p>mtsp (MTSP-LDP, {@link Tree}) keeps the ledger as lbd does and runs its rounds over a tree
 * over the d + 1 cells: round 1 reports the node of the user's level holding its cell, the level
 * given by its public position under the stream's public key ({@link Tree#level}), through OUE
 * over the level's nodes; round 2 answers with the interval of the decision's partition
 * ({@link Decision#starts()}) holding its cell, through OUE over the intervals. Its reports write
 * {@code "cells":k}, the cells the bits run over, right after {@code "d"}.
 */
public final class LdpClient {
  /** The library's name and version, written into every report. */
  public static final String CLIENT_NAME = "pwevent-ldp-java/0.3.0";
  /** The reports' topic under the stream's prefix: {@code <prefix>.ldp-reports}. */
  public static final String TOPIC = "ldp-reports";

  private final ReportConfig config;
  private final WordSource words;
  private final ClientLedger ledger;
  private final Schedule schedule;
  private final boolean rounds;
  private final boolean population;
  private final boolean tree;
  /** mtsp: the tree's height, the user's level and that level's nodes (0 for the others). */
  private final int height;
  private final int level;
  private final int levelCells;
  private final double eps;
  private final boolean grr;
  private final int cells;
  private final long threshold;
  private final String head;
  private final String middle;
  private final String rest;
  private final String oracleKey;
  private final String tail;

  /** A client drawing from the platform's CSPRNG. */
  public LdpClient(ReportConfig config) {
    this(config, new SecureWords(), CLIENT_NAME);
  }

  /** A client drawing from {@code words} (tests), naming itself {@code client} in reports. */
  public LdpClient(ReportConfig config, WordSource words, String client) {
    this.config = config;
    this.words = words;
    Wire.checkText("client", client);
    rounds = config.rounds();
    population = config.population();
    tree = config.tree();
    eps = config.eps();
    cells = Wire.oracleCells(config.d());
    if (tree) {
      height = Tree.height(cells);
      level = Tree.level(Schedule.position(config.lpuKey(), config.user()), height);
      levelCells = Tree.levelCells(cells, height, level);
    } else {
      height = 0;
      level = 0;
      levelCells = 0;
    }
    grr = config.protocol().equals("plbu") && Oracles.plbuUsesGrr(eps, cells);
    threshold = grr ? Oracles.grrKeepThreshold(eps, cells) : Oracles.oueThreshold(eps);
    schedule = new Schedule(config.protocol(), config.start(), config.w(), config.lpuKey(),
        config.user(), config.rotate());
    ledger = new ClientLedger(rounds && !population ? 2L * config.w() : config.w(),
        config.budget());
    head = "{\"v\":" + Wire.VERSION + ",\"protocol\":\"" + config.protocol() + "\",\"user\":"
        + Wire.formatString(config.user()) + ",\"slot\":";
    rest = ",\"E\":" + Wire.formatNumber(config.budget()) + ",\"w\":" + config.w() + ",\"d\":"
        + config.d() + ",";
    oracleKey = grr ? "\"oracle\":\"grr\",\"cell\":" : "\"oracle\":\"oue\",\"bits\":\"";
    middle = ",\"eps\":" + Wire.formatNumber(eps) + rest;
    tail = (grr ? "" : "\"") + ",\"client\":" + Wire.formatString(client) + "}";
  }

  /** The reports' topic of a stream whose topics are named {@code <prefix>.<topic>}. */
  public static String topicName(String prefix) {
    return prefix + "." + TOPIC;
  }

  /** The job's slot holding {@code timeMs}: floor((time - origin) / slot). */
  public static long slotOf(long timeMs, long originMs, long slotMs) {
    return Math.floorDiv(timeMs - originMs, slotMs);
  }

  /** This client's configuration. */
  public ReportConfig config() {
    return config;
  }

  /** "oue" or "grr": the oracle of this client's reports. */
  public String oracle() {
    return grr ? "grr" : "oue";
  }

  /**
   * Whether the user reports at {@code slot} (with a value there or without); for lpd and lpa
   * whether it is one of the slot's dissimilarity users (lower half, at its phase), when the
   * slot asks a dissimilarity round (publication rounds name their users in the decision).
   */
  public boolean due(long slot) {
    return schedule.due(slot);
  }

  /** The report's JSON text, or null; see {@link #report(long, Integer)}. */
  public String reportText(long slot, Integer value) {
    return reportText(slot, value, null);
  }

  /** The report's JSON text, or null; see {@link #report(long, Integer, Decision)}. */
  public String reportText(long slot, Integer value, Decision decision) {
    Wire.checkRange("slot", slot, 0, rounds ? Wire.MAX_ROUND_SLOT : Wire.MAX_SLOT);
    int cell = cellOf(value);
    if (!schedule.due(slot)) {
      return null;
    }
    if (!rounds) {
      if (decision != null) {
        throw new IllegalArgumentException(
            config.protocol() + " has one round a slot: it takes no decision");
      }
      return send(slot, cell, eps, slot, 0, 0);
    }
    if (slot > config.start()) {
      if (decision == null) {
        return null;
      }
      checkDecision(decision, slot - 1);
      if (decision.next() == 0.0) {
        return null;
      }
      if (decision.next() != eps) {
        throw new IllegalArgumentException("the decision asks a dissimilarity budget of "
            + decision.next() + ", not the stream's " + (population ? "E" : "E/(2w)") + " = "
            + eps);
      }
    }
    if (tree) {
      return send(slot, Tree.nodeOf(cell, height, level), eps, Decision.virtualSlot(slot, 1), 1,
          levelCells);
    }
    return send(slot, cell, eps, population ? slot : Decision.virtualSlot(slot, 1), 1, 0);
  }

  /**
   * The randomised report of cell {@code value} at {@code slot} as UTF-8 bytes, or null when the
   * user is not due at {@code slot}. A null {@code value} (no value at this slot) is reported as
   * well, as cell d ("no value"), spending what a value's report spends: call this at every slot,
   * with or without a value, so that whether the user had one stays as private as the value.
   * Throws {@link LedgerRefusal} when the budget does not allow it or the slot is not after the
   * last report's (nothing drawn, nothing spent), and IllegalArgumentException for a value
   * outside [0, d). Produce it keyed by {@link #userKey()}. For the two-round protocols this is
   * {@code report(slot, value, null)}: the dissimilarity report of the stream's first slot.
   */
  public byte[] report(long slot, Integer value) {
    return report(slot, value, null);
  }

  /**
   * As {@link #report(long, Integer)}; for the two-round protocols the dissimilarity report
   * (round 1, at E/(2w) for lbd, lba and mtsp, at E for lpd and lpa, where only the users due at
   * the slot report: {@link #due(long)}; for mtsp over the nodes of the user's level of the tree,
   * {@link Tree}): sent at the stream's first slot (the decision is not read there), and after it
   * only when {@code decision}, the previous slot's, asks for one (null without a decision, or
   * when it names no dissimilarity round). IllegalArgumentException for a decision of another
   * protocol or slot, or asking another budget than the round's (E/(2w), or E for lpd and lpa),
   * and for any decision given to a one-round protocol.
   */
  public byte[] report(long slot, Integer value, Decision decision) {
    String text = reportText(slot, value, decision);
    return text == null ? null : text.getBytes(StandardCharsets.UTF_8);
  }

  /** The answer's JSON text, or null; see {@link #answer(Decision, Integer)}. */
  public String answerText(Decision decision, Integer value) {
    if (!rounds) {
      throw new IllegalArgumentException(
          config.protocol() + " has one round a slot: nothing to answer");
    }
    Objects.requireNonNull(decision, "decision");
    long slot = Wire.checkRange("slot", decision.slot(), 0, Wire.MAX_ROUND_SLOT);
    int cell = cellOf(value);
    checkDecision(decision, slot);
    if (decision.eps() == 0.0 || slot < config.start()) {
      return null;
    }
    if (population) {
      if (decision.eps() != config.budget()) {
        throw new IllegalArgumentException(
            "the decision asks " + decision.eps() + ", not the stream's E = " + config.budget());
      }
      if (!Schedule.inInterval(schedule.position(), decision.from(), decision.size())) {
        return null;
      }
      return send(slot, cell, decision.eps(), slot, 2, 0);
    }
    if (!(decision.eps() <= config.budget() / 2)) {
      throw new IllegalArgumentException(
          "the decision asks " + decision.eps() + ", over E/2 = " + config.budget() / 2);
    }
    if (tree) {
      List<Integer> starts = decision.starts();
      int last = starts.get(starts.size() - 1);
      if (last >= cells) {
        throw new IllegalArgumentException("the decision's intervals reach cell " + last
            + ", past the " + cells + " cells of the stream");
      }
      return send(slot, Tree.intervalOf(cell, starts), decision.eps(),
          Decision.virtualSlot(slot, 2), 2, starts.size());
    }
    return send(slot, cell, decision.eps(), Decision.virtualSlot(slot, 2), 2, 0);
  }

  /**
   * The publication report (round 2) of cell {@code value} at the budget {@code decision} names
   * for its slot, as UTF-8 bytes; null when the decision names none (eps 0) or the slot lies
   * before the stream's first, and for lpd and lpa when the decision's interval
   * [from, from + size) of the upper half does not hold the user's position
   * ({@link Schedule#inInterval}). mtsp answers with the interval of the decision's partition
   * holding the cell ({@link Tree#intervalOf}), through OUE over the partition's intervals. A
   * null {@code value} (no value) is answered as well, as cell d at the same budget, so the
   * answer says nothing of whether the user had a value. Throws {@link LedgerRefusal} when the
   * ledger refuses it, and IllegalArgumentException for a one-round protocol, a decision of
   * another protocol or slot, or one asking more than E/2 (lbd, lba, mtsp) or another budget than
   * E (lpd, lpa), or, for mtsp, a partition reaching past the stream's d + 1 cells.
   */
  public byte[] answer(Decision decision, Integer value) {
    String text = answerText(decision, value);
    return text == null ? null : text.getBytes(StandardCharsets.UTF_8);
  }

  private void checkDecision(Decision decision, long slot) {
    if (!decision.protocol().equals(config.protocol()) || decision.slot() != slot) {
      throw new IllegalArgumentException("the decision is for " + decision.protocol() + " slot "
          + decision.slot() + ", not " + config.protocol() + " slot " + slot);
    }
  }

  /** The oracle's cell of {@code value}: the value checked to lie in [0, d), or d for null. */
  private int cellOf(Integer value) {
    if (value == null) {
      return config.d();
    }
    return (int) Wire.checkRange("value", value, 0, config.d() - 1);
  }

  /**
   * Randomise cell {@code cell} (d: no value) over the d + 1 cells at {@code budget}, spent at
   * ledger slot {@code at}: the report; mtsp randomises node or interval {@code cell} over
   * {@code width} cells (0: the d + 1), written as its {@code "cells"}.
   */
  private String send(long slot, int cell, double budget, long at, int round, int width) {
    ledger.check(at, budget);
    StringBuilder out = new StringBuilder(
        head.length() + middle.length() + oracleKey.length() + tail.length() + 60)
        .append(head).append(slot);
    if (round > 0) {
      out.append(",\"round\":").append(round);
    }
    if (budget == eps) {
      out.append(middle);
    } else {
      out.append(",\"eps\":").append(Wire.formatNumber(budget)).append(rest);
    }
    if (tree) {
      out.append("\"cells\":").append(width).append(',');
    }
    out.append(oracleKey);
    int over = width > 0 ? width : cells;
    if (grr) {
      out.append(Oracles.grrCell(cell, over, threshold, words));
    } else {
      long t = budget == eps ? threshold : Oracles.oueThreshold(budget);
      Oracles.oueHex(cell, over, t, words, out);
    }
    ledger.commit(at, budget);
    return out.append(tail).toString();
  }

  /** The Kafka key of this user's reports: the user id in UTF-8. */
  public byte[] userKey() {
    return config.user().getBytes(StandardCharsets.UTF_8);
  }

  /** The ledger's spends, oldest first, for the app to keep between runs. */
  public List<ClientLedger.Spend> state() {
    return ledger.dump();
  }

  /** Load spends {@link #state()} gave earlier; bad_state if malformed. */
  public void loadState(List<ClientLedger.Spend> spends) {
    ledger.load(spends);
  }

  /** The ledger (its checks, for tests and diagnostics). */
  public ClientLedger ledger() {
    return ledger;
  }
}
