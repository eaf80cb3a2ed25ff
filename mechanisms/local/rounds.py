"""Two rounds a slot: LBD and LBA on devices (docs/ldp-reports.md, "Two rounds a slot").

Slot t of a two-round stream runs

1. a *dissimilarity* round: every user reports (its value, or the "no value" cell) at budget
   E/(2w);
2. the collector's *decision* (:class:`Decision`): once round 1 has closed it estimates the
   frequencies f, tests ``mean_j (f_j - r_j)^2 - Var > Var(eps2)`` against the last released r
   (papers/002 section 2.6, as :mod:`mechanisms.baselines.ldp_ids` runs it) and names the
   publication budget eps2 of slot t (0: no publication round) and whether slot t + 1 has a
   dissimilarity round (LBA nullifies the slots a publication absorbed);
3. a *publication* round at the decision's eps2, answered by every user.

The planner's ``d`` is the cells the reports run over: the stream's value cells and "no value".

The budgets come from the collector's ledger: the distribution ledger (LBD) or the absorption
ledger (LBA) of :mod:`mechanisms.ledgers.fixed`, the evaluation's own, so any w consecutive slots
spend at most E/2 in round 1 and E/2 in round 2.

A client keeps its ledger over *virtual slots*: round r of slot t is virtual slot
``2 t + r - 1`` (:func:`virtual_slot`), against a window of 2w and budget E. A window of 2w
virtual slots holds at most w + 1 real slots' rounds (round 2 of the first and round 1 of the
last only), whose rounds 1 spend at most E/2 and rounds 2 at most E/2: every report the ledger
allows, the client's own ledger allows too, and a forged decision cannot make a client
overspend. A client answers only what was asked: round 1 at the stream's first slot and where
the previous slot's decision names one, round 2 where its slot's decision names a budget. A
client that missed a decision skips the rounds it would have named.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from mechanisms.ledgers.fixed import AbsorptionLedger, DistributionLedger
from mechanisms.local.collector import SlotEstimate, noise_variance, oue_probabilities
from mechanisms.local.ledger import ClientLedger
from mechanisms.local.oracles import MAX_EPS
from mechanisms.local.schedule import POPULATION_PROTOCOLS, ROUND_PROTOCOLS
from mechanisms.local.tree import TREE_PROTOCOL, check_starts
from mechanisms.local.wire import (
    MAX_ROUND_SLOT,
    MAX_SLOT,
    check_text,
    format_number,
    format_string,
)

__all__ = ["MAX_ROUND_SLOT", "POPULATION_PROTOCOLS", "ROUND_PROTOCOLS", "Decision", "Outcome",
           "RoundPlanner", "dissimilarity_budget", "encode_decision", "parse_decision",
           "virtual_slot"]
DECISION_VERSION: Final = 1
_DECISION_KEYS: Final = ("v", "stream", "protocol", "slot", "eps", "next")
#: An lpd or lpa decision's keys: its publication interval after the budgets.
_POPULATION_KEYS: Final = (*_DECISION_KEYS, "from", "size")
#: An mtsp decision's keys: its publication partition after the budgets.
_TREE_KEYS: Final = (*_DECISION_KEYS, "starts")
#: The width of the upper half of the positions, where publication intervals lie.
_HALF: Final = 2**31


def virtual_slot(slot: int, round_: int) -> int:
    """Where round ``round_`` (1 or 2) of ``slot`` lies on a client's ledger: 2 slot + round - 1."""
    return 2 * int(slot) + int(round_) - 1


def dissimilarity_budget(w: int, E: float) -> float:  # noqa: N803 - the papers' name
    """The budget of a dissimilarity report: E/(2w)."""
    return float(E) / (2.0 * float(w))


@dataclass(frozen=True)
class Decision:
    """The collector's decision for ``slot`` of ``stream``: ``eps`` is the publication round's
    budget (0: no publication round), ``next`` the dissimilarity budget of slot + 1 (0: none).
    An lpd or lpa decision also names the publication round's users: the upper-half positions
    ``[lo, lo + size)`` (offsets modulo 2^31, :mod:`mechanisms.local.population`); ``size`` is
    0 exactly when ``eps`` is. Both are 0 for the others. An mtsp decision names the
    publication round's partition of the cells by the intervals' first cells, ``starts``
    (:mod:`mechanisms.local.tree`), empty exactly when ``eps`` is 0; empty for the others."""

    stream: str
    protocol: str
    slot: int
    eps: float
    next: float
    lo: int = 0
    size: int = 0
    starts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        """Check every field; ValueError names the wrong one."""
        check_text("stream", self.stream)
        if self.protocol not in ROUND_PROTOCOLS:
            raise ValueError(f"protocol must be one of {ROUND_PROTOCOLS}, got {self.protocol!r}")
        if type(self.slot) is not int or not 0 <= self.slot <= MAX_SLOT:
            raise ValueError(f"slot must be an integer in [0, {MAX_SLOT}], got {self.slot!r}")
        for name in ("eps", "next"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not 0 <= value <= MAX_EPS:
                raise ValueError(f"{name} must be a number in [0, {MAX_EPS}], got {value!r}")
            object.__setattr__(self, name, float(value))
        population = self.protocol in POPULATION_PROTOCOLS
        for name, high in (("lo", _HALF - 1 if population else 0),
                           ("size", _HALF if population else 0)):
            value = getattr(self, name)
            if type(value) is not int or not 0 <= value <= high:
                raise ValueError(f"{name} must be an integer in [0, {high}], got {value!r}")
        if population and (self.size > 0) != (self.eps > 0):
            raise ValueError("an lpd or lpa decision names users (size > 0) exactly when it "
                             "names a publication budget (eps > 0)")
        starts = check_starts(self.starts)
        object.__setattr__(self, "starts", starts)
        tree = self.protocol == TREE_PROTOCOL
        if bool(starts) != (tree and self.eps > 0):
            raise ValueError("an mtsp decision names a partition (starts) exactly when it names "
                             "a publication budget (eps > 0); the others name none")


def encode_decision(decision: Decision) -> bytes:
    """A decision's bytes, keys in this order, numbers as the reports write them::

        {"v":1,"stream":"app","protocol":"lbd","slot":1042,"eps":0.025,"next":0.05}

    for lpd and lpa, the interval after them::

        {"v":1,"stream":"app","protocol":"lpd","slot":1042,"eps":1,"next":1,"from":0,"size":4096}

    and for mtsp, the partition's first cells::

        {"v":1,"stream":"app","protocol":"mtsp","slot":1042,"eps":0.25,"next":0.05,"starts":[0,4,6]}
    """
    d = decision
    interval = (f',"from":{d.lo},"size":{d.size}' if d.protocol in POPULATION_PROTOCOLS
                else f',"starts":[{",".join(map(str, d.starts))}]'
                if d.protocol == TREE_PROTOCOL else "")
    return (f'{{"v":{DECISION_VERSION},"stream":{format_string(d.stream)},'
            f'"protocol":"{d.protocol}","slot":{d.slot},"eps":{format_number(d.eps)},'
            f'"next":{format_number(d.next)}{interval}}}').encode()


def parse_decision(data: bytes) -> Decision:
    """Read and check a decision's bytes (UTF-8, a byte order mark allowed); ValueError says
    what is wrong."""
    try:
        record = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, RecursionError) as error:
        raise ValueError(f"not a decision: {error}"[:200]) from None
    protocol = record.get("protocol") if isinstance(record, dict) else None
    keys = (_POPULATION_KEYS if protocol in POPULATION_PROTOCOLS
            else _TREE_KEYS if protocol == TREE_PROTOCOL else _DECISION_KEYS)
    if not isinstance(record, dict) or tuple(record) != keys:
        raise ValueError(f"a decision is an object with the keys {list(keys)}")
    if record["v"] != DECISION_VERSION or type(record["v"]) is not int:
        raise ValueError(f"unknown decision version {record['v']!r}"[:200])
    return Decision(record["stream"], record["protocol"], record["slot"], record["eps"],
                    record["next"], record.get("from", 0), record.get("size", 0),
                    record.get("starts", ()))


@dataclass(frozen=True)
class Outcome:
    """A slot's decision as the planner took it: the publication budget (0: none), the next
    slot's dissimilarity budget (0: none), the test's two sides (nan when not tested) and, for
    lpd and lpa, the publication interval (:class:`Decision`'s ``lo`` and ``size``), for mtsp
    the partition (``starts``)."""

    eps: float
    next: float
    dissimilarity: float
    threshold: float
    lo: int = 0
    size: int = 0
    starts: tuple[int, ...] = ()


class RoundPlanner:
    """The collector's side of a two-round stream of ``protocol`` over ``d`` cells: its ledger,
    the last published frequencies and the decisions, slot after slot from ``start``.

    :meth:`decide` takes each slot's dissimilarity estimate once its round 1 has closed;
    :meth:`publish` takes the slot's publication estimate once its round 2 has, before the next
    slot is decided (both close when the watermark passes the next slot's end, round 2 first).
    """

    def __init__(self, protocol: str, w: int, E: float, d: int, start: int) -> None:  # noqa: N803
        """A planner whose first slot is ``start``."""
        if protocol not in ("lbd", "lba"):
            raise ValueError(f"protocol must be lbd or lba, got {protocol!r}")
        ledger = DistributionLedger if protocol == "lbd" else AbsorptionLedger
        self.protocol, self.w, self.E, self.d = protocol, int(w), float(E), int(d)
        self.ledger = ledger(np.array([self.w]), np.array([self.E]))
        #: the next slot to decide, and its dissimilarity budget (0: none asked)
        self.slot = int(start)
        self.asked = dissimilarity_budget(self.w, self.E)
        #: the last published frequencies, their per-cell variance and the slot they were
        #: estimated at (None before the first publication)
        self.last = np.zeros(self.d)
        self.last_variance = np.full(self.d, np.inf)
        self.estimated_at: int | None = None
        #: the ledger of a user who answers every round: no user's spends exceed it
        self.everyone = ClientLedger(2 * self.w, self.E)

    def decide(self, round1: SlotEstimate) -> Outcome:
        """Decide :attr:`slot` from its dissimilarity round's estimate (an empty one when the
        round was not asked) and charge the ledger. The test is the evaluation's, with the
        oracle's effective probabilities; a publication the full participant's ledger would
        refuse (a rounding) is not asked."""
        plan = self.ledger.plan_runs()
        eps2 = 0.0 if plan.nullified[0] else float(plan.eps2[0, 0])
        if self.asked > 0:
            self.everyone.commit(virtual_slot(self.slot, 1), self.asked)
        dis = bar = math.nan
        n = round1.reporters
        if self.asked > 0 and eps2 > 0 and n > 0:
            p, q = oue_probabilities(self.asked)
            dis = float(np.mean(np.square(round1.frequency - self.last))
                        - noise_variance(n, p, q))
            p2, q2 = oue_probabilities(eps2)
            bar = noise_variance(n, p2, q2)
        publish = bool(dis > bar)
        if publish:
            try:
                self.everyone.commit(virtual_slot(self.slot, 2), eps2)
            except ValueError:
                publish = False
        self.ledger.commit_runs(np.array([publish]))
        self.slot += 1
        nullified = bool(self.ledger.plan_runs().nullified[0])
        self.asked = 0.0 if nullified else dissimilarity_budget(self.w, self.E)
        return Outcome(eps2 if publish else 0.0, self.asked, dis, bar)

    def publish(self, slot: int, round2: SlotEstimate) -> None:
        """Take ``slot``'s publication estimate: it replaces the last one when anybody answered
        (a round nobody answered is charged all the same)."""
        if round2.reporters > 0:
            self.last, self.last_variance = round2.frequency, round2.variance
            self.estimated_at = int(slot)
