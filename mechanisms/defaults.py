"""The default configuration: the mechanism and post-processing run when none is named
(docs/results.md, "The default"; docs/design.md, "The default configuration").

The choice is fixed before any report and reads public inputs only: the users' requirements
(hence how many users there are) and the domain size. Its one quantity is the **per-slot
signal-to-noise ratio**

    snr = (n / d) / (sqrt(2) · w_min / E_min)

the mean count of a cell over the Laplace noise standard deviation a histogram has when the
strictest requirement spends its budget evenly (E_min/w_min per slot).

- ``snr >= 1``: ``pbu`` (each budget group's own histogram at E_i/w_i every slot, combined by
  least-squares weights) post-processed by ``kalman_split``. With a release every slot the
  filters see every slot, and their prediction error picks the smoothing online: per cell, the
  drift, and whether the cells' mean and their deviations from it are filtered apart.
- ``snr < 1``: a slot's noise exceeds a cell's mean count, so a release every slot is mostly noise,
  and a filter needs more slots to converge than a short or changing stream gives. ``pbad``
  (personalised distribution or absorption, whichever gives more) spends the budget in fewer,
  larger publications, rounded (``round``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from mechanisms.requirements import FixedRequirements

#: The name under which the default runs (``pwevent evaluate --mechanisms default``).
DEFAULT: str = "default"
#: Below this per-slot signal-to-noise ratio the default absorbs instead of releasing every slot.
SNR_THRESHOLD: float = 1.0


@dataclass(frozen=True)
class DefaultChoice:
    """What the default runs for one stream: a mechanism, its post-processing and the
    signal-to-noise ratio that chose them."""

    mechanism: str
    postprocess: str
    snr: float


def per_slot_snr(users: int, d: int, E_min: float, w_min: int) -> float:  # noqa: N803
    """The per-slot signal-to-noise ratio of the module doc: (users/d) / (sqrt(2) w_min/E_min)."""
    if users < 0 or d < 1 or not E_min > 0 or w_min < 1:
        raise ValueError(f"need users >= 0, d >= 1, E_min > 0, w_min >= 1; got {users}, {d}, "
                         f"{E_min}, {w_min}")
    return (users / d) / (math.sqrt(2.0) * w_min / E_min)


#: The mechanisms the default may run, each with its post-processing.
BRANCHES: dict[str, str] = {"pbu": "kalman_split", "pbad": "round"}


def _branch(snr: float) -> DefaultChoice:
    mechanism = "pbu" if snr >= SNR_THRESHOLD else "pbad"
    return DefaultChoice(mechanism, BRANCHES[mechanism], snr)


def choose(requirements: FixedRequirements, d: int) -> DefaultChoice:
    """The default's mechanism and post-processing for ``requirements`` over ``d`` cells."""
    return _branch(per_slot_snr(requirements.n, d, float(np.min(requirements.E)),
                                int(np.min(requirements.w))))


def choose_for_levels(levels: Mapping[tuple[int, float], int], d: int) -> DefaultChoice:
    """The same choice from users per requirement level ``(w, E) -> users`` (the job's
    coordinator sees levels, not users); levels without users do not count, and no user at all
    is a signal-to-noise ratio of 0."""
    held = {level: int(n) for level, n in levels.items() if int(n) > 0}
    if not held:
        return _branch(0.0)
    return _branch(per_slot_snr(sum(held.values()), d, min(E for _w, E in held),
                                min(w for w, _E in held)))
