"""Every mechanism, named once: its family, its budget ledger, whether it is homogeneous and
whether the Kafka job runs it. The name tables elsewhere (``FIXED_MECHANISMS``,
``DYNAMIC_MECHANISMS``, the job's choices, the evaluation's list) are derived from here.

>>> spec("pbd").family, spec("pbd").ledger, spec("pbd").in_job
('central', 'distribution', True)
>>> [s.name for s in specs(homogeneous=True, family="central")]
['bd', 'ba', 'uniform', 'sample']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Family = Literal["central", "dynamic", "baseline", "local"]


@dataclass(frozen=True)
class MechanismSpec:
    """One mechanism of the product."""

    name: str
    family: Family  # central (fixed requirements), dynamic, another baseline, local DP
    ledger: str | None  # the budget ledger kind, None where the mechanism keeps its own
    homogeneous: bool  # runs everyone at the strictest requirement (max w, min E)
    in_job: bool  # the Kafka job (and the in-process job) runs it
    summary: str


_SPECS = (
    MechanismSpec("pbd", "central", "distribution", False, True,
                  "personalised budget distribution (Algorithm 4)"),
    MechanismSpec("pba", "central", "absorption", False, True,
                  "personalised budget absorption (Algorithm 5)"),
    MechanismSpec("bd", "central", "distribution", True, True,
                  "budget distribution at the strictest requirement"),
    MechanismSpec("ba", "central", "absorption", True, True,
                  "budget absorption at the strictest requirement"),
    MechanismSpec("uniform", "central", "uniform", True, True,
                  "E/w at every slot, at the strictest requirement"),
    MechanismSpec("sample", "central", "sample", True, True,
                  "all of E once per window, at the strictest requirement"),
    MechanismSpec("dpbd", "dynamic", "dynamic-distribution", False, True,
                  "budget distribution under dynamic requirements"),
    MechanismSpec("dpba", "dynamic", "dynamic-absorption", False, True,
                  "budget absorption under dynamic requirements"),
    MechanismSpec("spas", "baseline", None, True, False,
                  "SPAS, sparse-vector w-event baseline"),
    MechanismSpec("plbu", "local", None, False, False,
                  "personalised LBU: each user spends E_i/w_i per slot (GRR or OUE reports)"),
    MechanismSpec("lbu", "local", "uniform", True, False, "LDP budget uniform"),
    MechanismSpec("lsp", "local", "sample", True, False, "LDP sampling"),
    MechanismSpec("lbd", "local", "distribution", True, False, "LDP budget distribution"),
    MechanismSpec("lba", "local", "absorption", True, False, "LDP budget absorption"),
    MechanismSpec("lpu", "local", "uniform", True, False, "LDP population uniform"),
    MechanismSpec("lpd", "local", "distribution", True, False, "LDP population distribution"),
    MechanismSpec("lpa", "local", "absorption", True, False, "LDP population absorption"),
    MechanismSpec("mtsp", "local", None, True, False, "MTSP-LDP"),
)
REGISTRY: dict[str, MechanismSpec] = {s.name: s for s in _SPECS}


def spec(name: str) -> MechanismSpec:
    """The mechanism called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown mechanism {name!r}; choose from {sorted(REGISTRY)}") from None


def specs(*, family: Family | None = None, homogeneous: bool | None = None,
          in_job: bool | None = None) -> tuple[MechanismSpec, ...]:
    """The mechanisms matching every given criterion, in registry order."""
    return tuple(s for s in _SPECS
                 if (family is None or s.family == family)
                 and (homogeneous is None or s.homogeneous == homogeneous)
                 and (in_job is None or s.in_job == in_job))


def names(**criteria: object) -> tuple[str, ...]:
    """Names of :func:`specs` matching ``criteria``."""
    return tuple(s.name for s in specs(**criteria))  # type: ignore[arg-type]


def histogram_dtype(noise: str) -> type[np.generic]:
    """The dtype of released histograms: integers under discrete noise, floats under
    Laplace noise."""
    return np.float64 if noise == "laplace" else np.int64
