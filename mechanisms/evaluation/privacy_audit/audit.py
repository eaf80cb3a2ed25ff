"""The audit over mechanisms, modes and pairs, and its table."""


from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mechanisms.defaults import DEFAULT, choose
from mechanisms.evaluation.audit_names import AUDITED, MODES, PAIRS
from mechanisms.evaluation.privacy_audit.distinguisher import distinguish
from mechanisms.evaluation.privacy_audit.inputs import (
    Population,
    default_population,
    neighbour_pair,
)
from mechanisms.evaluation.privacy_audit.runs import (
    TrialStreams,
    output_label,
    run_input,
    statistics,
    stream_key,
)


@dataclass(frozen=True)
class Setting:
    """A configuration audited: its label (``default`` for the job's default), the mechanism
    and the post-processing the job applies."""

    label: str
    mechanism: str
    postprocess: str = "none"


@dataclass(frozen=True)
class PairResult:
    """The audit of one (setting, mode, pair): the lower bound, the target's E it is compared
    with (over the target's window w), and whether the bound is within it; ``p_lower`` and
    ``p_upper`` bound the probability of the best event under the numerator's and the
    denominator's input (``extra``: its counts and the evaluation half's sizes)."""

    setting: str
    mechanism: str
    mode: str
    pair: str
    plant: str | None
    epsilon_lb: float
    E: float
    w: int
    target: str
    trials: int
    event: str
    p_lower: float
    p_upper: float
    seconds: float
    text: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Whether the lower bound is at most the target's E."""
        return self.epsilon_lb <= self.E

    def as_dict(self) -> dict:
        """A JSON-able record."""
        return {"setting": self.setting, "mechanism": self.mechanism, "mode": self.mode,
                "pair": self.pair, "plant": self.plant, "epsilon_lb": self.epsilon_lb,
                "E": self.E, "w": self.w, "target": self.target, "trials": self.trials,
                "passed": self.passed, "event": self.event, "p_lower": self.p_lower,
                "p_upper": self.p_upper, "seconds": self.seconds, "pair_text": self.text,
                **{k: list(v) for k, v in self.extra.items()}}


def resolved(setting: Setting, population: Population) -> Setting:
    """``setting`` with the default configuration (mechanism ``default``, post-processing
    ``auto``) replaced by what it runs on ``population``'s public requirements."""
    if setting.mechanism != DEFAULT:
        return setting if setting.postprocess != "auto" else Setting(setting.label,
                                                                     setting.mechanism)
    choice = choose(population.requirements(), population.d)
    post = choice.postprocess if setting.postprocess == "auto" else setting.postprocess
    return Setting(setting.label, choice.mechanism, post)


def settings_for(names: Sequence[str], default_mechanism: str,
                 default_postprocess: str = "none") -> list[Setting]:
    """The settings of ``names`` (mechanisms of :data:`AUDITED`, or ``default``: the job's
    default mechanism and post-processing, resolved by the caller)."""
    out = []
    for name in names:
        if name == "default":
            out.append(Setting("default", default_mechanism, default_postprocess))
        elif name in AUDITED:
            out.append(Setting(name, name))
        else:
            raise ValueError(f"unknown mechanism {name!r}; choose from "
                             f"{', '.join((*AUDITED, 'default'))}")
    return out


def audit_pair(
    setting: Setting | str,
    mode: str,
    pair: str,
    *,
    trials: int = 100_000,
    seed: int = 1,
    plant: str | None = None,
    noise: str = "laplace",
    neighbouring: str = "add-remove",
    alpha: float = 0.05,
    streams: TrialStreams | None = None,
    population: Population | None = None,
) -> PairResult:
    """Audit one setting on one pair of neighbouring inputs in one population mode; ``streams``
    (of ``trials`` generators) may be shared between calls. ``realised_users`` applies to the
    ``defaults`` mode (declared users are registered from slot 1 in any case)."""
    setting = setting if isinstance(setting, Setting) else Setting(setting, setting)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    start = time.perf_counter()
    population = population or default_population(mode)
    setting = resolved(setting, population)
    neighbours = neighbour_pair(population, pair, neighbouring)
    if streams is None or streams.trials != trials:
        streams = TrialStreams(trials)
    sensitivity = 2 if neighbouring == "replace" else 1
    realised = plant == "realised_users" and mode == "defaults"
    observed = []
    for i, cells in enumerate((neighbours.cells0, neighbours.cells1)):
        rngs = streams.reseed(seed, stream_key(setting.mechanism, mode, pair, plant, noise,
                                         neighbouring), i)
        observed.append(run_input(setting.mechanism, population, cells, rngs, noise=noise,
                                  sensitivity=sensitivity, plant=plant, realised=realised,
                                  dropped_slot=neighbours.slots[0]))
    labels: dict[tuple, int] = {}
    cats = [np.array([labels.setdefault(k, len(labels)) for k in o.keys])[o.history]
            for o in observed]
    names = [""] * len(labels)
    for k, v in labels.items():
        names[v] = output_label(k)
    stats = [statistics(o, neighbours, population.d, setting.postprocess) for o in observed]
    found = distinguish(stats[0], cats[0], stats[1], cats[1], alpha=alpha, labels=names)
    return PairResult(setting.label, setting.mechanism, mode, pair, plant, found.epsilon_lb,
                      neighbours.E, neighbours.w, neighbours.target, trials, found.description,
                      found.p_lower, found.p_upper, time.perf_counter() - start,
                      neighbours.text, {"hits": found.hits, "halves": found.halves})


def audit(
    settings: Sequence[Setting],
    *,
    modes: Sequence[str] = MODES,
    pairs: Sequence[str] = PAIRS,
    trials: int = 100_000,
    seed: int = 1,
    plant: str | None = None,
    noise: str = "laplace",
    neighbouring: str = "add-remove",
    alpha: float = 0.05,
    progress: Callable[[PairResult], None] | None = None,
) -> list[PairResult]:
    """Audit every setting in every mode on every pair (:func:`audit_pair`), sharing one set of
    trial generators; ``progress`` is called with each result as it is found."""
    streams = TrialStreams(trials)
    out = []
    for setting in settings:
        for mode in modes:
            for pair in pairs:
                result = audit_pair(setting, mode, pair, trials=trials, seed=seed, plant=plant,
                                    noise=noise, neighbouring=neighbouring, alpha=alpha,
                                    streams=streams)
                out.append(result)
                if progress is not None:
                    progress(result)
    return out


def format_table(results: Sequence[PairResult]) -> str:
    """The results as a Markdown table, one row per (setting, mode, pair)."""
    lines = ["| setting | mode | pair | eps_lb | E (w) | trials | result | event |",
             "|---|---|---|---:|---:|---:|---|---|"]
    for r in results:
        name = r.setting if r.setting == r.mechanism else f"{r.setting} ({r.mechanism})"
        if r.plant:
            name += f" +{r.plant}"
        lines.append(f"| {name} | {r.mode} | {r.pair} | {r.epsilon_lb:.3f} | {r.E:g} ({r.w}) "
                     f"| {r.trials:,} | {'pass' if r.passed else 'FAIL'} | {r.event} |")
    return "\n".join(lines)
