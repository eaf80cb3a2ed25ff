"""Compiled loops of the post-processing filters over a batch of runs, for the evaluation.

:func:`mechanisms.postprocess.kalman` and :func:`~mechanisms.postprocess.kalman_bank` step every
slot with numpy over the runs, which costs a few numpy calls per slot whatever the batch; the
kernels here run each (run, cell) recursion as scalars. They compute exactly what the numpy code
computes, bit for bit (the same operations in the same order, + - * / and ``sqrt`` alone, no
fast-math), and the numpy code stays the reference and the job's path (the job filters one
slot at a time and does not depend on numba). ``tests/mechanisms/test_postprocess.py``
compares both on random releases.
"""

from __future__ import annotations

import math

import numpy as np

from mechanisms.kernels.compiled import kernel, numba_module

#: A run alone of at least this many slots takes the compiled filters too: the numpy code
#: costs about 0.3 ms a slot for ``kalman_split``, numba's import and cached kernels about
#: half a second once per process.
LONG_RUN = 2_000


def available(runs: int, slots: int = 0) -> bool:
    """Whether a batch of ``runs`` runs of ``slots`` slots each takes the compiled filters:
    numba is installed, and the batch has more than one run or its run is long
    (:data:`LONG_RUN`). Only the evaluation filters whole runs; the job steps one slot at a
    time with the numpy code."""
    return (runs > 1 or slots >= LONG_RUN) and numba_module() is not None


def _batch(histograms: np.ndarray, published: np.ndarray, std: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The releases as contiguous (runs, T, d), (runs, T) and (runs, T, d) arrays."""
    h = np.ascontiguousarray(histograms, dtype=np.float64)
    T, d = h.shape[-2:]
    h = h.reshape(-1, T, d)
    pub = np.ascontiguousarray(np.asarray(published, dtype=bool).reshape(-1, T))
    s = np.asarray(std, dtype=np.float64)
    if s.ndim < np.asarray(histograms).ndim:
        s = s[..., None]
    s = np.ascontiguousarray(np.broadcast_to(s, np.asarray(histograms).shape).reshape(-1, T, d))
    return h, pub, s


def kalman(histograms: np.ndarray, published: np.ndarray, std: np.ndarray, q: np.ndarray,
           restart: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`mechanisms.postprocess.kalman` with ``q`` one value per run (runs,)."""
    h, pub, s = _batch(histograms, published, std)
    qs = np.ascontiguousarray(np.broadcast_to(np.asarray(q, dtype=np.float64), h.shape[:1]))
    out, var = np.empty_like(h), np.empty_like(h)
    _kalman(h, pub, s, qs, float(restart), out, var)
    shape = np.shape(histograms)
    return out.reshape(shape), var.reshape(shape)


def kalman_bank(histograms: np.ndarray, published: np.ndarray, std: np.ndarray,
                q: np.ndarray, forget: float, restart: float) -> np.ndarray:
    """:func:`mechanisms.postprocess.kalman_bank` with ``q`` (drifts, runs)."""
    h, pub, s = _batch(histograms, published, std)
    qs = np.ascontiguousarray(np.broadcast_to(np.asarray(q, dtype=np.float64),
                                              (np.shape(q)[0], h.shape[0])))
    out = np.empty_like(h)
    _kalman_bank(h, pub, s, qs, float(forget), float(restart), out)
    return out.reshape(np.shape(histograms))


@kernel
def _filter_step(x, p, released, fresh, r, q, restart):
    """One slot of :meth:`mechanisms.postprocess.KalmanState.step` for one cell: the new
    (x, p) and the estimate."""
    p = p + q
    seen = math.isfinite(p)
    gain = p / (p + r) if seen else 1.0
    update = fresh and math.isfinite(r) and r >= 0.0
    if seen and abs(released - x) > restart * math.sqrt(p + r):
        seen = False
    if not seen:
        gain = 1.0
    if update:
        x = x + gain * (released - x)
        p = (1.0 - gain) * p if seen else r
    return x, p, (x if math.isfinite(p) else released)


@kernel
def _kalman(h, pub, s, q, restart, out, var):
    runs, T, d = h.shape
    for b in range(runs):
        for j in range(d):
            x, p = 0.0, math.inf
            for t in range(T):
                r = s[b, t, j] * s[b, t, j]
                x, p, out[b, t, j] = _filter_step(x, p, h[b, t, j], pub[b, t], r, q[b], restart)
                var[b, t, j] = p


@kernel
def _kalman_bank(h, pub, s, q, forget, restart, out):
    runs, T, d = h.shape
    K = q.shape[0]
    xs, ps, score, est = np.empty(K), np.empty(K), np.empty(K), np.empty(K)
    for b in range(runs):
        for j in range(d):
            xs[:] = 0.0
            ps[:] = math.inf
            score[:] = 0.0
            for t in range(T):
                released = h[b, t, j]
                r = s[b, t, j] * s[b, t, j]
                scored = pub[b, t] and math.isfinite(r)
                for k in range(K):
                    if scored and math.isfinite(ps[k]):
                        error = (released - xs[k]) * (released - xs[k])
                        score[k] = forget * score[k] + error
                    xs[k], ps[k], est[k] = _filter_step(xs[k], ps[k], released, pub[b, t], r,
                                                        q[k, b], restart)
                best = 0
                for k in range(1, K):
                    if score[k] < score[best]:
                        best = k
                out[b, t, j] = est[best]
