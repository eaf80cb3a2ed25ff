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
from mechanisms.local.population import in_interval, in_round1, position
from mechanisms.local.rounds import MAX_ROUND_SLOT, ROUND_PROTOCOLS, Decision, virtual_slot
from mechanisms.local.schedule import (
    KEYED,
    POPULATION_PROTOCOLS,
    PROTOCOLS,
    report_budget,
    reports_at,
)
from mechanisms.local.tree import (
    TREE_PROTOCOL,
    interval_of,
    level_cells,
    node_of,
    tree_height,
    tree_level,
)
from mechanisms.local.wire import MAX_CELLS, MAX_SLOT, check_text, encode_report, oracle_cells
from mechanisms.local.words import WordSource


def is_integer(value: object) -> bool:
    """Whether ``value`` is an integer (numpy's too), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class ReportConfig:
    """What a client needs: the protocol, the user, the domain's ``d`` value cells (the oracle
    runs over ``d + 1``: cell ``d`` is "no value", :func:`oracle_cells`), the window ``w``
    and budget ``E`` (the stream's for all but plbu, the user's own for plbu), the stream's
    first slot ``start``, the stream's public key (``lpu_key``: LPU's groups, LPD's, LPA's and
    MTSP's positions) and LPU's rotation (epochs of ``rotate`` blocks; 0: one group for good)."""

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
        for name, low, high in (("d", 1, MAX_CELLS - 1), ("w", 1, 2**31 - 1),
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
        if self.protocol in KEYED:
            check_text("lpu_key", self.lpu_key)

    @property
    def eps(self) -> float:
        """The budget one report spends (a dissimilarity report's for lbd, lba, mtsp)."""
        return report_budget(self.protocol, self.w, self.E)

    @property
    def oracle(self) -> str:
        """``grr`` or ``oue``: GRR for PLBU where its variance is lower, OUE otherwise."""
        use_grr = self.protocol == "plbu" and plbu_uses_grr(self.eps, oracle_cells(self.d))
        return "grr" if use_grr else "oue"


class Reporter:
    """One user's reports under ``config``, its ledger and its words.

    The two-round protocols (lbd, lba) keep the ledger over virtual slots, 2 slot + round - 1,
    against a window of 2w (:mod:`mechanisms.local.rounds`): :meth:`report` sends round 1, asked
    by the previous slot's decision, and :meth:`answer` round 2, asked by the slot's own. The
    population ones (lpd, lpa: :mod:`mechanisms.local.population`) ask each user one round kind
    by its public position, every report at E, and keep the ledger over real slots (window w):
    a user answers at most once in any w slots. mtsp (:mod:`mechanisms.local.tree`) keeps the
    ledger as lbd does and reports round 1 over its level's nodes, round 2 over the decision's
    intervals."""

    def __init__(self, config: ReportConfig, words: WordSource, client: str) -> None:
        """A reporter with an empty ledger; ``client`` names the library in every report."""
        self.config, self.words, self.client = config, words, check_text("client", client)
        self.rounds = config.protocol in ROUND_PROTOCOLS
        self.population = config.protocol in POPULATION_PROTOCOLS
        self.tree = config.protocol == TREE_PROTOCOL
        #: the user's public position (lpd, lpa), None for the others
        self.position = position(config.lpu_key, config.user) if self.population else None
        #: mtsp: the tree's height, the user's level and that level's nodes (0 for the others)
        self.height = self.level = self.level_cells = 0
        if self.tree:
            self.height = tree_height(oracle_cells(config.d))
            self.level = tree_level(position(config.lpu_key, config.user), self.height)
            self.level_cells = level_cells(oracle_cells(config.d), self.height, self.level)
        virtual = self.rounds and not self.population
        self.ledger = ClientLedger(2 * config.w if virtual else config.w, config.E)
        eps = config.eps
        self.eps, self.oracle = eps, config.oracle
        self.cells = oracle_cells(config.d)
        self.threshold = (grr_keep_threshold(eps, self.cells) if self.oracle == "grr"
                          else oue_threshold(eps))

    def due(self, slot: int) -> bool:
        """Whether the protocol has this user report at ``slot`` (lpd, lpa: in the dissimilarity
        round, when the slot asks one; publication rounds name their users)."""
        c = self.config
        if self.position is not None:
            return in_round1(self.position, slot, c.start, c.w)
        return reports_at(c.protocol, slot, start=c.start, w=c.w, key=c.lpu_key, user=c.user,
                          rotate=c.rotate)

    def report(self, slot: int, value: int | None,
               decision: Decision | None = None) -> bytes | None:
        """The report of ``value`` (a cell, or None: no value, sent as cell ``d``) at ``slot``,
        or None when the user does not report there; :class:`~mechanisms.local.ledger.
        LedgerRefusal` when the ledger refuses it (nothing drawn, nothing spent). A user reports
        every slot it is due, with a value or without, so that whether it had one stays as
        private as the value. For lbd, lba and mtsp this is the dissimilarity report, asked at the
        stream's first slot and by ``decision``, the previous slot's, after it (without it, none
        is sent)."""
        c = self.config
        slot, value = self._check(slot, value)
        if not self.due(slot):
            return None
        if not self.rounds:
            if decision is not None:
                raise ValueError(f"{c.protocol} has one round a slot: it takes no decision")
            return self._send(slot, value, self.eps, slot, None)
        if slot > c.start:
            if decision is None:
                return None
            self._check_decision(decision, slot - 1)
            if decision.next == 0:
                return None
            if decision.next != self.eps:
                raise ValueError(f"the decision asks a dissimilarity budget of "
                                 f"{decision.next!r}, not the stream's {self.eps!r}")
        at = slot if self.population else virtual_slot(slot, 1)
        if self.tree:
            return self._send(slot, node_of(value, self.height, self.level), self.eps, at, 1,
                              self.level_cells)
        return self._send(slot, value, self.eps, at, 1)

    def answer(self, decision: Decision, value: int | None) -> bytes | None:
        """The publication report (round 2 of lbd, lba, mtsp) of ``value`` (None: no value) at
        the budget ``decision`` names for its slot, or None when it names none;
        :class:`~mechanisms.local.ledger.LedgerRefusal` when the ledger refuses it."""
        c = self.config
        if not self.rounds:
            raise ValueError(f"{c.protocol} has one round a slot: nothing to answer")
        if not isinstance(decision, Decision):
            raise ValueError(f"a decision must be a Decision, got {type(decision).__name__}")
        slot, value = self._check(decision.slot, value)
        self._check_decision(decision, slot)
        if decision.eps == 0 or slot < c.start:
            return None
        if self.position is not None:
            if decision.eps != c.E:
                raise ValueError(f"the decision asks {decision.eps!r}, not the stream's E = "
                                 f"{c.E!r}")
            if not in_interval(self.position, decision.lo, decision.size):
                return None
            return self._send(slot, value, decision.eps, slot, 2)
        if not decision.eps <= c.E / 2:
            raise ValueError(f"the decision asks {decision.eps!r}, over E/2 = {c.E / 2!r}")
        if self.tree:
            starts = decision.starts
            if starts[-1] >= self.cells:
                raise ValueError(f"the decision's intervals reach cell {starts[-1]}, past the "
                                 f"{self.cells} cells of the stream")
            return self._send(slot, interval_of(value, starts), decision.eps,
                              virtual_slot(slot, 2), 2, len(starts))
        return self._send(slot, value, decision.eps, virtual_slot(slot, 2), 2)

    def _check(self, slot: object, value: object) -> tuple[int, int]:
        c = self.config
        top = MAX_ROUND_SLOT if self.rounds else MAX_SLOT
        if not is_integer(slot) or not 0 <= slot <= top:  # type: ignore[operator]
            raise ValueError(f"slot must be an integer in [0, {top}], got {slot!r}")
        if value is not None and (not is_integer(value) or not 0 <= value < c.d):  # type: ignore[operator]
            raise ValueError(f"value must be a cell in [0, {c.d}) or None, got {value!r}")
        return int(slot), c.d if value is None else int(value)  # type: ignore[arg-type]

    def _check_decision(self, decision: Decision, slot: int) -> None:
        if not isinstance(decision, Decision):
            raise ValueError(f"a decision must be a Decision, got {type(decision).__name__}")
        if decision.protocol != self.config.protocol or decision.slot != slot:
            raise ValueError(f"the decision is for {decision.protocol} slot {decision.slot}, "
                             f"not {self.config.protocol} slot {slot}")

    def _send(self, slot: int, value: int, eps: float, at: int, round_: int | None,
              width: int = 0) -> bytes:
        """Randomise cell ``value`` (``d``: no value) at budget ``eps``, spent at ledger slot
        ``at``: the report; mtsp randomises node or interval ``value`` of ``width``."""
        c, cells = self.config, width or self.cells
        self.ledger.check(at, eps)
        if self.oracle == "grr":
            payload: bytes | int = grr_cell(value, cells, self.threshold,
                                            lambda: int(self.words.take(1)[0]))
        else:
            threshold = self.threshold if eps == self.eps else oue_threshold(eps)
            payload = pack_bits(oue_bits(value, cells, threshold, self.words.take(cells)))
        self.ledger.commit(at, eps)
        return encode_report(c.protocol, c.user, slot, eps, c.E, c.w, c.d, payload,
                             self.client, round_, width if self.tree else None)

