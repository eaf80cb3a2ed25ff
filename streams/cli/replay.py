"""``pwevent replay``: send a dataset or a recorded file into the job, or run it in-process.

Surviving a broker outage
-------------------------

The replay sends slot by slot: a slot's records
(and the requirements before them, and the closing watermark records after the last slot) go
through :class:`ResilientSender`, which does not move on until the broker has acknowledged every
record of the slot. Its producer is idempotent (:class:`streams.job.ingest.RawProducer`:
``enable_idempotence=True``, ``acks=all``): while one producer lives, a batch its client retries
after a lost connection or a timed-out request is written once, and a batch it has sent once is
retried until the broker answers. A broker that goes away and comes back with its state is
therefore ridden out by the client alone: nothing fails, nothing is sent twice, and the replay only
notices the silence (it probes the broker's address every second while nothing is acknowledged).

When a send does fail (the producer cannot connect or be created, a batch cannot be enqueued in
time, a batch's future fails: ``KafkaConnectionError``, ``KafkaTimeoutError``,
``RequestTimedOutError``, ``NotLeaderForPartitionError``, ``OutOfOrderSequenceNumber`` from a
broker that lost its state, ...), the sender waits until every other batch of the attempt is
settled (acknowledged or failed), keeps what was acknowledged, closes the producer (nothing is
pending in it any more), waits with exponential backoff (0.5 s doubling to 5 s), starts a new
producer and sends again only the records of the slot that were not acknowledged, in their
order. The first acknowledgement after an outage prints one notice line on stderr::

    pwevent replay: reconnected to the broker at HOST:PORT after 5.2 s; resuming at slot 12

The replay then goes on with the next slot. It resumes at the first slot whose records were not
all acknowledged, and a slot is sent whole again only when none of its records was. Records
sent again come after those of the slot acknowledged meanwhile on the same partition: the order
within a slot changes, which matters only for a recorded file holding two reports of one user
in one slot.

What can be sent twice, and why it is harmless. A record whose batch was *enqueued* and then
failed has an unknown fate: the client may have sent the batch, and the broker may have written
it, before the error (the answer was lost with the connection, the client gave up on a batch
whose partition had no known leader, or the broker refused a retry because it forgot the
producer). The next attempt uses a new producer, whose sequence numbers the broker cannot match
with the old one's, so such a record may be written twice: the same ``(user, slot)`` report,
byte for byte, at two offsets of the user's partition (records are partitioned by key). The
notice line then counts these records ("... were sent again and may be on the topic twice").
The job counts at most one report per user per slot, the first in partition order, and sends the
repeat to dead letters as ``duplicate_in_slot``, so the releases are those of a replay without
the repeat. Records that were never enqueued (the producer could not start, metadata or buffer
space did not come in time) were not sent and cannot be repeated; acknowledged records are
never sent again. A repeated requirement is the same declaration again; a repeated watermark
record moves nothing.

Giving up. When nothing has been acknowledged for ``--broker-timeout`` seconds while records
were waiting, the replay stops with one line on stderr and exit status 2::

    pwevent replay: error: the broker at HOST:PORT has been unreachable for 60 s; N of T
    slots sent (resume with --from-slot K)

(one line, broken here; ``has not acknowledged a record for 60 s`` when the broker still
accepts connections). ``N`` counts the slots all of whose records (and the declarations due
after them) were acknowledged, a resumed replay counting the slots it skipped, and ``K`` is the
first slot that was not: ``--from-slot K`` sends it and the rest. A slot partly acknowledged
before the failure is sent whole again by the resumed replay; the repeats are
``duplicate_in_slot`` as above. An error no retry can mend (the topic lacks the partition, the
broker refuses the records for a reason other than availability) stops the replay at once, in
one line with the same progress.

What the replay cannot see: a broker that acknowledged a write and then lost it (a crash before
the write was durable) leaves a hole no producer is told about. Its sign is that the broker no
longer knows the producer when it comes back (``OutOfOrderSequenceNumber``); the notice line
then says that records acknowledged before the outage may be lost, since the replay cannot
tell which.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator

import orjson

from mechanisms.dynamic import DYNAMIC_MECHANISMS
from streams.cli.job_args import add_broker, add_job, job_config, need_broker
from streams.data.sources import SOURCES, Records, Source, make_source, read_requirement_file

#: Backoff between attempts after a failed send: doubles from the first value to the second.
BACKOFF = (0.5, 5.0)


def add_source(p: argparse.ArgumentParser) -> None:
    """Flags that choose what is replayed."""
    p.add_argument("--dataset", choices=SOURCES, default="sin",
                   help="a synthetic stream (sin, log, tlns), real data (taxi, foursquare; "
                        "with --data) or a recorded file of reports (default: %(default)s)")
    p.add_argument("--data", default=None, metavar="PATH",
                   help="input path for taxi, foursquare or recorded")
    p.add_argument("--users", type=int, default=2000,
                   help="synthetic users (default: %(default)s)")
    # pwevent demo replays fewer slots by set_defaults; %(default)s shows the one in force
    p.add_argument("--slots", type=int, default=100,
                   help="slots to replay (default: %(default)s)")
    p.add_argument("--epsilon", type=float, default=0.6,
                   help="target E of the users' requirements, as in the paper's set-up "
                        "(default: %(default)s)")
    p.add_argument("--window", type=int, default=120,
                   help="target w of the users' requirements (default: %(default)s)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the synthetic stream and the requirements "
                        "(default: %(default)s)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``replay`` sub-command."""
    p = sub.add_parser(
        "replay",
        help="produce a dataset or recorded file into the reports topic (or run it in-process)",
        description="Registers the users' requirements, then produces their reports slot by "
                    "slot at --rate reports/s, with progress, and closes the last slot with "
                    "watermark records signed with the secret; rides out broker outages up to "
                    "--broker-timeout. --in-process runs the same stream through the job's "
                    "code without Kafka and prints the releases as JSON lines.",
    )
    add_broker(p)
    add_job(p)
    add_source(p)
    p.add_argument("--rate", type=float, default=0.0,
                   help="reports per second, 0 for as fast as possible (default: %(default)s)")
    p.add_argument("--requirements", default=None, metavar="FILE",
                   help="the users' requirements, as the CSV pwevent plan reads: user,w,E for "
                        "the fixed mechanisms, slot,user,wB,EB,wF,EF for dpbd and dpba (slots "
                        "from 1, the stream's first slot); replaces the dataset's own, and is "
                        "how a recorded file gets requirements")
    p.add_argument("--no-requirements", action="store_true",
                   help="do not send the users' requirements")
    p.add_argument("--register-timeout", type=float, default=60.0,
                   help="after sending requirements, wait up to this many seconds for the job "
                        "to register them before sending reports, 0 not to wait "
                        "(default: %(default)s)")
    p.add_argument("--broker-timeout", type=float, default=60.0,
                   help="give up (exit status 2) when the broker has acknowledged nothing for "
                        "this many seconds while records wait (default: %(default)s)")
    p.add_argument("--from-slot", type=int, default=None, metavar="K",
                   help="resume an interrupted replay at slot K (as its error line says): "
                        "skip the slots before K (a recorded file: its records up to the first "
                        "one of a slot >= K) and the requirements declared before K")
    p.add_argument("--in-process", action="store_true",
                   help="run through the job's code in this process and print the releases")
    p.add_argument("--nonce", default=None,
                   help="--in-process: the stream's nonce (hex, from the job's start record on "
                        "the decisions topic) to reproduce a recorded run (default: a fresh "
                        "one)")
    # a replay is history, stamped from --origin-ms on, faster than real time (--in-process)
    p.set_defaults(func=run, event_time="history")


def build_source(args: argparse.Namespace) -> Source:
    """The source the flags describe; ``ValueError`` on bad flags or a bad requirements file."""
    if args.users < 1 or args.slots < 1:
        raise ValueError("--users and --slots must be >= 1")
    source = make_source(args.dataset, args.users, args.slots, args.seed, args.epsilon,
                         args.window, args.data)
    path = getattr(args, "requirements", None)
    if path is not None:
        if args.no_requirements:
            raise ValueError("--requirements and --no-requirements exclude each other")
        dynamic = getattr(args, "mechanism", "") in DYNAMIC_MECHANISMS
        source.declared = read_requirement_file(path, dynamic)
    return source


def warn_unregistered(args: argparse.Namespace, source: Source, in_process: bool) -> None:
    """One warning line when a recorded replay registers nobody."""
    if source.recorded is None or source.declared is not None:
        return
    if in_process:
        print("pwevent replay: warning: --dataset recorded without --requirements registers no "
              "users, so every report goes to dead letters as unregistered_user",
              file=sys.stderr)
    elif not args.no_requirements:
        print("pwevent replay: warning: --dataset recorded without --requirements registers no "
              "users: unless the job has registered them already, their reports go to dead "
              "letters as unregistered_user", file=sys.stderr)


class Declarations:
    """A requirement schedule laid on the replayed slots.

    Declarations at slot 1 of the file (every fixed requirement) are registered before the
    first report. One at slot ``s >= 2`` targets stream slot ``first + s - 1`` (``first``: the
    slot of the stream's first report) and is sent right after that slot's reports, or before
    the next reports when the target slot has none: the slot before the target closes as the
    target's reports arrive, and the job applies a declaration at the first slot it plans after
    reading it. In-process that is exactly the target slot; a live worker reads requirements
    and reports from two topics, so it is the target slot when the worker has read the target's
    first reports before the declaration (the replay waits up to ``--register-timeout`` for the
    job to read each declaration before it sends the next slot).
    """

    def __init__(self, schedule: list[tuple[int, Records]], first: int,
                 from_slot: int | None = None) -> None:
        self.upfront: Records = []
        self.later: list[tuple[int, Records]] = []
        for s, records in schedule:
            if s <= 1:
                if from_slot is None or from_slot <= first:
                    self.upfront.extend(records)
            elif from_slot is None or first + s - 1 >= from_slot:
                self.later.append((first + s - 1, records))

    def due(self, slot: int | None, *, after: bool) -> Iterator[tuple[int, Records]]:
        """Pop ``(target slot, records)`` of the declarations due before (``after=False``) or
        after the reports of ``slot`` (``None``: every one left)."""
        while self.later and (slot is None or self.later[0][0] < slot
                              or (after and self.later[0][0] == slot)):
            yield self.later.pop(0)


Batches = Iterator[tuple[int, Records]]


def _peek_first(batches: Batches) -> tuple[int | None, Batches]:
    """The first batch's slot, and the batches with it put back."""
    first = next(batches, None)
    if first is None:
        return None, iter(())

    def again() -> Batches:
        yield first
        yield from batches

    return first[0], again()


def run_in_process(args: argparse.Namespace, out=None) -> int:
    """``--in-process``: releases as JSON lines on stdout."""
    from streams.job.pipeline import InProcessJob

    out = out or sys.stdout
    config = job_config(args)
    config.secret_bytes()
    if getattr(args, "from_slot", None) is not None:
        raise ValueError("--from-slot resumes a replay into a broker; --in-process always runs "
                         "the whole stream")
    source = build_source(args)
    warn_unregistered(args, source, in_process=True)
    job = InProcessJob(config)
    first, batches = _peek_first(source.slot_batches(config.origin_ms, config.slot_ms))
    schedule = [] if args.no_requirements else source.requirement_schedule(config.dynamic)
    declarations = Declarations(schedule, first or 0)
    job.register(declarations.upfront)
    last: int | None = None
    for slot, records in batches:
        for _target, due in declarations.due(slot, after=False):
            job.register(due)
        job.feed(records)
        for _target, due in declarations.due(slot, after=True):
            job.register(due)
        last = slot if last is None else max(last, slot)
    for _target, due in declarations.due(None, after=True):
        job.register(due)
    # close the last slot as the live replay's watermark records do
    job.finish(None if last is None else config.origin_ms + (last + 1) * config.slot_ms)
    for release in job.releases:
        out.write(release.decode() + "\n")
    print(f"{len(job.releases)} releases, {len(job.dead)} records rejected", file=sys.stderr)
    return 0


class ReplayInterrupted(RuntimeError):
    """The replay stopped before it sent everything; the message says why (and, from
    :func:`produce`, how far it got and where to resume)."""


class BrokerUnavailable(ReplayInterrupted):
    """The broker acknowledged nothing for ``--broker-timeout`` seconds while records waited."""


class SendRefused(ReplayInterrupted):
    """An error no retry can mend: the topic lacks a partition, the broker refuses the records
    (authorisation, size), a client error that is not about the connection."""


def _is_connection_error(exc: BaseException) -> bool:
    from aiokafka.errors import KafkaConnectionError, NodeNotReadyError

    return isinstance(exc, KafkaConnectionError | NodeNotReadyError | OSError)


def _fatal(exc: BaseException) -> bool:
    """Whether a send error is not an outage (sending again cannot help)."""
    from aiokafka.errors import BrokerResponseError, KafkaError

    if _lost_producer_state(exc):
        return False
    if isinstance(exc, BrokerResponseError):
        return not exc.retriable
    return not isinstance(exc, KafkaError | OSError)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _lost_producer_state(exc: BaseException) -> bool:
    """The broker no longer knows the producer's sequence numbers: it restarted without the
    state it had when it acknowledged the producer's last batches, which it may have lost."""
    from aiokafka.errors import OutOfOrderSequenceNumber

    return isinstance(exc, OutOfOrderSequenceNumber) or type(exc).__name__ in (
        "UnknownProducerIdError", "UnknownProducerId")


class ResilientSender:
    """Sends records to one topic and waits for the broker, across outages (module docstring).

    ``timeout`` is ``--broker-timeout``; ``notify`` prints a line on stderr. Counters:
    ``reconnects`` (outages recovered from), ``resent`` (records sent again after their batch
    failed, whose first sending's fate is unknown), ``outage_seconds`` (time spent in outages).
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, timeout: float,
                 notify: Callable[[str], None], probe_every: float = 1.0) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.timeout, self.notify, self.probe_every = timeout, notify, probe_every
        self.producer = None  # a started RawProducer, or None
        self.label = ""  # what is being sent, for the notice ("slot 12")
        self.last_ack = time.monotonic()
        self.trouble_since: float | None = None  # start of the current outage
        self.unreachable = False  # the last probe or error said no connection
        self.reconnects = 0
        self.resent = 0
        self.resent_in_outage = 0
        self.forgotten = False  # the broker lost this sender's producer state in the outage
        self.outage_seconds = 0.0
        self.gave_up = False
        self._acked_seen = 0

    # -- the outage clock ---------------------------------------------------------------------

    def _quiet_since(self, waiting_since: float) -> float:
        return max(waiting_since, self.last_ack)

    def _trouble(self, waiting_since: float, exc: BaseException | None = None) -> None:
        if exc is not None and _is_connection_error(exc):
            self.unreachable = True
        if self.trouble_since is None:
            self.trouble_since = self._quiet_since(waiting_since)

    def _progress(self, entries: list) -> None:
        """Note acknowledgements among ``entries``; the first after an outage ends it."""
        acked = sum(len(recs) for recs, outcome in entries
                    if isinstance(outcome, asyncio.Future) and outcome.done()
                    and not outcome.cancelled() and outcome.exception() is None)
        if acked <= self._acked_seen:
            return
        self._acked_seen = acked
        now = time.monotonic()
        self.last_ack = now
        if self.trouble_since is not None:
            seconds = now - self.trouble_since
            self.outage_seconds += seconds
            self.reconnects += 1
            self.unreachable = False
            line = (f"pwevent replay: reconnected to the broker at {self.bootstrap} after "
                    f"{seconds:.1f} s; resuming at {self.label or self.topic}")
            if self.resent_in_outage:
                line += (f"; {self.resent_in_outage} records whose batch failed after it was "
                         "handed to the client were sent again and may be on the topic twice "
                         "(the job counts one report per user and slot: a repeat is "
                         "duplicate_in_slot)")
            if self.forgotten:
                line += ("; the broker had lost this producer's state (OutOfOrderSequenceNumber), "
                         "so it may also have lost records it acknowledged before the outage")
            self.notify(line)
            self.trouble_since = None
            self.resent_in_outage = 0
            self.forgotten = False

    def _expired(self, waiting_since: float) -> bool:
        return time.monotonic() - self._quiet_since(waiting_since) >= self.timeout

    def _give_up(self) -> BrokerUnavailable:
        self.gave_up = True
        what = "has been unreachable" if self.unreachable else "has not acknowledged a record"
        return BrokerUnavailable(f"the broker at {self.bootstrap} {what} for {self.timeout:g} s")

    async def _probe(self) -> bool:
        """Whether any bootstrap address accepts a TCP connection (within 0.5 s)."""
        for address in self.bootstrap.split(","):
            host, _, port = address.strip().rpartition(":")
            if not host:
                host, port = port, "9092"
            try:
                _reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host.strip("[]"), int(port)), 0.5)
            except (OSError, ValueError):  # refused, timed out, or not HOST:PORT
                continue
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return True
        return False

    async def _watch(self, aw, waiting_since: float, entries: list | None = None):
        """Await ``aw`` while keeping the outage clock: probe the broker when nothing has been
        acknowledged for a while, and give up (cancelling ``aw``) at ``--broker-timeout``."""
        task = asyncio.ensure_future(aw)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.probe_every)
                if entries is not None:
                    self._progress(entries)
                if done:
                    return task.result()
                if time.monotonic() - self._quiet_since(waiting_since) >= self.probe_every:
                    if await self._probe():
                        self.unreachable = False
                    else:
                        self.unreachable = True
                        self._trouble(waiting_since)
                if self._expired(waiting_since):
                    raise self._give_up()
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    async def _pause(self, seconds: float, waiting_since: float) -> None:
        """Back off ``seconds``, but not past the deadline."""
        left = self.timeout - (time.monotonic() - self._quiet_since(waiting_since))
        if left <= 0:
            raise self._give_up()
        await self._watch(asyncio.sleep(min(seconds, left)), waiting_since)

    # -- sending ------------------------------------------------------------------------------

    async def send(self, records: Iterable[tuple[bytes | None, bytes]],
                   partition: int | None = None) -> int:
        """Send ``records`` (to ``partition``, or by key) and return once the broker has
        acknowledged every one of them; :class:`BrokerUnavailable` at the deadline."""
        from aiokafka.errors import KafkaError

        from streams.kafka.producer import RawProducer

        remaining = list(records)
        count = len(remaining)
        waiting_since = time.monotonic()
        backoff = BACKOFF[0]
        while remaining:
            if self.producer is None:
                producer = RawProducer(self.bootstrap, self.topic, self.partitions)
                try:
                    await self._watch(producer.start(), waiting_since)
                except BrokerUnavailable:
                    raise
                except Exception as exc:  # noqa: BLE001 - retried until the deadline
                    if _fatal(exc):
                        raise SendRefused(f"cannot connect to the broker at {self.bootstrap}: "
                                          f"{_describe(exc)}") from None
                    self._trouble(waiting_since, exc)
                    await self._pause(backoff, waiting_since)
                    backoff = min(2 * backoff, BACKOFF[1])
                    continue
                self.producer = producer
            entries: list = []
            self._acked_seen = 0
            await self._watch(self.producer.submit(remaining, partition, into=entries),
                              waiting_since, entries)
            futures = [o for _recs, o in entries if isinstance(o, asyncio.Future)]
            if futures:
                await self._watch(asyncio.wait(futures), waiting_since, entries)
            self._progress(entries)
            failed: list[tuple[bytes | None, bytes]] = []
            errors: list[BaseException] = []
            unknown = 0
            for recs, outcome in entries:
                if isinstance(outcome, BaseException):  # not enqueued: not sent
                    failed.extend(recs)
                    errors.append(outcome)
                elif outcome.cancelled() or outcome.exception() is not None:
                    failed.extend(recs)  # enqueued, then failed: unknown fate
                    errors.append(KafkaError("batch cancelled") if outcome.cancelled()
                                  else outcome.exception())
                    unknown += len(recs)
            if not failed:
                break
            refused = next((e for e in errors if _fatal(e)), None)
            if refused is not None:
                await self._close(1.0)
                raise SendRefused(f"cannot send to {self.topic}: {_describe(refused)} (are the "
                                  f"topics created, with --partitions {self.partitions}?)")
            self._trouble(waiting_since, errors[0])
            self.forgotten = self.forgotten or any(_lost_producer_state(e) for e in errors)
            # every batch of the attempt is settled, so closing abandons nothing
            await self._close(1.0)
            self.resent += unknown
            self.resent_in_outage += unknown
            remaining = failed
            await self._pause(backoff, waiting_since)
            backoff = min(2 * backoff, BACKOFF[1])
        return count

    async def _close(self, timeout: float) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.stop(timeout)

    async def close(self) -> None:
        """Flush and disconnect. After the sender gave up, batches may still be pending: they
        are abandoned after a second."""
        await self._close(1.0 if self.gave_up else 5.0)


async def produce(args: argparse.Namespace, source: Source, broker: str,
                  show_progress: bool = True) -> dict:
    """Send requirements, then reports at the requested rate, then the closing watermark
    records; returns counts. Raises :class:`BrokerUnavailable` when the broker stays away
    longer than ``--broker-timeout``, :class:`SendRefused` on an error no retry can mend; their
    message ends with the progress and how to resume."""
    from tqdm import tqdm

    from streams.job.partition import watermark_record
    from streams.kafka.topics import Topics

    topics = Topics(prefix=args.prefix, partitions=args.partitions)
    dynamic = getattr(args, "mechanism", "") in DYNAMIC_MECHANISMS
    timeout = float(getattr(args, "broker_timeout", 60.0))
    from_slot = getattr(args, "from_slot", None)
    if timeout <= 0:
        raise ValueError("--broker-timeout must be > 0")

    def notify(line: str) -> None:
        tqdm.write(line, file=sys.stderr)

    reports = ResilientSender(broker, topics.reports, args.partitions, timeout, notify)
    requirements = ResilientSender(broker, topics.requirements, args.partitions, timeout, notify)
    slots = source.slot_numbers(args.origin_ms, args.slot_ms)
    first = slots[0] if slots else 0
    schedule = [] if args.no_requirements else source.requirement_schedule(dynamic)
    declarations = Declarations(schedule, first, from_slot)
    sent = {"requirements": 0, "reports": 0, "slots": 0, "reconnects": 0, "resent": 0}
    skipped = 0 if from_slot is None else next(
        (i for i, s in enumerate(slots) if s >= from_slot), len(slots))
    # slots acknowledged (a resumed replay counts those it skips), and the slot to resume at
    progress = {"done": skipped, "next": first if from_slot is None else from_slot}

    async def declare(records: Records, label: str, target: int | None = None) -> None:
        if not records:
            return
        if target is not None:  # resuming at the target slot sends this declaration again
            progress["next"] = min(progress["next"], target)
        requirements.label = label
        sent["requirements"] += await requirements.send(records)
        if args.register_timeout > 0:
            await _wait_registered(args, broker, topics, sent["requirements"], show_progress)

    # disable=None: drawn on a terminal only, silent when stderr is a file or a pipe (CI logs)
    bar = (tqdm(total=len(slots) or 1, desc="replay", unit="slot", disable=None)
           if show_progress else None)
    start = time.monotonic()
    last_slot: int | None = None
    try:
        await declare(declarations.upfront, "the requirements")
        started = from_slot is None
        for slot, records in source.slot_batches(args.origin_ms, args.slot_ms):
            last_slot = slot if last_slot is None else max(last_slot, slot)
            if not started and slot < from_slot:
                if bar is not None:  # sent by the replay this one resumes
                    bar.update()
                continue
            started = True
            progress["next"] = slot
            for target, due in declarations.due(slot, after=False):
                await declare(due, f"the requirements of slot {target}", target)
            reports.label = f"slot {slot}"
            sent["reports"] += await reports.send(records)
            for target, due in declarations.due(slot, after=True):
                await declare(due, f"the requirements of slot {target}", target)
            # a slot counts as sent with its reports and the declarations due after them
            sent["slots"] += 1
            progress["done"] += 1
            progress["next"] = slot + 1
            if args.rate > 0:
                paused = reports.outage_seconds + requirements.outage_seconds
                ahead = sent["reports"] / args.rate - (time.monotonic() - start - paused)
                if ahead > 0:
                    await asyncio.sleep(ahead)
            if bar is not None:
                bar.set_postfix_str(f"{sent['reports']:,} reports", refresh=False)
                bar.update()
        for target, due in declarations.due(None, after=True):
            await declare(due, f"the requirements of slot {target}", target)
        secret = (getattr(args, "secret", None) or os.environ.get("PWEVENT_SECRET", "")).encode()
        if last_slot is not None and not secret:
            print("pwevent replay: warning: no secret (--secret or PWEVENT_SECRET), so the last "
                  "slot is left to the job's idle close", file=sys.stderr)
        elif last_slot is not None:
            end = args.origin_ms + (last_slot + 1) * args.slot_ms
            progress["next"] = last_slot + 1  # resuming there sends the watermarks alone
            reports.label = "the closing watermark records"
            for p in range(args.partitions):
                mark = watermark_record(end, secret, args.stream, p)
                await reports.send([(None, mark)], partition=p)
    except ReplayInterrupted as exc:
        raise type(exc)(f"{exc}; {progress['done']} of {len(slots)} slots sent (resume with "
                        f"--from-slot {progress['next']})") from None
    finally:
        await reports.close()
        await requirements.close()
        if bar is not None:
            bar.close()
    sent["reconnects"] = reports.reconnects + requirements.reconnects
    sent["resent"] = reports.resent + requirements.resent
    sent["seconds"] = round(time.monotonic() - start, 3)
    return sent


async def _wait_registered(args: argparse.Namespace, broker: str, topics, count: int,
                           show_progress: bool) -> None:
    """Wait up to ``--register-timeout`` for the job to consume the requirements topic."""
    from aiokafka.errors import KafkaError

    from streams.kafka.offsets import wait_consumed

    group = f"pwevent-{args.prefix}-{args.stream}"
    if show_progress:
        print(f"waiting for the job ({group}) to register {count:,} users ...", file=sys.stderr,
              flush=True)
    try:
        ok = await wait_consumed(broker, group, topics.requirements, args.partitions,
                                 args.register_timeout)
    except (KafkaError, OSError):
        ok = False
    if not ok:
        print(f"pwevent replay: warning: the job did not register the users within "
              f"{args.register_timeout:g} s; reports of unregistered users go to dead letters",
              file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Execute ``pwevent replay``."""
    try:
        if args.in_process:
            return run_in_process(args)
        broker = need_broker(args, "replay")
        source = build_source(args)
        warn_unregistered(args, source, in_process=False)
        # the replay reports outages itself (a notice, or one error line); the client's own
        # retry messages would bury them
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        sent = asyncio.run(produce(args, source, broker))
    except (ValueError, ImportError, ReplayInterrupted) as exc:
        print(f"pwevent replay: error: {exc}", file=sys.stderr)
        return 2
    print(orjson.dumps(sent).decode())
    return 0
