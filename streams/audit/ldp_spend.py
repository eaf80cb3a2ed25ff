"""The audit of a stream's local-DP reports (``pwevent audit --ldp``): from the reports' own
metadata, every client's spend over every window of its ``w`` slots is at most its ``E``, with one
report per slot in slot order (docs/ldp-reports.md, "The ledger").

Each report declares its protocol, slot, budget ``eps`` and the requirement ``(E, w)`` its
client's ledger holds. The audit replays every user's reports, in the order of their partition
(one user's reports share a partition: they are keyed by the user), through the clients' own
ledger rule (:class:`mechanisms.local.ClientLedger`); a report that rule refuses is a violation,
and so is a record no client writes (``malformed``) or one keyed by another user than its own
(``wrong_key``). The collector's watermark records (keyless ``{"watermark", "mac"}``, which
only move time and carry nothing of a user) are counted apart. A user whose ``E`` or ``w``
changed is checked as its client is: its history under the new requirement. A two-round
report (lbd, lba) is checked on its client's time line: round r of slot t at the virtual slot
2t + r - 1, windows of 2w (:mod:`mechanisms.local.rounds`), which cover every w real slots; an
lpd or lpa report on its slot, windows of w, as its client keeps them
(:mod:`mechanisms.local.population`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

from mechanisms.local import ClientLedger, LedgerRefusal, parse_report
from mechanisms.local.rounds import POPULATION_PROTOCOLS, virtual_slot
from streams.job.partitions.watermarks import WATERMARK_PREFIX


@dataclass(frozen=True)
class SpendViolation:
    """One report the audit refuses: where it lies, its user and slot (None when unreadable),
    the reason and a detail for people."""

    partition: int
    offset: int
    user: str | None
    slot: int | None
    reason: str
    detail: str

    def as_dict(self) -> dict:
        """A JSON-able record."""
        return {"partition": self.partition, "offset": self.offset, "user": self.user,
                "slot": self.slot, "reason": self.reason, "detail": self.detail}


@dataclass
class SpendReport:
    """What the audit read and found: reports and users, per protocol the reports, the largest
    share of E any window of any user spent, and the violations in the order read."""

    reports: int = 0
    watermarks: int = 0
    users: int = 0
    protocols: dict[str, int] = field(default_factory=dict)
    largest_share: float = 0.0
    violations: list[SpendViolation] = field(default_factory=list)

    def as_dict(self) -> dict:
        """A JSON-able record (``pwevent audit --ldp --json``)."""
        return {"reports": self.reports, "watermarks": self.watermarks, "users": self.users,
                "protocols": self.protocols,
                "largest_window_share_of_E": self.largest_share,
                "violations": [v.as_dict() for v in self.violations]}


def audit_spend(records: Iterable[tuple[int, int, bytes | None, bytes | None]]) -> SpendReport:
    """Audit ``records`` of ``<prefix>.ldp-reports`` given as (partition, offset, key, value),
    each partition's in offset order."""
    report = SpendReport()
    ledgers: dict[str, ClientLedger] = {}
    for partition, offset, key, value in records:
        if key is None and is_watermark(value):
            report.watermarks += 1
            continue
        report.reports += 1

        def refuse(reason: str, detail: str, user: str | None = None,
                   slot: int | None = None, where: tuple[int, int] = (partition, offset)) -> None:
            report.violations.append(SpendViolation(*where, user, slot, reason, detail[:300]))

        try:
            if value is None:
                raise ValueError("a tombstone is no report")
            parsed = parse_report(value)
        except (ValueError, UnicodeDecodeError) as exc:
            refuse("malformed", str(exc))
            continue
        report.protocols[parsed.protocol] = report.protocols.get(parsed.protocol, 0) + 1
        if key != parsed.user.encode("utf-8"):
            refuse("wrong_key", "the record's key is not its user id", parsed.user, parsed.slot)
            continue
        at, w = parsed.slot, parsed.w
        if parsed.round and parsed.protocol not in POPULATION_PROTOCOLS:
            at, w = virtual_slot(parsed.slot, parsed.round), 2 * parsed.w
        ledger = ledgers.get(parsed.user)
        if ledger is None or (ledger.w, ledger.E) != (w, parsed.E):
            fresh = ClientLedger(w, parsed.E)
            if ledger is not None:
                fresh.load(ledger.dump())
            ledger = fresh
        try:
            ledger.commit(at, parsed.eps)
        except LedgerRefusal as refusal:
            refuse(refusal.code, str(refusal), parsed.user, parsed.slot)
            continue
        ledgers[parsed.user] = ledger
        report.largest_share = max(report.largest_share, ledger.spent(at) / ledger.E)
    report.users = len(ledgers)
    return report


def is_watermark(value: bytes | None) -> bool:
    """Whether ``value`` has the shape of the collector's watermark record (its signature is
    the collector's to check: it needs the deployment secret)."""
    if value is None or not value.startswith(WATERMARK_PREFIX):
        return False
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return isinstance(doc, dict) and set(doc) == {"watermark", "mac"} and \
        type(doc["watermark"]) is int and type(doc["mac"]) is str


def summary(report: SpendReport, topic: str) -> str:
    """The human summary: what was read, then one line per violation."""
    lines = [f"audit of the local-DP reports on {topic}",
             f"reports: {report.reports} from {report.users} users ("
             + (", ".join(f"{p} {n}" for p, n in sorted(report.protocols.items())) or "none")
             + f"), {report.watermarks} watermark records",
             f"largest window spend: {report.largest_share:.6g} of E",
             f"violations: {len(report.violations)}"]
    lines += [f"partition {v.partition} offset {v.offset}: {v.reason}: "
              + (f"user {v.user!r} slot {v.slot}: " if v.user is not None else "") + v.detail
              for v in report.violations]
    return "\n".join(lines) + "\n"
