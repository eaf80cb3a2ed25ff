"""What an idle consumer costs on the embedded broker, with and without fetch pacing.

The embedded broker answers a fetch that finds nothing at once instead of holding it for the
request's wait, so an unpaced idle consumer sends fetches back to back.
``streams/kafka/fetch_pacing.py`` waits such answers out, for up to ``PACE_S`` at first and up to
``MAX_PACE_S`` once the consumer has stayed idle. This measures, in
alternating rounds on one broker, an idle consumer of a 4-partition topic with pacing and with
aiokafka's own send (fetches per second, CPU seconds per second of this process), then the CPU
share of one idle ``pwevent worker`` (paced, as every pwevent process is) and of the broker.

Run: ``.venv/bin/python benchmarks/bench_idle.py [--seconds 5] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from aiokafka import AIOKafkaConsumer  # noqa: E402
from aiokafka.client import AIOKafkaClient  # noqa: E402
from jobkit import config, setup_topics, start_worker, stop_worker, wait_for_assignment  # noqa: E402

from local_kafka.embedded import EmbeddedBroker  # noqa: E402
from streams.kafka.settings import client_options  # noqa: E402
from streams.kafka.topics import TopicSpec, create_topics  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def idle_consumer(bootstrap: str, seconds: float) -> tuple[float, float]:
    """Fetches per second and CPU seconds per second of an idle consumer."""
    consumer = AIOKafkaConsumer("idle", bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="latest", **client_options())
    await consumer.start()
    try:
        await consumer.getmany(timeout_ms=500)
        sends = 0
        inner = consumer._client.send

        async def counting(node_id, request, **kw):
            nonlocal sends
            sends += getattr(request, "API_KEY", None) == 1
            return await inner(node_id, request, **kw)

        consumer._client.send = counting
        cpu, wall = time.process_time(), time.monotonic()
        await consumer.getmany(timeout_ms=int(seconds * 1000))
        wall = time.monotonic() - wall
        return sends / wall, (time.process_time() - cpu) / wall
    finally:
        await consumer.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="length of one idle round")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each kind, alternating")
    args = ap.parse_args()
    paced = AIOKafkaClient.send
    with EmbeddedBroker() as broker:
        asyncio.run(create_topics(broker.bootstrap, [TopicSpec("idle", "idle", 4)]))
        results: dict[str, list[tuple[float, float]]] = {"paced": [], "unpaced": []}
        for _ in range(args.rounds):
            for kind in ("paced", "unpaced"):
                AIOKafkaClient.send = paced if kind == "paced" else paced.unpaced
                try:
                    results[kind].append(asyncio.run(idle_consumer(broker.bootstrap, args.seconds)))
                finally:
                    AIOKafkaClient.send = paced
        for kind, rows in results.items():
            fetches = statistics.median(r[0] for r in rows)
            cpu = statistics.median(r[1] for r in rows)
            print(f"idle consumer, {kind:8s}: {fetches:7.0f} fetches/s, {cpu:.3f} CPU s/s")
        ratio = (statistics.median(r[1] for r in results["unpaced"])
                 / statistics.median(r[1] for r in results["paced"]))
        print(f"CPU unpaced / paced: {ratio:.1f}x")

        cfg = config("idle-worker")
        topics = setup_topics(broker.bootstrap, cfg)
        with tempfile.TemporaryDirectory() as tmp:
            worker = start_worker(broker.bootstrap, cfg, Path(tmp) / "data", Path(tmp) / "log")
            try:
                wait_for_assignment(broker.bootstrap, cfg, topics.reports, 1, timeout=60)
                time.sleep(2)
                pids = {"worker": worker.pid, "broker": broker.pid}
                before = {k: cpu_seconds(p) for k, p in pids.items()}
                time.sleep(4 * args.seconds)
                for k, p in pids.items():
                    share = (cpu_seconds(p) - before[k]) / (4 * args.seconds)
                    print(f"idle pwevent worker on the embedded broker: {k} {share:.3f} CPU s/s")
            finally:
                stop_worker(worker)


if __name__ == "__main__":
    main()
