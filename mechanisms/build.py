"""Every mechanism of :mod:`mechanisms.registry` built from one call, behind one step interface.

``build(name, requirements, d, rng, noise)`` returns a :class:`~mechanisms.run.mechanism.Stepper`:
``step(cells)`` takes one cell per user (-1: no report) and returns the slot's release, which
always has ``slot``, ``histogram`` and ``published``. The central mechanisms take
:class:`~mechanisms.requirements.FixedRequirements`, the dynamic ones
:class:`~mechanisms.requirements.DynamicRequirements`; the homogeneous baselines run at the
strictest requirement. ``batch(runs)`` steps fresh runs of one mechanism together.

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
from mechanisms.batch.dynamic import BatchedDynamic
from mechanisms.batch.fixed import BatchedFixed
from mechanisms.batch.steppers import BatchedSteppers
from mechanisms.registry import spec
from mechanisms.requirements import DynamicRequirements, FixedRequirements
from mechanisms.run.dynamic import DynamicMechanism
from mechanisms.run.fixed import FixedMechanism
from mechanisms.run.mechanism import Stepper


def build(
    name: str,
    requirements: FixedRequirements | DynamicRequirements,
    d: int,
    rng: np.random.Generator | None = None,
    noise: str = "laplace",
) -> Stepper:
    """The mechanism ``name`` over ``requirements`` and ``d`` cells (module doc), drawing from
    ``rng`` (a fresh generator where None).

    Three users with windows 4, 2 and 3 and a budget of 1 each; a slot takes one cell per user
    (-1: no report). PBA's first slot spends each user's dissimilarity budget E/(2w):

    >>> req = FixedRequirements(("a", "b", "c"), np.array([4, 2, 3]), np.array([1.0, 1.0, 1.0]))
    >>> mech = build("pba", req, d=2, rng=np.random.default_rng(0), noise="discrete")
    >>> release = mech.step(np.array([0, 1, -1]))
    >>> release.slot, release.eps1.round(4).tolist()
    (1, [0.125, 0.25, 0.1667])
    >>> release.histogram.dtype.kind  # integer noise: counts carry no floating-point bits
    'i'
    """
    rng = np.random.default_rng() if rng is None else rng
    s = spec(name.lower())
    if s.family == "dynamic":
        if not isinstance(requirements, DynamicRequirements):
            raise ValueError(f"{s.name} takes dynamic requirements (DynamicRequirements)")
        return DynamicMechanism(s.name, requirements, d, rng, noise)
    if not isinstance(requirements, FixedRequirements):
        raise ValueError(f"{s.name} takes fixed requirements (FixedRequirements)")
    if s.family == "central":
        return FixedMechanism(s.name, requirements, d, rng, noise)
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
