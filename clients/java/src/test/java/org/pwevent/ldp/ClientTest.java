package org.pwevent.ldp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
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

  @Test
  @SuppressWarnings("unchecked")
  void oueKeepsTheTrueBitWithOneHalf() {
    LdpClient client = new LdpClient(new ReportConfig("lbu", "u", 8, 1, 1.0, 0));
    int n = 20_000;
    int[] ones = new int[8];
    for (int s = 0; s < n; s++) {
      Map<String, Object> r = (Map<String, Object>) Json.parse(client.reportText(s, 2));
      int b = Integer.parseInt((String) r.get("bits"), 16);
      for (int j = 0; j < 8; j++) {
        ones[j] += (b >> j) & 1;
      }
    }
    double q = Oracles.oueThreshold(1.0) / (double) Oracles.WORD;
    for (int j = 0; j < 8; j++) {
      double p = j == 2 ? 0.5 : q;
      assertEquals(p, ones[j] / (double) n, 5 * Math.sqrt(p * (1 - p) / n), "bit " + j);
    }
  }

  @Test
  void refusalsAndKeptState() {
    LdpClient client = new LdpClient(new ReportConfig("plbu", "alice", 4, 2, 1.0, 0));
    assertNotNull(client.report(7, 3));
    assertNull(client.report(8, null));
    assertEquals("not_after_last", assertThrows(LedgerRefusal.class, () -> client.report(7, 1)).code());
    LdpClient again = new LdpClient(new ReportConfig("plbu", "alice", 4, 2, 0.5, 0));
    again.loadState(client.state());
    assertEquals("over_budget", assertThrows(LedgerRefusal.class, () -> again.report(8, 1)).code());
    assertNotNull(again.report(9, 1));
    assertThrows(IllegalArgumentException.class, () -> client.report(9, 4));
    assertThrows(IllegalArgumentException.class, () -> client.report(-1, 0));
    assertEquals(1, LdpClient.slotOf(1_000_999, 1_000_000, 500));
    assertEquals("pwevent.ldp-reports", LdpClient.topicName("pwevent"));
  }
}
