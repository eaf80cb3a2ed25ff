"""Every budget ledger class by the name :mod:`mechanisms.registry` gives it: the fixed
ledgers by ledger kind, the dynamic ones by mechanism."""

from __future__ import annotations

from mechanisms.ledgers.adaptive import AdaptiveLedger
from mechanisms.ledgers.dpba import DPBALedger
from mechanisms.ledgers.dynamic import DPBDLedger, DynamicLedger
from mechanisms.ledgers.fixed import (
    AbsorptionLedger,
    BudgetLedger,
    DistributionLedger,
    SampleLedger,
    UniformLedger,
)

#: The budget ledger of each ledger kind of :mod:`mechanisms.registry` (fixed requirements).
LEDGER_CLASSES: dict[str, type[BudgetLedger]] = {
    "distribution": DistributionLedger,
    "absorption": AbsorptionLedger,
    "uniform": UniformLedger,
    "sample": SampleLedger,
    "adaptive": AdaptiveLedger,
}
#: The ledger of each mechanism of dynamic requirements.
DYNAMIC_LEDGERS: dict[str, type[DynamicLedger]] = {"dpbd": DPBDLedger, "dpba": DPBALedger}
