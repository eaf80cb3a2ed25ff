"""One user's client, pure: its protocol, ledger and randomised reports (docs/ldp-reports.md).

:class:`Reporter` decides alone whether the user reports at a slot (the schedule), refuses a
report its ledger does not allow, draws its words from the :class:`~mechanisms.local.words.
WordSource` it is given and returns the report's bytes. The Python client
(:mod:`streams.ldp_client`) gives it the operating system's CSPRNG; the test vectors give it
:class:`~mechanisms.local.words.CounterWords`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from mechanisms.local.ledger import ClientLedger
from mechanisms.local.oracles import (
    check_eps,
    grr_cell,
    grr_keep_threshold,
    oue_bits,
    oue_threshold,
    pack_bits,
    plbu_uses_grr,
)
from mechanisms.local.schedule import PROTOCOLS, report_budget, reports_at
from mechanisms.local.wire import MAX_CELLS, MAX_SLOT, check_text, encode_report
from mechanisms.local.words import WordSource


def is_integer(value: object) -> bool:
    """Whether ``value`` is an integer (numpy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class ReportConfig:
    """What a client needs: the protocol, the user, the domain's ``d`` cells, the window ``w``
    and budget ``E`` (the stream's for lbu/lsp/lpu, the user's own for plbu), the stream's
    first slot ``start``, LPU's public key and rotation (epochs of ``rotate`` blocks; 0: one
    group for good)."""

    protocol: str
    user: str
    d: int
    w: int
    E: float  # noqa: N815 - the papers' name
    start: int = 0
    lpu_key: str = ""
    rotate: int = 0

    def __post_init__(self) -> None:
        """Check every field (numpy scalars taken as Python numbers); ValueError names the
        wrong one."""
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}; choose from {PROTOCOLS}")
        check_text("user", self.user)
        for name, low, high in (("d", 1, MAX_CELLS), ("w", 1, 2**31 - 1),
                                ("start", 0, MAX_SLOT), ("rotate", 0, 2**31 - 1)):
            value = getattr(self, name)
            if not is_integer(value) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
            object.__setattr__(self, name, int(value))
        E = self.E
        if not isinstance(E, numbers.Real) or isinstance(E, bool) or not math.isfinite(E) \
                or E <= 0:
            raise ValueError(f"E must be a finite number > 0, got {E!r}")
        object.__setattr__(self, "E", float(E))
        check_eps(self.eps)
        if self.protocol == "lpu":
            check_text("lpu_key", self.lpu_key)

    @property
    def eps(self) -> float:
        """The budget one report spends."""
        return report_budget(self.protocol, self.w, self.E)

    @property
    def oracle(self) -> str:
        """``grr`` or ``oue``: GRR for PLBU where its variance is lower, OUE otherwise."""
        use_grr = self.protocol == "plbu" and plbu_uses_grr(self.eps, self.d)
        return "grr" if use_grr else "oue"


class Reporter:
    """One user's reports under ``config``, its ledger and its words."""

    def __init__(self, config: ReportConfig, words: WordSource, client: str) -> None:
        """A reporter with an empty ledger; ``client`` names the library in every report."""
        self.config, self.words, self.client = config, words, check_text("client", client)
        self.ledger = ClientLedger(config.w, config.E)
        eps = config.eps
        self.eps, self.oracle = eps, config.oracle
        self.threshold = (grr_keep_threshold(eps, config.d) if self.oracle == "grr"
                          else oue_threshold(eps))

    def due(self, slot: int) -> bool:
        """Whether the protocol has this user report at ``slot``."""
        c = self.config
        return reports_at(c.protocol, slot, start=c.start, w=c.w, key=c.lpu_key, user=c.user,
                          rotate=c.rotate)

    def report(self, slot: int, value: int | None) -> bytes | None:
        """The report of ``value`` (a cell, or None: no value) at ``slot``, or None when the
        user does not report there; :class:`~mechanisms.local.ledger.LedgerRefusal` when the
        ledger refuses it (nothing drawn, nothing spent)."""
        c = self.config
        if not is_integer(slot) or not 0 <= slot <= MAX_SLOT:
            raise ValueError(f"slot must be an integer in [0, {MAX_SLOT}], got {slot!r}")
        if value is not None and (not is_integer(value) or not 0 <= value < c.d):
            raise ValueError(f"value must be a cell in [0, {c.d}) or None, got {value!r}")
        slot = int(slot)
        if value is None or not self.due(slot):
            return None
        value = int(value)
        self.ledger.check(slot, self.eps)
        if self.oracle == "grr":
            payload: bytes | int = grr_cell(value, c.d, self.threshold,
                                            lambda: int(self.words.take(1)[0]))
        else:
            bits = oue_bits(value, c.d, self.threshold, self.words.take(c.d))
            payload = pack_bits(bits)
        self.ledger.commit(slot, self.eps)
        return encode_report(c.protocol, c.user, slot, self.eps, c.E, c.w, c.d, payload,
                             self.client)

