"""Running the Kafka job in tests: a worker process, producing, and reading topics."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from forked_workers import PROGRAM_LOAD_S, Process, start_command

from local_kafka.embedded import broker_binary, free_port
from streams.job.config import JobConfig
from streams.job.partitions.accumulator import watermark_record
from streams.job.pipeline import InProcessJob
from streams.job.worker.membership import describe_group
from streams.kafka.consumer_stop import stop_consumer
from streams.kafka.offsets import read_topic, wait_consumed
from streams.kafka.producer import RawProducer, key_partition
from streams.kafka.settings import ISOLATION_LEVEL
from streams.kafka.topics import Topics, create_topics

SECRET = "test-secret"


def config(prefix: str, **kw) -> JobConfig:
    """A small job: 2 partitions, 1-second slots, 3 cells."""
    base = dict(stream="s", mechanism="pbd", domain={"kind": "cells", "size": 3}, slot_ms=1000,
                partitions=2, secret=SECRET, prefix=prefix, idle_close_ms=800,
                event_time="history")  # the tests replay history from the epoch on
    base.update(kw)
    return JobConfig(**base)


def setup_topics(bootstrap: str, cfg: JobConfig) -> Topics:
    """Create the job's topics."""
    topics = Topics(prefix=cfg.prefix, partitions=cfg.partitions)
    asyncio.run(create_topics(bootstrap, topics.specs()))
    return topics


def start_worker(bootstrap: str, cfg: JobConfig, data_dir: Path, log: Path,
                 *extra: str, load_s: float = 0.0) -> Process:
    """``pwevent worker`` as a child process with the job's settings (and ``extra`` flags),
    forked from the tests' fork server, running after ``load_s`` seconds
    (:mod:`forked_workers`)."""
    args = ["worker", "--broker", bootstrap,
            "--prefix", cfg.prefix, "--partitions", str(cfg.partitions), "--stream", cfg.stream,
            "--mechanism", cfg.mechanism, "--cells", str(cfg.d), "--slot-ms", str(cfg.slot_ms),
            "--lateness-ms", str(cfg.lateness_ms), "--idle-close-ms", str(cfg.idle_close_ms),
            "--event-time", cfg.event_time,
            *([] if cfg.horizon_ms is None else ["--horizon-ms", str(cfg.horizon_ms)]),
            "--data-dir", str(data_dir), "--loglevel", "info", "--metrics-port", "0", *extra]
    return start_command(args, dict(os.environ, PWEVENT_SECRET=cfg.secret), log, load_s)


def group_assignment(bootstrap: str, cfg: JobConfig, topic: str) -> dict[str, set[int]] | None:
    """The job's consumer group as the broker describes it: each member's partitions of
    ``topic`` (members without any included); ``None`` while the group is rebalancing."""
    group = asyncio.run(describe_group(bootstrap, f"pwevent-{cfg.prefix}-{cfg.stream}", 30))
    if group.state != "Stable":
        return None
    return {m.member_id: set(m.partitions.get(topic, ())) for m in group.members}


def wait_for_assignment(bootstrap: str, cfg: JobConfig, topic: str, members: int,
                        timeout: float) -> dict[str, set[int]] | None:
    """Poll the group until it is stable with ``members`` members, each holding at least one
    partition of ``topic``, which together cover every partition; the last description seen
    (``None``: never stable) when that does not happen within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        got = group_assignment(bootstrap, cfg, topic)
        if got is not None:
            seen = got
            if len(got) == members and all(got.values()) \
                    and set().union(*got.values()) == set(range(cfg.partitions)):
                return got
        time.sleep(0.3)
    return seen


def stop_worker(proc: Process, kill: bool = False) -> None:
    """Stop a worker we started: SIGKILL, or SIGTERM with a SIGKILL fallback."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def stop_workers(procs: list[Process]) -> None:
    """SIGTERM every worker still running at once, then wait for each (SIGKILL after 30 s)."""
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    for proc in running:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def instance_held(bootstrap: str, cfg: JobConfig, topic: str) -> dict[str, set[int]] | None:
    """The partitions of ``topic`` each member of the job's group holds, by group instance id;
    ``None`` while the group is not stable."""
    group = asyncio.run(describe_group(bootstrap, cfg.app_id()))
    if group.state != "Stable":
        return None
    return {m.instance_id or m.member_id: set(m.partitions.get(topic, ())) for m in group.members}


class Workers:
    """Worker processes of one job by name, each with a data directory, hence a group identity,
    of its own and a log. :meth:`supervise` starts again a worker that exited by itself, as its
    supervisor would, and records the exit with the reason its log gives."""

    def __init__(self, bootstrap: str, cfg: JobConfig, root: Path) -> None:
        self.bootstrap, self.cfg, self.root = bootstrap, cfg, root
        root.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, Process] = {}
        self.exits: list[tuple[str, int, str]] = []  # (name, exit status, reason)
        self._log_start: dict[str, int] = {}
        self.extra: tuple[str, ...] = ()  # further worker flags

    def log_path(self, name: str) -> Path:
        return self.root / f"worker-{name}.log"

    def start(self, name: str) -> None:
        log = self.log_path(name)
        self._log_start[name] = log.stat().st_size if log.exists() else 0
        # at a real worker's pace: killed and started again is what these workers are for
        self.procs[name] = start_worker(self.bootstrap, self.cfg, self.root / f"data-{name}", log,
                                        *self.extra, load_s=PROGRAM_LOAD_S)

    def kill(self, name: str) -> None:
        """SIGKILL the worker: it leaves its member in the group."""
        stop_worker(self.procs[name], kill=True)

    def supervise(self) -> None:
        """Start again every worker that exited though nobody stopped it."""
        for name, proc in list(self.procs.items()):
            if proc.poll() is not None:
                self.exits.append((name, proc.returncode, self.reason(name)))
                self.start(name)

    def reason(self, name: str) -> str:
        """The last error line the worker's current run logged (a logged error, or the one line
        of a refusal to start)."""
        with self.log_path(name).open("rb") as fh:
            fh.seek(self._log_start.get(name, 0))
            text = fh.read().decode(errors="replace")
        errors = [line for line in text.splitlines()
                  if "[ERROR]" in line or line.startswith("pwevent worker: error:")]
        return errors[-1][-300:] if errors else "(no error logged)"

    def instance(self, name: str, timeout: float = 30) -> str:
        """The worker's group instance id, as it logs it at start."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.findall(r"as instance (\S+)", self.log(name))
            if found or time.monotonic() > deadline:
                assert found, f"worker {name} never logged its instance id"
                return found[-1]
            time.sleep(0.2)

    def log(self, name: str) -> str:
        path = self.log_path(name)
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {n}\n{self.log(n)[-tail:]}" for n in self.procs)

    def warnings(self, most: int = 80) -> str:
        """The warnings and errors every start of each worker logged (the last ``most``)."""
        out = []
        for name in self.procs:
            lines = [line for line in self.log(name).splitlines()
                     if "[WARNING]" in line or "[ERROR]" in line]
            out.append(f"--- {name}\n" + "\n".join(lines[-most:]))
        return "\n".join(out)

    def stop_all(self) -> None:
        stop_workers(list(self.procs.values()))


Records = list[tuple[bytes, bytes]]


def creation_cut_short(path: Path) -> None:
    """What a worker SIGKILLed while RocksDB created a store leaves behind (seen after a kill):
    the lock, the log, the identity still in its temporary file, and no ``CURRENT``."""
    path.mkdir(parents=True)
    (path / "LOCK").write_bytes(b"")
    (path / "LOG").write_text("2026/12/07-20:50:27.703714 139825106230144 RocksDB version: 9.8.4\n")
    (path / "000000.dbtmp").write_text("73b962d9-4ae0-4a70-a5e3-346276fecb57")
    (path / "rocksdict-config.json").write_text('{"raw_mode":true,"prefix_extractors":{}}')


def requirement_records(users: list[str], w: list[int], E: list[float]) -> Records:
    """``{user, w, E}`` records."""
    return [(u.encode(), orjson.dumps({"user": u, "w": wi, "E": Ei}))
            for u, wi, Ei in zip(users, w, E, strict=True)]


def dynamic_requirements(users: list[str]) -> Records:
    """``{user, wB, EB, wF, EF}`` records with both windows active, varied per user."""
    return [(u.encode(), orjson.dumps({"user": u, "wB": 3 + i % 5, "EB": 1.0 + (i % 3),
                                       "wF": 2 + i % 4, "EF": 0.5 + (i % 4) * 0.5}))
            for i, u in enumerate(users)]


def report(user: str, time_ms: int, value: object) -> tuple[bytes, bytes]:
    """One report record."""
    return user.encode(), orjson.dumps({"user": user, "time": time_ms, "value": value})


def slot_reports(users: list[str], slot: int, d: int, slot_ms: int = 1000) -> Records:
    """Every user reports once in ``slot``; cells vary with user and slot."""
    return [report(u, slot * slot_ms + (i * 37) % slot_ms, (i * 7 + slot * (i % 3)) % d)
            for i, u in enumerate(users)]


def produce(bootstrap: str, topic: str, partitions: int, records, partition: int | None = None):
    """Send records and wait for the broker."""
    produce_in_order(bootstrap, topic, partitions, [(records, partition)])


def produce_batches(bootstrap: str, topic: str, partitions: int, batches) -> None:  # type: ignore[no-untyped-def]
    """Send each batch of records in turn, by key, through one producer (as one
    :func:`produce` per batch sends them, without a producer's start for each)."""
    produce_in_order(bootstrap, topic, partitions, [(batch, None) for batch in batches])


def produce_in_order(bootstrap: str, topic: str, partitions: int, steps) -> None:  # type: ignore[no-untyped-def]
    """Send each step's records, ``(records, partition)`` (``None``: by key), through one
    producer, each step acknowledged by the broker before the next is sent."""
    async def go() -> None:
        prod = RawProducer(bootstrap, topic, partitions)
        await prod.start()
        try:
            for records, partition in steps:
                await prod.send_many(records, partition=partition)
        finally:
            await prod.stop()

    asyncio.run(go())


def watermark_steps(cfg: JobConfig, end_ms: int) -> list:
    """:func:`produce_in_order` steps of a watermark record to every partition."""
    return [([(None, watermark_record(end_ms, cfg.secret.encode(), cfg.stream, p))], p)
            for p in range(cfg.partitions)]


def close_through(bootstrap: str, topics: Topics, cfg: JobConfig, end_ms: int) -> None:
    """Watermark records to every partition: everything before ``end_ms`` may close."""
    produce_in_order(bootstrap, topics.reports, cfg.partitions, watermark_steps(cfg, end_ms))


def send_slots(bootstrap: str, topics: Topics, cfg: JobConfig, batches, slots) -> None:  # type: ignore[no-untyped-def]
    """For each slot t of ``slots`` in turn: its reports ``batches[t]``, then watermark records
    to every partition closing it, through one producer (as one ``produce`` and one
    ``close_through`` per slot send them, without a producer's start for each)."""
    steps = []
    for t in slots:
        steps += [(batches[t], None), *watermark_steps(cfg, (t + 1) * cfg.slot_ms)]
    produce_in_order(bootstrap, topics.reports, cfg.partitions, steps)


def register(bootstrap: str, topics: Topics, cfg: JobConfig, records, worker,
             misplaced: bool = False) -> None:
    """Send requirements and wait until the worker has consumed them; ``misplaced``: each on
    the partition after its key's, where the job must not take it."""
    if misplaced:
        for key, value in records:
            wrong = (key_partition(key, cfg.partitions) + 1) % cfg.partitions
            produce(bootstrap, topics.requirements, cfg.partitions, [(key, value)], wrong)
    else:
        produce(bootstrap, topics.requirements, cfg.partitions, records)
    group = f"pwevent-{cfg.prefix}-{cfg.stream}"
    ok = asyncio.run(wait_consumed(bootstrap, group, topics.requirements, cfg.partitions, 60,
                                   alive=lambda: worker.poll() is None))
    assert ok, "the worker did not consume the requirements"


def releases(bootstrap: str, topics: Topics) -> list[tuple[bytes, bytes]]:
    """Every record of the releases topic."""
    return asyncio.run(read_topic(bootstrap, topics.releases))


def wait_for_slots(bootstrap: str, topics: Topics, slots: set[int], timeout: float,
                   worker=None) -> list[dict]:
    """Poll the releases topic until every slot in ``slots`` was released."""
    deadline = time.monotonic() + timeout
    docs: list[dict] = []
    while time.monotonic() < deadline:
        docs = [orjson.loads(v) for _k, v in releases(bootstrap, topics)]
        if slots <= {d["slot"] for d in docs}:
            return docs
        if worker is not None and worker.poll() is not None:
            break
        time.sleep(0.5)
    return docs


def job_nonce(bootstrap: str, topics: Topics, stream: str = "s") -> str:
    """The nonce the Kafka job drew for ``stream`` (from its start record on ``decisions``)."""
    for key, value in asyncio.run(read_topic(bootstrap, topics.decisions)):
        if key == f"{stream}/start".encode():
            return orjson.loads(value)["nonce"]
    raise AssertionError(f"no start record of stream {stream!r} on {topics.decisions}")


def in_process(cfg: JobConfig, requirements, slot_batches, end_ms: int,
               later: dict[int, list[tuple[bytes, bytes | None]]] | None = None,
               nonce: str = "") -> list[bytes]:
    """The same input through the job's code without Kafka, under the stream nonce ``nonce``
    (a Kafka job's, to reproduce its releases); ``later[k]`` holds requirements records
    registered before the k-th batch."""
    job = InProcessJob(replace(cfg, nonce=nonce) if nonce else cfg)
    job.register(requirements)
    for k, batch in enumerate(slot_batches):
        job.register((later or {}).get(k, []))
        job.feed(batch)
    job.finish(end_ms)
    return job.releases


def kill_and_resume(bootstrap: str, topics: Topics, cfg: JobConfig, tmp_path: Path,
                    requirements, batches: list, sent_before: int, released_before: int) -> str:
    """Register, send the first ``sent_before`` slot batches, wait for ``released_before``
    slots, SIGKILL the worker, send the rest and close the last slot, start the worker again on
    the same data directory and wait for every slot; returns the worker log."""
    data, log = tmp_path / "data", tmp_path / "worker.log"
    worker = start_worker(bootstrap, cfg, data, log)
    try:
        register(bootstrap, topics, cfg, requirements, worker)
        for batch in batches[:sent_before]:
            produce(bootstrap, topics.reports, cfg.partitions, batch)
        wait_for_slots(bootstrap, topics, set(range(released_before)), 60, worker)
    finally:
        stop_worker(worker, kill=True)
    for batch in batches[sent_before:]:
        produce(bootstrap, topics.reports, cfg.partitions, batch)
    close_through(bootstrap, topics, cfg, len(batches) * cfg.slot_ms)
    time.sleep(0.5)
    worker = start_worker(bootstrap, cfg, data, log)
    try:
        wait_for_slots(bootstrap, topics, set(range(len(batches))), 120, worker)
    finally:
        stop_worker(worker)
    return log.read_text()


def wait_accepted(port: int, count: int, timeout: float, worker: Process) -> int:
    """Poll the ``pwevent_reports_total{outcome="accepted"}`` counter of the worker's /metrics
    (``--metrics-port port``) until it reaches ``count``: the worker has counted that many
    reports, whether or not their slots closed. Returns the last value read (-1: none)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    deadline, seen = time.monotonic() + timeout, -1
    while time.monotonic() < deadline and worker.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as resp:
                body = resp.read().decode()
        except OSError:  # not serving yet
            body = ""
        seen = max([int(s.value) for family in text_string_to_metric_families(body)
                    for s in family.samples if s.name == "pwevent_reports_total"
                    and s.labels.get("outcome") == "accepted"], default=seen)
        if seen >= count:
            break
        time.sleep(0.2)
    return seen


def accepted_by_slot(bootstrap: str, topics: Topics) -> dict[int, int]:
    """Reports counted per slot, from the partitions' messages on the internal ``slot-partials``
    topic (releases carry no exact counts); a message sent again after a restart counts once."""
    seen: set[tuple[int, int]] = set()
    out: dict[int, int] = {}
    for _key, value in asyncio.run(read_topic(bootstrap, topics.slot_partials)):
        msg = orjson.loads(value)
        p = int(msg["partition"])
        parts = ({str(msg["plan"]): msg} if "plan" in msg else msg.get("slots", {}))
        for slot_text, part in parts.items():
            if (p, int(slot_text)) not in seen and "accepted" in part:
                seen.add((p, int(slot_text)))
                out[int(slot_text)] = out.get(int(slot_text), 0) + int(part["accepted"])
    return out


def values_by_slot(records: list[tuple[bytes, bytes]]) -> dict[int, set[bytes]]:
    """The distinct values of records that carry a ``slot``, by slot."""
    out: dict[int, set[bytes]] = {}
    for _key, value in records:
        doc = orjson.loads(value)
        if "slot" in doc:
            out.setdefault(doc["slot"], set()).add(value)
    return out


def spy_deliveries(job: InProcessJob) -> list[dict]:
    """The messages ``job`` delivers between its partitions and coordinator from now on,
    recorded in order while the job goes on delivering them."""
    said: list[dict] = []
    deliver = job._deliver

    def spy(messages: list[dict]) -> None:
        said.extend(messages)
        deliver(messages)

    job._deliver = spy  # type: ignore[method-assign]
    return said


class RestartableBroker:
    """The embedded broker's executable on a fixed port and data directory, so that a test can
    stop it (SIGTERM, then SIGKILL, by pid) or kill it (SIGKILL) and start it again with the
    data it kept."""

    def __init__(self, root: Path) -> None:
        self.data = root / "data"
        self.data.mkdir(parents=True)
        self.log = root / "broker.log"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(broker_binary()), "start", "--only", "kafka", "--host", "127.0.0.1",
                 "--kafka-port", str(self.port), "--data-dir", str(self.data)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not asyncio.run(_answers(self.bootstrap)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"broker did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the broker: what it had not snapshotted yet (its last second or so of
        acknowledged writes) is lost."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def topic_names(bootstrap: str) -> set[str]:
    """The broker's topics, by a request for their names only, which never auto-creates one (a
    client asking for a topic itself before the worker created it would have the embedded
    broker auto-create it, with one partition)."""
    async def go() -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            return await admin.list_topics()
        finally:
            await admin.close()

    return set(asyncio.run(go()))


async def _answers(bootstrap: str) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=1000)
    try:
        await asyncio.wait_for(admin.start(), 2)
        await asyncio.wait_for(admin.list_topics(), 2)
        return True
    except Exception:  # noqa: BLE001 - not up yet
        return False
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


class LoginRefusingBroker:
    """A listener that speaks just enough of the Kafka protocol to refuse every SASL login.

    The embedded broker speaks plaintext only; this stands in for a SASL cluster whose
    credentials the client got wrong. It answers ApiVersions (v0) and SaslHandshake (offering
    ``PLAIN``), and answers every SaslAuthenticate with ``SASL_AUTHENTICATION_FAILED`` (58), as
    a Kafka broker does; any other request closes the connection. ``handshakes`` lists the
    ``(client id, mechanism)`` of each SASL handshake, ``users`` the user names sent."""

    def __init__(self) -> None:
        import socketserver
        import struct
        import threading

        self.handshakes: list[tuple[str, str]] = []
        self.users: list[str] = []
        outer = self

        def string(data: bytes, at: int) -> tuple[str, int]:
            (size,) = struct.unpack_from(">h", data, at)
            return data[at + 2: at + 2 + max(size, 0)].decode(), at + 2 + max(size, 0)

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock = self.request
                while True:
                    head = self._read(sock, 4)
                    if head is None:
                        return
                    body = self._read(sock, struct.unpack(">i", head)[0])
                    if body is None:
                        return
                    api, _version, correlation = struct.unpack_from(">hhi", body, 0)
                    client, at = string(body, 8)
                    if api == 18:  # ApiVersions v0: SaslHandshake v0-1, SaslAuthenticate v0
                        answer = struct.pack(">hi", 0, 3) + b"".join(
                            struct.pack(">hhh", *v) for v in ((17, 0, 1), (18, 0, 0), (36, 0, 0)))
                    elif api == 17:
                        mechanism, _ = string(body, at)
                        outer.handshakes.append((client, mechanism))
                        answer = struct.pack(">hi", 0, 1) + struct.pack(">h", 5) + b"PLAIN"
                    elif api == 36:  # auth bytes: authzid \0 user \0 password
                        (size,) = struct.unpack_from(">i", body, at)
                        fields = body[at + 4: at + 4 + size].split(b"\0")
                        outer.users.append(fields[1].decode() if len(fields) > 1 else "")
                        message = b"Authentication failed: Invalid username or password"
                        answer = (struct.pack(">hh", 58, len(message)) + message
                                  + struct.pack(">i", 0))
                    else:
                        return
                    reply = struct.pack(">i", correlation) + answer
                    sock.sendall(struct.pack(">i", len(reply)) + reply)

            @staticmethod
            def _read(sock, size: int) -> bytes | None:
                data = b""
                while len(data) < size:
                    chunk = sock.recv(size - len(data))
                    if not chunk:
                        return None
                    data += chunk
                return data

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="refusing-broker",
                                       daemon=True)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> LoginRefusingBroker:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class ReleaseKiller(threading.Thread):
    """SIGKILLs ``target()`` the moment the release of a slot in ``slots`` is on the topic."""

    def __init__(self, bootstrap: str, topic: str, slots: set[int], target) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.slots, self.target = bootstrap, topic, set(slots), target
        self.killed: list[int] = []
        self.stop = threading.Event()

    def run(self) -> None:
        asyncio.run(self._tail())

    async def _tail(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=20)
        await consumer.start()
        try:
            tp = TopicPartition(self.topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while not self.stop.is_set():
                batch = await consumer.getmany(tp, timeout_ms=100)
                for record in batch.get(tp, []):
                    slot = int(record.key.rsplit(b"/", 1)[1])
                    if slot in self.slots:
                        self.slots.discard(slot)
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(self.target().pid, signal.SIGKILL)
                        self.killed.append(slot)
        finally:
            await stop_consumer(consumer)


def start_configured_worker(bootstrap: str, prefix: str, conf: Path, data: Path,
                            log: Path) -> Process:
    """A worker whose job comes from the config file ``conf`` (the README's way), on two
    partitions, closing idle slots after 1.5 s."""
    args = ["--config", str(conf), "worker", "--broker", bootstrap, "--prefix", prefix,
            "--partitions", "2", "--idle-close-ms", "1500", "--data-dir", str(data),
            "--metrics-port", "0"]
    return start_command(args, dict(os.environ, PWEVENT_SECRET=SECRET), log)


def timestamped_records(bootstrap: str, topic: str, partitions: int) -> list[tuple]:
    """A topic's records as the source stage reads them (only what transactions committed):
    (key, value, partition, offset, timestamp), partition by partition."""
    async def go() -> list[tuple]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             isolation_level=ISOLATION_LEVEL)
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            ends = await c.end_offsets(tps)
            out = []
            for tp in tps:
                while await c.position(tp) < ends[tp]:
                    got = await c.getmany(tp, timeout_ms=1000)
                    out += [(r.key, r.value, tp.partition, r.offset, r.timestamp)
                            for r in got.get(tp, [])]
            return out
        finally:
            await stop_consumer(c)

    return asyncio.run(go())


def parse_worker_args(argv: list[str], conf: dict | None = None):
    """``pwevent worker`` arguments as the command line parses them, the config file's
    ``conf`` (a parsed file) applied first."""
    import argparse

    from streams.cli import defaults
    from streams.cli.worker import add_parser

    top = argparse.ArgumentParser()
    sub = top.add_subparsers()
    add_parser(sub)
    if conf is not None:
        defaults.apply(sub.choices["worker"], "worker", conf, environ={})
    return top.parse_args(["worker", *argv])


def slot_winners(mapped: list[tuple[bytes, bytes]], slot_ms: int,
                 origin_ms: int = 0) -> set[tuple[bytes, bytes]]:
    """Of re-keyed reports (key, value with ``source``), per user and slot the one with the
    smallest (event time, source position): the one that counts, and the only one the source
    stage must forward of those it reads together."""
    best: dict[tuple[str, int], tuple[tuple, tuple[bytes, bytes]]] = {}
    for key, value in mapped:
        doc = orjson.loads(value)
        slot = (doc["time"] - origin_ms) // slot_ms
        rank = (doc["time"], *doc["source"])
        at = best.get((doc["user"], slot))
        if at is None or rank < at[0]:
            best[(doc["user"], slot)] = (rank, (key, value))
    return {record for _rank, record in best.values()}


def rekeyed(records: list[tuple], mapping: object, partitions: int,
            topic_index: int = 0) -> list[tuple[bytes, bytes]]:
    """The reports the source stage writes for source ``records`` (as
    :func:`timestamped_records` reads them) under ``mapping``, before it keeps only those that
    can still win: every mapped record, with its source position, in event-time order."""
    from streams.job.source.rekey import report_value

    out = []
    for p in range(partitions):
        recs = [r for r in records if r[2] == p]
        b = mapping.map(recs)  # type: ignore[attr-defined]
        out += [(u.encode(), report_value(u, int(b.times[j]), b.values[j],
                                          (topic_index, p, recs[int(b.index[j])][3])))
                for j, u in enumerate(b.users)]
    return sorted(out, key=lambda r: orjson.loads(r[1])["time"])


def wait_while_running(test, timeout: float, proc: Process, log: Path):  # type: ignore[no-untyped-def]
    """What ``test`` gives once it gives something truthy, polled while ``proc`` (a worker
    logging to ``log``) runs; AssertionError with the log's tail if it stops or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = test()
        if got:
            return got
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.3)
    raise AssertionError(f"timed out; worker log:\n{log.read_text()[-3000:]}")
