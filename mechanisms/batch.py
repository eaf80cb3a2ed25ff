"""Many independent runs of one mechanism stepped together: one Python call per slot.

The evaluation replays one stream through many runs of a mechanism (repeats, and settings of E,
w and seed). A run's slot is cheap on count vectors, so stepping runs one at a time costs mostly
Python overhead. Here the runs of a batch share each slot's call: per-level and per-cell arrays
carry a leading batch axis, and everything deterministic (the ledgers' plans and commits, OBS,
the sampling probabilities, the dissimilarity, the publish test, the bookkeeping) is computed for
the whole batch at once.

Every run keeps its own generator and makes exactly the calls it makes alone, in the same order
and with the same arguments, so each run of a batch releases exactly what it releases alone (the
tests check it bit for bit for every registered mechanism). Only the draws are made per run: a
short loop over the runs that draw at the slot.

- :class:`BatchedRule`: the release rule (OBS, sampling, dissimilarity, publish test, noise)
  over the batch.
- :class:`BatchedFixed`: the central mechanisms (PBD, PBA, BD, BA, Uniform, Sample), their
  ledgers and the rule vectorised over the batch. It takes per-(level, cell) counts directly
  (:meth:`BatchedFixed.step_counts`), which is how the evaluation feeds it: each realised stream
  is counted once per user *class* (users whose requirements agree in every setting) and
  :meth:`BatchedFixed.class_matrix` maps class counts to each run's level counts.
- :class:`BatchedDynamic`: DPBD and DPBA, the runs' per-user ledgers held as one ledger whose
  columns each belong to one run, levels and the rule over the batch.
- :class:`BatchedPlbu`: PLBU, its variances, weights and two-cell GRR estimates over the batch.
- :class:`BatchedSteppers`: any other mechanism (SPAS, the local-DP family, MTSP-LDP) run by
  run behind the same batch interface.

:func:`mechanisms.build.batch` picks the class.

Two runs of PBA at different budgets stepped together release what each releases alone:

>>> from mechanisms.requirements import FixedRequirements
>>> from mechanisms.central import create_mechanism
>>> req = [FixedRequirements(("a", "b"), np.array([4, 2]), np.array([E, 1.0])) for E in (1, 2)]
>>> alone = [create_mechanism("pba", r, 2, np.random.default_rng(7)) for r in req]
>>> batch = BatchedFixed([create_mechanism("pba", r, 2, np.random.default_rng(7)) for r in req])
>>> cells = np.array([[0, 1], [1, 1], [0, -1]])
>>> for slot in cells:
...     together = batch.step(np.stack([slot, slot]))
...     one = [m.step(slot) for m in alone]
...     assert [r.published for r in one] == together.published.tolist()
...     assert np.array_equal(np.stack([r.histogram for r in one]), together.histogram)
>>> batch.slot
4
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mechanisms.baselines.ldp import Plbu, grr_frequencies, grr_variance, oue_variance
from mechanisms.central import FixedMechanism
from mechanisms.dynamic import DynamicMechanism, _Directory, _validate
from mechanisms.ledgers.columns import UNIT
from mechanisms.ledgers.fixed import (
    AbsorptionLedger,
    BudgetLedger,
    DistributionLedger,
    SampleLedger,
    UniformLedger,
)
from mechanisms.mechanism import Released
from mechanisms.noise import draw_noise, noise_variance
from mechanisms.registry import histogram_dtype
from mechanisms.requirements import class_levels

#: a partial level set with at most this many (level, cell) draws is drawn value by value: the
#: same calls of the generator's binomial sampler as one array call, at a fraction of its cost
_SCALAR_DRAWS = 24


@dataclass(frozen=True)
class BatchRelease:
    """One slot of every run of a batch: ``histogram`` is (runs, d), ``published`` (runs,)."""

    slot: int
    histogram: np.ndarray
    published: np.ndarray


def batch_optimal_budget(
    budgets: np.ndarray, sizes: np.ndarray, noise: str = "laplace"
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`mechanisms.obs.optimal_budget` of each row: (threshold, error) per run.

    ``budgets`` and ``sizes`` are (runs, levels); a level of size 0 does not count. Each row
    goes through the same operations as the one-run OBS (distinct budgets in ascending order,
    their multiplicities, sequential prefix sums), so the results agree bit for bit.
    """
    budgets = np.asarray(budgets, dtype=np.float64)
    B, L = budgets.shape
    keep = sizes > 0
    if L == 1:  # one value: no prefix sums, the error is the noise variance alone
        theta = np.where(keep[:, 0] & (budgets[:, 0] > 0), budgets[:, 0], 0.0)
        with np.errstate(divide="ignore"):
            err = np.where(theta > 0, noise_variance(theta, noise), np.inf)
        return theta, err
    vals = np.where(keep, budgets, np.inf)
    order = np.argsort(vals, axis=1, kind="stable")
    sv = np.take_along_axis(vals, order, axis=1)
    sc = np.take_along_axis(np.where(keep, sizes, 0).astype(np.float64), order, axis=1)
    new = np.ones((B, L), dtype=bool)
    new[:, 1:] = sv[:, 1:] != sv[:, :-1]
    rank = np.cumsum(new, axis=1) - 1
    rows = np.broadcast_to(np.arange(B)[:, None], (B, L))
    finite = np.isfinite(sv)
    values = np.zeros((B, L))
    values[rows, rank] = np.where(finite, sv, 0.0)
    real = np.zeros((B, L), dtype=bool)
    real[rows, rank] = finite
    mult = np.zeros((B, L))
    np.add.at(mult, (rows, rank), sc)  # sums of integers: exact in any order
    a = np.expm1(values)
    n = mult
    zero = np.zeros((B, 1))
    pn = np.concatenate((zero, np.cumsum(n, axis=1)), axis=1)[:, :-1]
    pa = np.concatenate((zero, np.cumsum(n * a, axis=1)), axis=1)[:, :-1]
    pa2 = np.concatenate((zero, np.cumsum(n * a * a, axis=1)), axis=1)[:, :-1]
    positive = real & (values > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        variance = pa / a - pa2 / (a * a)
        bias = pn - pa / a
        errors = variance + bias * bias + noise_variance(values, noise)
    errors = np.where(positive, errors, np.inf)
    k = np.argmin(errors, axis=1)
    idx = np.arange(B)
    any_positive = positive.any(axis=1)
    theta = np.where(any_positive, values[idx, k], 0.0)
    err = np.where(any_positive, errors[idx, k], np.inf)
    return theta, err


def batch_inclusion(budgets: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """:func:`mechanisms.sampling.inclusion_probabilities` per row, threshold per row."""
    th = threshold[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.expm1(budgets) / np.expm1(th)
        p = np.clip(np.where(budgets >= th, 1.0, p), 0.0, 1.0)
    return np.where(th > 0, p, 0.0)


def draw_binomial(
    rng: np.random.Generator, counts: np.ndarray, p: np.ndarray
) -> np.ndarray | list[int]:
    """``rng.binomial(counts, p[:, None]).sum(axis=0)``, the partial levels' sampled counts
    (an array, or a list of exact integers).

    Small sets are drawn one value at a time, in the same order: the generator makes the same
    draws either way, and a scalar call costs a tenth of an array call.
    """
    if counts.size > _SCALAR_DRAWS:
        return rng.binomial(counts, p[:, None]).sum(axis=0)
    binomial = rng.binomial
    rows = counts.tolist()
    out = [0] * counts.shape[1]
    for row, q in zip(rows, p.tolist(), strict=True):
        for j, c in enumerate(row):
            out[j] += binomial(c, q)
    return out


class _History:
    """Each run's levels' eps2 over the last slots, in age order (column 0: the last slot), as
    the distribution ledger keeps it; writing moves a window over a wider buffer, so a slot costs
    no copy of the history."""

    def __init__(self, runs: int, levels: int, width: int) -> None:
        self.width = width
        self.spare = width + 64
        self.buffer = np.zeros((runs, levels, width + self.spare))
        self.pos = self.spare

    def view(self) -> np.ndarray:
        return self.buffer[:, :, self.pos : self.pos + self.width]

    def push(self, eps2: np.ndarray) -> None:
        if self.pos == 0:
            self.buffer[:, :, self.spare :] = self.buffer[:, :, : self.width].copy()
            self.pos = self.spare
        self.pos -= 1
        self.buffer[:, :, self.pos] = eps2


class _BatchLedger:
    """The fixed ledgers of a batch's runs (one kind), levels padded to the batch's largest count:
    a padded level has w = 1, E = 0, no users, and is charged nothing."""

    def __init__(self, ledgers: Sequence[BudgetLedger]) -> None:
        kinds = {type(x) for x in ledgers}
        if len(kinds) != 1:
            raise ValueError("a batch holds runs of one ledger kind")
        self.kind = kinds.pop()
        B = len(ledgers)
        L = max(x.levels for x in ledgers)
        self.levels = np.array([x.levels for x in ledgers])
        self.w = np.ones((B, L), dtype=np.int64)
        self.E = np.zeros((B, L))
        self.valid = np.zeros((B, L), dtype=bool)
        for b, x in enumerate(ledgers):
            if x.slot != 1:
                raise ValueError("a batch starts from fresh mechanisms (slot 1)")
            self.w[b, : x.levels] = x.w
            self.E[b, : x.levels] = x.E
            self.valid[b, : x.levels] = True
        self.slot = 1
        self.adaptive = self.kind.adaptive
        if issubclass(self.kind, DistributionLedger):
            # the one-run ledger sums a row as wide as the run's largest window: runs are
            # grouped by that width so that every row is summed as it is alone
            widths = np.array([int(x.w.max(initial=1)) for x in ledgers])
            self.history = _History(B, L, int(widths.max()))
            self.groups = []
            for width in np.unique(widths).tolist():
                rows = np.flatnonzero(widths == width)
                mask = np.arange(width)[None, None, :] < (self.w[rows] - 1)[:, :, None]
                self.groups.append((rows, width, mask, rows.size == B))
        elif issubclass(self.kind, AbsorptionLedger):
            self.shares = np.zeros((B, L), dtype=np.int64)
            self.last_published = np.zeros(B, dtype=np.int64)
        elif issubclass(self.kind, SampleLedger):
            self.last = np.zeros((B, L), dtype=np.int64)
        elif not issubclass(self.kind, UniformLedger):
            raise ValueError(f"no batched form of ledger {self.kind.__name__}")
        self.eps1 = self._eps1()

    def _eps1(self) -> np.ndarray:
        if issubclass(self.kind, (DistributionLedger, AbsorptionLedger)):
            return self.E / (2.0 * self.w)
        return np.zeros(self.E.shape)

    def plan(self) -> tuple[np.ndarray, np.ndarray]:
        """(eps2 per run and level, nullified per run) of the next slot."""
        B = self.E.shape[0]
        if issubclass(self.kind, DistributionLedger):
            view = self.history.view()
            spent = np.empty(self.E.shape)
            for rows, width, mask, every in self.groups:
                part = view[:, :, :width] if every else view[rows, :, :width]
                spent[rows] = np.where(mask, part, 0.0).sum(axis=2)
            remaining = np.maximum(self.E / 2.0 - spent, 0.0)
            return remaining / 2.0, np.zeros(B, dtype=bool)
        if issubclass(self.kind, AbsorptionLedger):
            share = self.eps1
            spans = np.maximum(self.shares - 1, 0)
            since = self.slot - self.last_published
            bound = spans.max(axis=1, initial=0)
            nullified = (self.last_published > 0) & (since <= bound)
            absorbed = np.maximum(since[:, None] - spans, 0)
            return share * np.minimum(absorbed, self.w), nullified
        if issubclass(self.kind, UniformLedger):
            return self.E / self.w, np.zeros(B, dtype=bool)
        due = (self.last == 0) | (self.slot - self.last >= self.w)
        return np.where(due, self.E, 0.0), ~(due & self.valid).any(axis=1)

    def commit(self, eps2: np.ndarray, published: np.ndarray) -> None:
        """Record each run's decision for the planned slot (``published``: not nullified)."""
        if issubclass(self.kind, DistributionLedger):
            self.history.push(np.where(published[:, None], eps2, 0.0))
        elif issubclass(self.kind, AbsorptionLedger):
            if published.any():
                since = self.slot - self.last_published
                absorbed = np.maximum(since[:, None] - np.maximum(self.shares - 1, 0), 0)
                self.shares = np.where(published[:, None], np.minimum(absorbed, self.w),
                                       self.shares)
                self.last_published = np.where(published, self.slot, self.last_published)
        elif issubclass(self.kind, SampleLedger):
            self.last = np.where(published[:, None] & (eps2 > 0), self.slot, self.last)
        self.slot += 1


class BatchedRule:
    """The release rule (:class:`mechanisms.release.ReleaseRule`) over a batch of runs: each run
    its generator and last publication; budgets, sizes and counts are (runs, levels[, d])
    arrays, a padded level having budget 0 and no users."""

    def __init__(self, rngs: Sequence[np.random.Generator], d: int, noise: str, test: str,
                 sensitivity: int = 1) -> None:
        self.rngs, self.d, self.noise, self.test = list(rngs), int(d), noise, test
        self.sensitivity = sensitivity
        self.runs = len(self.rngs)
        self.last = np.zeros((self.runs, self.d), dtype=histogram_dtype(noise))
        self._memo: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def scaled(self, eps: np.ndarray) -> np.ndarray:
        """Budgets divided by the sensitivity, as the rule runs on them."""
        return eps if self.sensitivity == 1 else eps / self.sensitivity

    def obs(self, eps: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:func:`batch_optimal_budget`, memoised: ledgers revisit the same budgets."""
        key = eps.tobytes() + b"|" + sizes.tobytes()
        hit = self._memo.get(key)
        if hit is None:
            if len(self._memo) >= 4096:
                self._memo.clear()
            hit = self._memo[key] = batch_optimal_budget(eps, sizes, self.noise)
        return hit

    def sampling(self, eps1: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
        """The dissimilarity's threshold, inclusion probabilities, fully kept and partly
        sampled levels, and the runs with any partly sampled level."""
        theta1, _ = self.obs(eps1, sizes)
        p1 = batch_inclusion(eps1, theta1)
        full1 = p1 >= 1.0
        partial1 = (p1 > 0.0) & ~full1
        return theta1, p1, full1, partial1, partial1.any(axis=1)

    def release(
        self,
        eps2: np.ndarray,
        nullified: np.ndarray,
        adaptive: bool,
        counts: np.ndarray,
        sizes: np.ndarray,
        first: tuple[np.ndarray, ...] | None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Decide and release every run's slot: (histogram (runs, d), published (runs,)).

        ``first`` is :meth:`sampling` of the dissimilarity budgets (adaptive rules)."""
        d, rngs, noise = self.d, self.rngs, self.noise
        eps2 = self.scaled(eps2)
        theta2, err2 = self.obs(eps2, sizes)
        live = ~nullified
        if adaptive:
            assert first is not None
            # the dissimilarity (Algorithm 3): each run draws its sample and its noise
            theta1, p1, full1, partial1, any_partial1 = first
            sampled = np.where(full1[:, :, None], counts, 0).sum(axis=1)
            noise1 = np.zeros(self.runs)
            drawing = np.flatnonzero(live & (theta1 > 0))
            for b in drawing.tolist():
                rng = rngs[b]
                if any_partial1[b]:
                    part = partial1[b]
                    sampled[b] += draw_binomial(rng, counts[b][part], p1[b][part])
                if noise == "laplace":
                    noise1[b] = rng.laplace(0.0, 1.0 / (d * theta1[b]))
                else:
                    noise1[b] = float(draw_noise(theta1[b], 1, rng, "discrete")[0])
            total = np.abs(sampled - self.last).sum(axis=1).astype(np.float64)
            dis = total / d + noise1 if noise == "laplace" else (total + noise1) / d
            dis = np.where(theta1 > 0, dis, np.inf)
            with np.errstate(divide="ignore"):
                bar = np.sqrt(err2) if self.test == "obs" else 1.0 / theta2
            publish = live & (theta2 > 0) & (dis > bar)
        else:
            publish = live & (theta2 > 0)
        histogram = self.last.copy()
        writing = np.flatnonzero(publish)
        if writing.size:
            p2 = batch_inclusion(eps2[writing], theta2[writing])
            full2 = p2 >= 1.0
            partial2 = (p2 > 0.0) & ~full2
            sub = counts[writing]
            sampled2 = np.where(full2[:, :, None], sub, 0).sum(axis=1)
            noise2 = np.zeros((writing.size, d), dtype=self.last.dtype)
            for i, b in enumerate(writing.tolist()):
                rng = rngs[b]
                part = partial2[i]
                if part.any():
                    sampled2[i] += draw_binomial(rng, sub[i][part], p2[i][part])
                noise2[i] = draw_noise(theta2[b], d, rng, noise)
            fresh = sampled2 + noise2
            histogram[writing] = fresh
            self.last[writing] = fresh
        return histogram, publish


class BatchedFixed:
    """Runs of one central mechanism (:class:`~mechanisms.central.FixedMechanism`) stepped
    together; each run keeps its requirements, its generator and its last publication.

    Built from fresh mechanisms (made as for a run alone, so their generators are where a run
    alone has them); the mechanisms themselves are not stepped.
    """

    def __init__(self, mechanisms: Sequence[FixedMechanism]) -> None:
        if not mechanisms:
            raise ValueError("a batch needs at least one run")
        first = mechanisms[0]
        for m in mechanisms:
            if (m.name, m.d, m.rule.noise, m.rule.test, m.rule.sensitivity) != (
                first.name, first.d, first.rule.noise, first.rule.test, first.rule.sensitivity
            ):
                raise ValueError("a batch holds runs of one mechanism, domain and noise")
        self.name, self.d = first.name, first.d
        self.rule = BatchedRule([m.rng for m in mechanisms], first.d, first.rule.noise,
                                first.rule.test, first.rule.sensitivity)
        self.ledger = _BatchLedger([m.ledger for m in mechanisms])
        B, L = self.ledger.E.shape
        self.runs, self.levels = B, L
        self.sizes = np.zeros((B, L), dtype=np.int64)
        for b, m in enumerate(mechanisms):
            self.sizes[b, : m.ledger.levels] = m.level_sizes()
        self.level_of_user = [m.level_of_user for m in mechanisms]
        # the dissimilarity budgets are fixed per run: their OBS and sampling are too
        self._first = self.rule.sampling(self.rule.scaled(self.ledger.eps1), self.sizes)

    @property
    def slot(self) -> int:
        """The next slot to be released (from 1)."""
        return self.ledger.slot

    @property
    def last(self) -> np.ndarray:
        """Each run's last published histogram, (runs, d)."""
        return self.rule.last

    def class_matrix(self, classes: Sequence[np.ndarray]) -> np.ndarray:
        """(runs, levels, classes) 0/1: which class's reports each run's level counts.

        ``classes[b]`` labels run b's users (0..C-1); every user of a class must be in one level
        of the run (``ValueError`` otherwise), so counting a stream's reports per class once
        gives every run's level counts exactly.
        """
        C = 1 + max(int(c.max(initial=-1)) for c in classes)
        out = np.zeros((self.runs, self.levels, C), dtype=np.int64)
        for b, (cls, lvl) in enumerate(zip(classes, self.level_of_user, strict=True)):
            if cls.shape != lvl.shape:
                raise ValueError(f"run {b}: one class per user expected")
            level_of_class = np.full(C, -1, dtype=np.int64)
            found = class_levels(cls, lvl)
            level_of_class[: found.size] = found
            seen = level_of_class >= 0
            out[b, level_of_class[seen], np.flatnonzero(seen)] = 1
        return out

    def level_counts(self, cells: np.ndarray) -> np.ndarray:
        """(runs, levels, d) reports per level and cell from (runs, users) cells (-1: none)."""
        width = self.d + 1
        out = np.zeros((self.runs, self.levels, self.d), dtype=np.int64)
        for b, lvl in enumerate(self.level_of_user):
            cb = np.asarray(cells[b])
            if cb.shape != lvl.shape or cb.dtype.kind not in "iu":
                raise ValueError(f"run {b}: expected {lvl.shape[0]} integer cells")
            if cb.size and (cb.min() < -1 or cb.max() >= self.d):
                raise ValueError(f"run {b}: cells must lie in [0, {self.d}) or be -1")
            flat = np.bincount(lvl * width + 1 + cb, minlength=self.levels * width)
            out[b] = flat.reshape(self.levels, width)[:, 1:]
        return out

    def step(self, cells: np.ndarray) -> BatchRelease:
        """Release the next slot of every run from (runs, users) cells (-1: no report)."""
        return self.step_counts(self.level_counts(cells))

    def step_counts(self, counts: np.ndarray) -> BatchRelease:
        """Release the next slot of every run from its reports per (level, cell): a
        (runs, levels, d) integer array (a padded level counts 0)."""
        ledger = self.ledger
        slot = ledger.slot
        eps2, nullified = ledger.plan()
        histogram, publish = self.rule.release(eps2, nullified, ledger.adaptive, counts,
                                               self.sizes, self._first)
        ledger.commit(eps2, publish)
        return BatchRelease(slot, histogram, publish)


class BatchedDynamic:
    """Runs of DPBD or DPBA (:class:`~mechanisms.dynamic.DynamicMechanism`) stepped together.

    The runs' per-user ledgers are held as one :class:`~mechanisms.ledgers.dynamic.
    DynamicLedger` whose columns each belong to one run (a run's users declare apart, so no
    column is shared, and groups are never merged across runs): it plans and commits the whole
    batch with one call per slot, each run nullified and published on its own. The runs' levels
    (distinct budget pairs of a run's columns) and the release rule are computed over the batch.

    Built from fresh mechanisms (their requirements, domain, noise and generators); the
    mechanisms themselves are not stepped.
    """

    def __init__(self, mechanisms: Sequence[DynamicMechanism]) -> None:
        if not mechanisms:
            raise ValueError("a batch needs at least one run")
        first = mechanisms[0]
        for m in mechanisms:
            if m.slot != 1 or m.n or m._extra:
                raise ValueError("a batch starts from fresh mechanisms (slot 1)")
            if (type(m.ledger), m.ledger.grid_bits, m.d, m.rule.noise, m.rule.test,
                m.rule.sensitivity) != (type(first.ledger), first.ledger.grid_bits, first.d,
                                        first.rule.noise, first.rule.test,
                                        first.rule.sensitivity):
                raise ValueError("a batch holds runs of one mechanism, domain and noise")
        self.requirements = [m.requirements for m in mechanisms]
        self.runs, self.d = len(mechanisms), first.d
        widths = np.array([m.ledger.max_window for m in mechanisms], dtype=np.int64)
        ledger = type(first.ledger)(int(widths.max()), first.ledger.grid_bits, 1 << 62)
        ledger.owner = np.zeros(0, dtype=np.int64)
        ledger.runs = self.runs
        ledger.run_tie_units = np.array([m.ledger.tie_units for m in mechanisms])
        ledger.nullified_runs = np.zeros(self.runs, dtype=bool)
        self.ledger = ledger
        self.rule = BatchedRule([m.rng for m in mechanisms], first.d, first.rule.noise,
                                first.rule.test, first.rule.sensitivity)
        self.directories = [_Directory() for _ in mechanisms]
        self.users = [np.zeros(0, dtype=np.int64) for _ in mechanisms]  # ledger index of each
        self._declared = [set(np.unique(r.slot).tolist()) for r in self.requirements]
        self._class_maps: list[tuple | None] = [None] * self.runs

    @property
    def slot(self) -> int:
        """The next slot to be released (from 1)."""
        return self.ledger.slot

    def _apply(self) -> None:
        """This slot's declarations, run by run (each its own declare: no shared column)."""
        ledger, t = self.ledger, self.ledger.slot
        for b, req in enumerate(self.requirements):
            if t not in self._declared[b]:
                continue
            users, wB, EB, wF, EF = req.at(t)
            if not users:
                continue
            wB, EB, wF, EF = _validate(users, wB, EB, wF, EF)
            directory = self.directories[b]
            local = directory.indices(users)
            fresh = local >= len(directory.users)
            index = np.empty(local.size, dtype=np.int64)
            index[~fresh] = self.users[b][local[~fresh]]
            order = np.argsort(local[fresh], kind="stable")
            added = ledger.n + np.arange(int(fresh.sum()), dtype=np.int64)
            index[np.flatnonzero(fresh)[order]] = added
            ledger.declare(index, wB, EB, wF, EF)
            directory.add(users, local)
            self.users[b] = np.concatenate([self.users[b], added])
            owner = np.zeros(ledger.size.shape[0], dtype=np.int64)
            owner[: ledger.owner.size] = ledger.owner[: owner.size]
            owner[ledger.group[self.users[b]]] = b
            ledger.owner = owner

    def step(self, cells: Sequence[np.ndarray]) -> BatchRelease:
        """Release the next slot of every run from its cells (-1: no report)."""
        self._apply()
        counts = []
        for b, c in enumerate(cells):
            c = np.asarray(c)
            n = self.users[b].size
            if c.shape != (n,) or c.dtype.kind not in "iu":
                raise ValueError(f"run {b}: expected {n} integer cells")
            if n and (c.min() < -1 or c.max() >= self.d):
                raise ValueError(f"run {b}: cells must lie in [0, {self.d}) or be -1")
            keep = c >= 0
            counts.append((self.users[b][keep], c[keep]))
        return self._release(counts, by_user=True)

    def step_classes(self, class_counts: Sequence[np.ndarray],
                     classes: Sequence[np.ndarray]) -> BatchRelease:
        """Release the next slot of every run from its reports per (class, cell), all users of
        a class being in one ledger column of the run."""
        self._apply()
        return self._release(list(zip(classes, class_counts, strict=True)), by_user=False)

    def _release(self, reports: list, by_user: bool) -> BatchRelease:
        ledger, d, B = self.ledger, self.d, self.runs
        slot = ledger.slot
        plan = ledger.plan_columns()
        k = ledger.k
        owner, size = ledger.owner[:k], ledger.size[:k]
        code1, code2 = plan.stored1.astype(np.int64), plan.stored2.astype(np.int64)
        width2 = int(code2.max(initial=0)) + 1
        pair = code1 * width2 + code2
        span = int(pair.max(initial=0)) + 1
        key = owner * span + pair
        live = size > 0
        keys = np.unique(key[live])  # sorted by run, then by (eps1, eps2) code: as alone
        level_of_col = np.searchsorted(keys, key)
        run_of_level = keys // span
        start = np.searchsorted(run_of_level, np.arange(B))
        rank = np.arange(keys.size) - start[run_of_level]  # a level's index within its run
        P = max(1, int(np.bincount(run_of_level, minlength=B).max(initial=0)))
        table = ledger.table
        eps1 = np.zeros((B, P))
        eps2 = np.zeros((B, P))
        eps1[run_of_level, rank] = table[(keys % span) // width2] * UNIT
        eps2[run_of_level, rank] = table[(keys % span) % width2] * UNIT
        sizes = np.zeros((B, P), dtype=np.int64)
        np.add.at(sizes, (owner[live], rank[level_of_col[live]]), size[live])
        counts = np.zeros((B, P, d), dtype=np.int64)
        for b, (who, what) in enumerate(reports):
            if by_user:
                levels = rank[level_of_col[ledger.group[who]]]
                np.add.at(counts[b], (levels, what), 1)
            else:
                column_of_class = self._columns(b, who)
                used = column_of_class >= 0
                levels = rank[level_of_col[column_of_class[used]]]
                np.add.at(counts[b], levels, np.asarray(what)[used])
        first = self.rule.sampling(self.rule.scaled(eps1), sizes)
        histogram, publish = self.rule.release(eps2, ledger.nullified_runs.copy(), True, counts,
                                               sizes, first)
        done = ledger.commit_runs(publish)
        return BatchRelease(slot, histogram, done)

    def _columns(self, b: int, classes: np.ndarray) -> np.ndarray:
        """The ledger column of each class of run b's users (cached while columns hold)."""
        cached = self._class_maps[b]
        if cached is None or cached[0] is not classes or cached[1] != self.ledger.version:
            if classes.shape != self.users[b].shape:
                raise ValueError(f"run {b}: one class per declared user expected")
            cols = class_levels(classes, self.ledger.group[self.users[b]])
            cached = self._class_maps[b] = (classes, self.ledger.version, cols)
        return cached[2]


class BatchedPlbu:
    """Runs of PLBU (:class:`~mechanisms.baselines.ldp.Plbu`) stepped together: the variances
    and weights over the batch, each run's simulated reports drawn from its generator as alone
    (small sets value by value), each run's estimate combined as alone."""

    def __init__(self, mechanisms: Sequence[Plbu]) -> None:
        if not mechanisms:
            raise ValueError("a batch needs at least one run")
        self.mechanisms = list(mechanisms)
        d = self.mechanisms[0].d
        if any(m.d != d or m.slot != 1 for m in self.mechanisms):
            raise ValueError("a batch holds fresh runs over one domain")
        self.runs, self.d = len(self.mechanisms), d
        self.groups = [m.group_eps.shape[0] for m in self.mechanisms]
        G = max(self.groups)
        self.eps = np.zeros((self.runs, G))
        self.grr = np.zeros((self.runs, G), dtype=bool)
        for b, m in enumerate(self.mechanisms):
            self.eps[b, : self.groups[b]] = m.group_eps
            self.grr[b, : self.groups[b]] = m.use_grr
        e = np.exp(self.eps)
        self._p = e / (e + d - 1)  # GRR: keep the true cell
        self._q = 1.0 / (e + d - 1)
        self._class_maps: list[tuple[np.ndarray, np.ndarray] | None] = [None] * self.runs
        self.slot = 1

    def step(self, cells: Sequence[np.ndarray]) -> BatchRelease:
        """Release the next slot of every run from its cells (-1: no value)."""
        counts = np.zeros((self.runs, self.eps.shape[1], self.d), dtype=np.int64)
        width = self.d + 1
        for b, (m, c) in enumerate(zip(self.mechanisms, cells, strict=True)):
            G = self.groups[b]
            flat = np.bincount(m._keys + np.asarray(c), minlength=G * width)
            counts[b, :G] = flat.reshape(G, width)[:, 1:]
        return self.step_counts(counts)

    def step_classes(self, class_counts: Sequence[np.ndarray],
                     classes: Sequence[np.ndarray]) -> BatchRelease:
        """Release the next slot of every run from its reports per (class, cell)."""
        counts = np.zeros((self.runs, self.eps.shape[1], self.d), dtype=np.int64)
        for b, (m, cc, cls) in enumerate(zip(self.mechanisms, class_counts, classes,
                                             strict=True)):
            cached = self._class_maps[b]
            if cached is None or cached[0] is not cls:
                cached = self._class_maps[b] = (cls, class_levels(cls, m.group_of_user))
            np.add.at(counts[b], cached[1], np.asarray(cc, dtype=np.int64))
        return self.step_counts(counts)

    def step_counts(self, counts: np.ndarray) -> BatchRelease:
        """Release the next slot of every run from its reports per (budget group, cell), a
        (runs, groups, d) array (a padded group counts 0)."""
        d = self.d
        sizes = counts.sum(axis=2)
        kept_n = np.maximum(sizes, 1)
        with np.errstate(divide="ignore"):  # padded groups: budget 0, no users
            var = np.where(self.grr, grr_variance(self.eps, d, kept_n),
                           oue_variance(self.eps, kept_n))
        weights = np.where(sizes > 0, 1.0 / var, 0.0)
        histogram = np.zeros((self.runs, d))
        # GRR over two cells, the sweep's case: every run's kept reports drawn value by value,
        # then the estimates of the whole batch at once
        fast = self.grr & (sizes > 0) if d == 2 else np.zeros(sizes.shape, dtype=bool)
        kept = np.zeros(counts.shape, dtype=np.int64)
        freqs = []
        for b, m in enumerate(self.mechanisms):
            G, rng = self.groups[b], m.rng
            size, count = sizes[b, :G], counts[b, :G]
            freq = np.zeros((G, d))
            oue = np.flatnonzero((size > 0) & ~m.use_grr)
            if oue.size:  # as Plbu.step_counts
                n = size[oue][:, None]
                q = 1.0 / (np.exp(m.group_eps[oue]) + 1.0)[:, None]
                ones = rng.binomial(count[oue], 0.5) + rng.binomial(n - count[oue], q)
                freq[oue] = (ones - n * q) / (n * (0.5 - q))
            if d == 2:
                binomial = rng.binomial
                for g, (row, pg, go) in enumerate(zip(count.tolist(), self._p[b].tolist(),
                                                      fast[b].tolist(), strict=False)):
                    if go:
                        kept[b, g] = (binomial(row[0], pg), binomial(row[1], pg))
            else:
                grr = np.flatnonzero((size > 0) & m.use_grr)
                if grr.size:
                    freq[grr] = grr_frequencies(count[grr], m.group_eps[grr], rng)
            freqs.append(freq)
        if fast.any():
            landed = (counts - kept)[:, :, ::-1].astype(np.float64)  # the other cell's moved
            safe = np.maximum(sizes, 1)[:, :, None]
            p, q = self._p[:, :, None], self._q[:, :, None]
            with np.errstate(divide="ignore", invalid="ignore"):
                grr_freq = ((kept + landed) / safe - q) / (p - q)
        for b, freq in enumerate(freqs):
            G = self.groups[b]
            if fast[b].any():
                freq = np.where(fast[b, :G, None], grr_freq[b, :G], freq)
            total = int(sizes[b].sum())
            if total:
                w = weights[b, :G]
                histogram[b] = total * (w @ freq) / w.sum()
        slot = self.slot
        self.slot += 1
        return BatchRelease(slot, histogram, np.ones(self.runs, dtype=bool))


class BatchedSteppers:
    """Runs of any mechanism stepped one by one behind the batch interface: the dynamic
    mechanisms and the baselines, whose state is kept per run."""

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
        return BatchRelease(slot, np.stack([np.asarray(r.histogram, dtype=np.float64)
                                            for r in releases]),
                            np.array([bool(r.published) for r in releases]))
