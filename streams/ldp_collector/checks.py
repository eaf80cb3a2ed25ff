"""What the collector accepts (docs/ldp-reports.md): the stream it collects for and the checks
one record must pass before its slot, duplicates and the user's ledger are looked at."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from mechanisms.local import PROTOCOLS, ParsedReport, parse_report, plbu_uses_grr, reports_at
from mechanisms.local.schedule import KEYED
from mechanisms.local.wire import MAX_CELLS, MAX_SLOT, check_text, oracle_cells

#: Every reason a record goes to the dead letters, in the order the checks run.
REASONS: Final = (
    "malformed",  # parse_report refuses it (or it is no bytes at all)
    "wrong_key",  # the record's key is not the user id's UTF-8 bytes
    "wrong_protocol",  # another protocol than the collector's
    "wrong_domain",  # another d than the collector's
    "wrong_requirement",  # lbu, lsp, lpu: another E or w than the stream's
    "wrong_oracle",  # not the oracle the protocol uses at this budget and d
    "schedule",  # a slot the protocol does not have this user report at
    "late",  # its slot is closed already
    "duplicate_in_slot",  # the user already has a report kept for this slot
    "not_after_last",  # the user's ledger: not after its last kept report's slot
    "over_budget",  # the user's ledger: the window ending at the slot would spend over E
    "unasked_round",  # lbd, lba: a round the decisions did not ask, or at another budget
)


class Refusal(Exception):
    """A record the collector does not count: ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str = "") -> None:
        """A refusal for ``reason``, with a ``detail`` for people."""
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class Stream:
    """The stream a collector reads: its protocol, ``d`` value cells (reports run over
    :attr:`cells`, ``d + 1``: the last is "no value"), first slot ``start``, the
    requirement (``E``, ``w``) of lbu/lsp/lpu (None for plbu, where each user has its own),
    LPU's public key and rotation (blocks per epoch, 0: none)."""

    protocol: str
    d: int
    start: int
    E: float | None = None  # noqa: N815 - the papers' name
    w: int | None = None
    lpu_key: str = ""
    lpu_rotate: int = 0

    def __post_init__(self) -> None:
        """Check the fields; ValueError names the wrong one."""
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}; choose from {PROTOCOLS}")
        for name, low, high in (("d", 1, MAX_CELLS - 1), ("start", 0, MAX_SLOT),
                                ("lpu_rotate", 0, 2**31 - 1)):
            value = getattr(self, name)
            if type(value) is not int or not low <= value <= high:
                raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
        if self.protocol == "plbu":
            if self.E is not None or self.w is not None:
                raise ValueError("plbu users bring their own E and w: give neither")
        else:
            if type(self.w) is not int or not 1 <= self.w <= 2**31 - 1:
                raise ValueError(f"w must be an integer >= 1, got {self.w!r}")
            E = self.E
            if not isinstance(E, int | float) or isinstance(E, bool) or not math.isfinite(E) \
                    or E <= 0:
                raise ValueError(f"E must be a finite number > 0, got {E!r}")
            object.__setattr__(self, "E", float(E))
        if self.protocol in KEYED:
            check_text("lpu_key", self.lpu_key)


    @property
    def cells(self) -> int:
        """The cells reports run over: the ``d`` value cells and "no value"."""
        return oracle_cells(self.d)


def oracle_of(stream: Stream, eps: float) -> str:
    """The oracle a report of ``stream`` at budget ``eps`` must use: OUE, or for plbu GRR where
    :func:`~mechanisms.local.plbu_uses_grr` says so."""
    if stream.protocol == "plbu" and plbu_uses_grr(eps, stream.cells):
        return "grr"
    return "oue"


def read_record(stream: Stream, key: bytes | None, value: bytes | None) -> ParsedReport:
    """The report a record holds if it belongs to ``stream`` and its schedule; :class:`Refusal`
    otherwise (never anything else). Slots, duplicates and ledgers are the collector's."""
    try:
        report = parse_report(value)  # type: ignore[arg-type] - None is refused here too
    except Exception as error:  # noqa: BLE001 - any refusal of the reader is a malformed record
        raise Refusal("malformed", str(error)[:200]) from None
    if key != report.user.encode("utf-8"):
        raise Refusal("wrong_key", "the key must be the user id's UTF-8 bytes")
    if report.protocol != stream.protocol:
        raise Refusal("wrong_protocol", f"{report.protocol}, not {stream.protocol}")
    if report.d != stream.d:
        raise Refusal("wrong_domain", f"d = {report.d}, not {stream.d}")
    if stream.protocol != "plbu" and (report.E != stream.E or report.w != stream.w):
        raise Refusal("wrong_requirement", f"E = {report.E!r}, w = {report.w}, not the "
                      f"stream's E = {stream.E!r}, w = {stream.w}")
    if report.oracle != oracle_of(stream, report.eps):
        raise Refusal("wrong_oracle", f"{report.oracle} at eps = {report.eps!r}")
    if not reports_at(stream.protocol, report.slot, start=stream.start, w=report.w,
                      key=stream.lpu_key, user=report.user, rotate=stream.lpu_rotate):
        raise Refusal("schedule", f"{stream.protocol} has no report of this user at slot "
                      f"{report.slot}")
    return report
