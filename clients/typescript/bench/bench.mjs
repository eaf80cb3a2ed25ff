// Reports randomised per second in Node: LBU over 16 value cells (OUE) and PLBU over 4 (GRR),
// each oracle running over d + 1 cells (cell d: no value), each report made with the platform
// CSPRNG and encoded to UTF-8 bytes. Prints one JSON line per case.
// Usage: npm run bench [-- seconds]
import { LdpClient } from "../dist/index.js";

const seconds = Number(process.argv[2] ?? 2);
const cases = [
  { name: "lbu-oue-d16", config: { protocol: "lbu", user: "user-42", d: 16, w: 10, E: 1 } },
  { name: "plbu-grr-d4", config: { protocol: "plbu", user: "user-42", d: 4, w: 2, E: 4 } },
  { name: "lbu-oue-d256", config: { protocol: "lbu", user: "user-42", d: 256, w: 10, E: 1 } },
];
for (const { name, config } of cases) {
  const client = new LdpClient(config);
  let slot = 0;
  let bytes = 0;
  const run = (n) => {
    for (let i = 0; i < n; i++) bytes += client.report(slot++, slot % config.d).length;
  };
  run(20000); // warm up
  const started = process.hrtime.bigint();
  let reports = 0;
  let elapsed = 0;
  while (elapsed < seconds) {
    run(10000);
    reports += 10000;
    elapsed = Number(process.hrtime.bigint() - started) / 1e9;
  }
  const line = { language: "typescript", case: name, reports, seconds: elapsed, reports_per_s: reports / elapsed };
  process.stdout.write(JSON.stringify(line) + "\n");
  if (bytes === 0) throw new Error("no report made");
}
