"""Registration at ingest speed: requirement records per second on one worker, its memory per
registered user, the first release after a restart, and dynamic declarations per second.

Starts the embedded broker and, for each ``--users`` count n, one real worker (``pwevent
worker``, ``pbd``, 16 cells, 4 partitions, ``--event-time history``) on empty topics:

1. once it is ready, n fixed requirements (three levels) are produced; registered is
   ``pwevent_requirements_total`` reaching n (polled on /metrics every 50 ms): the rate is n over
   the time from the first registration seen, and the lag is the time after the last record was
   produced; the worker's RSS before and after gives the bytes per registered user;
2. n reports of slot 0, one per user, are produced: the report ingest rate of the same worker
   (``pwevent_reports_total{outcome="accepted"}``), to compare with;
3. the worker is stopped; 100,000 reports of slot 1 and, per partition, one of slot 2 (which
   close slots 0 and 1) are produced; the worker starts again: restart-to-first-release is the
   time from its start to the first release (the decision record of slot 0), and
   close-to-release that of slot 1, from its last partial to its decision record (Kafka
   timestamps).

4. the same worker's rates from a full topic (on topics of their own): the n requirements are
   produced before it starts, then, with it stopped, the n reports; each is timed from the
   first record taken to the last, so neither is bounded by the producer.

Then ``dpbd`` on a worker of its own: n dynamic declarations, then n changed ones (every
field moves), each timed like 1. Run::

    .venv/bin/python benchmarks/bench_register.py --users 100000 1000000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench_job import timestamps  # noqa: E402

from local_kafka.embedded import EmbeddedBroker  # noqa: E402
from streams.kafka.producer import key_partition, produce_raw  # noqa: E402
from streams.kafka.topics import Topics, create_topics  # noqa: E402

SLOT_MS = 60_000
PARTS = 4
CELLS = 16
SLOT_REPORTS = 100_000


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Worker:
    """One ``pwevent worker`` process and its /metrics."""

    def __init__(self, bootstrap: str, prefix: str, mechanism: str, workdir: Path) -> None:
        self.port = _port()
        self.cmd = [sys.executable, "-m", "streams.cli", "worker", "--broker", bootstrap,
                    "--prefix", prefix, "--partitions", str(PARTS), "--stream", "b",
                    "--mechanism", mechanism, "--cells", str(CELLS), "--slot-ms", str(SLOT_MS),
                    "--data-dir", str(workdir / "data"), "--idle-close-ms", "600000",
                    "--loglevel", "warning", "--metrics-port", str(self.port),
                    "--event-time", "history"]
        self.log = workdir / "log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        """Start the process; returns when it started (perf_counter)."""
        env = dict(os.environ, PWEVENT_SECRET="bench", PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(self.cmd, stdout=self.log.open("ab"),
                                     stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        return time.perf_counter()

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except OSError as exc:
            return getattr(exc, "code", 0) or 0, ""

    def wait_ready(self, timeout: float = 120) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._get("/readyz")[0] == 200:
                return time.perf_counter()
            assert self.proc is not None and self.proc.poll() is None, self.tail()
            time.sleep(0.05)
        raise TimeoutError(self.tail())

    def metric(self, name: str) -> float:
        _, text = self._get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def wait_count(self, name: str, want: int, timeout: float = 900) -> tuple[float, float]:
        """(first time the metric was seen above zero, time it reached ``want``)."""
        first = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.metric(name)
            now = time.perf_counter()
            if value > 0 and first is None:
                first = now
            if value >= want:
                return first or now, now
            assert self.proc is not None and self.proc.poll() is None, self.tail()
            time.sleep(0.05)
        raise TimeoutError(f"{name} stuck at {self.metric(name)} of {want}\n{self.tail()}")

    def rss(self) -> int:
        """Resident set of the worker, bytes."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def fixed_requirements(n: int) -> list[tuple[bytes, bytes]]:
    """Three fixed requirement levels."""
    levels = [(10, 1.0), (20, 0.5), (40, 2.0)]
    return [(f"u{i}".encode(), orjson.dumps({"user": f"u{i}", "w": levels[i % 3][0],
                                             "E": levels[i % 3][1]})) for i in range(n)]


def dynamic_requirements(n: int, shift: int) -> list[tuple[bytes, bytes]]:
    """Dynamic declarations over ten values per field; ``shift`` moves every field."""
    return [(f"u{i}".encode(), orjson.dumps({
        "user": f"u{i}", "wB": 10 + 10 * ((i + shift) % 10), "EB": 0.5 + 0.5 * ((i + shift) % 7),
        "wF": 10 + 10 * ((i // 10 + shift) % 10), "EF": 0.5 + 0.5 * ((i // 7 + shift) % 5)}))
        for i in range(n)]


def reports(users: range, slot: int) -> list[tuple[bytes, bytes]]:
    base = slot * SLOT_MS
    return [(f"u{i}".encode(), orjson.dumps({"user": f"u{i}", "time": base + i % SLOT_MS,
                                             "value": (i + slot) % CELLS})) for i in users]


def closers(n: int, slot: int) -> list[tuple[bytes, bytes]]:
    """One report of ``slot`` on every partition (users below ``n``)."""
    out, seen = [], set()
    for i in range(n):
        p = key_partition(f"u{i}".encode(), PARTS)
        if p not in seen:
            seen.add(p)
            out += reports(range(i, i + 1), slot)
        if len(seen) == PARTS:
            return out
    return out


def produce(bootstrap: str, topic: str, records: list) -> float:
    """Produce ``records``; returns when the last was acknowledged (perf_counter)."""
    asyncio.run(produce_raw(bootstrap, topic, records, partitions=PARTS))
    return time.perf_counter()


def fixed_run(bootstrap: str, n: int) -> dict:
    prefix = f"reg{n}"
    topics = Topics(prefix=prefix, partitions=PARTS)
    asyncio.run(create_topics(bootstrap, topics.specs()))
    worker = Worker(bootstrap, prefix, "pbd", Path(tempfile.mkdtemp(prefix="pwevent-reg-")))
    reqs = fixed_requirements(n)
    slot0 = reports(range(n), 0)
    later = reports(range(min(n, SLOT_REPORTS)), 1) + closers(n, 2)
    worker.start()
    try:
        worker.wait_ready()
        time.sleep(2.0)
        rss0 = worker.rss()
        t0 = time.perf_counter()
        produced = produce(bootstrap, topics.requirements, reqs)
        first, done = worker.wait_count("pwevent_requirements_total", n)
        rss1 = worker.rss()
        r0 = time.perf_counter()
        produce(bootstrap, topics.reports, slot0)
        rfirst, rdone = worker.wait_count('pwevent_reports_total{outcome="accepted"}', n)
        rss2 = worker.rss()
    finally:
        worker.stop()
    produce(bootstrap, topics.reports, later)
    started = worker.start()
    try:
        ready = worker.wait_ready()
        rel: list = []
        deadline = time.monotonic() + 300
        while len(rel) < 2 and time.monotonic() < deadline:
            rel = [(ts, doc) for ts, doc in asyncio.run(timestamps(bootstrap, topics.decisions,
                                                                  10**6, 2))
                   if "published" in doc and doc.get("slot") in (0, 1)]
        partials = asyncio.run(timestamps(bootstrap, topics.slot_partials, 10**6, 3))
    finally:
        worker.stop()
    wall_start = time.time() - (time.perf_counter() - started)  # the restart, epoch s
    released = {doc["slot"]: ts / 1000.0 for ts, doc in rel}
    closed1 = max(ts for ts, m in partials if m.get("closed_through") == 1) / 1000.0
    return {"users": n, "produce_s": produced - t0, "register_rate": n / max(done - first, 0.05),
            "after_last_produced_s": done - produced, "report_rate": n / max(rdone - rfirst, 0.05),
            "report_produce_s": rdone - r0, "rss_empty_mb": rss0 / 2**20,
            "rss_registered_mb": rss1 / 2**20, "rss_after_slot_mb": rss2 / 2**20,
            "bytes_per_user": (rss1 - rss0) / n, "ready_s": ready - started,
            "restart_to_first_release_s": released[0] - wall_start,
            "slot1_close_to_release_s": released[1] - closed1}


def dynamic_run(bootstrap: str, n: int, mechanism: str) -> dict:
    prefix = f"regdyn{n}"
    topics = Topics(prefix=prefix, partitions=PARTS)
    asyncio.run(create_topics(bootstrap, topics.specs()))
    worker = Worker(bootstrap, prefix, mechanism, Path(tempfile.mkdtemp(prefix="pwevent-reg-")))
    worker.start()
    try:
        worker.wait_ready()
        time.sleep(2.0)
        rss0 = worker.rss()
        produced = produce(bootstrap, topics.requirements, dynamic_requirements(n, 0))
        first, done = worker.wait_count("pwevent_requirements_total", n)
        rss1 = worker.rss()
        changed_at = produce(bootstrap, topics.requirements, dynamic_requirements(n, 3))
        cfirst, cdone = worker.wait_count("pwevent_requirements_total", 2 * n)
    finally:
        worker.stop()
    return {"users": n, "mechanism": mechanism, "declare_rate": n / max(done - first, 0.05),
            "after_last_produced_s": done - produced, "change_rate": n / max(cdone - cfirst, 0.05),
            "change_after_last_produced_s": cdone - changed_at,
            "bytes_per_user": (rss1 - rss0) / n}


def registry_bytes(n: int, mechanism: str) -> float:
    """Bytes per user of one partition's registry of ``n`` users, in this process (traced
    allocations, the records themselves excluded)."""
    import tracemalloc

    from streams.job.config import JobConfig
    from streams.job.roles import make_registry

    config = JobConfig(mechanism=mechanism, partitions=1)
    recs = fixed_requirements(n) if mechanism == "pbd" else dynamic_requirements(n, 0)
    keys, values = [k for k, _ in recs], [v for _, v in recs]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    reg = make_registry(config, 0)
    for i in range(0, n, 20_000):
        reg.apply_batch(keys[i:i + 20_000], values[i:i + 20_000])
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(reg.users) == n
    return size / n


def registry_speed(n: int, batch: int = 20_000) -> dict:
    """In this process, one partition's ``pbd`` registry of ``n`` users: requirement records
    applied per second (batches of ``batch``), and report users looked up per second (the
    accumulator's batch lookup; half of them unknown)."""
    from streams.job.config import JobConfig
    from streams.job.roles import make_registry

    recs = fixed_requirements(n)
    keys, values = [k for k, _ in recs], [v for _, v in recs]
    reg = make_registry(JobConfig(mechanism="pbd", partitions=1), 0)
    t = time.perf_counter()
    for i in range(0, n, batch):
        reg.apply_batch(keys[i:i + batch], values[i:i + batch])
    applied = time.perf_counter() - t
    names = [f"u{i}" for i in range(0, 2 * n, 2)]
    t = time.perf_counter()
    for i in range(0, n, batch):
        reg.lookup(names[i:i + batch])
    looked = time.perf_counter() - t
    return {"users": n, "applies_per_s": n / applied, "lookups_per_s": n / looked}


def full_topic_run(bootstrap: str, n: int) -> dict:
    """The worker's own rates, not bounded by a producer: the n requirements are produced
    before the worker starts, and timed from the first registration to the last; the worker
    is stopped, the n reports of slot 0 produced, and it starts again, timed the same way."""
    prefix = f"regfull{n}"
    topics = Topics(prefix=prefix, partitions=PARTS)
    asyncio.run(create_topics(bootstrap, topics.specs()))
    worker = Worker(bootstrap, prefix, "pbd", Path(tempfile.mkdtemp(prefix="pwevent-reg-")))

    def drain(counter: str) -> tuple[float, float]:
        """Start the worker on the full topic, time it through ``n`` of ``counter``, stop it."""
        worker.start()
        try:
            worker.wait_ready()
            return worker.wait_count(counter, n)
        finally:
            worker.stop()

    produce(bootstrap, topics.requirements, fixed_requirements(n))
    first, done = drain("pwevent_requirements_total")
    produce(bootstrap, topics.reports, reports(range(n), 0))
    rfirst, rdone = drain('pwevent_reports_total{outcome="accepted"}')
    return {"users": n, "register_rate": n / max(done - first, 0.05),
            "report_rate": n / max(rdone - rfirst, 0.05)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--mechanism", default="dpbd", choices=("dpbd", "dpba"))
    args = parser.parse_args()
    rows, dyn = [], []
    top = max(args.users)
    own = {m: registry_bytes(top, m) for m in ("pbd", args.mechanism)}
    print(f"registry alone, {top:,} users: " + ", ".join(
        f"{m} {b:.0f} bytes/user" for m, b in own.items()), flush=True)
    speed = registry_speed(top)
    print(f"registry alone, {top:,} users: {speed['applies_per_s']:,.0f} records applied/s, "
          f"{speed['lookups_per_s']:,.0f} report users looked up/s", flush=True)
    full = []
    with EmbeddedBroker() as broker:
        for n in args.users:
            rows.append(fixed_run(broker.bootstrap, n))
            print(orjson.dumps(rows[-1]).decode(), flush=True)
            full.append(full_topic_run(broker.bootstrap, n))
            print(orjson.dumps(full[-1]).decode(), flush=True)
        n = max(args.users)
        dyn.append(dynamic_run(broker.bootstrap, n, args.mechanism))
        print(orjson.dumps(dyn[-1]).decode(), flush=True)
    print("| users | registered /s | after last produced s | reports /s | registered/reports "
          "| RSS empty MB | RSS registered MB | bytes/user | ready s | restart to first release s"
          " | slot close to release s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['users']:,} | {r['register_rate']:,.0f} | {r['after_last_produced_s']:.1f} "
              f"| {r['report_rate']:,.0f} | {r['register_rate'] / r['report_rate']:.0%} "
              f"| {r['rss_empty_mb']:.0f} | {r['rss_registered_mb']:.0f} "
              f"| {r['bytes_per_user']:.0f} | {r['ready_s']:.1f} "
              f"| {r['restart_to_first_release_s']:.1f} | {r['slot1_close_to_release_s']:.2f} |")
    for f in full:
        print(f"from a full topic, {f['users']:,} users: registered {f['register_rate']:,.0f}/s, "
              f"reports {f['report_rate']:,.0f}/s, "
              f"{f['register_rate'] / f['report_rate']:.0%}")
    for d in dyn:
        print(f"{d['mechanism']}, {d['users']:,} users: declarations {d['declare_rate']:,.0f}/s "
              f"({d['after_last_produced_s']:.1f} s after the last), changed declarations "
              f"{d['change_rate']:,.0f}/s ({d['change_after_last_produced_s']:.1f} s after the "
              f"last), {d['bytes_per_user']:.0f} bytes/user")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
