"""Sending a replay into the job's topics slot by slot: the users' requirements on their
schedule (:class:`Declarations`), the reports at the requested rate, the closing watermark
records (:func:`produce`)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Iterator

from mechanisms.run.dynamic import DYNAMIC_MECHANISMS
from streams.cli.replay_sender import ReplayInterrupted, ResilientSender
from streams.data.sources import Records, Source


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


async def produce(args: argparse.Namespace, source: Source, broker: str,
                  show_progress: bool = True) -> dict:
    """Send requirements, then reports at the requested rate, then the closing watermark
    records; returns counts. Raises :class:`~streams.cli.replay_sender.BrokerUnavailable` when
    the broker stays away longer than ``--broker-timeout``,
    :class:`~streams.cli.replay_sender.SendRefused` on an error no retry can mend; their message
    ends with the progress and how to resume."""
    from tqdm import tqdm

    from streams.job.partitions.accumulator import watermark_record
    from streams.kafka.topics import Topics

    topics = Topics(prefix=args.prefix, partitions=args.partitions)
    dynamic = getattr(args, "mechanism", "") in DYNAMIC_MECHANISMS
    timeout = float(getattr(args, "broker_timeout", 60.0))
    request_timeout = float(getattr(args, "request_timeout", 40.0))
    from_slot = getattr(args, "from_slot", None)
    if timeout <= 0:
        raise ValueError("--broker-timeout must be > 0")
    if not request_timeout > 0:
        raise ValueError("--request-timeout must be > 0")

    def notify(line: str) -> None:
        tqdm.write(line, file=sys.stderr)

    request_ms = max(1, int(request_timeout * 1000))
    reports = ResilientSender(broker, topics.reports, args.partitions, timeout, notify,
                              request_timeout_ms=request_ms)
    requirements = ResilientSender(broker, topics.requirements, args.partitions, timeout, notify,
                                   request_timeout_ms=request_ms)
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
