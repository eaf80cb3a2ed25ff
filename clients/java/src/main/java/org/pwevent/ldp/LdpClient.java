package org.pwevent.ldp;

import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * One user's client: {@link #report(long, Integer)} gives the randomised report's UTF-8 bytes,
 * or null when the user does not report at that slot (or has no value), and throws a
 * {@link LedgerRefusal} rather than spend over the user's budget. Not thread-safe: one client
 * per user, used from one thread at a time.
 */
public final class LdpClient {
  /** The library's name and version, written into every report. */
  public static final String CLIENT_NAME = "pwevent-ldp-java/0.1.0";
  /** The reports' topic under the stream's prefix: {@code <prefix>.ldp-reports}. */
  public static final String TOPIC = "ldp-reports";

  private final ReportConfig config;
  private final WordSource words;
  private final ClientLedger ledger;
  private final Schedule schedule;
  private final double eps;
  private final boolean grr;
  private final long threshold;
  private final String head;
  private final String middle;
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
    eps = config.eps();
    grr = config.protocol().equals("plbu") && Oracles.plbuUsesGrr(eps, config.d());
    threshold = grr ? Oracles.grrKeepThreshold(eps, config.d()) : Oracles.oueThreshold(eps);
    schedule = new Schedule(config.protocol(), config.start(), config.w(), config.lpuKey(),
        config.user(), config.rotate());
    ledger = new ClientLedger(config.w(), config.budget());
    head = "{\"v\":" + Wire.VERSION + ",\"protocol\":\"" + config.protocol() + "\",\"user\":"
        + Wire.formatString(config.user()) + ",\"slot\":";
    middle = ",\"eps\":" + Wire.formatNumber(eps) + ",\"E\":" + Wire.formatNumber(config.budget())
        + ",\"w\":" + config.w() + ",\"d\":" + config.d() + ","
        + (grr ? "\"oracle\":\"grr\",\"cell\":" : "\"oracle\":\"oue\",\"bits\":\"");
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

  /** Whether the user reports at {@code slot} (when it has a value there). */
  public boolean due(long slot) {
    return schedule.due(slot);
  }

  /** The report's JSON text, or null; see {@link #report(long, Integer)}. */
  public String reportText(long slot, Integer value) {
    Wire.checkRange("slot", slot, 0, Wire.MAX_SLOT);
    if (value == null) {
      return null;
    }
    Wire.checkRange("value", value, 0, config.d() - 1);
    if (!schedule.due(slot)) {
      return null;
    }
    ledger.check(slot, eps);
    StringBuilder out = new StringBuilder(head.length() + middle.length() + tail.length() + 40)
        .append(head).append(slot).append(middle);
    if (grr) {
      out.append(Oracles.grrCell(value, config.d(), threshold, words));
    } else {
      Oracles.oueHex(value, config.d(), threshold, words, out);
    }
    ledger.commit(slot, eps);
    return out.append(tail).toString();
  }

  /**
   * The randomised report of cell {@code value} at {@code slot} as UTF-8 bytes, or null (not
   * due, or no value); throws {@link LedgerRefusal} when the budget does not allow it or the slot
   * is not after the last report's. Produce it keyed by {@link #userKey()}.
   */
  public byte[] report(long slot, Integer value) {
    String text = reportText(slot, value);
    return text == null ? null : text.getBytes(StandardCharsets.UTF_8);
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
