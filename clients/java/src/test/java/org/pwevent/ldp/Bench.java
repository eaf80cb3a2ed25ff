package org.pwevent.ldp;

/**
 * Reports randomised per second on the JVM, as the TypeScript benchmark measures them: LBU over
 * 16 value cells (OUE), PLBU over 4 (GRR), LBU over 256, each with SecureRandom and encoded to
 * UTF-8 (the oracle runs over one cell more, "no value").
 * Prints one JSON line per case. Usage: java -cp target/classes:target/test-classes
 * org.pwevent.ldp.Bench [seconds]
 */
public final class Bench {
  private Bench() {}

  public static void main(String[] args) {
    double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 2.0;
    Object[][] cases = {
      {"lbu-oue-d16", new ReportConfig("lbu", "user-42", 16, 10, 1.0, 0)},
      {"plbu-grr-d4", new ReportConfig("plbu", "user-42", 4, 2, 4.0, 0)},
      {"lbu-oue-d256", new ReportConfig("lbu", "user-42", 256, 10, 1.0, 0)},
    };
    for (Object[] c : cases) {
      ReportConfig config = (ReportConfig) c[1];
      LdpClient client = new LdpClient(config);
      long slot = 0;
      long bytes = 0;
      for (int i = 0; i < 50_000; i++, slot++) { // warm up
        bytes += client.report(slot, (int) (slot % config.d())).length;
      }
      long started = System.nanoTime();
      long reports = 0;
      double elapsed = 0;
      while (elapsed < seconds) {
        for (int i = 0; i < 10_000; i++, slot++) {
          bytes += client.report(slot, (int) (slot % config.d())).length;
        }
        reports += 10_000;
        elapsed = (System.nanoTime() - started) / 1e9;
      }
      System.out.printf("{\"language\":\"java\",\"case\":\"%s\",\"reports\":%d,\"seconds\":%.3f,"
          + "\"reports_per_s\":%.1f,\"bytes\":%d}%n", c[0], reports, elapsed, reports / elapsed, bytes);
    }
  }
}
