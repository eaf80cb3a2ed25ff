package org.pwevent.ldp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.Supplier;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;

/** The client with the platform's CSPRNG: reports, the ledger, kept state. */
class ClientTest {
  @Test
  void secureWordsLookUniform() {
    SecureWords words = new SecureWords();
    int n = 200_000;
    int below = 0;
    for (int i = 0; i < n; i++) {
      long u = words.nextWord();
      assertTrue(u >= 0 && u < Oracles.WORD);
      if (u < Oracles.HALF_WORD) {
        below++;
      }
    }
    assertEquals(0.5, below / (double) n, 0.01);
  }

  /** Bit {@code j} of packed OUE bits in hex: bit j mod 8 of byte j / 8. */
  private static int bit(String hex, int j) {
    return (Integer.parseInt(hex.substring(2 * (j / 8), 2 * (j / 8) + 2), 16) >> (j % 8)) & 1;
  }

  @Test
  @SuppressWarnings("unchecked")
  void oueKeepsTheTrueBitWithOneHalf() {
    // d = 8 value cells: the oracle runs over 9, bit 8 the "no value" cell, in ceil(9/8) = 2 bytes
    for (Integer value : new Integer[] {2, null}) {
      LdpClient client = new LdpClient(new ReportConfig("lbu", "u", 8, 1, 1.0, 0));
      int n = 20_000;
      int[] ones = new int[9];
      for (int s = 0; s < n; s++) {
        Map<String, Object> r = (Map<String, Object>) Json.parse(client.reportText(s, value));
        String bits = (String) r.get("bits");
        assertEquals(4, bits.length(), bits);
        assertEquals(0, Integer.parseInt(bits.substring(2), 16) >> 1, "unused bits " + bits);
        for (int j = 0; j < 9; j++) {
          ones[j] += bit(bits, j);
        }
      }
      int cell = value == null ? 8 : value;
      double q = Oracles.oueThreshold(1.0) / (double) Oracles.WORD;
      for (int j = 0; j < 9; j++) {
        double p = j == cell ? 0.5 : q;
        assertEquals(p, ones[j] / (double) n, 5 * Math.sqrt(p * (1 - p) / n),
            "value " + value + " bit " + j);
      }
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  void grrKeepsTheNoValueCellAsAValue() {
    // PLBU over d = 3 value cells at eps 2: GRR over 4 cells, cell 3 for "no value"
    ReportConfig config = new ReportConfig("plbu", "u", 3, 1, 2.0, 0);
    assertEquals("grr", new LdpClient(config).oracle());
    double keep = Oracles.grrKeepThreshold(2.0, 4) / (double) Oracles.WORD;
    for (Integer value : new Integer[] {1, null}) {
      LdpClient client = new LdpClient(config);
      int n = 20_000;
      int[] counts = new int[4];
      for (int s = 0; s < n; s++) {
        Map<String, Object> r = (Map<String, Object>) Json.parse(client.reportText(s, value));
        counts[Math.toIntExact((Long) r.get("cell"))]++;
      }
      int cell = value == null ? 3 : value;
      for (int j = 0; j < 4; j++) {
        double p = j == cell ? keep : (1 - keep) / 3;
        assertEquals(p, counts[j] / (double) n, 5 * Math.sqrt(p * (1 - p) / n),
            "value " + value + " cell " + j);
      }
    }
  }

  @Test
  void refusalsAndKeptState() {
    LdpClient client = new LdpClient(new ReportConfig("plbu", "alice", 4, 2, 1.0, 0));
    assertNotNull(client.report(7, 3));
    assertEquals("not_after_last", assertThrows(LedgerRefusal.class, () -> client.report(7, 1)).code());
    assertEquals("not_after_last", assertThrows(LedgerRefusal.class, () -> client.report(7, null)).code());
    LdpClient again = new LdpClient(new ReportConfig("plbu", "alice", 4, 2, 0.5, 0));
    again.loadState(client.state());
    assertEquals("over_budget", assertThrows(LedgerRefusal.class, () -> again.report(8, 1)).code());
    assertEquals("over_budget", assertThrows(LedgerRefusal.class, () -> again.report(8, null)).code());
    assertNotNull(again.report(9, 1));
    // no value: sent all the same (GRR over d + 1 = 5 cells), and charged as a value is
    assertNotNull(client.report(8, null));
    assertEquals(List.of(new ClientLedger.Spend(7, 0.5), new ClientLedger.Spend(8, 0.5)), client.state());
    assertThrows(IllegalArgumentException.class, () -> client.report(9, 4)); // d: no value's cell, not a value
    assertThrows(IllegalArgumentException.class, () -> client.report(9, -1));
    assertThrows(IllegalArgumentException.class, () -> client.report(-1, 0));
    assertThrows(IllegalArgumentException.class, () -> client.report(-1, null));
    assertEquals(2, client.state().size());
    assertEquals(1, LdpClient.slotOf(1_000_999, 1_000_000, 500));
    assertEquals("pwevent.ldp-reports", LdpClient.topicName("pwevent"));
  }

  /** What one call did: its report's text (null: nothing sent), or the refusal's code. */
  private record Outcome(String report, String refused) {}

  private static Outcome outcome(Supplier<byte[]> call) {
    try {
      byte[] bytes = call.get();
      return new Outcome(bytes == null ? null : new String(bytes, StandardCharsets.UTF_8), null);
    } catch (LedgerRefusal refusal) {
      return new Outcome(null, refusal.code());
    }
  }

  /**
   * The same call on a client given values and on one given none (the same words): both send
   * or neither, both refuse alike, both spend and draw the same; the reports differ only in their
   * payload, the no-value one's over d + 1 cells. Returns whether a report was sent.
   */
  @SuppressWarnings("unchecked")
  private static boolean sameSpend(LdpClient valued, CounterWords valuedWords, LdpClient empty,
      CounterWords emptyWords, Supplier<byte[]> withValue,
      Supplier<byte[]> withoutValue, String where) {
    Outcome a = outcome(withValue);
    Outcome b = outcome(withoutValue);
    assertEquals(a.refused(), b.refused(), where);
    assertEquals(a.report() == null, b.report() == null, where);
    assertEquals(valued.state(), empty.state(), where);
    assertEquals(valuedWords.drawn(), emptyWords.drawn(), where);
    if (a.report() == null) {
      return false;
    }
    Map<String, Object> ra = new LinkedHashMap<>((Map<String, Object>) Json.parse(a.report()));
    Map<String, Object> rb = new LinkedHashMap<>((Map<String, Object>) Json.parse(b.report()));
    int d = empty.config().d();
    if (empty.oracle().equals("grr")) {
      long cell = (Long) rb.remove("cell");
      assertTrue(0 <= cell && cell <= d, where);
      ra.remove("cell");
    } else {
      String bits = (String) rb.remove("bits");
      assertEquals(2 * ((d + 1 + 7) / 8), bits.length(), where);
      assertEquals(bits.length(), ((String) ra.remove("bits")).length(), where);
    }
    assertEquals(ra, rb, where);
    assertEquals(2L, rb.get("v"), where);
    assertEquals((long) d, rb.get("d"), where);
    return true;
  }

  @Test
  void aNoValueReportIsSentAndSpendsAsAValueReport() {
    List<ReportConfig> configs = List.of(
        new ReportConfig("lbu", "u", 8, 3, 1.0, 2),
        new ReportConfig("lsp", "u", 5, 3, 1.0, 1),
        new ReportConfig("lpu", "u", 6, 4, 1.0, 0, "key", 1),
        new ReportConfig("plbu", "u", 3, 1, 2.0, 3), // GRR over 4 cells
        new ReportConfig("plbu", "u", 12, 10, 1.0, 5), // OUE over 13 cells
        new ReportConfig("lbd", "u", 4, 2, 1.0, 1),
        new ReportConfig("lba", "u", 7, 3, 1.2, 0));
    for (ReportConfig config : configs) {
      String name = config.protocol() + " d " + config.d();
      CounterWords valuedWords = new CounterWords("same");
      CounterWords emptyWords = new CounterWords("same");
      LdpClient valued = new LdpClient(config, valuedWords, "test");
      LdpClient empty = new LdpClient(config, emptyWords, "test");
      int sent = 0;
      int unsent = 0;
      int answers = 0;
      Decision previous = null;
      for (long at = 0; at < 40; at++) {
        long slot = at;
        int value = (int) (slot % config.d());
        Decision asked = previous;
        String where = name + " slot " + slot;
        boolean out = sameSpend(valued, valuedWords, empty, emptyWords,
            () -> valued.report(slot, value, asked), () -> empty.report(slot, null, asked), where);
        sent += out ? 1 : 0;
        unsent += out ? 0 : 1;
        if (config.rounds()) {
          double eps = slot % 3 == 0 ? 0.0 : config.budget() / (2 + slot % 4);
          double next = slot % 4 == 1 ? 0.0 : config.eps();
          Decision decision = new Decision("app", config.protocol(), slot, eps, next);
          boolean answered = sameSpend(valued, valuedWords, empty, emptyWords,
              () -> valued.answer(decision, value), () -> empty.answer(decision, null),
              where + " round 2");
          sent += answered ? 1 : 0;
          answers += answered ? 1 : 0;
          unsent += answered ? 0 : 1;
          previous = decision;
        }
      }
      assertTrue(sent > 0, name);
      assertTrue(unsent > 0, name); // before the start, not due, not asked or refused: neither sent
      assertEquals(config.rounds(), answers > 0, name); // round 2 answered without a value too
    }
  }

  private static final String CANONICAL =
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1042,\"eps\":0.025,\"next\":0.05}";

  @Test
  void decisionsEncodeAndParseAsThePythonReference() {
    Decision d = new Decision("app", "lbd", 1042, 0.025, 0.05);
    assertEquals(CANONICAL, d.text());
    assertArrayEquals(CANONICAL.getBytes(StandardCharsets.UTF_8), d.encode());
    assertEquals(d, Decision.parse(CANONICAL));
    assertEquals(d, Decision.parse(d.encode()));
    assertEquals("{\"v\":1,\"stream\":\"a\\\"\\u0001\u00e9\",\"protocol\":\"lba\",\"slot\":0,\"eps\":500,"
        + "\"next\":1e-7}", new Decision("a\"\u0001\u00e9", "lba", 0, 500, 1e-7).text());
    // JSON's freedoms, as json.loads reads them: whitespace, escapes, a repeated key's last value
    assertEquals(new Decision("app\ud83d\ude00", "lbd", 7, 100.0, 0.0), Decision.parse(
        " {\"v\" : 1,\"stream\":\"\\u0061pp\\ud83d\\ude00\",\"protocol\":\"lb\\u0064\",\"slot\":7,"
            + "\"eps\":[1,{\"x\":null}],\"next\":0,\"eps\":1E2}\r\n"));
    byte[] bom = ("\ufeff" + CANONICAL).getBytes(StandardCharsets.UTF_8);
    assertEquals(d, Decision.parse(bom)); // utf-8-sig, as json.loads reads bytes
    String[] refused = {
      "{\"v\":1.0,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":0,\"next\":0}",
      "{\"v\":true,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":0,\"next\":0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1e0,\"eps\":0,\"next\":0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":9007199254740992,\"eps\":0,\"next\":0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":NaN,\"next\":0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":1e400,\"next\":0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":501,\"next\":0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":0,\"next\":true}",
      "{\"v\":1,\"stream\":\"\\ud83d\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":0,\"next\":0}",
      "{\"v\":1,\"stream\":\"a\u0001\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":0,\"next\":0}",
      "{\"v\":1,\"stream\":\"" + "x".repeat(257) + "\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":0,\"next\":0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":01,\"eps\":0,\"next\":0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":0,\"next\":0,}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":0,\"next\":0,\"x\":0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":0,\"next\":0} x",
      "\ufeff\ufeff" + CANONICAL, "\ud800" + CANONICAL, "[1]", "", "{}",
    };
    for (String text : refused) {
      assertThrows(IllegalArgumentException.class, () -> Decision.parse(text), text);
    }
    byte[] notUtf8 = CANONICAL.replace("app", "a\u00e9p").getBytes(StandardCharsets.UTF_8);
    notUtf8[notUtf8.length / 3] = (byte) 0xc0;
    assertThrows(IllegalArgumentException.class, () -> Decision.parse(notUtf8));
    assertThrows(IllegalArgumentException.class, () -> new Decision("app", "lbu", 1, 0, 0));
    assertThrows(IllegalArgumentException.class, () -> new Decision("", "lbd", 1, 0, 0));
    assertThrows(IllegalArgumentException.class, () -> new Decision("app", "lbd", -1, 0, 0));
    assertThrows(IllegalArgumentException.class, () -> new Decision("app", "lbd", 1, -0.5, 0));
    assertThrows(IllegalArgumentException.class, () -> new Decision("app", "lbd", 1, 0, Double.NaN));
    assertEquals(21, Decision.virtualSlot(10, 2));
    assertEquals(0.25, Decision.dissimilarityBudget(2, 1.0));
  }

  @Test
  @SuppressWarnings("unchecked")
  void twoRoundsAskedByDecisions() {
    ReportConfig config = new ReportConfig("lbd", "u", 4, 2, 1.0, 10);
    assertTrue(config.rounds());
    assertEquals(0.25, config.eps());
    LdpClient client = new LdpClient(config);
    assertNull(client.report(9, 1)); // before the stream's first slot
    Map<String, Object> first = (Map<String, Object>) Json.parse(client.reportText(10, 1));
    assertEquals(List.of("v", "protocol", "user", "slot", "round", "eps", "E", "w", "d", "oracle",
        "bits", "client"), List.copyOf(first.keySet()));
    assertEquals(1L, first.get("round"));
    assertEquals(0.25, first.get("eps"));
    Decision at10 = new Decision("app", "lbd", 10, 0.5, 0.25);
    Map<String, Object> second = (Map<String, Object>) Json.parse(client.answerText(at10, 3));
    assertEquals(2L, second.get("round"));
    assertEquals(0.5, second.get("eps"));
    assertEquals(List.of(new ClientLedger.Spend(20, 0.25), new ClientLedger.Spend(21, 0.5)),
        client.state());
    assertNull(client.report(11, 1)); // after the first slot, only when a decision asks
    assertThrows(IllegalArgumentException.class, () -> client.report(11, 1, new Decision("app", "lbd", 9, 0.5, 0.25)));
    assertThrows(IllegalArgumentException.class,
        () -> client.report(11, 1, new Decision("app", "lba", 10, 0.5, 0.25)));
    assertThrows(IllegalArgumentException.class,
        () -> client.report(11, 1, new Decision("app", "lbd", 10, 0.5, 0.3)));
    assertNull(client.report(11, 1, new Decision("app", "lbd", 10, 0.5, 0.0)));
    // a decision is read with a value or without
    assertThrows(IllegalArgumentException.class,
        () -> client.report(11, null, new Decision("app", "lba", 3, 0, 0)));
    assertNull(client.report(11, null)); // no value, and not asked: nothing sent
    assertNull(client.report(11, null, new Decision("app", "lbd", 10, 0.5, 0.0)));
    assertNotNull(client.report(11, 1, at10));
    Decision at11 = new Decision("app", "lbd", 11, 0.5, 0.25);
    assertNull(client.answer(new Decision("app", "lbd", 11, 0.0, 0.25), 2));
    assertNull(client.answer(new Decision("app", "lbd", 11, 0.0, 0.25), null));
    assertNull(client.answer(new Decision("app", "lbd", 9, 0.5, 0.25), 2)); // before the start
    assertNull(client.answer(new Decision("app", "lbd", 9, 0.5, 0.25), null));
    assertThrows(IllegalArgumentException.class, () -> client.answer(new Decision("app", "lbd", 11, 0.75, 0.25), 2));
    assertThrows(IllegalArgumentException.class, () -> client.answer(at11, 4));
    // round 2 of slot 11 would make the 2w = 4 virtual slots (19, 23] spend 1.5 > E
    assertEquals("over_budget", assertThrows(LedgerRefusal.class, () -> client.answer(at11, 2)).code());
    // and so would its answer without a value: "no value" is charged as a value is
    assertEquals("over_budget", assertThrows(LedgerRefusal.class, () -> client.answer(at11, null)).code());
    assertEquals(3, client.state().size());

    LdpClient once = new LdpClient(new ReportConfig("lbu", "u", 4, 2, 1.0, 0));
    assertThrows(IllegalArgumentException.class, () -> once.report(0, 1, at10));
    assertThrows(IllegalArgumentException.class, () -> once.report(0, null, at10));
    assertThrows(IllegalArgumentException.class, () -> once.answer(at10, 1));
  }

  @Test
  void forgedDecisionsNeverOverspend() {
    Random random = new Random(5);
    int w = 3;
    double budget = 1.2;
    LdpClient client = new LdpClient(new ReportConfig("lba", "u", 5, w, budget, 0));
    double asked = Decision.dissimilarityBudget(w, budget);
    double[] spent = new double[2 * 400 + 2];
    Decision previous = null;
    for (long slot = 0; slot < 400; slot++) {
      try {
        client.report(slot, random.nextInt(5), previous);
      } catch (LedgerRefusal refused) {
        assertEquals("over_budget", refused.code());
      }
      double eps = random.nextInt(3) == 0 ? 0.0 : random.nextDouble() * budget / 2;
      Decision decision = new Decision("app", "lba", slot, eps, random.nextBoolean() ? asked : 0.0);
      try {
        client.answer(decision, random.nextInt(5));
      } catch (LedgerRefusal refused) {
        assertEquals("over_budget", refused.code());
      }
      for (ClientLedger.Spend s : client.state()) {
        spent[(int) s.slot()] = s.eps();
      }
      previous = decision;
    }
    for (int end = 0; end < spent.length; end++) {
      double total = 0;
      for (int at = Math.max(0, end - 2 * w + 1); at <= end; at++) {
        total += spent[at];
      }
      assertTrue(total <= budget * ClientLedger.SLACK, "window ending at " + end);
    }
  }

  private static final String KEY = "pop-key";

  /** The first user {@code <prefix>-<i>} whose position under {@link #KEY} is in the upper half (or the lower). */
  private static String populationUser(String prefix, boolean upper) {
    for (int i = 0; i < 10_000; i++) {
      String user = prefix + "-" + i;
      if ((Schedule.position(KEY, user) >= Schedule.HALF) == upper) {
        return user;
      }
    }
    throw new AssertionError("no such user");
  }

  @Test
  void positionsAndPhases() {
    long half = Schedule.HALF;
    assertEquals(0, Schedule.phase(0, 7));
    assertEquals(6, Schedule.phase(half - 1, 7));
    assertEquals(Integer.MAX_VALUE - 1, Schedule.phase(half - 1, Integer.MAX_VALUE)); // ~2^62, exact
    assertEquals(1, Schedule.phase(half / 2, 2));
    assertNull(Schedule.phase(half, 3));
    assertNull(Schedule.phase(2 * half - 1, 3));
    assertThrows(IllegalArgumentException.class, () -> Schedule.phase(2 * half, 3));
    assertThrows(IllegalArgumentException.class, () -> Schedule.phase(-1, 3));
    for (String user : new String[] {"a", "b", "\u00e9t\u00e9", "x".repeat(256)}) {
      long at = Schedule.position(KEY, user);
      assertTrue(at >= 0 && at < 2 * half, user);
      assertEquals(at, Schedule.position(KEY, user));
    }
    assertTrue(Schedule.position("k1", "u") != Schedule.position("k2", "u"));
    // the interval's offsets wrap around the upper half
    assertTrue(Schedule.inInterval(half + 5, 5, 1));
    assertFalse(Schedule.inInterval(half + 5, 6, half - 1));
    assertTrue(Schedule.inInterval(half, half - 3, 4)); // [2^31 - 3, 2^31) and [0, 1)
    assertTrue(Schedule.inInterval(2 * half - 1, half - 3, 4));
    assertFalse(Schedule.inInterval(half + 1, half - 3, 4));
    assertTrue(Schedule.inInterval(half + 1, 0, half));
    assertFalse(Schedule.inInterval(half - 1, 0, half)); // a lower-half user is never named
    assertFalse(Schedule.inInterval(half + 1, 0, 0));
  }

  @Test
  void populationDueByPhase() {
    int w = 3;
    long start = 5;
    for (String protocol : new String[] {"lpd", "lpa"}) {
      String low = populationUser("low", false);
      LdpClient lower = new LdpClient(new ReportConfig(protocol, low, 4, w, 2.0, start, KEY, 0));
      assertTrue(lower.config().rounds());
      assertTrue(lower.config().population());
      assertEquals(2.0, lower.config().eps()); // every report at E
      int phase = Schedule.phase(Schedule.position(KEY, low), w);
      int due = 0;
      for (long slot = 0; slot < 40; slot++) {
        boolean expected = slot >= start && (slot - start) % w == phase;
        assertEquals(expected, lower.due(slot), protocol + " slot " + slot);
        assertEquals(Schedule.inRound1(Schedule.position(KEY, low), slot, start, w), lower.due(slot));
        due += expected ? 1 : 0;
      }
      assertEquals((40 - start + w - 1 - phase) / w, due, protocol);
      // a dissimilarity user reports at E on the real slot, at the first slot or where asked
      long first = start + phase;
      Decision ask = new Decision("app", protocol, first - 1, 0, 2.0);
      if (first == start) {
        assertNotNull(lower.report(first, 1));
      } else {
        assertNull(lower.report(first, 1)); // not asked
        assertNotNull(lower.report(first, 1, ask));
      }
      assertEquals(List.of(new ClientLedger.Spend(first, 2.0)), lower.state());
      assertNull(lower.report(first + 1, 1, new Decision("app", protocol, first, 0, 2.0))); // not due
      // it is never a publication user, whatever the interval
      assertNull(lower.answer(new Decision("app", protocol, first + w, 2.0, 2.0, 0, Schedule.HALF), 1));
      assertEquals(1, lower.state().size());

      String high = populationUser("high", true);
      LdpClient upper = new LdpClient(new ReportConfig(protocol, high, 4, w, 2.0, start, KEY, 0));
      for (long slot = 0; slot < 40; slot++) {
        assertFalse(upper.due(slot), protocol + " upper slot " + slot);
      }
      assertNull(upper.report(start, 1)); // never a dissimilarity user
      assertEquals(List.of(), upper.state());
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  void publicationUserInsideAndOutsideIntervals() {
    int w = 2;
    String high = populationUser("high", true);
    long off = Schedule.position(KEY, high) - Schedule.HALF; // its offset in the upper half
    long half = Schedule.HALF;
    LdpClient client = new LdpClient(new ReportConfig("lpa", high, 3, w, 1.5, 0, KEY, 0));
    // exactly its position: answered at E, round 2, spent at the real slot
    Map<String, Object> r = (Map<String, Object>) Json.parse(
        client.answerText(new Decision("app", "lpa", 0, 1.5, 0, off, 1), 2));
    assertEquals(2L, r.get("round"));
    assertEquals(1.5, r.get("eps"));
    assertEquals(0L, r.get("slot"));
    assertEquals(List.of(new ClientLedger.Spend(0, 1.5)), client.state());
    // every other position: not named
    assertNull(client.answer(new Decision("app", "lpa", 2, 1.5, 0, (off + 1) % half, half - 1), 2));
    // an interval wrapping around the end of the upper half: from 2^31 - 3 through off
    Decision wrapping = new Decision("app", "lpa", 2, 1.5, 1.5, half - 3, off + 4);
    assertTrue(wrapping.from() + wrapping.size() > half);
    assertNotNull(client.answer(wrapping, null)); // without a value, as a value
    assertEquals(List.of(new ClientLedger.Spend(2, 1.5)), client.state()); // slot 0 left the window
    // a wrapping interval that stops just before it, and one that starts just after it
    assertNull(client.answer(new Decision("app", "lpa", 4, 1.5, 0, half - 3, off + 3), 1));
    assertNull(client.answer(new Decision("app", "lpa", 4, 1.5, 0, off + 1, half - 1), 1));
    // one that wraps around and holds it near its end
    assertNotNull(client.answer(new Decision("app", "lpa", 4, 1.5, 0, (off + half - 5) % half, 10), 0));
    // no publication round, or a slot before the stream's first: nothing
    assertNull(client.answer(new Decision("app", "lpa", 6, 0, 1.5), 1));
    LdpClient late = new LdpClient(new ReportConfig("lpa", high, 3, w, 1.5, 10, KEY, 0));
    assertNull(late.answer(new Decision("app", "lpa", 9, 1.5, 0, off, 1), 1));
    assertEquals(List.of(), late.state());
    assertEquals(List.of(new ClientLedger.Spend(4, 1.5)), client.state());
  }

  @Test
  void forgedPopulationDecisionsThrow() {
    int w = 3;
    String high = populationUser("high", true);
    long off = Schedule.position(KEY, high) - Schedule.HALF;
    LdpClient upper = new LdpClient(new ReportConfig("lpd", high, 4, w, 2.0, 0, KEY, 0));
    // a publication budget other than E, below or above: refused, nothing drawn or spent
    assertThrows(IllegalArgumentException.class,
        () -> upper.answer(new Decision("app", "lpd", 3, 1.0, 2.0, off, 1), 1));
    assertThrows(IllegalArgumentException.class,
        () -> upper.answer(new Decision("app", "lpd", 3, 4.0, 2.0, off, 1), null));
    // even when the interval does not name the user
    assertThrows(IllegalArgumentException.class,
        () -> upper.answer(new Decision("app", "lpd", 3, 1.0, 2.0, (off + 1) % Schedule.HALF, 1), 1));
    // another protocol's or slot's decision
    assertThrows(IllegalArgumentException.class, () -> upper.answer(
        new Decision("app", "lpa", 3, 2.0, 2.0, off, 1), 1));
    assertThrows(IllegalArgumentException.class, () -> upper.answer(
        new Decision("app", "lbd", 3, 1.0, 2.0), 1));
    assertEquals(List.of(), upper.state());
    assertNotNull(upper.answer(new Decision("app", "lpd", 3, 2.0, 2.0, off, 1), 1));

    String low = populationUser("low", false);
    LdpClient lower = new LdpClient(new ReportConfig("lpd", low, 4, w, 2.0, 0, KEY, 0));
    long slot = Schedule.phase(Schedule.position(KEY, low), w) + w; // due, after the first slot
    assertTrue(lower.due(slot));
    // a dissimilarity budget other than E
    assertThrows(IllegalArgumentException.class,
        () -> lower.report(slot, 1, new Decision("app", "lpd", slot - 1, 0, 1.0)));
    assertThrows(IllegalArgumentException.class,
        () -> lower.report(slot, 1, new Decision("app", "lpd", slot - 2, 0, 2.0)));
    assertNull(lower.report(slot, 1, new Decision("app", "lpd", slot - 1, 0, 0))); // not asked
    assertEquals(List.of(), lower.state());
    assertNotNull(lower.report(slot, 1, new Decision("app", "lpd", slot - 1, 0, 2.0)));
    // a one-round protocol takes no decision; a population decision names users only with a budget
    assertThrows(IllegalArgumentException.class, () -> new Decision("app", "lpd", 1, 2.0, 2.0));
    assertThrows(IllegalArgumentException.class, () -> new Decision("app", "lpd", 1, 0, 2.0, 0, 5));
  }

  @Test
  void populationProtocolsNeedTheKey() {
    for (String protocol : new String[] {"lpd", "lpa"}) {
      assertThrows(IllegalArgumentException.class,
          () -> new ReportConfig(protocol, "u", 4, 2, 1.0, 0), protocol);
      assertThrows(IllegalArgumentException.class,
          () -> new ReportConfig(protocol, "u", 4, 2, 1.0, 0, null, 0), protocol);
      assertThrows(IllegalArgumentException.class,
          () -> new ReportConfig(protocol, "u", 4, 2, 1.0, 0, "", 0), protocol);
      assertThrows(IllegalArgumentException.class,
          () -> new ReportConfig(protocol, "u", 4, 2, 1.0, 0, "k".repeat(257), 0), protocol);
      assertThrows(IllegalArgumentException.class,
          () -> new ReportConfig(protocol, "u", 4, 2, 1.0, 0, "\ud800", 0), protocol);
      ReportConfig ok = new ReportConfig(protocol, "u", 4, 2, 1.0, 0, "k".repeat(256), 0);
      assertEquals(1.0, ok.eps());
      assertTrue(ReportConfig.HOMOGENEOUS.contains(protocol));
    }
  }

  @Test
  void intervalsWithinWSlotsNamingTheSameUserAreRefused() {
    int w = 4;
    String high = populationUser("high", true);
    long off = Schedule.position(KEY, high) - Schedule.HALF;
    LdpClient client = new LdpClient(new ReportConfig("lpa", high, 5, w, 1.0, 0, KEY, 0));
    assertNotNull(client.answer(new Decision("app", "lpa", 10, 1.0, 1.0, off, 1), 2));
    // forged: the next intervals name it again within w slots; the ledger (real slots, window
    // w, budget E) refuses, nothing drawn, nothing spent
    for (long slot = 11; slot < 10 + w; slot++) {
      Decision again = new Decision("app", "lpa", slot, 1.0, 1.0, (off + Schedule.HALF - 1) % Schedule.HALF, 3);
      assertEquals("over_budget", assertThrows(LedgerRefusal.class, () -> client.answer(again, 2)).code());
      assertEquals("over_budget",
          assertThrows(LedgerRefusal.class, () -> client.answer(again, null)).code());
    }
    assertEquals("not_after_last", assertThrows(LedgerRefusal.class,
        () -> client.answer(new Decision("app", "lpa", 10, 1.0, 1.0, off, 1), 2)).code());
    assertEquals(List.of(new ClientLedger.Spend(10, 1.0)), client.state());
    // w slots on, the window has passed
    assertNotNull(client.answer(new Decision("app", "lpa", 10 + w, 1.0, 1.0, 0, Schedule.HALF), 2));
    assertEquals(List.of(new ClientLedger.Spend(10 + w, 1.0)), client.state());
    // kept state holds real slots: a client loading it refuses as well
    LdpClient again = new LdpClient(new ReportConfig("lpa", high, 5, w, 1.0, 0, KEY, 0));
    again.loadState(client.state());
    assertEquals("over_budget", assertThrows(LedgerRefusal.class,
        () -> again.answer(new Decision("app", "lpa", 11 + w, 1.0, 1.0, off, 1), 2)).code());
  }

  @Test
  void populationDecisionsOnTheWire() {
    Decision d = new Decision("app", "lpd", 1042, 1, 1, 0, 4096);
    String text = "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lpd\",\"slot\":1042,\"eps\":1,"
        + "\"next\":1,\"from\":0,\"size\":4096}";
    assertEquals(text, d.text());
    assertEquals(d, Decision.parse(text));
    assertEquals(d, Decision.parse(d.encode()));
    assertEquals(0, d.from());
    assertEquals(4096, d.size());
    Decision none = new Decision("app", "lpa", 3, 0, 0);
    assertEquals("{\"v\":1,\"stream\":\"app\",\"protocol\":\"lpa\",\"slot\":3,\"eps\":0,"
        + "\"next\":0,\"from\":0,\"size\":0}", none.text());
    Decision widest = new Decision("app", "lpa", 3, 2, 0, Schedule.HALF - 1, Schedule.HALF);
    assertEquals(widest, Decision.parse(widest.text()));
    // lbd and lba keep the old six keys: from and size are 0 and never written
    assertEquals(CANONICAL, new Decision("app", "lbd", 1042, 0.025, 0.05, 0, 0).text());
    String[] refused = {
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lbd\",\"slot\":1,\"eps\":0,\"next\":0,"
          + "\"from\":0,\"size\":0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lpd\",\"slot\":1,\"eps\":1,\"next\":1}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lpd\",\"slot\":1,\"eps\":1,\"next\":1,"
          + "\"size\":5,\"from\":0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lpd\",\"slot\":1,\"eps\":1,\"next\":1,"
          + "\"from\":true,\"size\":5}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lpd\",\"slot\":1,\"eps\":1,\"next\":1,"
          + "\"from\":0,\"size\":5.0}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lpd\",\"slot\":1,\"eps\":1,\"next\":1,"
          + "\"from\":-1,\"size\":5}",
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lpd\",\"slot\":1,\"eps\":0,\"next\":1,"
          + "\"from\":0,\"size\":5}",
    };
    for (String t : refused) {
      assertThrows(IllegalArgumentException.class, () -> Decision.parse(t), t);
    }
    assertThrows(IllegalArgumentException.class, () -> new Decision("app", "lbd", 1, 0.5, 0, 1, 0));
    assertThrows(IllegalArgumentException.class, () -> new Decision("app", "lba", 1, 0.5, 0, 0, 1));
    assertThrows(IllegalArgumentException.class,
        () -> new Decision("app", "lpd", 1, 1, 0, Schedule.HALF, 1));
    assertThrows(IllegalArgumentException.class,
        () -> new Decision("app", "lpd", 1, 1, 0, 0, Schedule.HALF + 1));
    assertThrows(IllegalArgumentException.class, () -> new Decision("app", "lpd", 1, 1, 0, -1, 1));
    assertThrows(IllegalArgumentException.class, () -> new Decision("app", "lpd", 1, 1, 0, 0, 0));
  }

  private static final String TREE_KEY = "tree-key";

  /** The first user {@code <prefix>-<i>} at {@code level} of the tree over d + 1 cells. */
  private static String treeUser(String prefix, int d, int level) {
    int height = Tree.height(Wire.oracleCells(d));
    for (int i = 0; i < 10_000; i++) {
      String user = prefix + "-" + i;
      if (Tree.level(Schedule.position(TREE_KEY, user), height) == level) {
        return user;
      }
    }
    throw new AssertionError("no such user");
  }

  @Test
  void treeNeedsTheKey() {
    assertThrows(IllegalArgumentException.class, () -> new ReportConfig("mtsp", "u", 6, 2, 1.0, 0));
    assertThrows(IllegalArgumentException.class,
        () -> new ReportConfig("mtsp", "u", 6, 2, 1.0, 0, null, 0));
    assertThrows(IllegalArgumentException.class,
        () -> new ReportConfig("mtsp", "u", 6, 2, 1.0, 0, "", 0));
    assertThrows(IllegalArgumentException.class,
        () -> new ReportConfig("mtsp", "u", 6, 2, 1.0, 0, "k".repeat(257), 0));
    ReportConfig ok = new ReportConfig("mtsp", "u", 6, 2, 1.0, 0, TREE_KEY, 0);
    assertEquals(0.25, ok.eps()); // E/(2w), as lbd
    assertTrue(ok.rounds());
    assertTrue(ok.tree());
    assertFalse(ok.population());
    assertTrue(ReportConfig.HOMOGENEOUS.contains("mtsp"));
    assertTrue(Schedule.isKeyed("mtsp"));
    assertTrue(new LdpClient(ok).due(0)); // every slot from the stream's first
    assertEquals("pwevent-ldp-java/0.3.0", LdpClient.CLIENT_NAME);
  }

  @Test
  void treeLevelsNodesAndIntervals() {
    assertEquals(1, Tree.height(2));
    assertEquals(2, Tree.height(3));
    assertEquals(2, Tree.height(4));
    assertEquals(3, Tree.height(5));
    assertEquals(16, Tree.height(Wire.MAX_CELLS));
    assertEquals(1, Tree.level(0, 3));
    assertEquals(1, Tree.level((Schedule.POSITIONS + 2) / 3 - 1, 3)); // 1 + floor(p h / 2^32)
    assertEquals(2, Tree.level((Schedule.POSITIONS + 2) / 3, 3));
    assertEquals(3, Tree.level(Schedule.POSITIONS - 1, 3));
    assertEquals(16, Tree.level(Schedule.POSITIONS - 1, 16));
    assertThrows(IllegalArgumentException.class, () -> Tree.level(Schedule.POSITIONS, 3));
    assertThrows(IllegalArgumentException.class, () -> Tree.level(-1, 3));
    // 7 cells (d = 6) under 8 leaves: 2, 4 and 7 real nodes
    assertEquals(List.of(2, 4, 7), List.of(Tree.levelCells(7, 3, 1), Tree.levelCells(7, 3, 2),
        Tree.levelCells(7, 3, 3)));
    assertEquals(1, Tree.nodeOf(6, 3, 1));
    assertEquals(3, Tree.nodeOf(6, 3, 2));
    assertEquals(6, Tree.nodeOf(6, 3, 3));
    assertThrows(IllegalArgumentException.class, () -> Tree.levelCells(7, 3, 4));
    List<Integer> starts = List.of(0, 2, 4, 6);
    int[] expected = {0, 0, 1, 1, 2, 2, 3, 3};
    for (int cell = 0; cell < expected.length; cell++) {
      assertEquals(expected[cell], Tree.intervalOf(cell, starts), "cell " + cell);
    }
    assertEquals(0, Tree.intervalOf(5, List.of(0)));
  }

  @Test
  @SuppressWarnings("unchecked")
  void treeReportsRunOverTheLevelThenTheIntervals() {
    int d = 6;
    int height = Tree.height(Wire.oracleCells(d));
    List<Integer> starts = List.of(0, 2, 5); // [0, 2), [2, 5), [5, 6]: 6 is "no value"
    for (int level = 1; level <= height; level++) {
      String user = treeUser("t", d, level);
      // E = 40 over w = 1: round 1 at 20, round 2 at E/2 = 20; the other bits are ~never set
      LdpClient client = new LdpClient(new ReportConfig("mtsp", user, d, 1, 40.0, 0, TREE_KEY, 0));
      int width = Tree.levelCells(Wire.oracleCells(d), height, level);
      Decision previous = null;
      int[] kept = new int[2];
      int n = 300;
      for (long slot = 0; slot < n; slot++) {
        Integer value = slot % 7 == 6 ? null : (int) (slot % 7);
        int cell = value == null ? d : value;
        String where = "level " + level + " slot " + slot;
        Map<String, Object> one = (Map<String, Object>) Json.parse(
            new String(client.report(slot, value, previous), StandardCharsets.UTF_8));
        assertEquals((long) width, one.get("cells"), where);
        assertEquals(1L, one.get("round"), where);
        String bits = (String) one.get("bits");
        assertEquals(2 * ((width + 7) / 8), bits.length(), where);
        int node = Tree.nodeOf(cell, height, level);
        for (int j = 0; j < 8 * bits.length() / 2; j++) {
          assertTrue(bit(bits, j) == 0 || j == node, where + " bit " + j);
        }
        kept[0] += bit(bits, node);
        Decision decision = new Decision("app", "mtsp", slot, 20.0, 20.0, starts);
        String text = client.answerText(decision, value);
        assertTrue(text.contains(",\"d\":6,\"cells\":3,\"oracle\":\"oue\",\"bits\":\""), text);
        Map<String, Object> two = (Map<String, Object>) Json.parse(text);
        assertEquals((long) starts.size(), two.get("cells"), where); // the intervals' number
        bits = (String) two.get("bits");
        assertEquals(2, bits.length(), where);
        int interval = Tree.intervalOf(cell, starts);
        for (int j = 0; j < 8; j++) {
          assertTrue(bit(bits, j) == 0 || j == interval, where + " round 2 bit " + j);
        }
        kept[1] += bit(bits, interval);
        previous = decision;
      }
      for (int k : kept) {
        assertEquals(0.5, k / (double) n, 5 * Math.sqrt(0.25 / n), "level " + level);
      }
      // the ledger is lbd's: virtual slots 2 slot and 2 slot + 1
      assertEquals(List.of(new ClientLedger.Spend(2 * n - 2, 20.0),
          new ClientLedger.Spend(2 * n - 1, 20.0)), client.state());
    }
  }

  @Test
  void forgedTreeDecisionsThrow() {
    int d = 6;
    CounterWords words = new CounterWords("tree");
    LdpClient client = new LdpClient(
        new ReportConfig("mtsp", treeUser("f", d, 2), d, 2, 1.0, 3, TREE_KEY, 0), words, "test");
    assertNotNull(client.report(3, 1));
    List<ClientLedger.Spend> spent = client.state();
    long drawn = words.drawn();
    // over E/2 = 0.5, with a value or without
    assertThrows(IllegalArgumentException.class,
        () -> client.answer(new Decision("app", "mtsp", 3, 0.75, 0.25, List.of(0, 4)), 1));
    assertThrows(IllegalArgumentException.class,
        () -> client.answer(new Decision("app", "mtsp", 3, 0.5000001, 0.25, List.of(0)), null));
    // a partition reaching past the d + 1 = 7 cells
    assertThrows(IllegalArgumentException.class,
        () -> client.answer(new Decision("app", "mtsp", 3, 0.5, 0.25, List.of(0, 7)), 1));
    assertThrows(IllegalArgumentException.class,
        () -> client.answer(new Decision("app", "mtsp", 3, 0.5, 0.25, List.of(0, 65535)), null));
    // another protocol's or slot's decision; round 1 asked at another budget than E/(2w)
    assertThrows(IllegalArgumentException.class,
        () -> client.answer(new Decision("app", "lbd", 3, 0.25, 0.25), 1));
    assertThrows(IllegalArgumentException.class,
        () -> client.report(4, 1, new Decision("app", "mtsp", 3, 0, 0.5)));
    assertThrows(IllegalArgumentException.class,
        () -> client.report(4, 1, new Decision("app", "mtsp", 2, 0, 0.25)));
    assertEquals(spent, client.state()); // nothing spent, nothing drawn
    assertEquals(drawn, words.drawn());
    // the last cell, "no value", may start an interval of its own
    assertTrue(client.answerText(new Decision("app", "mtsp", 3, 0.5, 0.25, List.of(0, 6)), null)
        .contains("\"cells\":2,"));
    assertNull(client.answer(new Decision("app", "mtsp", 4, 0, 0.25), 1)); // no publication
  }

  @Test
  void treeDecisionsOnTheWire() {
    Decision d = new Decision("app", "mtsp", 1042, 0.25, 0.05, List.of(0, 4, 6));
    String text = "{\"v\":1,\"stream\":\"app\",\"protocol\":\"mtsp\",\"slot\":1042,\"eps\":0.25,"
        + "\"next\":0.05,\"starts\":[0,4,6]}";
    assertEquals(text, d.text());
    assertEquals(d, Decision.parse(text));
    assertEquals(d, Decision.parse(d.encode()));
    assertEquals(d, Decision.parse(text.replace("[0,4,6]", " [ 0 , 4,\n6 ] ")));
    assertThrows(UnsupportedOperationException.class, () -> d.starts().add(8));
    Decision none = new Decision("app", "mtsp", 3, 0, 0.05);
    assertEquals(List.of(), none.starts());
    assertTrue(none.text().endsWith(",\"next\":0.05,\"starts\":[]}"), none.text());
    assertEquals(none, Decision.parse(none.text()));
    // the others keep their keys: starts empty, never written
    assertEquals(CANONICAL, new Decision("app", "lbd", 1042, 0.025, 0.05, List.of()).text());
    String[] refused = {
      text.replace("[0,4,6]", "[0,4.0,6]"),
      text.replace("[0,4,6]", "[0,false,6]"),
      text.replace("[0,4,6]", "[0,-4,6]"),
      text.replace("[0,4,6]", "[0,6,4]"),
      text.replace("[0,4,6]", "[[0],4,6]"),
      text.replace("[0,4,6]", "{\"0\":0}"),
      text.replace("[0,4,6]", "null"),
      text.replace(",\"starts\":[0,4,6]", ""),
      text.replace(",\"starts\":[0,4,6]", ",\"starts\":[0,4,6],\"from\":0"),
      text.replace("\"next\":0.05,\"starts\":[0,4,6]", "\"starts\":[0,4,6],\"next\":0.05"),
      "{\"v\":1,\"stream\":\"app\",\"protocol\":\"lpd\",\"slot\":1,\"eps\":0,\"next\":1,"
          + "\"from\":0,\"size\":0,\"starts\":[]}",
    };
    for (String t : refused) {
      assertThrows(IllegalArgumentException.class, () -> Decision.parse(t), t);
    }
    ArrayList<Integer> holed = new ArrayList<>(List.of(0, 2));
    holed.add(null);
    assertThrows(IllegalArgumentException.class,
        () -> new Decision("app", "mtsp", 1, 0.5, 0, holed));
    assertThrows(IllegalArgumentException.class, () -> new Decision("app", "mtsp", 1, 0.5, 0));
    assertThrows(IllegalArgumentException.class,
        () -> new Decision("app", "mtsp", 1, 0, 0, List.of(0)));
    assertThrows(IllegalArgumentException.class,
        () -> new Decision("app", "lba", 1, 0.5, 0, List.of(0)));
    assertThrows(IllegalArgumentException.class,
        () -> new Decision("app", "mtsp", 1, 0.5, 0, List.of(1, 2)));
    assertThrows(IllegalArgumentException.class,
        () -> new Decision("app", "mtsp", 1, 0.5, 0, List.of(0, 65536)));
    assertEquals(65536, new Decision("app", "mtsp", 1, 0.5, 0,
        IntStream.range(0, 65536).boxed().toList()).starts().size());
  }

  @Test
  void rangesOfWholeMtspIntervalsHaveBars() {
    // d = 5 value cells, intervals [0, 2), [2, 5) and the "no value" cell alone from 5
    RangeQueries.Intervals intervals = new RangeQueries.Intervals(new int[] {0, 2, 5},
        new double[] {10.0, 30.0, 4.0}, new double[] {3.0, 4.0, 12.0});
    RangeQueries.Release release = new RangeQueries.Release(
        new double[] {4.0, 6.0, 10.0, 15.0, 5.0}, new Double[] {null, null, null, null, null},
        intervals);
    List<RangeQueries.Release> one = List.of(release);
    assertEquals(new RangeQueries.Range(0, 4, 40.0, 5.0, 40.0, null),
        RangeQueries.query(one, 0, 4, 1).get(0)); // both intervals: sqrt(3^2 + 4^2)
    assertEquals(new RangeQueries.Range(2, 4, 30.0, 4.0, 30.0, null),
        RangeQueries.query(one, 2, 4, 1).get(0));
    assertEquals(3.0, RangeQueries.query(one, 0, 1, 1).get(0).std());
    // a part of an interval has no bars: its cells are shares, not estimates of their own
    assertNull(RangeQueries.query(one, 0, 0, 1).get(0).std());
    assertNull(RangeQueries.query(one, 1, 2, 1).get(0).std());
    assertNull(RangeQueries.query(one, 2, 3, 1).get(0).std());
    assertEquals(25.0, RangeQueries.query(one, 2, 3, 1).get(0).count());
    // cells estimated alone: their variances add; a cell without its own std, none
    RangeQueries.Release cells = new RangeQueries.Release(new double[] {1.0, 2.0, 3.0},
        new Double[] {3.0, 4.0, null});
    assertEquals(5.0, RangeQueries.query(List.of(cells), 0, 1, 1).get(0).std());
    assertNull(RangeQueries.query(List.of(cells), 1, 2, 1).get(0).std());
    assertNull(RangeQueries.query(List.of(new RangeQueries.Release(new double[] {1.0}, null)),
        0, 0, 1).get(0).std());
    // the arrays are copied in and out
    double[] counts = {1.0, 2.0, 3.0};
    RangeQueries.Release copied = new RangeQueries.Release(counts, null);
    counts[0] = 100.0;
    copied.counts()[1] = 100.0;
    assertArrayEquals(new double[] {1.0, 2.0, 3.0}, copied.counts());
    assertEquals(new RangeQueries.Release(new double[] {1.0, 2.0, 3.0}, null), copied);
  }

  @Test
  void periodsAndEvents() {
    List<RangeQueries.Release> releases = new ArrayList<>();
    for (double x : new double[] {1.0, 2.0, -4.0, 5.0, 8.0}) {
      releases.add(new RangeQueries.Release(new double[] {x, 0.5}, null));
    }
    List<RangeQueries.Range> got = RangeQueries.query(releases, 0, 0, 2, 1.0, 0.5);
    List<Double> periods = new ArrayList<>();
    List<Integer> events = new ArrayList<>();
    for (RangeQueries.Range r : got) {
      periods.add(r.period());
      events.add(r.event());
    }
    assertEquals(Arrays.asList(null, 3.0, -2.0, 1.0, 13.0), periods);
    // slot 2: no previous period; slot 3: 1 > 1 * max(3, 0) + 0.5 fails; slot 4: the previous
    // period -2 is clipped at 0, 13 > 0.5
    assertEquals(List.of(0, 0, 0, 0, 1), events);
    assertNull(RangeQueries.query(releases, 0, 1, 1).get(0).event()); // no ratio, no flag
    assertEquals(1.5, RangeQueries.query(releases, 0, 1, 1).get(0).count());
    assertEquals(List.of(), RangeQueries.query(List.of(), 3, 1, 9, 1.0, 0.0));
    assertThrows(IllegalArgumentException.class, () -> RangeQueries.query(releases, 0, 2, 1));
    assertThrows(IllegalArgumentException.class, () -> RangeQueries.query(releases, -1, 0, 1));
    assertThrows(IllegalArgumentException.class, () -> RangeQueries.query(releases, 1, 0, 1));
    assertThrows(IllegalArgumentException.class, () -> RangeQueries.query(releases, 0, 0, 0));
    assertThrows(IllegalArgumentException.class, () -> RangeQueries.query(releases, 0, 0, 6));
    assertEquals(5, RangeQueries.query(releases, 0, 0, 5).size());
    List<RangeQueries.Release> mixed = new ArrayList<>(releases);
    mixed.add(new RangeQueries.Release(new double[] {1.0}, null));
    assertThrows(IllegalArgumentException.class, () -> RangeQueries.query(mixed, 0, 0, 1));
    assertThrows(IllegalArgumentException.class,
        () -> new RangeQueries.Release(new double[] {1.0, 2.0}, new Double[] {1.0}));
    assertThrows(IllegalArgumentException.class,
        () -> new RangeQueries.Intervals(new int[] {0, 2}, new double[] {1.0}, new double[] {1.0}));
  }
}
