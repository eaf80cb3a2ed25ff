"""MTSP-LDP on devices: the tree's levels, who reports which, and the publication intervals
(docs/ldp-reports.md, "Tree rounds").

The tree runs over the oracle's ``c = d + 1`` cells (cell ``d``: "no value"), padded to
``2^h`` leaves, ``h = max(1, bit_length(c - 1))`` (:func:`tree_height`); level ``l`` in
``[1, h]`` holds ``ceil(c / 2^(h - l))`` real nodes (:func:`level_cells`) and cell ``x`` lies in
its node ``x >> (h - l)``, as :mod:`mechanisms.baselines.private_tree` lays trees out.

- **Round 1 (M1).** The evaluation splits the users at random over the h levels each slot; on
  devices a user's level comes from its public position (:func:`mechanisms.local.population.
  position`): ``1 + floor(position h / 2^32)`` (:func:`tree_level`), so any party can check
  it. The user reports its level's node through OUE over the level's real nodes, at E/(2w),
  every slot the decisions ask one (all of them: MTSP-LDP never skips M1).
- **Round 2 (M3).** The decision names a partition of the cells into intervals by their first
  cells, ``starts`` (increasing, the first 0); a user answers with its cell's interval
  (:func:`interval_of`) through OUE over the intervals at the decision's budget, at most E/2.

The client keeps its ledger over virtual slots (window 2w), as for lbd and lba
(:mod:`mechanisms.local.rounds`), so a forged decision cannot make it overspend; the partition
decides nothing about privacy, only which cells share a bit.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Final

import numpy as np

from mechanisms.local.wire import MAX_CELLS

#: The protocol whose rounds run over a tree.
TREE_PROTOCOL: Final = "mtsp"
#: The positions a level is drawn from: [0, 2^32).
_POSITIONS: Final = 2**32


def tree_height(cells: int) -> int:
    """The tree's height over ``cells`` oracle cells: the smallest h >= 1 with 2^h >= cells."""
    return max(1, (int(cells) - 1).bit_length())


def tree_level(at: int, h: int) -> int:
    """The level in [1, h] of a user at public position ``at``: 1 + floor(at h / 2^32)."""
    return 1 + int(at) * int(h) // _POSITIONS


def tree_levels(at: np.ndarray, h: int) -> np.ndarray:
    """:func:`tree_level` of each public position in ``at`` (integers in [0, 2^32))."""
    return 1 + np.asarray(at, dtype=np.int64) * int(h) // _POSITIONS


def level_cells(cells: int, h: int, level: int) -> int:
    """The real nodes of ``level`` over ``cells`` oracle cells: ceil(cells / 2^(h - level))."""
    return -(-int(cells) // (1 << (int(h) - int(level))))


def node_of(cell: int, h: int, level: int) -> int:
    """The node of ``level`` that holds ``cell``, counted from the level's left end."""
    return int(cell) >> (int(h) - int(level))


def interval_of(cell: int, starts: Sequence[int]) -> int:
    """The interval of the partition ``starts`` (first cells, increasing) holding ``cell``."""
    return bisect_right(starts, int(cell)) - 1


def check_starts(starts: object) -> tuple[int, ...]:
    """``starts`` as a tuple, or ValueError unless it is a list of integers in [0, 65535],
    strictly increasing, the first 0 (or empty: no publication)."""
    if not isinstance(starts, list | tuple):
        raise ValueError(f"starts must be a list of integers, got {type(starts).__name__}")
    if len(starts) > MAX_CELLS:
        raise ValueError(f"starts holds at most {MAX_CELLS} cells, got {len(starts)}")
    previous = -1
    for x in starts:
        if type(x) is not int or not previous < x < MAX_CELLS:
            raise ValueError(f"starts must be integers in [0, {MAX_CELLS - 1}], strictly "
                             f"increasing, got {x!r} after {previous}"[:200])
        previous = x
    if starts and starts[0] != 0:
        raise ValueError(f"the first interval starts at cell 0, not {starts[0]!r}")
    return tuple(starts)
