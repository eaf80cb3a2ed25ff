"""An open slot of the collector: the users it kept a report of and its reports counted per
(oracle, budget) group, which is all its estimate needs
(:func:`mechanisms.local.collector.estimate_counts`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from mechanisms.local import ParsedReport
from mechanisms.local.collector import SlotEstimate, estimate_counts

if TYPE_CHECKING:
    from streams.ldp_collector.reading import Reports


class OpenSlot:
    """One open slot over ``d`` cells: its users, and per budget of each oracle the number of
    reports kept and the observed count per cell (OUE: 1-bits; GRR: reported cells). An mtsp
    slot (``tree``) counts its OUE reports per width instead (:attr:`widths`: a round's
    reports share one budget; in round 1 a width is a level of the tree)."""

    def __init__(self, d: int, tree: bool = False) -> None:
        """An empty slot."""
        self.d, self.tree = d, tree
        self.users: set[str] = set()
        self.oue: dict[float, list] = {}  # eps -> [reports, ones per cell]
        self.grr: dict[float, list] = {}  # eps -> [reports, reports per cell]
        self.widths: dict[int, list] = {}  # mtsp: width -> [reports, ones per cell]

    def _group(self, oracle: str, eps: float, width: int = 0) -> list:
        if self.tree:
            group = self.widths.get(width)
            if group is None:
                group = self.widths[width] = [0, np.zeros(self.d, dtype=np.int64)]
            return group
        groups = self.oue if oracle == "oue" else self.grr
        group = groups.get(eps)
        if group is None:
            group = groups[eps] = [0, np.zeros(self.d, dtype=np.int64)]
        return group

    def add(self, report: ParsedReport) -> None:
        """Keep ``report`` (its user has none here yet)."""
        self.users.add(report.user)
        group = self._group(report.oracle, report.eps, report.cells)
        group[0] += 1
        if report.oracle == "oue":
            group[1][: report.cells] += np.asarray(report.bits, dtype=bool)
        else:
            group[1][report.cell] += 1

    def add_counts(self, oracle: str, eps: float, reports: int, counts: np.ndarray,
                   width: int = 0) -> None:
        """Count ``reports`` more reports of one budget (and ``width``), observed ``counts`` per
        cell (their users are added to :attr:`users` by the caller)."""
        group = self._group(oracle, eps, width)
        group[0] += int(reports)
        group[1] += counts

    def estimate(self) -> SlotEstimate:
        """The slot's estimate from every report kept, groups in increasing budget."""
        return estimate_counts(self.d, oue=[(e, *self.oue[e]) for e in sorted(self.oue)],
                               grr=[(e, *self.grr[e]) for e in sorted(self.grr)])


def add_reports(slot: Callable[[int], OpenSlot], kept: Reports) -> None:
    """Add ``kept`` (reports whose users have none at their slots yet) to the open slots
    ``slot(s)`` gives: their users, and their counts per (slot, oracle, budget)."""
    slots = kept.slot.tolist()
    opened = {s: slot(s) for s in set(slots)}
    for s, user in zip(slots, kept.users, strict=True):
        opened[s].users.add(user)
    d = kept.bits.shape[1]
    for grr in (False, True):
        pick = np.flatnonzero(kept.grr == grr)
        if not pick.size:
            continue
        at, slot_of = np.unique(kept.slot[pick], return_inverse=True)
        levels, level_of = np.unique(kept.eps[pick], return_inverse=True)
        widths, width_of = np.unique(kept.width[pick], return_inverse=True)
        groups, group_of = np.unique((slot_of * levels.size + level_of) * widths.size + width_of,
                                     return_inverse=True)
        sizes = np.bincount(group_of, minlength=groups.size)
        if grr:
            flat = group_of * d + kept.cell[pick]
        else:
            flat = (group_of.reshape(-1, 1) * d + np.arange(d))[kept.bits[pick]]
        counts = np.bincount(flat, minlength=groups.size * d).reshape(groups.size, d)
        for g, group in enumerate(groups.tolist()):
            rest, width = divmod(group, widths.size)
            s, level = divmod(rest, levels.size)
            opened[int(at[s])].add_counts("grr" if grr else "oue", float(levels[level]),
                                          int(sizes[g]), counts[g], int(widths[width]))
