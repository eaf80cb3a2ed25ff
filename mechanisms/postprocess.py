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

Every function works on a leading batch axis as well, so the evaluation filters all its runs at
once, and :class:`KalmanState` steps one slot at a time for the job, with the same arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from mechanisms import compiled

#: The post-processing methods, ``none`` first (the raw release).
METHODS: Final = ("none", "round", "kalman")
#: Per-slot standard deviation of a cell's count, as a share of the users per cell, that the
#: Kalman filter's random walk assumes (docs/results.md, "Post-processing").
DRIFT: Final = 0.003
#: A publication more than this many standard deviations (of the prediction's error) from the
#: prediction restarts the filter at that publication.
RESTART: Final = 8.0


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


def kalman(histograms: np.ndarray, published: np.ndarray, std: np.ndarray,
           q: np.ndarray | float, restart: float = RESTART,
           compile_ok: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Filter a run's (or runs') releases: ``histograms`` (..., T, d), ``published`` (..., T),
    ``std`` (..., T) or (..., T, d), ``q`` scalar or (...). Returns the estimates (..., T, d)
    and their variances under the filter's model (inf before the first publication).

    A batch of runs (runs, T, d) with one std per slot is filtered by a compiled loop where
    numba is installed (:func:`mechanisms.compiled.kalman`, the same values); ``compile_ok=False``
    keeps the numpy steps of :class:`KalmanState`."""
    h = np.asarray(histograms, dtype=np.float64)
    pub = np.asarray(published, dtype=bool)
    s = np.asarray(std, dtype=np.float64)
    if compile_ok and h.ndim == 3 and s.shape == pub.shape == h.shape[:2] and compiled.available(
            h.shape[0]):  # a batch of runs, one std per slot: the same arithmetic, compiled
        return compiled.kalman(h, pub, s, np.broadcast_to(q, h.shape[:1]), restart)
    T = h.shape[-2]
    state = KalmanState.fresh(h.shape[:-2] + h.shape[-1:])
    out = np.empty_like(h)
    var = np.empty_like(h)
    for t in range(T):
        out[..., t, :] = state.step(h[..., t, :], pub[..., t], s[..., t], q, restart)
        var[..., t, :] = state.p
    return out, var


def postprocess(method: str, histograms: np.ndarray, published: np.ndarray, std: np.ndarray,
                users: int | np.ndarray, d: int) -> np.ndarray:
    """``method`` of :data:`METHODS` applied to releases shaped as in :func:`kalman`."""
    if method == "none":
        return np.asarray(histograms)
    if method == "round":
        return project(histograms)
    if method == "kalman":
        return project(kalman(histograms, published, std, process_variance(users, d))[0])
    raise ValueError(f"unknown post-processing {method!r}; choose from {', '.join(METHODS)}")


class Postprocessor:
    """One stream's post-processing, one slot at a time (the job's coordinator holds it).

    :meth:`step` takes what the slot's release record carries (histogram, published, the
    per-cell noise standard deviations, registered users) and returns the post-processed
    histogram as integers; :meth:`state` and :meth:`load` keep the filter across restarts, and
    replaying the same releases gives the same values.
    """

    def __init__(self, method: str, d: int) -> None:
        if method not in METHODS:
            raise ValueError(f"unknown post-processing {method!r}; choose from "
                             f"{', '.join(METHODS)}")
        self.method, self.d = method, d
        self.filter = KalmanState.fresh((d,))

    def step(self, histogram: np.ndarray | list, published: bool,
             std: np.ndarray | list | None, users: int) -> list[int]:
        """The slot's post-processed histogram (non-negative integers)."""
        h = np.asarray(histogram, dtype=np.float64)
        if h.shape != (self.d,):
            raise ValueError(f"expected {self.d} cells, got {h.shape}")
        if self.method == "kalman":
            s = np.full(self.d, np.nan) if std is None else np.asarray(std, dtype=np.float64)
            h = self.filter.step(h, np.asarray(bool(published) and std is not None), s,
                                 process_variance(users, self.d))
        return [int(v) for v in project(h).tolist()]

    def state(self) -> dict:
        """The filter as a JSON-able document (None: no measurement yet)."""
        p = [None if not np.isfinite(v) else float(v) for v in self.filter.p.tolist()]
        return {"method": self.method, "x": self.filter.x.tolist(), "p": p}

    def load(self, doc: dict) -> None:
        """Reinstate :meth:`state`."""
        if doc.get("method") != self.method:
            raise ValueError(f"saved post-processing {doc.get('method')!r}, configured "
                             f"{self.method!r}")
        self.filter = KalmanState(np.asarray(doc["x"], dtype=np.float64),
                                  np.array([np.inf if v is None else v for v in doc["p"]],
                                           dtype=np.float64))
