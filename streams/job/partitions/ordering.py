"""Which report of a user counts in a slot when reports come through the source stage.

Reports the source stage writes carry their source position (:mod:`streams.job.source.rekey`). One
user's events may sit on several source partitions, read by different workers at different
speeds, so the order in which they reach the user's partition of ``reports`` is not a property of
the source. Among such reports of one (user, slot) the partition counts the one with the
smallest (event time, source topic index, source partition, source offset), whatever the order
of arrival: a later report with a smaller position replaces the one counted while the slot is
open, and the one that loses is dead-lettered as ``duplicate_in_slot``. A repeat of the same
record (read again after a crash) has an equal position and changes nothing. Reports without a
source position keep the rule of the ``reports`` topic: the first in partition order counts, and
neither replaces nor is replaced by another.

:class:`SlotOrder` holds, per open slot, what was counted per user (event time, packed source
position, cell, level, offset on ``reports``) and decides a batch in a few vectorised steps.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import numpy as np

__all__ = ["Replaced", "SlotOrder"]

_FIELDS = ("times", "sources", "cells", "levels", "offsets")


@dataclass(frozen=True)
class Replaced:
    """Reports that lost their place to a report with a smaller position: per report its user
    index, level, cell and offset on ``reports``."""

    users: np.ndarray
    levels: np.ndarray
    cells: np.ndarray
    offsets: np.ndarray


class SlotOrder:
    """The counted sourced report per user of one open slot (module doc); ``sources`` is -1
    where the counted report had no source position, or nothing was counted."""

    def __init__(self, size: int) -> None:
        self.times = np.zeros(size, dtype=np.int64)
        self.sources = np.full(size, -1, dtype=np.int64)
        self.cells = np.zeros(size, dtype=np.int64)
        self.levels = np.zeros(size, dtype=np.int64)
        self.offsets = np.zeros(size, dtype=np.int64)

    def grow(self, size: int) -> None:
        """Room for ``size`` users."""
        n = self.times.shape[0]
        if n >= size:
            return
        for name in _FIELDS:
            old = getattr(self, name)
            new = np.full(size, -1 if name == "sources" else 0, dtype=np.int64)
            new[:n] = old
            setattr(self, name, new)

    def decide(self, seen: np.ndarray, users: np.ndarray, times: np.ndarray,
               sources: np.ndarray, cells: np.ndarray, levels: np.ndarray,
               offsets: np.ndarray) -> tuple[np.ndarray, Replaced]:
        """Decide sourced reports of this slot (all with ``sources >= 0``) against what was
        counted (``seen``: a report of the user is counted, updated here). Returns which of them
        count now, and the counted reports they replace."""
        self.grow(seen.shape[0])
        n = users.shape[0]
        accept = np.zeros(n, dtype=bool)
        order = np.lexsort((sources, times, users))
        su = users[order]
        head = np.ones(n, dtype=bool)
        head[1:] = su[1:] != su[:-1]
        best = order[head]  # per user of the batch, its smallest (time, source)
        u = users[best]
        fresh = ~seen[u]
        sourced = self.sources[u] >= 0
        earlier = sourced & ((times[best] < self.times[u])
                             | ((times[best] == self.times[u]) & (sources[best] < self.sources[u])))
        take = fresh | (~fresh & earlier)
        lost = best[~fresh & earlier]
        lu = users[lost]
        replaced = Replaced(lu.copy(), self.levels[lu].copy(), self.cells[lu].copy(),
                            self.offsets[lu].copy())
        won = best[take]
        wu = users[won]
        accept[won] = True
        seen[wu] = True
        self.times[wu] = times[won]
        self.sources[wu] = sources[won]
        self.cells[wu] = cells[won]
        self.levels[wu] = levels[won]
        self.offsets[wu] = offsets[won]
        return accept, replaced

    def state(self) -> dict:
        """A JSON-able form; :meth:`from_state` takes it back."""
        return {name: base64.b64encode(getattr(self, name).tobytes()).decode()
                for name in _FIELDS}

    @classmethod
    def from_state(cls, doc: dict) -> SlotOrder:
        """Reinstate a :meth:`state`."""
        out = cls(0)
        for name in _FIELDS:
            setattr(out, name, np.frombuffer(base64.b64decode(doc[name]), dtype=np.int64).copy())
        return out
