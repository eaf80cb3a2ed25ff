"""Reports randomised per second by the local-DP clients: TypeScript in Node (target >= 1e5/s),
Python and Java, in one run on this machine, and the ratios between them.

Each case makes one user's reports slot after slot with the platform's CSPRNG, encoded to bytes
(what an app hands its producer): LBU over 16 cells (OUE), PLBU over 4 (GRR), LBU over 256
(OUE). TypeScript runs ``npm run bench`` in clients/typescript, Java the ``Bench`` class of
clients/java's test classes (both built first), Python :class:`streams.ldp_client.LdpClient`.
The languages run one after another, never at once (the machine has 2 cores).

Run: ``.venv/bin/python benchmarks/bench_ldp_clients.py [--seconds 2] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mechanisms.local import ReportConfig  # noqa: E402
from streams.ldp_client import LdpClient  # noqa: E402

CASES = {
    "lbu-oue-d16": ReportConfig("lbu", "user-42", d=16, w=10, E=1.0),
    "plbu-grr-d4": ReportConfig("plbu", "user-42", d=4, w=2, E=4.0),
    "lbu-oue-d256": ReportConfig("lbu", "user-42", d=256, w=10, E=1.0),
}
TARGET_TS = 1e5


def python_rates(seconds: float) -> list[dict]:
    """The Python client's reports per second, per case."""
    out = []
    for name, config in CASES.items():
        client, slot = LdpClient(config), 0
        for _ in range(2000):  # warm up
            client.report(slot, slot % config.d)
            slot += 1
        reports, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            for _ in range(1000):
                client.report(slot, slot % config.d)
                slot += 1
            reports += 1000
        out.append({"language": "python", "case": name, "reports": reports,
                    "seconds": elapsed, "reports_per_s": reports / elapsed})
    return out


def lines(command: list[str], where: Path) -> list[dict]:
    """The JSON lines a benchmark command prints."""
    done = subprocess.run(command, cwd=where, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> int:
    """Measure, print a table and the ratios; 1 when TypeScript misses its target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per case and language")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    ts_dir, java_dir = ROOT / "clients" / "typescript", ROOT / "clients" / "java"
    subprocess.run(["mvn", "-q", "-B", "-o", "test-compile"], cwd=java_dir, check=True,
                   capture_output=True)
    rows = lines(["npm", "run", "--silent", "bench", "--", str(args.seconds)], ts_dir)
    rows += python_rates(args.seconds)
    rows += lines(["java", "-cp", "target/classes:target/test-classes", "org.pwevent.ldp.Bench",
                   str(args.seconds)], java_dir)
    rate = {(r["language"], r["case"]): r["reports_per_s"] for r in rows}
    print(f"{'case':<14} {'typescript':>12} {'python':>12} {'java':>12} {'ts/py':>7} "
          f"{'java/ts':>8}")
    for case in CASES:
        ts, py, java = (rate[(lang, case)] for lang in ("typescript", "python", "java"))
        print(f"{case:<14} {ts:>12,.0f} {py:>12,.0f} {java:>12,.0f} {ts / py:>7.1f} "
              f"{java / ts:>8.2f}")
    worst = min(rate[("typescript", case)] for case in CASES)
    print(f"TypeScript's slowest case: {worst:,.0f} reports/s (target {TARGET_TS:,.0f}/s): "
          f"{'met' if worst >= TARGET_TS else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if worst >= TARGET_TS else 1


if __name__ == "__main__":
    sys.exit(main())
