"""Population division on devices: LPD and LPA (docs/ldp-reports.md, "Population rounds").

The evaluation's LPD and LPA (:mod:`mechanisms.baselines.ldp_ids`) ask a random subset of users
per round, each reporting with the whole budget E, none twice in any w slots. On devices the
subsets come from a public *position*: each user's 32 bits of HMAC-SHA256 under the stream's
public key (:func:`position`), so that any party can check who was asked and no server keeps
a list of users.

- The lower half of the positions, ``[0, 2^31)``, holds the *dissimilarity* users, cut into w
  phases of equal width: a user at phase k (:func:`phase`) reports round 1 at the slots
  ``start + k``, ``start + k + w``, ... whose dissimilarity round the decisions ask: about
  ``n/(2w)`` users a slot, as the evaluation's ``n/(2w)``, each once every w slots.
- The upper half, ``[2^31, 2^32)``, serves the *publication* rounds: the decision of slot t
  names an interval ``[from, from + size)`` of it (offsets modulo 2^31, :func:`in_interval`),
  whose users answer round 2. The planner's ledger (the evaluation's distribution ledger for
  LPD, absorption ledger for LPA, over a budget of 2^32 positions in place of n users) keeps
  any w consecutive slots' publications within 2^31 positions, and the intervals follow one
  another from a cursor: any w consecutive slots' intervals are disjoint.

So every user reports at most once in any w slots, at E, and a client's own ledger
(:class:`~mechanisms.local.ledger.ClientLedger` over real slots, window w, budget E) refuses
whatever a forged decision would add. The two halves never meet: a user answers one round kind
only.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections import deque
from typing import Final

import numpy as np

from mechanisms.ledgers.fixed import AbsorptionLedger, DistributionLedger
from mechanisms.local.collector import SlotEstimate, noise_variance, oue_probabilities
from mechanisms.local.rounds import Outcome
from mechanisms.local.schedule import POPULATION_PROTOCOLS

__all__ = ["HALF", "POPULATION_PROTOCOLS", "POSITIONS", "PopulationPlanner", "Positions",
           "in_interval", "in_round1", "interval_mask", "phase", "position", "round1_mask"]
#: The positions: [0, 2^32); the lower half dissimilarity users, the upper publication users.
POSITIONS: Final = 2**32
HALF: Final = 2**31
#: The domain-separation prefix of the position hash.
POSITION_HASH_PREFIX: Final = b"pwevent-lpd-v1"


def position(key: str, user: str) -> int:
    """The user's public position in [0, 2^32): HMAC-SHA256 keyed with the stream's public key
    (UTF-8) over the prefix ``pwevent-lpd-v1``, the user id's UTF-8 length as 4 big-endian
    bytes and its UTF-8 bytes; the tag's first 4 bytes as a big-endian unsigned integer."""
    data = user.encode("utf-8")
    tag = hmac.digest(key.encode("utf-8"),
                      POSITION_HASH_PREFIX + len(data).to_bytes(4, "big") + data, "sha256")
    return int.from_bytes(tag[:4], "big")


class Positions:
    """:func:`position` under one key for many users, 2.5 times faster: HMAC's keyed inner and
    outer SHA-256 states (RFC 2104) are computed once, the prefix absorbed, and copied per
    user."""

    def __init__(self, key: str) -> None:
        """The states of ``key`` (UTF-8; a key over SHA-256's 64-byte block is hashed first)."""
        raw = key.encode("utf-8")
        if len(raw) > 64:
            raw = hashlib.sha256(raw).digest()
        raw = raw.ljust(64, b"\0")
        self._inner = hashlib.sha256(bytes(x ^ 0x36 for x in raw) + POSITION_HASH_PREFIX)
        self._outer = hashlib.sha256(bytes(x ^ 0x5C for x in raw))

    def __call__(self, user: str) -> int:
        """The user's position, as :func:`position` gives it."""
        return self.many([user])[0]

    def many(self, users: list[str]) -> list[int]:
        """The users' positions, in order."""
        inner_copy, outer_copy, out = self._inner.copy, self._outer.copy, []
        for user in users:
            data = user.encode("utf-8")
            inner = inner_copy()
            inner.update(len(data).to_bytes(4, "big") + data)
            outer = outer_copy()
            outer.update(inner.digest())
            out.append(int.from_bytes(outer.digest()[:4], "big"))
        return out


def phase(at: int, w: int) -> int | None:
    """The dissimilarity phase in [0, w) of a user at position ``at``: floor(at w / 2^31) in the
    lower half; None in the upper half (a publication user)."""
    if at >= HALF:
        return None
    return at * int(w) // HALF


def in_round1(at: int, slot: int, start: int, w: int) -> bool:
    """Whether a user at position ``at`` is one of ``slot``'s dissimilarity users (when the
    slot asks a dissimilarity round)."""
    k = phase(at, w)
    return k is not None and slot >= start and (slot - start) % int(w) == k


def in_interval(at: int, lo: int, size: int) -> bool:
    """Whether a user at position ``at`` lies in the publication interval ``[lo, lo + size)``
    of the upper half (offsets from 2^31, modulo 2^31)."""
    return at >= HALF and (at - HALF - lo) % HALF < size


def interval_mask(at: np.ndarray, lo: int, size: int) -> np.ndarray:
    """:func:`in_interval` over an array of positions."""
    a = np.asarray(at, dtype=np.int64)
    return (a >= HALF) & ((a - HALF - lo) % HALF < size)


def round1_mask(at: np.ndarray, slot: np.ndarray, start: int, w: int) -> np.ndarray:
    """:func:`in_round1` over arrays of positions and slots."""
    a, s = np.asarray(at, dtype=np.int64), np.asarray(slot, dtype=np.int64)
    return (a < HALF) & (s >= start) & ((s - start) % int(w) == a * int(w) // HALF)


class PopulationPlanner:
    """The collector's side of an LPD or LPA stream over ``d`` cells (every cell of the
    oracle): its ledger over positions, the publication cursor, the last published frequencies
    and the decisions, slot after slot from ``start``; the interface of
    :class:`~mechanisms.local.rounds.RoundPlanner`, each outcome also naming its interval."""

    def __init__(self, protocol: str, w: int, E: float, d: int, start: int) -> None:  # noqa: N803
        """A planner whose first slot is ``start``."""
        if protocol not in POPULATION_PROTOCOLS:
            raise ValueError(f"protocol must be one of {POPULATION_PROTOCOLS}, got {protocol!r}")
        ledger = DistributionLedger if protocol == "lpd" else AbsorptionLedger
        self.protocol, self.w, self.E, self.d = protocol, int(w), float(E), int(d)
        self.ledger = ledger(np.array([self.w]), np.array([float(POSITIONS)]))
        self.slot = int(start)
        #: round 1's budget at :attr:`slot` (0: not asked); every report spends E
        self.asked = self.E
        self.last = np.zeros(self.d)
        self.last_variance = np.full(self.d, np.inf)
        self.estimated_at: int | None = None
        #: where the next publication interval starts (an offset in the upper half)
        self.cursor = 0
        #: the intervals of the last w - 1 slots, (slot, size): with the next one, within 2^31
        self.recent: deque[tuple[int, int]] = deque()

    def decide(self, round1: SlotEstimate) -> Outcome:
        """Decide :attr:`slot` from its dissimilarity round's estimate and charge the ledger.
        The outcome's ``eps`` is E when the slot publishes (0: no publication round), ``next``
        E when the next slot asks a dissimilarity round, ``lo`` and ``size`` the interval.
        The test is the evaluation's with the oracle's effective probabilities: round 1's
        ``n1`` reporters estimate the population as 2w n1, the interval's users as that times
        size/2^32."""
        plan = self.ledger.plan_runs()
        size = 0 if plan.nullified[0] else min(int(math.floor(float(plan.eps2[0, 0]))), HALF)
        while self.recent and self.recent[0][0] <= self.slot - self.w:
            self.recent.popleft()
        dis = bar = math.nan
        n = round1.reporters
        if self.asked > 0 and size > 0 and n > 0:
            p, q = oue_probabilities(self.E)
            dis = float(np.mean(np.square(round1.frequency - self.last))
                        - noise_variance(n, p, q))
            expected = 2.0 * self.w * n * size / POSITIONS
            bar = noise_variance(expected, p, q) if expected >= 1 else math.inf  # type: ignore[arg-type]
        publish = bool(dis > bar) and sum(s for _, s in self.recent) + size <= HALF
        lo = self.cursor if publish else 0
        if publish:
            self.cursor = (self.cursor + size) % HALF
            self.recent.append((self.slot, size))
        self.ledger.commit_runs(np.array([publish]))
        self.slot += 1
        nullified = bool(self.ledger.plan_runs().nullified[0])
        self.asked = 0.0 if nullified else self.E
        return Outcome(self.E if publish else 0.0, self.asked, dis, bar, lo,
                       size if publish else 0)

    def publish(self, slot: int, round2: SlotEstimate) -> None:
        """Take ``slot``'s publication estimate: it replaces the last one when anybody answered
        (a round nobody answered is charged all the same)."""
        if round2.reporters > 0:
            self.last, self.last_variance = round2.frequency, round2.variance
            self.estimated_at = int(slot)
