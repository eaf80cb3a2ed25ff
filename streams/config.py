"""Settings every worker of one job must agree on."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from mechanisms.dynamic import DYNAMIC_MECHANISMS
from mechanisms.mechanism import FIXED_MECHANISMS
from streams.records import CellDomain, Domain, domain_from_config
from streams.slotting import SlotClock

JOB_MECHANISMS = (*FIXED_MECHANISMS, *DYNAMIC_MECHANISMS)


@dataclass(frozen=True)
class JobConfig:
    """One job: which stream, which mechanism, how slots are cut and where randomness comes from.

    ``secret`` keys the per-slot generators (DESIGN.md, decision 5); it must be the same for
    every worker and must stay private. ``idle_close_ms``: when no report arrived for that long
    (wall clock), open slots up to the largest event time seen are closed. ``max_window``: the
    longest window a dynamic requirement may declare (DPBD, DPBA keep that many slots of
    charges per user).
    """

    stream: str = "default"
    mechanism: str = "pbd"
    domain: dict = field(default_factory=lambda: {"kind": "cells", "size": 2})
    slot_ms: int = 60_000
    origin_ms: int = 0
    lateness_ms: int = 0
    horizon_ms: int = 3_600_000
    noise: str = "discrete"
    secret: str = ""
    prefix: str = ""
    partitions: int = 1
    idle_close_ms: int = 2_000
    max_window: int = 200

    def __post_init__(self) -> None:
        if self.mechanism not in JOB_MECHANISMS:
            raise ValueError(f"mechanism must be one of {JOB_MECHANISMS}, got {self.mechanism!r}")
        if self.max_window < 1:
            raise ValueError(f"max window must be >= 1, got {self.max_window}")
        if self.slot_ms < 1 or self.lateness_ms < 0 or self.horizon_ms < 0:
            raise ValueError("slot length must be >= 1 ms, lateness and horizon >= 0")
        if self.partitions < 1:
            raise ValueError("partitions must be >= 1")
        if self.noise not in ("laplace", "discrete"):
            raise ValueError(f"noise must be laplace or discrete, got {self.noise!r}")
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
    def clock(self) -> SlotClock:
        """Slot arithmetic."""
        return SlotClock(self.slot_ms, self.origin_ms)

    def secret_bytes(self) -> bytes:
        """The randomness secret; ``PWEVENT_SECRET`` when the config has none."""
        secret = self.secret or os.environ.get("PWEVENT_SECRET", "")
        if not secret:
            raise ValueError("no randomness secret: pass --secret or set PWEVENT_SECRET")
        return secret.encode()

    def to_dict(self) -> dict:
        """JSON-able form (the secret left out)."""
        out = asdict(self)
        out.pop("secret")
        return out


def cells_domain(d: int) -> dict:
    """Domain config of cell indices 0..d-1."""
    return CellDomain(d).to_config()
