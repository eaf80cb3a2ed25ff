"""What the audit reads and what it reports: one dumped topic record (:class:`Record`), a failed
check (:class:`Violation`) and the :class:`AuditReport`; with :func:`is_num`, the test for a finite
JSON number that the checks apply to the records' values."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Final

#: relative tolerance of the audit's budget comparisons (floating-point sums of charges)
TOLERANCE: Final = 1e-9

__all__ = ["AuditReport", "Record", "Violation", "is_num"]


@dataclass(frozen=True, slots=True)
class Record:
    """One topic record as dumped: JSON value decoded, ``None`` for a tombstone."""

    partition: int
    offset: int
    key: str | None
    value: Any


@dataclass(frozen=True, slots=True)
class Violation:
    """One failed check at a slot."""

    kind: str
    slot: int
    detail: str


@dataclass
class AuditReport:
    """What the audit checked and what it found."""

    stream: str
    mechanism: str | None
    slots_audited: int = 0
    windows_checked: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: how users registered and what each published field depends on
    #: (:func:`streams.audit.population.check_population`)
    population: dict[str, Any] = field(default_factory=dict)

    def add(self, kind: str, slot: int, detail: str) -> None:
        """Record a violation."""
        self.violations.append(Violation(kind, int(slot), detail))

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {"stream": self.stream, "mechanism": self.mechanism,
                "slots_audited": self.slots_audited, "windows_checked": self.windows_checked,
                "violations": [asdict(v) for v in self.sorted_violations()],
                "population": self.population}

    def sorted_violations(self) -> list[Violation]:
        """Violations by slot (stable within a slot)."""
        return sorted(self.violations, key=lambda v: v.slot)


def is_num(x: object) -> bool:
    """Whether ``x`` is a finite JSON number (an int or a float, not a bool)."""
    return type(x) in (int, float) and math.isfinite(x)
