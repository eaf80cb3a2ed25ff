"""Every mechanism of :mod:`mechanisms.registry` built from one call, behind one step interface.

``build(name, requirements, d, rng, noise)`` returns a :class:`~mechanisms.mechanism.Stepper`:
``step(cells)`` takes one cell per user (-1: no report) and returns the slot's release, which
always has ``slot``, ``histogram`` and ``published``. The central mechanisms take
:class:`~mechanisms.requirements.FixedRequirements`, the dynamic ones
:class:`~mechanisms.dynamic.DynamicRequirements`; the homogeneous baselines run at the
strictest requirement.

>>> from mechanisms.registry import names
>>> req = FixedRequirements(("a", "b", "c"), np.array([4, 2, 3]), np.array([1.0, 1.0, 1.0]))
>>> released = {}
>>> for name in names(family="central") + names(family="baseline") + names(family="local"):
...     mech = build(name, req, 2, np.random.default_rng(0))
...     released[name] = mech.step(np.array([0, 1, -1]))
>>> sorted({(r.slot, r.histogram.shape) for r in released.values()})
[(1, (2,))]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mechanisms.baselines.ldp import BatchedPlbu, Plbu
from mechanisms.baselines.ldp_ids import BatchedLdpIds, LdpIds
from mechanisms.baselines.mtsp_batch import BatchedMtsp
from mechanisms.baselines.mtsp_ldp import MtspLdp
from mechanisms.baselines.spas import BatchedSpas, Spas
from mechanisms.central import BatchedFixed, FixedMechanism, create_mechanism
from mechanisms.dynamic import DynamicMechanism, DynamicRequirements
from mechanisms.dynamic_batch import BatchedDynamic
from mechanisms.mechanism import BatchRelease, Released, RuleRelease, Stepper, release_std
from mechanisms.registry import spec
from mechanisms.release import ReleaseRule
from mechanisms.requirements import FixedRequirements


def build(
    name: str,
    requirements: FixedRequirements | DynamicRequirements,
    d: int,
    rng: np.random.Generator,
    noise: str = "laplace",
) -> Stepper:
    """The mechanism ``name`` over ``requirements`` and ``d`` cells (module doc)."""
    s = spec(name.lower())
    if s.family == "dynamic":
        if not isinstance(requirements, DynamicRequirements):
            raise ValueError(f"{s.name} takes dynamic requirements (DynamicRequirements)")
        return DynamicMechanism(s.name, requirements, d, rng, noise)
    if not isinstance(requirements, FixedRequirements):
        raise ValueError(f"{s.name} takes fixed requirements (FixedRequirements)")
    if s.family == "central":
        return create_mechanism(s.name, requirements, d, rng, noise)
    if s.name == "plbu":
        return Plbu(requirements, d, rng)
    w, E = requirements.strictest()
    if s.name == "spas":
        return Spas(w, E, d, rng, noise)
    if s.name == "mtsp":
        return MtspLdp(w, E, requirements.n, d, rng)
    return LdpIds(s.name, w, E, requirements.n, d, rng)


def batch(
    mechanisms: Sequence[Stepper],
) -> (BatchedFixed | BatchedDynamic | BatchedPlbu | BatchedSpas | BatchedLdpIds
      | BatchedMtsp | BatchedSteppers):
    """Fresh mechanisms of one kind (from :func:`build`, each with its own generator) as one
    batch stepped by one call per slot: the central and dynamic mechanisms, SPAS, PLBU, the
    local-DP family (LBU..LPA) and MTSP-LDP vectorised over the runs (each run drawing from its
    own generator); a single dynamic run is stepped alone. Each run releases what it would
    alone.

    >>> req = FixedRequirements(("a", "b"), np.array([4, 2]), np.array([1.0, 1.0]))
    >>> runs = batch([build("pbd", req, 2, np.random.default_rng(s)) for s in range(3)])
    >>> runs.step(np.array([[0, 1], [1, 1], [0, -1]])).histogram.shape
    (3, 2)
    """
    mechanisms = list(mechanisms)
    if mechanisms and all(isinstance(m, FixedMechanism) for m in mechanisms):
        return BatchedFixed(mechanisms)
    if len(mechanisms) > 1 and all(isinstance(m, DynamicMechanism) for m in mechanisms):
        return BatchedDynamic(mechanisms)  # one run alone: its own ledger costs less
    if mechanisms and all(isinstance(m, Plbu) for m in mechanisms):
        return BatchedPlbu(mechanisms)
    if mechanisms and all(isinstance(m, Spas) for m in mechanisms):
        return BatchedSpas(mechanisms)
    if mechanisms and all(isinstance(m, LdpIds) for m in mechanisms) and len(
            {m.name for m in mechanisms}) == 1:
        return BatchedLdpIds(mechanisms)
    if mechanisms and all(isinstance(m, MtspLdp) for m in mechanisms):
        return BatchedMtsp(mechanisms)
    return BatchedSteppers(mechanisms)


class BatchedSteppers:
    """Runs of any mechanism stepped one by one behind the batch interface (one dynamic run
    alone, or runs of no batched kind), whose state is kept per run."""

    def __init__(self, steppers: Sequence) -> None:
        if not steppers:
            raise ValueError("a batch needs at least one run")
        self.steppers = list(steppers)
        self.runs = len(self.steppers)
        self.slot = 1

    def step(self, cells: np.ndarray) -> BatchRelease:
        """Release the next slot of every run from (runs, users) cells (-1: no report)."""
        return self._collect([s.step(c) for s, c in zip(self.steppers, cells, strict=True)])

    def step_classes(self, class_counts: Sequence[np.ndarray],
                     classes: Sequence[np.ndarray]) -> BatchRelease:
        """Release the next slot of every run from its reports per (class, cell): runs whose
        mechanism needs only counts (``step_classes``) are fed those."""
        return self._collect([s.step_classes(cc, cls) for s, cc, cls in
                              zip(self.steppers, class_counts, classes, strict=True)])

    def _collect(self, releases: list[Released]) -> BatchRelease:
        slot = self.slot
        self.slot += 1
        histogram = np.stack([np.asarray(r.histogram, dtype=np.float64) for r in releases])
        published = np.array([bool(r.published) for r in releases])
        thresholds = [getattr(r, "threshold", None) for r in releases]
        rules = [getattr(s, "rule", None) for s in self.steppers]
        if all(isinstance(t, float) for t in thresholds) and all(
                isinstance(r, ReleaseRule) for r in rules):
            std = np.array([release_std(published[b : b + 1], np.array([t]), rule)[0]
                            for b, (t, rule) in enumerate(zip(thresholds, rules, strict=True))])
            return RuleRelease(slot, histogram, published, std)
        return BatchRelease(slot, histogram, published)
