"""The job's coordinator: takes every partition's messages and releases each slot once.

The :class:`Coordinator` reads the messages of :mod:`streams.job.slot_protocol`, drops repeats,
and releases slots in order from the stream's first slot on, including slots nobody reported in
(every registered user is charged at every slot, docs/design.md, privacy decision 2). When the
stream starts, when a slot is ready and how it is released depend on where the budget ledger
lives, which its placement (:mod:`streams.job.coordination.placement`) decides. Randomness for slot
t comes from generators keyed by the secret and (stream, nonce, t) (privacy decision 5). A release
is recorded in the state before it is emitted, and a slot already released is never computed
again.
"""

from __future__ import annotations

import logging
import secrets
import zlib
from collections import Counter

import numpy as np
import orjson

from mechanisms.noise.slot_randomness import slot_generator
from mechanisms.postprocess import METHODS, Postprocessor
from mechanisms.release.sampling import thinned
from streams.job.config import JobConfig
from streams.job.coordination.placement import ReleasePlacement, release_placement
from streams.job.slot_protocol import Decision, PartitionMessage, Start, kind, secret_check
from streams.records.domains import BinDomain, CategoryDomain, Domain, GridDomain
from streams.records.output_formats import CELLS_INLINE_MAX, NOISE_DISTRIBUTIONS, RELEASE_VERSION

#: The post-processings a release's estimate may name.
POSTPROCESSING = METHODS[1:]

KEEP_RELEASED = 64
log = logging.getLogger("pwevent.coordinator")


Emitted = tuple[int, bytes | None, bytes]  # slot, release (None: the start record), decision


class Coordinator:
    """Releases each slot once from the partitions' messages; ``placement`` (by default the
    one ``config``'s mechanism needs) takes their contents and runs the mechanism.

    It keeps the stream's start and nonce, releases and decisions recorded before they are
    emitted, and how far emission went. A restarted coordinator re-emits what it recorded and
    never computes a released slot again.

    The nonce is drawn when the stream starts (a fresh coordinator state) and kept in the
    state, so a restarted coordinator draws the same noise for a slot it already computed,
    while a re-run, a backfill or a second deployment under the same stream name draws fresh
    noise. It is published in the start record; without the secret it reveals nothing.
    """

    def __init__(self, config: JobConfig, placement: ReleasePlacement | None = None) -> None:
        self.config = config
        self.placement = placement or release_placement(config)
        self.closed: dict[int, int] = {}  # per partition, how far it closed
        self.rejected: Counter[int] = Counter()  # records rejected, per closure
        self.secret = config.secret_bytes()
        self.nonce = config.nonce or secrets.token_hex(16)
        self.start: int | None = None
        self.start_emitted = False
        self.released: dict[int, bytes] = {}
        self.decisions: dict[int, bytes] = {}
        self.emitted_through: int | None = None
        #: the last slot published (what an approximated slot repeats); None: none yet
        self.last_published: int | None = None
        self.cells = release_cells(config)
        #: the post-processing of releases (None: none, or not chosen yet under the default),
        #: fed every release in slot order
        self.postprocessor: Postprocessor | None = None
        self.duplicates = 0
        self.next_slot: int | None = None
        #: the next offset of the ``slot-partials`` topic to take (the job's input position,
        #: kept with the state so that a record skipped by the consumer is noticed)
        self.input_offset: int | None = None

    # -- receiving and releasing -----------------------------------------------------------

    def receive(self, message: PartitionMessage) -> list[Emitted]:
        """Take one message of a partition; returns the new (slot, release, decision) records
        to emit (a ``None`` release: the start record)."""
        p = int(message["partition"])
        if not 0 <= p < self.config.partitions:
            raise ValueError(f"message from partition {p}, but the job has "
                             f"{self.config.partitions}")
        if kind(message) == "plan":
            if not self.placement.take_plan(p, message, self.next_slot):
                self.duplicates += 1
        else:
            through = int(message["closed_through"])
            known = self.closed.get(p)
            if known is not None and through <= known:
                self.duplicates += 1
                return []
            self.placement.take_closure(p, message, known, self.next_slot)
            self.rejected[through] += int(message.get("rejected", 0))
            self.closed[p] = through
        out: list[Emitted] = []
        if self.next_slot is None:
            first = self.placement.first_slot(self.closed)
            if first is not None:
                self.next_slot = first
                out.append(self.begin(first))
        while self.next_slot is not None and self.placement.ready(self.next_slot, self.closed):
            out.append(self._release(self.next_slot))
            self.next_slot += 1
        frontier = self.placement.frontier(self.closed, self.next_slot)
        if frontier is not None:
            self.forget(frontier)
            for slot in [s for s in self.rejected if s < frontier]:
                del self.rejected[slot]
            self.placement.forget(self.next_slot)
        return out

    def _release(self, slot: int) -> Emitted:
        rel = self.placement.release(slot, self.slot_rng(slot))
        rejected = sum(n for close, n in self.rejected.items() if close == slot)
        log.info("slot %d released (published %s, nullified %s): %d reports accepted, %d "
                 "records rejected", slot, rel.published, rel.nullified, rel.accepted,
                 rejected, extra={"slot": slot, "published": rel.published,
                                  "nullified": rel.nullified, "accepted": rel.accepted,
                                  "rejected": rejected})
        release = self.release(slot, rel.published, rel.nullified, rel.histogram.tolist(),
                               rel.threshold, rel.users, rel.noise_std,
                               thinned=rel.published and decision_thinned(
                                   rel.decision, rel.threshold, self.config.sensitivity))
        return self.record(slot, release, rel.decision)

    def recover(self, start: dict, decisions: dict[int, bytes], releases: dict[int, bytes]) -> int:
        """Rebuild from the stream's own records when this coordinator's state is gone: the
        nonce and start from the start record, and every slot already on the topics, so that no
        slot is ever released again with another value. Returns the slots recovered."""
        self.nonce, self.start, self.start_emitted = str(start["nonce"]), start["start"], True
        self.next_slot = self.start
        return self.adopt(decisions, releases)

    def adopt(self, decisions: dict[int, bytes], releases: dict[int, bytes]) -> int:
        """Take the slots already on the topics from :attr:`next_slot` on (a state older than
        the topics), so that none is released again with another value. Returns how many."""
        if self.next_slot is None:
            return 0
        first = slot = self.next_slot
        while slot in releases:  # the releases analysts saw, without a gap
            release = orjson.loads(releases[slot])
            decision = orjson.loads(decisions[slot]) if slot in decisions else {
                # its decision was lost with the broker's last writes: the publish flag is the
                # release's, the levels those of the next decision kept (levels are only ever
                # added, so every level charged at this slot is charged: a level that joined
                # later is charged from here, never one left out)
                "stream": self.config.stream, "slot": slot, "published": release["published"],
                "nullified": release["nullified"], "eps1": {}, "eps2": {},
                "users": next_users(decisions, slot)}
            if "mechanism" not in decision and release.get("mechanism") != self.config.mechanism:
                decision["mechanism"] = release.get("mechanism")  # the default's branch
            self.replay_slot(slot, decision, release)
            estimate = release.get("estimate")
            self.filter(estimate.get("method") if type(estimate) is dict else None)
            self.postprocess(dict(release))  # the filter takes the slot as released
            if release["published"]:
                self.last_published = slot
            self.released[slot], self.decisions[slot] = releases[slot], orjson.dumps(decision)
            self.emitted_through = slot
            slot += 1
        self.next_slot = slot
        if slot > first:
            self.start_emitted = True  # a released slot follows the start record
        return slot - first

    def replay_slot(self, slot: int, decision: dict, release: dict) -> None:
        """Take one slot already released (see :meth:`recover`)."""
        self.placement.replay(slot, decision, release["histogram"])
        self.next_slot = slot + 1

    def slot_rng(self, slot: int) -> np.random.Generator:
        """The randomness of ``slot``: keyed by the secret, the stream, its nonce and the slot."""
        return slot_generator(self.secret, self.config.stream, slot, self.nonce)

    def start_record(self) -> bytes:
        """The stream's start record (decisions topic, key ``<stream>/start``); a domain of more
        than ``CELLS_INLINE_MAX`` cells has its labels here, under ``config.cells``."""
        config = self.config.public()
        if isinstance(self.cells, dict):
            config["cells"] = cell_labels(self.config.make_domain())
        record: Start = {"stream": self.config.stream, "start": self.start,
                         "nonce": self.nonce,
                         "secret_check": secret_check(self.secret, self.config.stream),
                         "config": config}
        return orjson.dumps(record)

    def release(self, slot: int, published: bool, nullified: bool, histogram: list,
                threshold: float, users: int, noise_std: np.ndarray | None,
                thinned: bool = False) -> dict:
        """:func:`release_record` of a slot about to be recorded (``noise_std``: per cell, of
        the noise added when published; ``thinned``: the publication sampled users away); an
        approximation names the publication it repeats."""
        record = release_record(self.config, slot, published, nullified, histogram, threshold,
                                users, cells=self.cells,
                                noise_std=noise_std if published else None,
                                approximates=None if published else self.last_published,
                                thinned=thinned, mechanism=self.placement.mechanism_name)
        self.postprocess(record)
        return record

    def postprocess(self, record: dict) -> None:
        """Add the post-processed histogram to a release record (field ``estimate``) and
        advance the filter; it reads the record's released values and public fields only."""
        if self.filter() is None:
            return
        assert self.postprocessor is not None
        noise = record["noise"]
        record["estimate"] = {
            "method": self.postprocessor.method,
            "histogram": self.postprocessor.step(record["histogram"], record["published"],
                                                 None if noise is None else noise["scale"],
                                                 record["users"]),
        }

    def filter(self, recorded: str | None = None) -> Postprocessor | None:
        """The post-processing, made once its method is known (under the default, from the
        first slot's branch); ``None``: none. ``recorded``: the method of the stream's
        releases or saved filters, which a stream under ``--postprocess auto`` keeps (a stream
        started by an earlier version goes on as it began, however that version chose)."""
        if self.postprocessor is None:
            method = self.placement.postprocess_method()
            if (recorded in POSTPROCESSING and method not in (None, "none")
                    and self.config.postprocess == "auto"):
                method = recorded
            if method not in (None, "none"):
                self.postprocessor = Postprocessor(str(method), self.config.d)
        return self.postprocessor

    def begin(self, start: int) -> Emitted:
        """Fix the stream's first slot; returns the start record to emit."""
        self.start = int(start)
        return self.start - 1, None, self.start_record()

    def record(self, slot: int, release: dict, decision: Decision) -> Emitted:
        """Keep a slot's release and decision; returns them encoded, to be emitted."""
        self.released[slot] = orjson.dumps(release)
        self.decisions[slot] = orjson.dumps(decision)
        if release["published"]:
            self.last_published = slot
        return slot, self.released[slot], self.decisions[slot]

    def unemitted(self) -> list[Emitted]:
        """Records kept but not yet confirmed as emitted (after a restart), in order."""
        out: list[Emitted] = []
        if self.start is not None and not self.start_emitted:
            out.append((self.start - 1, None, self.start_record()))
        after = -(2**62) if self.emitted_through is None else self.emitted_through
        return out + [(s, self.released[s], self.decisions[s]) for s in sorted(self.released)
                      if s > after]

    def lost(self, start: dict | None, decisions: dict[int, bytes],
             releases: dict[int, bytes]) -> list[Emitted]:
        """What this state recorded that the topics lack, after a broker lost its last writes
        (the tail of each topic, never a record before one it kept): the start record, when the
        topics hold neither it (``start``, the one on ``decisions``) nor any release; every
        recorded slot past the last one on ``releases``, or whose decision is missing past the
        last one on ``decisions`` (both by slot; decisions expire, releases are kept). In order,
        to be emitted again byte for byte, so that no slot analysts may have seen is computed
        again. Nothing when the topics' start record has another nonce (the stream was started
        again without this state)."""
        if self.start is None or (start is not None and start.get("nonce") != self.nonce):
            return []
        out: list[Emitted] = []
        if start is None and not releases:
            out.append((self.start - 1, None, self.start_record()))
        last_release, last_decision = max(releases, default=None), max(decisions, default=None)
        for s in sorted(self.released):
            if (last_release is None or s > last_release) or (
                    s not in decisions and (last_decision is None or s > last_decision)):
                out.append((s, self.released[s], self.decisions[s]))
        return out

    def mark_emitted(self, slot: int) -> None:
        """Record that the start record and every release up to ``slot`` were emitted."""
        if self.start is None:
            return
        self.start_emitted = True
        if slot >= self.start and (self.emitted_through is None or slot > self.emitted_through):
            self.emitted_through = slot

    def forget(self, frontier: int) -> None:
        """Drop emitted releases well behind ``frontier``."""
        done = self.emitted_through if self.emitted_through is not None else frontier
        for slot in [s for s in self.released if s < min(frontier, done) - KEEP_RELEASED]:
            del self.released[slot]
            del self.decisions[slot]

    def log_state(self) -> dict:
        """The start, nonce and recorded releases as a JSON-able document."""
        return {
            "nonce": self.nonce,
            "start": self.start,
            "start_emitted": self.start_emitted,
            "released": {str(s): r.decode() for s, r in self.released.items()},
            "decisions": {str(s): r.decode() for s, r in self.decisions.items()},
            "emitted_through": self.emitted_through,
            "duplicates": self.duplicates,
            "input_offset": self.input_offset,
            "last_published": self.last_published,
            **({} if self.postprocessor is None else
               {"postprocessor": self.postprocessor.state()}),
        }

    def load_log(self, doc: dict) -> None:
        """Reinstate :meth:`log_state`."""
        self.nonce = str(doc["nonce"])
        self.start = doc["start"]
        self.start_emitted = bool(doc["start_emitted"])
        self.released = {int(s): r.encode() for s, r in doc["released"].items()}
        self.decisions = {int(s): r.encode() for s, r in doc["decisions"].items()}
        self.emitted_through = doc["emitted_through"]
        self.duplicates = int(doc["duplicates"])
        self.input_offset = doc.get("input_offset")
        if "postprocessor" in doc and (post := self.filter(
                doc["postprocessor"].get("method"))) is not None:
            post.load(doc["postprocessor"])
        if "last_published" in doc:
            self.last_published = doc["last_published"]
        else:  # a state saved before it was kept: the latest publication still recorded
            self.last_published = max((s for s, r in self.released.items()
                                        if orjson.loads(r)["published"]), default=None)


    # -- state -----------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state, compressed."""
        doc = {
            **self.placement.state(),
            "closed": {str(p): c for p, c in self.closed.items()},
            "rejected": {str(s): n for s, n in self.rejected.items()},
            "next_slot": self.next_slot,
            **self.log_state(),
        }
        return zlib.compress(orjson.dumps(doc), 3)

    def restore(self, data: bytes) -> None:
        """Reinstate a :meth:`snapshot`."""
        doc = orjson.loads(zlib.decompress(data))
        self.placement.load(doc)
        self.closed = {int(p): int(c) for p, c in doc["closed"].items()}
        self.rejected = Counter({int(s): int(n) for s, n in doc["rejected"].items()})
        self.next_slot = doc["next_slot"]
        self.load_log(doc)


def next_users(decisions: dict[int, bytes], slot: int) -> dict[str, int]:
    """The users per level of the first decision after ``slot`` in ``decisions`` (``{}``:
    none), standing in for a decision of ``slot`` that was lost."""
    later = [s for s in decisions if s > slot]
    return dict(orjson.loads(decisions[min(later)])["users"]) if later else {}


def _edges(low: float, high: float, n: int) -> list[str]:
    """``n`` equal-width intervals over ``[low, high]`` as labels; the last one is closed."""
    cuts = [f"{x:.12g}" for x in np.linspace(low, high, n + 1).tolist()]
    return [f"[{a}, {b}{']' if i == n - 1 else ')'}"
            for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True))]


def cell_labels(domain: Domain) -> list[str]:
    """Every cell's label, in cell order: the index (``"0"``), a bin (``"[0, 2.5)"``), a grid
    cell (``"lon [0, 1) lat [5, 6)"``, cell = row * cols + col) or the domain's label."""
    if isinstance(domain, CategoryDomain):
        return list(domain.labels)
    if isinstance(domain, BinDomain):
        return _edges(domain.low, domain.high, domain.bins)
    if isinstance(domain, GridDomain):
        lon = _edges(domain.lon_min, domain.lon_max, domain.cols)
        lat = _edges(domain.lat_min, domain.lat_max, domain.rows)
        return [f"lon {x} lat {y}" for y in lat for x in lon]
    return [str(i) for i in range(domain.size)]


def release_cells(config: JobConfig) -> list[str] | dict:
    """A release's ``cells``: the labels, or for a domain of more than ``CELLS_INLINE_MAX``
    cells a reference to the stream's start record, which carries them."""
    domain = config.make_domain()
    if domain.size > CELLS_INLINE_MAX:
        return {"ref": f"{config.stream}/start", "size": int(domain.size)}
    return cell_labels(domain)


def release_record(config: JobConfig, slot: int, published: bool, nullified: bool,
                   histogram: list, threshold: float, users: int, *,
                   cells: list[str] | dict | None = None, noise_std: np.ndarray | None = None,
                   approximates: int | None = None, thinned: bool = False,
                   mechanism: str | None = None) -> dict:
    """The record of one slot on the releases topic (``streams/records/schemas/releases.json``).

    Every field is the noisy histogram or a function of public inputs (the configuration, the
    requirements, the slot, the publish/approximate decision): exact counts of reports accepted
    or rejected never leave the job in a release (they go to the log and to internal topics).
    ``noise_std``: per cell, the standard deviation of the noise added (published slots only);
    ``approximates``: the slot whose publication an unpublished slot repeats; ``thinned``: the
    publication sampled users away (``noise.thinned``: its bars would not hold the true count,
    so clients give none; a function of the level budgets, sizes and threshold only);
    ``mechanism``: the one that released the slot, when not the configuration's (the default's
    branch).
    """
    clock = config.clock
    noise = None
    if published:
        if noise_std is None:
            raise ValueError("a published release needs the noise it added")
        noise = {"distribution": NOISE_DISTRIBUTIONS[config.noise],
                 "scale": np.asarray(noise_std, dtype=np.float64).tolist()}
        if thinned:
            noise["thinned"] = True
    return {
        "schema_version": RELEASE_VERSION,
        "stream": config.stream,
        "slot": slot,
        "start": clock.start(slot),
        "end": clock.end(slot),
        "mechanism": mechanism or config.mechanism,
        "published": published,
        "nullified": nullified,
        "histogram": histogram,
        "threshold": threshold,
        "users": users,
        "cells": release_cells(config) if cells is None else cells,
        "noise": noise,
        "approximates": None if published else approximates,
    }


def decision_thinned(decision: Decision, threshold: float, sensitivity: int) -> bool:
    """Whether a publication sampled users away (:func:`mechanisms.release.sampling.thinned`),
    from its decision's per-level publication budgets and registered users and its threshold
    (public)."""
    keys = list(decision["eps2"])
    budgets = np.array([decision["eps2"][k] for k in keys], dtype=np.float64) / sensitivity
    sizes = np.array([decision["users"].get(k, 0) for k in keys], dtype=np.int64)
    return bool(thinned(budgets, sizes, float(threshold)))
