"""Running one input many times: the public state along each publish history, the trials'
generators, and what an analyst reads of each run."""


from __future__ import annotations

import copy
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mechanisms import postprocess as pp
from mechanisms.build import build
from mechanisms.evaluation.audit_names import PLANTS
from mechanisms.evaluation.privacy_audit.defects import DroppedChargeLedger, make_rule
from mechanisms.evaluation.privacy_audit.inputs import NeighbourPair, Population
from mechanisms.ledgers.plan import SlotPlan
from mechanisms.registry import histogram_dtype, spec
from mechanisms.release.rule import Sampling
from mechanisms.requirements import DynamicRequirements, FixedRequirements
from mechanisms.run.dynamic import DynamicMechanism
from mechanisms.run.mechanism import release_std


@dataclass(frozen=True)
class _SlotState:
    """What a slot's rule needs of one history group, and what an analyst reads of it."""

    counts: np.ndarray  # (levels, d)
    sizes: np.ndarray  # (levels,)
    plan: SlotPlan
    users: int


def _first_events(cells: np.ndarray) -> np.ndarray:
    """Each user's first report slot (1-based; T + 1: never)."""
    has = cells >= 0
    return np.where(has.any(axis=0), has.argmax(axis=0) + 1, cells.shape[0] + 1)


#: the generator of the product objects stepped by their ledgers alone (it never draws)
_UNUSED = np.random.default_rng(0)


class _Public:
    """One input's ledger, levels and registrations along one publish history: the product's
    mechanism object, stepped by its ledger only (the rule runs over all runs at once)."""

    def __init__(self, mechanism: str, population: Population, cells: np.ndarray,
                 realised: bool, noise: str, dropped: int | None) -> None:
        self.population, self.cells, self.realised = population, cells, realised
        self.first = _first_events(cells) if realised else np.ones(len(population.users),
                                                                     dtype=np.int64)
        self.dynamic = spec(mechanism).family == "dynamic"
        index = {u: i for i, u in enumerate(population.users)}
        if self.dynamic:
            rows = [(int(self.first[i]), u, int(population.w[i]), float(population.E[i]),
                     int(population.w[i]), float(population.E[i]))
                    for i, u in enumerate(population.users) if self.first[i] <= population.T]
            req = DynamicRequirements.from_rows(rows)
            self.mech = DynamicMechanism(mechanism, req, population.d, _UNUSED, noise)
            ledger = self.mech.levels
            self._declared = [(index[u], int(s)) for s, u in zip(req.slot.tolist(), req.user,
                                                                 strict=True)]
        else:
            start = np.flatnonzero(self.first <= 1)
            req = FixedRequirements.from_arrays([population.users[i] for i in start],
                                                population.w[start], population.E[start])
            self.mech = build(mechanism, req, population.d, _UNUSED, noise)
            ledger = self.mech.ledger
        self.ledger = ledger if dropped is None else DroppedChargeLedger(ledger, dropped)
        self.index = index

    def prepare(self, t: int) -> _SlotState:
        """Register what slot ``t`` registers, plan it and count its reports per level."""
        row = self.cells[t - 1]
        if self.dynamic:
            order = [i for i, s in self._declared if s <= t]
            counts, _, level_of_user = self.mech.level_counts(row[order].astype(np.int64))
            sizes = np.bincount(level_of_user, minlength=counts.shape[0]).astype(np.int64)
        else:
            new = np.flatnonzero(self.first == t) if t > 1 else np.zeros(0, dtype=np.int64)
            if new.size:
                self.mech.register([self.population.users[i] for i in new],
                                   self.population.w[new], self.population.E[new])
            order = [self.index[u] for u in self.mech.users]
            counts = self.mech.level_counts(row[order].astype(np.int64))
            sizes = np.asarray(self.mech.level_sizes(), dtype=np.int64)
        return _SlotState(counts, sizes, self.ledger.plan(), int(sizes.sum()))

    def child(self, published: bool) -> _Public:
        """A copy of this history continued by one decision."""
        out = copy.deepcopy(self)
        out.ledger.commit(bool(published))
        return out


def _public_part(state: _SlotState, published: bool, threshold: float) -> tuple:
    """What an analyst reads of a slot besides the histogram: the published and nullified
    flags, the threshold, the users, and each level's (eps1, eps2 charged, users)."""
    live = state.sizes > 0
    eps2 = state.plan.eps2 if published else np.zeros_like(state.plan.eps2)
    levels = sorted(zip(state.plan.eps1[live].tolist(), eps2[live].tolist(),
                        state.sizes[live].tolist(), strict=True))
    return (bool(published), bool(state.plan.nullified), float(threshold), state.users,
            tuple(levels))


def output_label(key: tuple) -> str:
    flags = "".join("P" if s[0] else ("N" if s[1] else "-") for s in key)
    return f"{flags} users {'/'.join(str(s[3]) for s in key)}"

class TrialStreams:
    """One generator per trial, reseeded for every input (:meth:`reseed`), so that each trial
    of each input is an independent run with its own seeded stream. The generator objects are
    kept (the batched path's compiled draws hold them in a list built once)."""

    def __init__(self, trials: int) -> None:
        if trials < 4:
            raise ValueError(f"need at least 4 trials, got {trials}")
        self.trials = int(trials)
        self.rngs = [np.random.Generator(np.random.PCG64(0)) for _ in range(self.trials)]

    def reseed(self, *key: int) -> list[np.random.Generator]:
        """Give every generator a fresh state drawn from ``key``; returns the generators."""
        words = np.random.SeedSequence(list(key)).generate_state(4 * self.trials, np.uint64)
        rows = words.reshape(-1, 4).tolist()
        for rng, (a, b, c, e) in zip(self.rngs, rows, strict=True):
            rng.bit_generator.state = {
                "bit_generator": "PCG64",
                "state": {"state": (a << 64) | b, "inc": ((c << 64) | e) | 1},
                "has_uint32": 0, "uinteger": 0,
            }
        return self.rngs


def stream_key(*parts: object) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode())

@dataclass(frozen=True)
class Observed:
    """Every trial's output for one input: released histograms (trials, T, d), published flags
    and per-cell noise deviations (trials, T), and each trial's publish history (an index into
    ``keys``, the discrete part an analyst reads, one tuple per slot)."""

    released: np.ndarray
    published: np.ndarray
    std: np.ndarray
    history: np.ndarray
    keys: list[tuple]
    users: np.ndarray  # (T,) registered users read at each slot (equal over the trials)


def run_input(mechanism: str, population: Population, cells: np.ndarray,
              rngs: Sequence[np.random.Generator], *, noise: str = "laplace",
              sensitivity: int = 1, plant: str | None = None, realised: bool = False,
              dropped_slot: int = 1) -> Observed:
    """Run one input ``cells`` (T, n) once per generator of ``rngs`` through ``mechanism``, on
    the batched release rule; ``realised`` registers each device at its first event."""
    if plant is not None and plant not in PLANTS:
        raise ValueError(f"plant must be one of {PLANTS}, got {plant!r}")
    rule = make_rule(mechanism, population.d, noise, sensitivity, plant)
    root = _Public(mechanism, population, cells, realised, noise,
                   dropped_slot if plant == "charge_dropped" else None)
    N, T, d = len(rngs), population.T, population.d
    released = np.zeros((N, T, d), dtype=np.float64)
    published_all = np.zeros((N, T), dtype=bool)
    std_all = np.full((N, T), np.nan)
    users = np.zeros(T, dtype=np.int64)
    nodes, keys = [root], [()]
    node_of_run = np.zeros(N, dtype=np.int64)
    lasts = np.zeros((N, d), dtype=histogram_dtype(noise))
    for t in range(1, T + 1):
        states = [node.prepare(t) for node in nodes]
        G, L = len(states), max(1, max(s.counts.shape[0] for s in states))
        eps1, eps2 = np.zeros((G, L)), np.zeros((G, L))
        sizes, counts = np.zeros((G, L), dtype=np.int64), np.zeros((G, L, d), dtype=np.int64)
        nullified = np.zeros(G, dtype=bool)
        for g, s in enumerate(states):
            k = s.counts.shape[0]
            eps1[g, :k], eps2[g, :k] = s.plan.eps1, s.plan.eps2
            sizes[g, :k], counts[g, :k] = s.sizes, s.counts
            nullified[g] = s.plan.nullified
        adaptive = bool(states[0].plan.adaptive)
        first = None
        if adaptive:
            group_first = rule.sampling(rule.scaled(eps1), sizes)
            first = Sampling.of(group_first.threshold[node_of_run], group_first.p[node_of_run])
        decision = rule.decide_runs(eps1[node_of_run], eps2[node_of_run],
                                    nullified[node_of_run], adaptive, counts[node_of_run],
                                    sizes[node_of_run], lasts, rngs, first)
        published = np.asarray(decision.published, dtype=bool)
        lasts = decision.histogram
        released[:, t - 1] = decision.histogram
        published_all[:, t - 1] = published
        std_all[:, t - 1] = release_std(published, decision.threshold, rule, decision.std)
        users[t - 1] = states[0].users
        code = node_of_run * 2 + published
        found, where, inverse = np.unique(code, return_index=True, return_inverse=True)
        new_nodes, new_keys = [], []
        for c, i in zip(found.tolist(), where.tolist(), strict=True):
            g, bit = divmod(c, 2)
            part = _public_part(states[g], bool(bit), float(decision.threshold[i]))
            new_nodes.append(nodes[g].child(bool(bit)))
            new_keys.append(keys[g] + (part,))
        nodes, keys, node_of_run = new_nodes, new_keys, inverse.reshape(-1)
    return Observed(released, published_all, std_all, node_of_run, keys, users)


def statistics(observed: Observed, pair: NeighbourPair, d: int,
               postprocess: str = "none") -> dict[str, np.ndarray]:
    """The scalar statistics of every trial: the released counts projected on the difference
    between the pair's inputs (D0's reports minus D1's), summed over the differing slots
    (``sum``) and slot by slot (``slot t``); with ``postprocess``, the same sum of the
    post-processed histograms (``<method> sum``)."""
    T = observed.released.shape[1]
    diff = np.zeros((T, d))
    for cells, sign in ((pair.cells0, 1.0), (pair.cells1, -1.0)):
        target = cells[:, pair.index]
        for t in range(T):
            if target[t] >= 0:
                diff[t, target[t]] += sign
    out: dict[str, np.ndarray] = {}
    slots = [t for t in range(T) if diff[t].any()]
    out["sum"] = np.einsum("ntd,td->n", observed.released, diff)
    if len(slots) > 1:
        for t in slots:
            out[f"slot {t + 1}"] = observed.released[:, t] @ diff[t]
    if postprocess != "none":
        est = postprocessed(postprocess, observed, d)
        out[f"{postprocess} sum"] = np.einsum("ntd,td->n", est, diff)
    return out


def postprocessed(method: str, observed: Observed, d: int) -> np.ndarray:
    """Every trial's post-processed histograms (trials, T, d), slot by slot as the job's
    post-processor computes them (:class:`mechanisms.postprocess.Postprocessor`: the filter
    fed each slot's release, its noise deviation and the users read at that slot)."""
    released = observed.released
    if method == "round":
        return pp.project(released)
    if method not in pp.FILTERING:
        raise ValueError(f"unknown post-processing {method!r}; choose from "
                         f"{', '.join(pp.METHODS)}")
    N, T, _ = released.shape
    state = (pp.KalmanBank.fresh((N, d)) if method == "kalman_bank" else
             pp.SplitBank.fresh((N, d)) if method == "kalman_split" else
             pp.KalmanState.fresh((N, d)))
    out = np.empty_like(released)
    for t in range(T):
        users = np.full(N, float(observed.users[t]))
        fresh = observed.published[:, t] & np.isfinite(observed.std[:, t])
        if isinstance(state, pp.KalmanBank):
            h = state.step(released[:, t], fresh, observed.std[:, t], users, d)
        elif isinstance(state, pp.SplitBank):
            h = state.step(released[:, t], fresh, observed.std[:, t, None], users, d)
        else:
            h = state.step(released[:, t], fresh, observed.std[:, t],
                           pp.process_variance(users, d))
        out[:, t] = pp.project(h)
    return out
