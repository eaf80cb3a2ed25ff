"""Sending the replay's records to Kafka across broker outages: :class:`ResilientSender`.

The replay sends slot by slot: a slot's records (and the requirements before them, and the closing
watermark records after the last slot) go through :class:`ResilientSender`, which does not move on
until the broker has acknowledged every record of the slot. Its producer is idempotent
(:class:`streams.kafka.producer.RawProducer`: ``enable_idempotence=True``, ``acks=all``): while one
producer lives, a batch its client retries after a lost connection or a timed-out request is
written once, and a batch it has sent once is retried until the broker answers. A broker that goes
away and comes back with its state is therefore ridden out by the client alone: nothing fails,
nothing is sent twice, and the replay only notices the silence (it probes the broker's address
every second while nothing is acknowledged, once it has read the answers already received: after
the process was paused, an acknowledgement that arrived meanwhile is not an outage).

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
broker refuses the records for a reason other than availability, or refuses the login under
SASL settings) stops the replay at once, in one line with the same progress.

What the replay cannot see: a broker that acknowledged a write and then lost it (a crash before
the write was durable; the embedded broker also does so for writes that reach it while it shuts
down on SIGTERM) leaves a hole no producer is told about. Its sign is that the broker no
longer knows the producer when it comes back (``OutOfOrderSequenceNumber``); the notice line
then says that records acknowledged before the outage may be lost, since the replay cannot
tell which.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable

#: Backoff between attempts after a failed send: doubles from the first value to the second.
BACKOFF = (0.5, 5.0)
#: Before a silence is judged, answers already received get this many turns of the event loop
#: and this many seconds to reach the sender: after the process was paused (SIGSTOP, a
#: suspended machine) the wait's timer and the broker's answer are due at once, and the answer
#: takes a few turns to pass through the client.
SETTLE = (50, 0.05)
#: Seconds one SASL handshake may take when a producer could not connect: a refused login is
#: not an outage (:mod:`streams.kafka.errors`).
LOGIN_CHECK_S = 2.0


class ReplayInterrupted(RuntimeError):
    """The replay stopped before it sent everything; the message says why (and, from
    :func:`streams.cli.replay_produce.produce`, how far it got and where to resume)."""


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

    ``timeout`` is ``--broker-timeout``, ``request_timeout_ms`` its producers' request timeout
    (``--request-timeout``); ``notify`` prints a line on stderr. Counters:
    ``reconnects`` (outages recovered from), ``resent`` (records sent again after their batch
    failed, whose first sending's fate is unknown), ``outage_seconds`` (time spent in outages).
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, timeout: float,
                 notify: Callable[[str], None], probe_every: float = 1.0,
                 request_timeout_ms: int = 40_000) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.request_timeout_ms = request_timeout_ms
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
                if not done:
                    await self._settle(task)
                if entries is not None:
                    self._progress(entries)
                if task.done():
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

    @staticmethod
    async def _settle(task: asyncio.Future) -> None:
        """Let what the process has already received reach ``task``: a few turns of the loop,
        then :data:`SETTLE` seconds at most."""
        turns, seconds = SETTLE
        for _ in range(turns):
            if task.done():
                return
            await asyncio.sleep(0)
        await asyncio.wait({task}, timeout=seconds)

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

        from streams.kafka.errors import authentication_failed, authentication_failure
        from streams.kafka.producer import RawProducer

        remaining = list(records)
        count = len(remaining)
        waiting_since = time.monotonic()
        backoff = BACKOFF[0]
        while remaining:
            if self.producer is None:
                producer = RawProducer(self.bootstrap, self.topic, self.partitions,
                                       request_timeout_ms=self.request_timeout_ms)
                try:
                    await self._watch(producer.start(), waiting_since)
                except BrokerUnavailable:
                    raise
                except Exception as exc:  # noqa: BLE001 - retried until the deadline
                    if _fatal(exc):
                        raise SendRefused(f"cannot connect to the broker at {self.bootstrap}: "
                                          f"{_describe(exc)}") from None
                    refused = await authentication_failure(self.bootstrap, exc, LOGIN_CHECK_S)
                    if refused is not None:  # no retry can mend a refused login
                        raise SendRefused(authentication_failed(self.bootstrap,
                                                                refused)) from None
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
