"""Post-processing of released histograms: functions of released values and public parameters
only, so they cost no privacy (the post-processing property of differential privacy).

Nothing here sees an exact count. The inputs are what a release record carries: each slot's
released histogram, whether it was a fresh publication, the per-cell standard deviation of the
noise it added (``noise.scale``, a function of the public threshold), and the number of
registered users (public). Two methods:

- ``round``: projection onto non-negative integers (a count is one), cell by cell.
- ``kalman``: a causal Kalman filter per cell in the spirit of FAST (Fan and Xiong), then the
  projection. The state is the cell's count, a random walk of per-slot variance ``q``; a
  published slot is a measurement of it with the released noise variance; an approximated slot
  (which repeats an older publication) is no measurement, the filter only predicts. ``q`` is
  data-independent: :func:`process_variance` derives it from the registered users and the
  domain size alone (docs/results.md, "Post-processing", says how the rule was chosen).
- ``kalman_bank``: the same filter at each drift of :data:`BANK_DRIFTS` side by side; each cell
  takes, at each slot, the estimate of the filter whose predictions of that cell's publications
  erred least so far (squared errors, older ones discounted by :data:`BANK_FORGET` per
  publication). The choice reads released values only, so it is post-processing too, and it
  follows a stream whose pace changes, which no single drift does.
- ``kalman_split``: ``kalman_bank`` run three times: on the cells themselves, on the cells' mean
  and on each cell's deviation from the mean; each cell then takes, at each slot, the plain
  bank's estimate or the mean's plus its deviation's, whichever predicted that cell's
  publications better so far (the same discounted squared errors). With the same noise in every
  cell the mean and the deviations are orthogonal components of the release: the mean carries
  1/d of a cell's noise variance, the deviations 1 - 1/d, and the exact Kalman filter of the
  vector splits into their filters when the cells' total moves apart from their shape. A total
  that holds still (every user in one cell of d = 2) is then filtered to near exactness and a
  cell's own error falls to that of its deviation; where the total moves with the cells, the
  plain bank predicts better and is kept (docs/design.md, "The default configuration").

Every function works on a leading batch axis as well, so the evaluation filters all its runs at
once (compiled, :mod:`mechanisms.kernels.compiled_filters`, where numba is installed and the
batch has several runs or a long one), and
:class:`KalmanState` steps one slot at a time for the job, with the same arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np

from mechanisms.kernels import compiled_filters

#: The post-processing methods, ``none`` first (the raw release).
METHODS: Final = ("none", "round", "kalman", "kalman_bank", "kalman_split")
#: The methods that filter (they need each release's noise scale).
FILTERING: Final = ("kalman", "kalman_bank", "kalman_split")
#: Per-slot standard deviation of a cell's count, as a share of the users per cell, that the
#: Kalman filter's random walk assumes (docs/results.md, "Post-processing").
DRIFT: Final = 0.003
#: A publication more than this many standard deviations (of the prediction's error) from the
#: prediction restarts the filter at that publication.
RESTART: Final = 8.0
#: The drifts of the ``kalman_bank`` filters (docs/results.md, "Post-processing").
BANK_DRIFTS: Final = (0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03)
#: The weight of a bank filter's past prediction errors after each further publication.
BANK_FORGET: Final = 0.99


def process_variance(users: int | np.ndarray, d: int, drift: float = DRIFT) -> np.ndarray:
    """The random walk's per-slot variance of a cell: (drift * users / d)^2, at least 1.

    It depends on the registered users and the domain only (both public), never on reports.
    """
    if d < 1:
        raise ValueError(f"domain size d must be >= 1, got {d}")
    if not drift > 0:
        raise ValueError(f"drift must be > 0, got {drift!r}")
    per_cell = np.asarray(users, dtype=np.float64) / d
    return np.maximum((drift * per_cell) ** 2, 1.0)


def project(histograms: np.ndarray) -> np.ndarray:
    """Each value rounded to the nearest integer and clipped at 0 (float64 array)."""
    return np.maximum(np.rint(np.asarray(histograms, dtype=np.float64)), 0.0)


@dataclass
class KalmanState:
    """Per cell, the filter's estimate ``x`` and its variance ``p`` (inf: no measurement yet).

    Both carry any leading batch axes: (..., d).
    """

    x: np.ndarray
    p: np.ndarray

    @classmethod
    def fresh(cls, shape: tuple[int, ...]) -> KalmanState:
        """The state before any publication."""
        return cls(np.zeros(shape), np.full(shape, np.inf))

    def step(self, released: np.ndarray, published: np.ndarray, std: np.ndarray,
             q: np.ndarray | float, restart: float = RESTART) -> np.ndarray:
        """Advance one slot and return the estimate (..., d).

        ``released`` is the slot's released histogram (..., d), ``published`` (...) whether it
        is a fresh publication, ``std`` (...) or (..., d) its noise's standard deviation (any
        value where not published), ``q`` the random walk's variance (scalar or (...)).
        Before the first publication the estimate is the release itself (zeros).
        """
        released = np.asarray(released, dtype=np.float64)
        pub = np.asarray(published, dtype=bool)[..., None]
        r = np.square(np.asarray(std, dtype=np.float64))
        if r.ndim < released.ndim:
            r = r[..., None]
        q = np.asarray(q, dtype=np.float64)
        if q.ndim and q.ndim < released.ndim:
            q = q[..., None]
        p = self.p + q  # inf stays inf
        seen = np.isfinite(p)
        with np.errstate(invalid="ignore", divide="ignore"):
            gain = np.where(seen, p / (p + r), 1.0)
        update = pub & np.isfinite(r) & (r >= 0)
        with np.errstate(invalid="ignore"):
            # a publication too far from the prediction for the model: the count moved more
            # than the random walk allows, so the filter starts again from it
            jump = seen & (np.abs(released - self.x) > restart * np.sqrt(p + r))
        seen &= ~jump
        gain = np.where(seen, gain, 1.0)
        x = np.where(update, self.x + gain * (released - self.x), self.x)
        with np.errstate(invalid="ignore"):
            p = np.where(update, np.where(seen, (1.0 - gain) * p, r), p)
        self.x, self.p = x, p
        return np.where(np.isfinite(p), x, released)


@dataclass
class KalmanBank:
    """The ``kalman_bank`` filters of one or more streams: ``filters`` holds one
    :class:`KalmanState` per drift of :data:`BANK_DRIFTS` along a leading axis, ``score`` each
    filter's discounted squared prediction error per cell; both (drifts, ..., d)."""

    filters: KalmanState
    score: np.ndarray

    @classmethod
    def fresh(cls, shape: tuple[int, ...]) -> KalmanBank:
        """The bank before any publication, for releases of ``shape`` (..., d)."""
        full = (len(BANK_DRIFTS), *shape)
        return cls(KalmanState.fresh(full), np.zeros(full))

    def step(self, released: np.ndarray, published: np.ndarray, std: np.ndarray,
             users: int | np.ndarray, d: int, restart: float = RESTART) -> np.ndarray:
        """Advance one slot and return each cell's estimate from its best filter so far
        (arguments as :meth:`KalmanState.step`, with the registered users for the drifts)."""
        released = np.asarray(released, dtype=np.float64)
        pub = np.asarray(published, dtype=bool)[..., None]
        r = np.square(np.asarray(std, dtype=np.float64))
        if r.ndim < released.ndim:
            r = r[..., None]
        users = np.asarray(users, dtype=np.float64)
        q = np.stack([process_variance(users, d, drift) for drift in BANK_DRIFTS])[..., None]
        # a filter is scored on a publication it had predicted (it has seen one before)
        scored = pub & np.isfinite(r) & np.isfinite(self.filters.p)
        error = np.square(released - self.filters.x)
        self.score = np.where(scored, BANK_FORGET * self.score + error, self.score)
        estimates = self.filters.step(released, published, std, q, restart)
        best = np.argmin(self.score, axis=0)[None]
        return np.take_along_axis(estimates, best, axis=0)[0]


def split_scales(std: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """The noise standard deviations of the cells' mean and of a cell's deviation from it,
    from per-cell deviations ``std`` (..., d): with the mean noise variance r of the cells,
    sqrt(r / d) and sqrt(r (1 - 1/d))."""
    r = np.square(np.asarray(std, dtype=np.float64)).mean(axis=-1)
    return np.sqrt(r / d), np.sqrt(r * (1.0 - 1.0 / d))


@dataclass
class SplitBank:
    """The ``kalman_split`` filters of one or more streams: the plain bank (``cells``), the
    banks of the cells' mean (``mean``, (..., 1)) and of their deviations from it
    (``shape``), the last estimates of both routes (None before the first slot) and each
    route's discounted squared error predicting each cell's publications (..., d)."""

    cells: KalmanBank
    mean: KalmanBank
    shape: KalmanBank
    last_cells: np.ndarray | None
    last_split: np.ndarray | None
    score_cells: np.ndarray
    score_split: np.ndarray

    @classmethod
    def fresh(cls, shape: tuple[int, ...]) -> SplitBank:
        """The filters before any publication, for releases of ``shape`` (..., d)."""
        return cls(KalmanBank.fresh(shape), KalmanBank.fresh((*shape[:-1], 1)),
                   KalmanBank.fresh(shape), None, None, np.zeros(shape), np.zeros(shape))

    def step(self, released: np.ndarray, published: np.ndarray, std: np.ndarray,
             users: int | np.ndarray, d: int, restart: float = RESTART) -> np.ndarray:
        """Advance one slot and return each cell's estimate from the route that predicted it
        better so far (arguments as :meth:`KalmanBank.step`; ``std`` per cell (..., d), nan
        where not published)."""
        released = np.asarray(released, dtype=np.float64)
        std = np.broadcast_to(np.asarray(std, dtype=np.float64), released.shape)
        fresh = np.asarray(published, dtype=bool) & np.isfinite(std).all(axis=-1)
        direct = self.cells.step(released, fresh, std, users, d, restart)
        if d == 1:
            return direct
        mean_std, shape_std = split_scales(std, d)
        level = released.mean(axis=-1, keepdims=True)
        split = (self.mean.step(level, fresh, mean_std, users, d, restart)
                 + self.shape.step(released - level, fresh, shape_std[..., None], users, d,
                                   restart))
        if self.last_cells is not None:
            scored = fresh[..., None]
            self.score_cells = np.where(
                scored, BANK_FORGET * self.score_cells + np.square(released - self.last_cells),
                self.score_cells)
            self.score_split = np.where(
                scored, BANK_FORGET * self.score_split + np.square(released - self.last_split),
                self.score_split)
        self.last_cells, self.last_split = direct, split
        return np.where(self.score_split < self.score_cells, split, direct)


def kalman_bank(histograms: np.ndarray, published: np.ndarray, std: np.ndarray,
                users: int | np.ndarray, d: int) -> np.ndarray:
    """The ``kalman_bank`` estimates of a run's (or runs') releases, shaped as in
    :func:`kalman` (``users`` scalar or (...))."""
    h = np.asarray(histograms, dtype=np.float64)
    pub = np.asarray(published, dtype=bool)
    s = np.asarray(std, dtype=np.float64)
    lead = h.shape[:-2]
    if compiled_filters.available(int(np.prod(lead, dtype=np.int64)), h.shape[-2]):
        q = np.stack([np.broadcast_to(process_variance(users, d, drift), lead).reshape(-1)
                      for drift in BANK_DRIFTS])
        return compiled_filters.kalman_bank(h, pub, s, q, BANK_FORGET, RESTART)
    bank = KalmanBank.fresh(h.shape[:-2] + h.shape[-1:])
    out = np.empty_like(h)
    for t in range(h.shape[-2]):
        out[..., t, :] = bank.step(h[..., t, :], pub[..., t], _at(s, t, h.ndim), users, d)
    return out


def kalman_split(histograms: np.ndarray, published: np.ndarray, std: np.ndarray,
                 users: int | np.ndarray, d: int) -> np.ndarray:
    """The ``kalman_split`` estimates of a run's (or runs') releases, shaped as in
    :func:`kalman` (``users`` scalar or (...)): the three banks over the whole run (compiled
    where :func:`kalman_bank` is), then each slot's choice as :meth:`SplitBank.step` makes
    it."""
    h = np.asarray(histograms, dtype=np.float64)
    s = np.asarray(std, dtype=np.float64)
    per_cell = np.broadcast_to(s if s.ndim == h.ndim else s[..., None], h.shape)
    fresh = np.asarray(published, dtype=bool) & np.isfinite(per_cell).all(axis=-1)
    direct = kalman_bank(h, fresh, per_cell, users, d)
    if d == 1:
        return direct
    mean_std, shape_std = split_scales(per_cell, d)
    level = h.mean(axis=-1, keepdims=True)
    split = (kalman_bank(level, fresh, mean_std, users, d)
             + kalman_bank(h - level, fresh, shape_std, users, d))
    out = direct.copy()
    score_cells = np.zeros(h.shape[:-2] + h.shape[-1:])
    score_split = np.zeros_like(score_cells)
    for t in range(1, h.shape[-2]):
        scored = fresh[..., t, None]
        now = h[..., t, :]
        score_cells = np.where(
            scored, BANK_FORGET * score_cells + np.square(now - direct[..., t - 1, :]),
            score_cells)
        score_split = np.where(
            scored, BANK_FORGET * score_split + np.square(now - split[..., t - 1, :]),
            score_split)
        out[..., t, :] = np.where(score_split < score_cells, split[..., t, :],
                                  direct[..., t, :])
    return out


def kalman(histograms: np.ndarray, published: np.ndarray, std: np.ndarray,
           q: np.ndarray | float, restart: float = RESTART) -> tuple[np.ndarray, np.ndarray]:
    """Filter a run's (or runs') releases: ``histograms`` (..., T, d), ``published`` (..., T),
    ``std`` (..., T) or (..., T, d), ``q`` scalar or (...). Returns the estimates (..., T, d)
    and their variances under the filter's model (inf before the first publication)."""
    h = np.asarray(histograms, dtype=np.float64)
    pub = np.asarray(published, dtype=bool)
    s = np.asarray(std, dtype=np.float64)
    lead = h.shape[:-2]
    if compiled_filters.available(int(np.prod(lead, dtype=np.int64)), h.shape[-2]):
        q_runs = np.broadcast_to(np.asarray(q, dtype=np.float64), lead).reshape(-1)
        return compiled_filters.kalman(h, pub, s, q_runs, restart)
    T = h.shape[-2]
    state = KalmanState.fresh(h.shape[:-2] + h.shape[-1:])
    out = np.empty_like(h)
    var = np.empty_like(h)
    for t in range(T):
        out[..., t, :] = state.step(h[..., t, :], pub[..., t], _at(s, t, h.ndim), q, restart)
        var[..., t, :] = state.p
    return out, var


def _at(std: np.ndarray, t: int, ndim: int) -> np.ndarray:
    """Slot ``t`` of noise scales shaped (..., T) or, per cell, (..., T, d) (``ndim``: that of
    the histograms)."""
    return std[..., t, :] if std.ndim == ndim else std[..., t]


def postprocess(method: str, histograms: np.ndarray, published: np.ndarray, std: np.ndarray,
                users: int | np.ndarray, d: int) -> np.ndarray:
    """``method`` of :data:`METHODS` applied to releases shaped as in :func:`kalman`."""
    if method == "none":
        return np.asarray(histograms)
    if method == "round":
        return project(histograms)
    if method == "kalman":
        return project(kalman(histograms, published, std, process_variance(users, d))[0])
    if method == "kalman_bank":
        return project(kalman_bank(histograms, published, std, users, d))
    if method == "kalman_split":
        return project(kalman_split(histograms, published, std, users, d))
    raise ValueError(f"unknown post-processing {method!r}; choose from {', '.join(METHODS)}")


class Postprocessor:
    """One stream's post-processing, one slot at a time (the job's coordinator holds it).

    :meth:`step` takes what the slot's release record carries (histogram, published, the
    per-cell noise standard deviations, registered users) and returns the post-processed
    histogram as integers; :meth:`state` and :meth:`load` keep the filters across restarts, and
    replaying the same releases gives the same values.
    """

    def __init__(self, method: str, d: int) -> None:
        if method not in METHODS:
            raise ValueError(f"unknown post-processing {method!r}; choose from "
                             f"{', '.join(METHODS)}")
        self.method, self.d = method, d
        self.filter: KalmanState | KalmanBank | SplitBank = (
            KalmanBank.fresh((d,)) if method == "kalman_bank" else SplitBank.fresh((d,))
            if method == "kalman_split" else KalmanState.fresh((d,)))

    def step(self, histogram: np.ndarray | list, published: bool,
             std: np.ndarray | list | None, users: int) -> list[int]:
        """The slot's post-processed histogram (non-negative integers)."""
        h = np.asarray(histogram, dtype=np.float64)
        if h.shape != (self.d,):
            raise ValueError(f"expected {self.d} cells, got {h.shape}")
        if self.method in FILTERING:
            s = np.full(self.d, np.nan) if std is None else np.asarray(std, dtype=np.float64)
            fresh = np.asarray(bool(published) and std is not None)
            if isinstance(self.filter, KalmanBank | SplitBank):
                h = self.filter.step(h, fresh, s, users, self.d)
            else:
                h = self.filter.step(h, fresh, s, process_variance(users, self.d))
        return [int(v) for v in project(h).tolist()]

    def state(self) -> dict:
        """The filters as a JSON-able document (a variance of None: no measurement yet)."""
        if isinstance(self.filter, SplitBank):
            f = self.filter
            return {"method": self.method, "cells": _bank_doc(f.cells),
                    "mean": _bank_doc(f.mean), "shape": _bank_doc(f.shape),
                    "last_cells": None if f.last_cells is None else f.last_cells.tolist(),
                    "last_split": None if f.last_split is None else f.last_split.tolist(),
                    "score_cells": f.score_cells.tolist(), "score_split": f.score_split.tolist()}
        if isinstance(self.filter, KalmanBank):
            return {"method": self.method, **_bank_doc(self.filter)}
        return {"method": self.method, "x": self.filter.x.tolist(),
                "p": _finite_or_none(self.filter.p)}

    def load(self, doc: dict) -> None:
        """Reinstate :meth:`state`."""
        if doc.get("method") != self.method:
            raise ValueError(f"saved post-processing {doc.get('method')!r}, configured "
                             f"{self.method!r}")
        if self.method == "kalman_split":
            def last(values: list | None) -> np.ndarray | None:
                return None if values is None else np.asarray(values, dtype=np.float64)

            self.filter = SplitBank(
                _bank(doc["cells"]), _bank(doc["mean"]), _bank(doc["shape"]),
                last(doc["last_cells"]), last(doc["last_split"]),
                np.asarray(doc["score_cells"], dtype=np.float64),
                np.asarray(doc["score_split"], dtype=np.float64))
            return
        state = KalmanState(np.asarray(doc["x"], dtype=np.float64), _none_as_inf(doc["p"]))
        self.filter = _bank(doc) if self.method == "kalman_bank" else state


def _bank_doc(bank: KalmanBank) -> dict:
    """A bank's filters and scores as a JSON-able document."""
    return {"x": bank.filters.x.tolist(), "p": _finite_or_none(bank.filters.p),
            "score": bank.score.tolist()}


def _bank(doc: dict) -> KalmanBank:
    """Inverse of :func:`_bank_doc`."""
    return KalmanBank(KalmanState(np.asarray(doc["x"], dtype=np.float64),
                                  _none_as_inf(doc["p"])),
                      np.asarray(doc["score"], dtype=np.float64))


def _finite_or_none(values: np.ndarray) -> list:
    """``values`` as nested lists of floats, None where a value is not finite."""
    flat = [v if math.isfinite(v) else None for v in values.ravel().tolist()]
    return np.array(flat, dtype=object).reshape(values.shape).tolist()


def _none_as_inf(values: list) -> np.ndarray:
    """Inverse of :func:`_finite_or_none` for variances (None: inf)."""
    return np.asarray(np.where(np.equal(np.asarray(values, dtype=object), None), np.inf,
                               np.asarray(values, dtype=object)), dtype=np.float64)
