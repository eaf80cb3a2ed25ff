package org.pwevent.ldp;

import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** The shared vectors (clients/vectors/ldp-vectors.json), reproduced in Java. */
class VectorsTest {
  private static Map<String, Object> vectors;

  @BeforeAll
  @SuppressWarnings("unchecked")
  static void load() throws IOException {
    String path = System.getProperty("ldp.vectors", "../vectors/ldp-vectors.json");
    vectors = (Map<String, Object>) Json.parse(Files.readString(Path.of(path), StandardCharsets.UTF_8));
  }

  @SuppressWarnings("unchecked")
  private static List<Map<String, Object>> section(String name) {
    return (List<Map<String, Object>>) vectors.get(name);
  }

  private static double num(Object o) {
    return ((Number) o).doubleValue();
  }

  private static int integer(Object o) {
    return Math.toIntExact((Long) o);
  }

  private static long whole(Object o) {
    return (Long) o;
  }

  @SuppressWarnings("unchecked")
  private static ReportConfig config(Map<String, Object> c) {
    Object start = c.getOrDefault("start", 0L);
    Object rotate = c.getOrDefault("rotate", 0L);
    return new ReportConfig((String) c.get("protocol"), (String) c.get("user"),
        integer(c.get("d")), integer(c.get("w")), num(c.get("E")), whole(start),
        (String) c.getOrDefault("lpu_key", ""), integer(rotate));
  }

  @SuppressWarnings("unchecked")
  private static List<ClientLedger.Spend> spends(Object o) {
    List<ClientLedger.Spend> out = new ArrayList<>();
    for (Object pair : (List<Object>) o) {
      List<Object> p = (List<Object>) pair;
      out.add(new ClientLedger.Spend(whole(p.get(0)), num(p.get(1))));
    }
    return out;
  }

  @Test
  @SuppressWarnings("unchecked")
  void counterWords() {
    Map<String, Object> w = (Map<String, Object>) vectors.get("words");
    CounterWords words = new CounterWords((String) w.get("seed"));
    for (Object expected : (List<Object>) w.get("first")) {
      assertEquals(whole(expected), words.nextWord());
    }
  }

  @Test
  void portableExpBitForBit() {
    for (Map<String, Object> v : section("exp")) {
      long bits = Double.doubleToRawLongBits(Oracles.portableExp(num(v.get("x"))));
      assertEquals(v.get("bits"), String.format("%016x", bits), "exp(" + v.get("x") + ")");
    }
  }

  @Test
  void thresholds() {
    for (Map<String, Object> t : section("thresholds")) {
      double eps = num(t.get("eps"));
      int d = integer(t.get("d"));
      assertEquals(whole(t.get("oue")), Oracles.oueThreshold(eps), "oue " + eps);
      assertEquals(whole(t.get("grr")), Oracles.grrKeepThreshold(eps, d), "grr " + eps + " " + d);
      assertEquals(t.get("plbu_grr"), Oracles.plbuUsesGrr(eps, d), "plbu " + eps + " " + d);
    }
  }

  @Test
  void numbers() {
    for (Map<String, Object> n : section("numbers")) {
      assertEquals(n.get("text"), Wire.formatNumber(num(n.get("x"))), String.valueOf(n.get("x")));
    }
  }

  @Test
  void lpuGroups() {
    for (Map<String, Object> g : section("lpu_groups")) {
      assertEquals(integer(g.get("group")), Schedule.lpuPhase((String) g.get("key"),
          (String) g.get("user"), integer(g.get("w")), whole(g.get("epoch"))), g.toString());
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  void positions() {
    List<Map<String, Object>> cases = section("positions");
    assertTrue(!cases.isEmpty(), "no positions in the vectors: regenerate them");
    for (Map<String, Object> p : cases) {
      long position = whole(p.get("position"));
      assertEquals(position, Schedule.position((String) p.get("key"), (String) p.get("user")),
          p.toString());
      for (Object o : (List<Object>) p.get("phases")) {
        List<Object> pair = (List<Object>) o;
        Object phase = pair.get(1);
        assertEquals(phase == null ? null : integer(phase), Schedule.phase(position,
            integer(pair.get(0))), p + " w " + pair.get(0));
      }
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  void treeLevels() {
    List<Map<String, Object>> cases = section("tree_levels");
    assertTrue(cases != null && !cases.isEmpty(), "no tree levels in the vectors: regenerate them");
    for (Map<String, Object> t : cases) {
      int cells = Wire.oracleCells(integer(t.get("d")));
      int height = Tree.height(cells);
      assertEquals(integer(t.get("height")), height, t.toString());
      int level = Tree.level(Schedule.position((String) t.get("key"), (String) t.get("user")),
          height);
      assertEquals(integer(t.get("level")), level, t.toString());
      List<Object> widths = (List<Object>) t.get("widths");
      assertEquals(height, widths.size(), t.toString());
      for (int l = 1; l <= height; l++) {
        assertEquals(integer(widths.get(l - 1)), Tree.levelCells(cells, height, l),
            t + " level " + l);
      }
      for (Object o : (List<Object>) t.get("nodes")) {
        List<Object> pair = (List<Object>) o;
        assertEquals(integer(pair.get(1)), Tree.nodeOf(integer(pair.get(0)), height, level),
            t + " cell " + pair.get(0));
      }
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  void grrDraws() {
    for (Map<String, Object> g : section("grr_draws")) {
      List<Object> given = (List<Object>) g.get("words");
      int[] used = {0};
      WordSource words = () -> whole(given.get(used[0]++));
      assertEquals(integer(g.get("out")), Oracles.grrCell(integer(g.get("cell")),
          integer(g.get("d")), whole(g.get("keep")), words), g.toString());
      assertEquals(integer(g.get("used")), used[0]);
    }
  }

  private static double[] doubles(Object o) {
    @SuppressWarnings("unchecked")
    List<Object> list = (List<Object>) o;
    double[] out = new double[list.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = num(list.get(i));
    }
    return out;
  }

  /** A release of "query_releases" as the queries read it. */
  @SuppressWarnings("unchecked")
  private static RangeQueries.Release release(Map<String, Object> r) {
    Double[] std = null;
    if (r.get("std") != null) {
      List<Object> list = (List<Object>) r.get("std");
      std = new Double[list.size()];
      for (int i = 0; i < std.length; i++) {
        std[i] = list.get(i) == null ? null : num(list.get(i));
      }
    }
    RangeQueries.Intervals intervals = null;
    if (r.get("intervals") != null) {
      Map<String, Object> m = (Map<String, Object>) r.get("intervals");
      List<Object> starts = (List<Object>) m.get("starts");
      intervals = new RangeQueries.Intervals(
          starts.stream().mapToInt(VectorsTest::integer).toArray(), doubles(m.get("counts")),
          doubles(m.get("std")));
    }
    return new RangeQueries.Release(doubles(r.get("counts")), std, intervals);
  }

  /** Null or a double's bits, so that equality is bit for bit. */
  private static Long bits(Object o) {
    return o == null ? null : Double.doubleToRawLongBits(((Number) o).doubleValue());
  }

  @Test
  void rangeQueries() {
    List<RangeQueries.Release> releases = new ArrayList<>();
    for (Map<String, Object> r : section("query_releases")) {
      releases.add(release(r));
    }
    List<Map<String, Object>> cases = section("range_queries");
    assertTrue(cases != null && !cases.isEmpty(), "no range queries in the vectors: regenerate them");
    assertEquals(6, releases.size());
    int errors = 0;
    int events = 0;
    for (Map<String, Object> c : cases) {
      int a = integer(c.get("from"));
      int b = integer(c.get("to"));
      int delta = integer(c.get("delta"));
      Double ratio = c.get("ratio") == null ? null : num(c.get("ratio"));
      double margin = num(c.get("margin"));
      String where = c.toString();
      if (c.containsKey("error")) {
        assertEquals(Boolean.TRUE, c.get("error"), where);
        assertThrows(IllegalArgumentException.class,
            () -> RangeQueries.query(releases, a, b, delta, ratio, margin), where);
        errors++;
        continue;
      }
      @SuppressWarnings("unchecked")
      List<Map<String, Object>> ranges = (List<Map<String, Object>>) c.get("ranges");
      List<RangeQueries.Range> got = RangeQueries.query(releases, a, b, delta, ratio, margin);
      assertEquals(ranges.size(), got.size(), where);
      for (int i = 0; i < got.size(); i++) {
        Map<String, Object> want = ranges.get(i);
        RangeQueries.Range range = got.get(i);
        String at = where + " release " + i;
        assertEquals(integer(want.get("from")), range.from(), at);
        assertEquals(integer(want.get("to")), range.to(), at);
        assertEquals(bits(want.get("count")), bits(range.count()), at + " count");
        assertEquals(bits(want.get("std")), bits(range.std()), at + " std");
        assertEquals(bits(want.get("period")), bits(range.period()), at + " period");
        assertEquals(ratio != null, want.containsKey("event"), at);
        assertEquals(want.get("event") == null ? null : integer(want.get("event")), range.event(),
            at + " event");
        events += range.event() == null ? 0 : range.event();
      }
    }
    assertTrue(errors > 0 && events > 0, "the vectors hold no refused query or no event");
  }

  @Test
  void badConfigs() {
    for (Map<String, Object> c : section("bad_configs")) {
      assertThrows(IllegalArgumentException.class, () -> config(c), c.toString());
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  void clients() {
    int noValueSent = 0;
    for (Map<String, Object> c : section("clients")) {
      CounterWords words = new CounterWords((String) c.get("seed"));
      LdpClient client = new LdpClient(config((Map<String, Object>) c.get("config")), words,
          (String) c.get("client"));
      if (c.get("state") != null) {
        client.loadState(spends(c.get("state")));
      }
      for (Object o : (List<Object>) c.get("steps")) {
        Map<String, Object> step = (Map<String, Object>) o;
        String where = c.get("name") + " slot " + step.get("slot");
        long slot = whole(step.get("slot"));
        Integer value = step.get("value") == null ? null : integer(step.get("value"));
        if (step.containsKey("refused")) {
          LedgerRefusal refusal = assertThrows(LedgerRefusal.class, () -> client.report(slot, value), where);
          assertEquals(step.get("refused"), refusal.code(), where);
        } else {
          byte[] bytes = client.report(slot, value);
          if (step.get("report") == null) {
            assertNull(bytes, where);
          } else {
            assertEquals(step.get("report"), new String(bytes, StandardCharsets.UTF_8), where);
            noValueSent += value == null ? 1 : 0;
          }
        }
        assertEquals(spends(step.get("spends")), client.state(), where);
        assertEquals(whole(step.get("words")), words.drawn(), where);
      }
    }
    assertTrue(noValueSent > 0, "the vectors send no report without a value: regenerate them");
  }

  @Test
  @SuppressWarnings("unchecked")
  void decisions() {
    for (Map<String, Object> c : section("decisions")) {
      String text = (String) c.get("text");
      byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
      Map<String, Object> read = (Map<String, Object>) c.get("read");
      if (read == null) {
        assertThrows(IllegalArgumentException.class, () -> Decision.parse(text), text);
        assertThrows(IllegalArgumentException.class, () -> Decision.parse(bytes), text);
        continue;
      }
      List<Integer> starts = new ArrayList<>();
      for (Object x : (List<Object>) read.get("starts")) {
        starts.add(integer(x));
      }
      Decision expected = new Decision((String) read.get("stream"), (String) read.get("protocol"),
          whole(read.get("slot")), num(read.get("eps")), num(read.get("next")),
          whole(read.get("from")), whole(read.get("size")), starts);
      assertEquals(expected, Decision.parse(text), text);
      assertEquals(expected, Decision.parse(bytes), text);
      assertEquals(expected, Decision.parse(expected.encode()), text); // encode reads back
      assertEquals(text, expected.text(), text); // the vectors write them canonically
    }
  }

  @Test
  @SuppressWarnings("unchecked")
  void roundClients() {
    for (Map<String, Object> c : section("round_clients")) {
      CounterWords words = new CounterWords((String) c.get("seed"));
      LdpClient client = new LdpClient(config((Map<String, Object>) c.get("config")), words,
          (String) c.get("client"));
      int i = 0;
      for (Object o : (List<Object>) c.get("steps")) {
        Map<String, Object> step = (Map<String, Object>) o;
        int round = integer(step.get("round"));
        long slot = whole(step.get("slot"));
        String where = c.get("name") + " step " + i++ + " round " + round + " slot " + slot;
        Integer value = step.get("value") == null ? null : integer(step.get("value"));
        String text = (String) step.get("decision");
        Decision decision = text == null ? null : Decision.parse(text);
        if (decision != null) {
          assertEquals(text, decision.text(), where); // the vectors write them canonically
        }
        Executable call;
        Object[] out = new Object[1];
        if (round == 1) {
          call = () -> out[0] = client.report(slot, value, decision);
        } else {
          assertEquals(2, round, where);
          assertEquals(slot, decision.slot(), where);
          call = () -> out[0] = client.answer(decision, value);
        }
        if (step.containsKey("refused")) {
          LedgerRefusal refusal = assertThrows(LedgerRefusal.class, call, where);
          assertEquals(step.get("refused"), refusal.code(), where);
        } else if (step.containsKey("error")) {
          assertEquals(Boolean.TRUE, step.get("error"), where);
          assertThrows(IllegalArgumentException.class, call, where);
        } else {
          assertDoesNotThrow(call, where);
          if (step.get("report") == null) {
            assertNull(out[0], where);
          } else {
            assertEquals(step.get("report"), new String((byte[]) out[0], StandardCharsets.UTF_8), where);
          }
        }
        assertEquals(spends(step.get("spends")), client.state(), where);
        assertEquals(whole(step.get("words")), words.drawn(), where);
      }
    }
  }
}
