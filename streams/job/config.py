"""Settings every worker of one job must agree on."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from mechanisms.defaults import DEFAULT
from mechanisms.noise.calibrated import DISCRETE_MAX_EPS, DISCRETE_MIN_EPS
from mechanisms.postprocess import METHODS
from mechanisms.registry import names
from mechanisms.run.dynamic import DYNAMIC_MECHANISMS
from streams.job.slot_clock import SlotClock
from streams.records.domains import CellDomain, Domain, domain_from_config

#: ``default`` (the default configuration, :mod:`mechanisms.defaults`) and every mechanism by name
JOB_MECHANISMS = (DEFAULT, *names(in_job=True))
#: ``auto``: the default configuration's post-processing under ``default``, none otherwise
POSTPROCESS = ("auto", *METHODS)
NEIGHBOURING = ("add-remove", "replace")
EVENT_TIME = ("live", "history")


def smallest_share(min_epsilon: float, max_window: int, sensitivity: int) -> float:
    """The smallest per-slot budget the release rule draws integer noise for under a
    requirement at the bounds (E = ``min_epsilon``, w = ``max_window``), divided by the
    sensitivity as the rule does: the dissimilarity's share E/(2w) of every adaptive mechanism
    (and its dynamic counterpart EF/(2wF); Uniform's E/w and Sample's E are larger), or, when
    w = 1, the first publication's E/4 under PBD, BD and DPBD."""
    return min_epsilon / (max(2 * max_window, 4) * sensitivity)


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class JobConfig:
    """One job: which stream, which mechanism, how slots are cut and where randomness comes from.

    ``secret`` keys the per-slot randomness together with the stream's nonce (docs/design.md,
    randomness); it must be the same for every worker and must stay private. It also signs the
    job's control records. ``nonce`` pins the stream's nonce, only to reproduce a recorded run
    (``pwevent replay --in-process --nonce``); a live stream draws a fresh one at its start.
    ``idle_close_ms``: when no report arrived for that long (wall clock), open slots up to the
    largest event time seen are closed. Requirements are accepted only with windows in
    ``[1, max_window]`` and budgets in ``[min_epsilon, max_epsilon]``; with integer noise the
    bounds must stay within what the exact sampler serves (:func:`check_sampler_bounds`).
    ``neighbouring``:
    ``add-remove`` calibrates noise to one report added or removed (sensitivity 1), ``replace``
    to one report changed (sensitivity 2). ``event_time``: ``live`` accepts reports from the
    stream's start (the worker's clock when a partition first took records, minus
    ``max_skew_ms`` or the lateness if larger; kept in its checkpoint) to the worker's clock plus
    ``max_skew_ms``, control
    records up to the same bound; ``history`` (replaying recorded data) accepts reports from
    ``origin_ms`` on and does not look at the clock.
    """

    stream: str = "default"
    mechanism: str = DEFAULT
    domain: dict = field(default_factory=lambda: {"kind": "cells", "size": 2})
    slot_ms: int = 60_000
    origin_ms: int = 0
    lateness_ms: int = 0
    horizon_ms: int | None = None
    noise: str = "discrete"
    secret: str = ""
    prefix: str = ""
    partitions: int = 1
    idle_close_ms: int = 2_000
    max_window: int = 200
    min_epsilon: float = 0.01
    max_epsilon: float = 10.0
    neighbouring: str = "add-remove"
    event_time: str = "live"
    max_skew_ms: int = 300_000
    nonce: str = ""
    postprocess: str = "auto"
    #: partitions of each source topic (``--source-topic``, in order); the stream's event time
    #: is then the smallest any of them has reached (streams/job/source_progress.py)
    source_partitions: tuple[int, ...] = ()
    #: live: the longest a slot waits past its end, by the worker's clock, for a lagging input
    #: partition before it closes (``--max-hold-ms``)
    max_hold_ms: int = 600_000
    #: the levels default requirements register devices at (``--default-requirement``), each
    #: with the size the mechanism sees for it, a public prior (docs/design.md, "Default
    #: requirements"): ``(level key, size)`` in key order
    default_levels: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.mechanism not in JOB_MECHANISMS:
            raise ValueError(f"mechanism must be one of {JOB_MECHANISMS}, got {self.mechanism!r}")
        if self.max_window < 1:
            raise ValueError(f"max window must be >= 1, got {self.max_window}")
        if self.slot_ms < 1 or self.lateness_ms < 0 or (self.horizon_ms or 0) < 0:
            raise ValueError("slot length must be >= 1 ms, lateness and horizon >= 0")
        if self.partitions < 1:
            raise ValueError("partitions must be >= 1")
        if not 0 < self.min_epsilon <= self.max_epsilon < float("inf"):
            raise ValueError("budget bounds must satisfy 0 < min epsilon <= max epsilon < inf, "
                             f"got [{self.min_epsilon}, {self.max_epsilon}]")
        if self.neighbouring not in NEIGHBOURING:
            raise ValueError(f"neighbouring must be one of {NEIGHBOURING}, "
                             f"got {self.neighbouring!r}")
        if self.event_time not in EVENT_TIME:
            raise ValueError(f"event time must be one of {EVENT_TIME}, got {self.event_time!r}")
        if self.max_skew_ms < 0:
            raise ValueError("max clock skew must be >= 0 ms")
        if self.max_hold_ms < 1:
            raise ValueError("max hold must be >= 1 ms")
        if self.default_levels and self.mechanism in DYNAMIC_MECHANISMS:
            raise ValueError("default requirements need a fixed-requirement mechanism")
        if any(n < 1 for _k, n in self.default_levels):
            raise ValueError("a default level's public size must be >= 1")
        if self.nonce and not _is_hex(self.nonce):
            raise ValueError("a pinned nonce must be hexadecimal")
        if self.noise not in ("laplace", "discrete"):
            raise ValueError(f"noise must be laplace or discrete, got {self.noise!r}")
        if self.postprocess not in POSTPROCESS:
            raise ValueError(f"postprocess must be one of {POSTPROCESS}, got "
                             f"{self.postprocess!r}")
        if self.noise == "discrete":
            check_sampler_bounds(self.min_epsilon, self.max_epsilon, self.max_window,
                                 self.sensitivity)
        self.make_domain()

    @property
    def dynamic(self) -> bool:
        """Whether the mechanism takes dynamic requirements (DPBD, DPBA)."""
        return self.mechanism in DYNAMIC_MECHANISMS

    def make_domain(self) -> Domain:
        """The domain that maps report values to cells."""
        return domain_from_config(self.domain)

    @property
    def d(self) -> int:
        """Number of cells."""
        return int(self.make_domain().size)

    @property
    def sensitivity(self) -> int:
        """L1 sensitivity of a count under the neighbouring relation."""
        return 2 if self.neighbouring == "replace" else 1

    def public(self) -> dict:
        """The public parameters an auditor needs, as recorded in the stream's start record."""
        return {"mechanism": self.mechanism, "d": self.d, "partitions": self.partitions,
                "min_epsilon": self.min_epsilon, "max_epsilon": self.max_epsilon,
                "max_window": self.max_window, "neighbouring": self.neighbouring,
                "noise": self.noise, "slot_ms": self.slot_ms, "origin_ms": self.origin_ms,
                **({"default_levels": dict(self.default_levels)} if self.default_levels else {})}

    @property
    def clock(self) -> SlotClock:
        """Slot arithmetic."""
        return SlotClock(self.slot_ms, self.origin_ms)

    def app_id(self) -> str:
        """The Faust app's id: the workers' consumer group and its changelog topics' prefix."""
        return f"pwevent-{self.prefix or 'job'}-{self.stream}"

    def secret_bytes(self) -> bytes:
        """The randomness secret; ``PWEVENT_SECRET`` when the config has none."""
        secret = self.secret or os.environ.get("PWEVENT_SECRET", "")
        if not secret:
            raise ValueError("no randomness secret: pass --secret or set PWEVENT_SECRET")
        return secret.encode()


def check_sampler_bounds(min_epsilon: float, max_epsilon: float, max_window: int,
                         sensitivity: int) -> None:
    """Refuse requirement bounds the exact discrete Laplace sampler cannot serve (it takes
    budgets in [2**-30, 2**20], :data:`~mechanisms.noise.calibrated.DISCRETE_MIN_EPS`): the smallest
    regular per-slot budget (:func:`smallest_share`) must be at least 2**-29, twice the
    sampler's smallest, as the dynamic ledgers round budgets down by less than half; the
    largest, Sample's whole E divided by the sensitivity, at most 2**20. A threshold a ledger
    plans below 2**-30 later on (a publication budget halved at each publication of a window,
    a dynamic budget's remainder) is not drawn at
    (:class:`~mechanisms.release.rule.ReleaseRule`)."""
    floor = 2 * DISCRETE_MIN_EPS
    share = smallest_share(min_epsilon, max_window, sensitivity)
    if share < floor:
        need = floor * max(2 * max_window, 4) * sensitivity
        raise ValueError(
            f"min epsilon {min_epsilon:g} is too small for the discrete noise sampler: a "
            f"requirement at the bounds (E = {min_epsilon:g}, w = {max_window}, sensitivity "
            f"{sensitivity}) gets {share:.3g} per slot, and it must get at least 2**-29; use "
            f"min epsilon >= {need:.3g} or a smaller max window")
    if max_epsilon / sensitivity > DISCRETE_MAX_EPS:
        raise ValueError(
            f"max epsilon {max_epsilon:g} is too large for the discrete noise sampler: a slot "
            f"may spend a whole budget E (divided by the sensitivity {sensitivity}), and the "
            f"sampler takes at most 2**20; use max epsilon <= {DISCRETE_MAX_EPS * sensitivity:g}")


def cells_domain(d: int) -> dict:
    """Domain config of cell indices 0..d-1."""
    return CellDomain(d).to_config()
