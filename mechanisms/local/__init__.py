"""Local differential privacy on the device: the randomisation, schedules, budget ledger and
wire format of the client libraries (docs/ldp-reports.md), pure and free of I/O.

- :mod:`~mechanisms.local.oracles`: OUE and GRR drawn from uniform 32-bit words against integer
  thresholds, with the portable ``exp`` every language computes bit for bit alike.
- :mod:`~mechanisms.local.schedule`: when a user of LBU, LSP, LPU or PLBU reports and with what
  budget, LPU's public keyed group hash.
- :mod:`~mechanisms.local.ledger`: one user's per-window budget ledger, which refuses a report
  that would overspend any window.
- :mod:`~mechanisms.local.wire`: a report's bytes, written and read.
- :mod:`~mechanisms.local.words`: the word sources; the test vectors' counter-based one.
- :mod:`~mechanisms.local.rounds`, :mod:`~mechanisms.local.population`,
  :mod:`~mechanisms.local.tree`: the two-round protocols' decisions (lbd, lba; lpd, lpa; mtsp)
  and the collector's planners (:mod:`~mechanisms.local.tree_planner` for mtsp).
- :mod:`~mechanisms.local.reporter`: one user's client, the pieces together.

The Python client (:mod:`streams.ldp_client`) and the TypeScript and Java clients (``clients/``)
implement the same rules; ``clients/vectors/ldp-vectors.json`` holds the outputs all must agree on.
"""

from mechanisms.local.ledger import ClientLedger, LedgerRefusal
from mechanisms.local.oracles import (
    HALF_WORD,
    MAX_EPS,
    WORD,
    grr_cell,
    grr_keep_threshold,
    oue_bits,
    oue_threshold,
    pack_bits,
    plbu_uses_grr,
    portable_exp,
    unpack_bits,
)
from mechanisms.local.reporter import ReportConfig, Reporter
from mechanisms.local.schedule import (
    HOMOGENEOUS,
    PROTOCOLS,
    lpu_phase,
    report_budget,
    reports_at,
)
from mechanisms.local.wire import ParsedReport, encode_report, format_number, parse_report
from mechanisms.local.words import CounterWords, WordSource

__all__ = [
    "HALF_WORD",
    "HOMOGENEOUS",
    "MAX_EPS",
    "PROTOCOLS",
    "WORD",
    "ClientLedger",
    "CounterWords",
    "LedgerRefusal",
    "ParsedReport",
    "ReportConfig",
    "Reporter",
    "WordSource",
    "encode_report",
    "format_number",
    "grr_cell",
    "grr_keep_threshold",
    "lpu_phase",
    "oue_bits",
    "oue_threshold",
    "pack_bits",
    "parse_report",
    "plbu_uses_grr",
    "portable_exp",
    "report_budget",
    "reports_at",
    "unpack_bits",
]
