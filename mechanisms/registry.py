"""Every mechanism, named once: its family, its budget ledger, whether it is homogeneous,
whether the Kafka job runs it, and the release rule it runs (its publish test and estimator).
The name tables elsewhere (``FIXED_MECHANISMS``, ``DYNAMIC_MECHANISMS``, the job's choices, the
evaluation's list) are derived from here, and every release rule is built from its mechanism's
row (:func:`mechanisms.release.rule.release_rule`).

>>> spec("pbd").family, spec("pbd").ledger, spec("pbd").in_job
('central', 'distribution', True)
>>> spec("ba").test, spec("pba_ipw").estimator, spec("spas").test
('scale', 'ipw', None)
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
    #: the release rule's publish test ("obs": OBS's error, "scale": the noise scale), None
    #: where the mechanism does not run the release rule
    test: str | None
    #: the release rule's estimator ("paper": the thinned histogram, "ipw": the unbiased one,
    #: "levels": each budget group's own histogram, combined)
    estimator: str | None
    summary: str


#: One row per mechanism: name, family, ledger ("-": keeps its own), "h" if homogeneous, "job"
#: if the Kafka job runs it, the release rule's test and estimator ("-": runs no release rule),
#: then its summary.
_TABLE = """
pbd      central   distribution          -  job  obs   paper  personalised budget distribution (Algorithm 4)
pba      central   absorption            -  job  obs   paper  personalised budget absorption (Algorithm 5)
bd       central   distribution          h  job  scale paper  budget distribution at the strictest requirement
ba       central   absorption            h  job  scale paper  budget absorption at the strictest requirement
uniform  central   uniform               h  job  obs   paper  E/w at every slot, at the strictest requirement
sample   central   sample                h  job  obs   paper  all of E once per window, at the strictest requirement
pbad     central   adaptive              -  job  obs   paper  personalised budget distribution or absorption, whichever gives more at each slot
pbu      central   uniform               -  job  obs   levels personalised uniform: each budget group's own histogram at E_i/w_i every slot, combined by least-squares weights
pbd_ipw  central   distribution          -  job  obs   ipw    PBD releasing the unbiased (inverse-probability weighted) histogram
pba_ipw  central   absorption            -  job  obs   ipw    PBA releasing the unbiased (inverse-probability weighted) histogram
dpbd     dynamic   dynamic-distribution  -  job  obs   paper  budget distribution under dynamic requirements
dpba     dynamic   dynamic-absorption    -  job  obs   paper  budget absorption under dynamic requirements
spas     baseline  -                     h  -    -     -      SPAS, sparse-vector w-event baseline
plbu     local     -                     -  -    -     -      personalised LBU: each user spends E_i/w_i per slot (GRR or OUE reports)
lbu      local     uniform               h  -    -     -      LDP budget uniform
lsp      local     sample                h  -    -     -      LDP sampling
lbd      local     distribution          h  -    -     -      LDP budget distribution
lba      local     absorption            h  -    -     -      LDP budget absorption
lpu      local     uniform               h  -    -     -      LDP population uniform
lpd      local     distribution          h  -    -     -      LDP population distribution
lpa      local     absorption            h  -    -     -      LDP population absorption
mtsp     local     -                     h  -    -     -      MTSP-LDP
"""  # noqa: E501 - a table reads best unwrapped


def _parse(table: str) -> tuple[MechanismSpec, ...]:
    rows = []
    for line in table.strip().splitlines():
        name, family, ledger, homogeneous, in_job, test, estimator, summary = line.split(
            maxsplit=7)
        rows.append(MechanismSpec(name, family, None if ledger == "-" else ledger,  # type: ignore[arg-type]
                                  homogeneous == "h", in_job == "job",
                                  None if test == "-" else test,
                                  None if estimator == "-" else estimator, summary))
    return tuple(rows)


_SPECS = _parse(_TABLE)
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
