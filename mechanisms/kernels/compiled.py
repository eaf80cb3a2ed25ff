"""Compiled loops of a batch's slot, for the evaluation: numba, when installed (the evaluation
extra), runs the few loops that numpy cannot take over the runs of a batch without a Python
call per run or per group of runs.

Each kernel computes exactly what its numpy counterpart computes, bit for bit, and the numpy
code stays the reference: the job runs one run per mechanism and never uses these (numba is not
one of its dependencies), a batch of one takes the numpy path, and the tests compare both on
every kernel (``tests/mechanisms/test_compiled.py``, and ``tests/mechanisms/test_batch.py``'s
runs alone against the same runs batched). What keeps them equal:

- the generators: numba's ``Generator.binomial`` and ``Generator.laplace`` follow numpy's
  algorithms on the same bit generator, and numpy's multinomial is drawn as numpy draws it,
  one binomial per category;
- sums: :func:`_pairwise` adds in the order of numpy's pairwise summation of a contiguous row;
  prefix sums add left to right, as ``np.cumsum`` does;
- transcendental functions (``expm1``, the noise variance) are computed by numpy before the
  kernel runs, elementwise, and only read inside; the kernels use + - * / alone, which numba
  compiles without fusing or reordering (no fast-math).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

import numpy as np

#: numba and its ``typed`` module once looked up ([None, None] without the evaluation extra).
#: numba is imported on the first batch of more than one run, never by a process that steps
#: runs alone: a job's worker or a command does not pay its import (about 0.2 s a process).
_NUMBA: list = []
_GENERATORS: list = []


def numba_module() -> ModuleType | None:
    """numba, imported on first need; None where it is not installed."""
    if not _NUMBA:
        try:  # the evaluation extra; the job never needs it
            import numba
            from numba import typed
        except ImportError:  # pragma: no cover - exercised where the extra is absent
            _NUMBA[:] = [None, None]
        else:
            _NUMBA[:] = [numba, typed]
    return _NUMBA[0]


class _Kernel:
    """A kernel until its module's kernels are compiled: the first call compiles every kernel
    of the module (:func:`compile_kernels`, so that kernels calling kernels find each other
    compiled) and runs the compiled one."""

    def __init__(self, func: Callable) -> None:
        self.func = func
        functools.update_wrapper(self, func)

    def __call__(self, *args: object) -> object:
        module = sys.modules[self.func.__module__]
        compile_kernels(module)
        return getattr(module, self.func.__name__)(*args)


def kernel(func: Callable) -> Callable:
    """``func`` compiled by numba where it is installed (on the first call of a kernel of its
    module, and cached on disk between processes), else ``func`` itself."""
    return _Kernel(func)


def compile_kernels(module: ModuleType) -> None:
    """Put in place of each kernel of ``module`` its numba dispatcher (numba compiles it on its
    first call), or its Python function without numba."""
    nb = numba_module()
    for name, value in list(vars(module).items()):
        if isinstance(value, _Kernel):
            setattr(module, name,
                    nb.njit(cache=True, nogil=True)(value.func) if nb is not None else value.func)


def available(runs: int) -> bool:
    """Whether a batch of ``runs`` runs takes the compiled loops: numba is installed and the
    batch has more than one run (a run alone, as in the job, takes the numpy code and never
    imports numba)."""
    return runs > 1 and numba_module() is not None


def generators(rngs: Sequence[np.random.Generator]) -> object:
    """The runs' generators as one typed list, kept while the same generators are asked for."""
    key = tuple(map(id, rngs))
    if not _GENERATORS or _GENERATORS[0] != key:
        numba_module()
        _GENERATORS[:] = [key, list(rngs), _NUMBA[1].List(rngs)]  # the list keeps ids valid
    return _GENERATORS[2]


def draw_runs(rngs, who, rows, probs, begin, end, scales, count):
    """:func:`mechanisms.release.run_draws.draw_runs` for Laplace noise of scale ``scales[i]``."""
    thinned = np.zeros((who.size, rows.shape[1]), dtype=np.int64)
    noise = np.empty((who.size, count))
    as_int = np.int64
    _draw_runs(generators(rngs), who.astype(as_int, copy=False), rows.astype(as_int, copy=False),
               probs.astype(np.float64, copy=False), begin.astype(as_int, copy=False),
               end.astype(as_int, copy=False), scales, count, thinned, noise)
    return thinned, noise


@kernel
def _draw_runs(gens, who, rows, probs, begin, end, scales, count, thinned, noise):
    d = rows.shape[1]
    for i in range(who.size):
        g = gens[who[i]]
        for k in range(begin[i], end[i]):
            q = probs[k]
            for j in range(d):
                thinned[i, j] += g.binomial(rows[k, j], q)
        for m in range(count):
            noise[i, m] = g.laplace(0.0, scales[i])


def ipw_runs(rngs, who, counts, p, scales):
    """:func:`mechanisms.release.ipw.ipw_release` for item i: run ``who[i]`` releases its counts
    ``counts[i]`` (levels, d), d >= 2 and at most 128 levels, with inclusion probabilities
    ``p[i]`` and Laplace noise of scale ``scales[i]``. Returns the estimates (items, d) and,
    per item, the sum of 1/p^2 over its partly kept levels (summed as numpy sums them)."""
    estimates = np.empty((who.size, counts.shape[2]))
    inverse = np.empty(who.size)
    _ipw_runs(generators(rngs), who.astype(np.int64, copy=False),
              counts.astype(np.int64, copy=False), p.astype(np.float64, copy=False),
              scales.astype(np.float64, copy=False), estimates, inverse)
    return estimates, inverse


@kernel
def _ipw_runs(gens, who, counts, p, scales, estimates, inverse):
    _, L, d = counts.shape
    whole = np.empty(d, dtype=np.int64)
    level = np.empty(L, dtype=np.int64)
    q = np.empty(L)
    thinned = np.empty((L, d), dtype=np.int64)
    scaled = np.empty(d)
    squares = np.empty(L)
    r = np.empty(8)
    for i in range(who.size):
        g = gens[who[i]]
        whole[:] = 0
        P = 0
        for k in range(L):  # the levels kept whole (an integer sum) and those sampled
            if p[i, k] >= 1.0:
                for j in range(d):
                    whole[j] += counts[i, k, j]
            elif p[i, k] > 0.0:
                level[P] = k
                q[P] = p[i, k]
                P += 1
        for k in range(P):  # numpy's binomial of the (levels, d) counts, row by row
            for j in range(d):
                thinned[k, j] = g.binomial(counts[i, level[k], j], q[k])
        # then the (levels + 1) x d noise values: the whole levels' row first
        for j in range(d):
            estimates[i, j] = float(whole[j]) + g.laplace(0.0, scales[i])
        for k in range(P):  # numpy sums a (levels, d) array over its levels row after row
            for j in range(d):
                v = (float(thinned[k, j]) + g.laplace(0.0, scales[i])) / q[k]
                scaled[j] = v if k == 0 else scaled[j] + v
        for j in range(d):
            estimates[i, j] = estimates[i, j] + (scaled[j] if P else 0.0)
        for k in range(P):
            squares[k] = 1.0 / (q[k] * q[k])
        inverse[i] = _short_sum(squares, P, r) if P else 0.0


@kernel
def _short_sum(values, n, r):
    """numpy's pairwise sum of ``values[:n]``, n <= 128 (one block: no recursion, which the
    disk cache of a kernel calling it does not survive)."""
    if n < 8:
        res = -0.0
        for i in range(n):
            res += values[i]
        return res
    for j in range(8):
        r[j] = values[j]
    whole = n - n % 8
    for i in range(8, whole, 8):
        for j in range(8):
            r[j] += values[i + j]
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    for i in range(whole, n):
        res += values[i]
    return res


def window_sums(buffer: np.ndarray, pos: int, widths: np.ndarray, windows: np.ndarray,
                order: np.ndarray) -> np.ndarray:
    """Per run and level, the sum of the history's ages 1 .. w_l - 1 as numpy sums a run's
    row alone: a row as wide as the run's largest window, zeros past the level's own.

    ``buffer[i, l, pos + a]`` holds age a + 1 of row i, which is run ``order[i]``; ``widths``
    and ``windows`` are per run."""
    out = np.empty(windows.shape)
    _window_sums(buffer, pos, widths, windows, order, out)
    return out


@kernel
def _window_sums(buffer, pos, widths, windows, order, out):
    r = np.empty(8)
    for i in range(order.size):
        b = order[i]
        n = widths[b]
        for level in range(windows.shape[1]):
            out[b, level] = _pairwise(buffer[i, level], pos, n, pos + windows[b, level] - 1, r)


@kernel
def _pairwise(row, lo, n, stop, r):
    """numpy's pairwise sum of ``row[lo:lo + n]`` (values >= 0) with those from ``stop`` on
    read as 0; ``r`` is scratch space for the eight partial sums. Adding a zero leaves a sum
    of values >= 0 as it is, so the zeros past ``stop`` are not added but where numpy's sum
    starts from -0.0 (a row shorter than 8)."""
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += row[i] if i < stop else 0.0
        return res
    if stop <= lo:
        return 0.0
    if n <= 128:
        for j in range(8):
            r[j] = row[lo + j] if lo + j < stop else 0.0
        whole = lo + n - n % 8
        i = lo + 8
        while i < whole and i + 8 <= stop:
            for j in range(8):
                r[j] += row[i + j]
            i += 8
        if i < whole:  # the block where stop falls, if any
            for j in range(min(8, stop - i)):
                r[j] += row[i + j]
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for i in range(whole, min(lo + n, stop)):
            res += row[i]
        return res
    half = n // 2
    half -= half % 8
    return _pairwise(row, lo, half, stop, r) + _pairwise(row, lo + half, n - half, stop, r)


def optimal_budgets(budgets: np.ndarray, sizes: np.ndarray, expm1: np.ndarray,
                    variance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`mechanisms.release.obs.batch_optimal_budget` of each row, given numpy's
    ``np.expm1`` and noise variance of every budget (same shape as ``budgets``)."""
    theta = np.empty(budgets.shape[0])
    err = np.empty(budgets.shape[0])
    _optimal_budgets(budgets, sizes.astype(np.int64), expm1, variance, theta, err)
    return theta, err


@kernel
def _optimal_budgets(budgets, sizes, expm1, variance, theta, err):
    B, L = budgets.shape
    key = np.empty(L)
    for b in range(B):
        for level in range(L):
            key[level] = budgets[b, level] if sizes[b, level] > 0 else np.inf
        order = np.argsort(key, kind="mergesort")
        # the distinct kept budgets in ascending order, each taken as the threshold in turn;
        # the first of the smallest errors wins, as np.argmin picks it (a nan first of all)
        best, best_theta, positive = np.inf, 0.0, False
        pn, pa, pa2 = 0.0, 0.0, 0.0
        j, k = 0, 0
        while k < L and key[order[k]] != np.inf:
            first = order[k]
            value = key[first]
            n = 0.0
            while k < L and key[order[k]] == value:
                n += float(sizes[b, order[k]])
                k += 1
            a = expm1[b, first]
            error = np.inf
            if value > 0:
                positive = True
                if L == 1:
                    error = variance[b, first]
                else:
                    bias = pn - pa / a
                    error = (pa / a - pa2 / (a * a)) + bias * bias
                    error = error + variance[b, first]
            if j == 0 or not np.isnan(best) and (error < best or np.isnan(error)):
                best, best_theta = error, value
            na = n * a
            if j == 0:  # np.cumsum starts from the first value, not from 0 + it
                pn, pa, pa2 = n, na, na * a
            else:
                pn, pa, pa2 = pn + n, pa + na, pa2 + na * a
            j += 1
        theta[b] = best_theta if positive else 0.0
        err[b] = best if positive else np.inf


def plbu_draws(rngs, counts, sizes, oue, q, grr, p):
    """:meth:`mechanisms.baselines.ldp.BatchedPlbu._draw`: every run's OUE 1-bits, GRR kept
    reports (runs, groups, d) and, over more than two cells, its moved reports
    (runs, groups, d, d - 1) or None."""
    d = counts.shape[2]
    ones = np.zeros(counts.shape, dtype=np.int64)
    kept = np.zeros(counts.shape, dtype=np.int64)
    moved = np.zeros(counts.shape + (max(d - 1, 1),), dtype=np.int64)
    _plbu_draws(generators(rngs), counts.astype(np.int64), sizes.astype(np.int64), oue, q,
                grr, p, ones, kept, moved)
    return ones, kept, (moved if d > 2 else None)


@kernel
def _plbu_draws(gens, counts, sizes, oue, q, grr, p, ones, kept, moved):
    B, G, d = counts.shape
    share = 1.0 / (d - 1) if d > 1 else 1.0  # each other cell's probability
    for b in range(B):
        g = gens[b]
        for k in range(G):  # numpy's array calls: Binomial(c, 1/2) of every group, then ...
            if oue[b, k]:
                for j in range(d):
                    ones[b, k, j] = g.binomial(counts[b, k, j], 0.5)
        for k in range(G):  # ... Binomial(n - c, q) of every group
            if oue[b, k]:
                for j in range(d):
                    ones[b, k, j] += g.binomial(sizes[b, k] - counts[b, k, j], q[b, k])
        for k in range(G):  # GRR: the kept reports of every group, then ...
            if grr[b, k]:
                for j in range(d):
                    kept[b, k, j] = g.binomial(counts[b, k, j], p[b, k])
        if d <= 2:
            continue
        for k in range(G):  # ... numpy's multinomial of the moved ones, cell by cell
            if grr[b, k]:
                for j in range(d):
                    left = counts[b, k, j] - kept[b, k, j]
                    rest = 1.0
                    for m in range(d - 2):
                        x = g.binomial(left, share / rest)
                        moved[b, k, j, m] = x
                        left -= x
                        if left <= 0:
                            break
                        rest -= share
                    if left > 0:
                        moved[b, k, j, d - 2] = left

