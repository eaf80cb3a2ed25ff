"""The empirical privacy audit (``pwevent audit --empirical``): run every mechanism of the job on
neighbouring inputs many times and lower-bound its privacy loss with a statistical distinguisher
(:mod:`mechanisms.evaluation.privacy_audit`).

Each (mechanism, population mode, neighbouring pair) gets a lower bound eps_lb that holds with
95% confidence; it is compared with the target user's E. A bound above E proves a violation; a
bound at or below E proves nothing more than that the audit found none. ``default`` is the job's
default configuration (:class:`streams.job.config.JobConfig`'s mechanism and post-processing).

Exit status: 0 when every lower bound is at most its E, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, TextIO

import orjson

from mechanisms.evaluation.audit_names import (
    AUDITED,
    MODES,
    NEIGHBOURING,
    PAIRS,
    PLANTS,
)
from streams.cli.options import add_options, option
from streams.job.config import JobConfig

if TYPE_CHECKING:
    from mechanisms.evaluation.privacy_audit import PairResult

#: what ``--mechanisms all`` audits: every mechanism of the job and the job's default setting
ALL = (*AUDITED, "default")


def _mechanisms(text: str) -> list[str]:
    names = [x.strip().lower() for x in text.split(",") if x.strip()]
    if names == ["all"]:
        return list(ALL)
    unknown = [x for x in names if x not in ALL]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected 'all' or a comma-separated list of {','.join(ALL)}, got {text!r}")
    return list(dict.fromkeys(names))


def _trials(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 4:
        raise argparse.ArgumentTypeError("at least 4 trials")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the empirical audit's options to ``parser``."""
    add_options(parser, (
        option("--trials", "independent runs of each input of each pair (default: "
               "%(default)s)", type=_trials, default=100_000, metavar="N"),
        option("--mechanisms", f"'all' or comma-separated, of {','.join(ALL)} (default: all)",
               type=_mechanisms, default="all", metavar="LIST"),
        option("--seed", "seed of every trial's generator (default: %(default)s)", type=int,
               default=1),
        option("--noise", "the release noise: laplace (every run drawn in one compiled call) "
               "or discrete (the job's default; drawn run by run, far slower) (default: "
               "%(default)s)", choices=("laplace", "discrete"), default="laplace"),
        option("--neighbouring", "add-remove: the one-slot pair removes a report; replace: it "
               "moves the report to another cell and the rule is calibrated to sensitivity 2 "
               f"(default: the job's, {JobConfig().neighbouring})", choices=NEIGHBOURING,
               default=JobConfig().neighbouring),
        option("--plant", "run a planted defect instead of the product, to show the audit "
               "finds it", choices=PLANTS, default=None),
    ))
    with contextlib.suppress(argparse.ArgumentError):  # a command may have the flag already
        option("--json", "print one JSON object instead of a table",
               action="store_true").add_to(parser)


def _progress(result: PairResult, err: TextIO) -> None:
    verdict = "<=" if result.passed else "> "
    name = (result.setting if result.setting == result.mechanism
            else f"{result.setting} ({result.mechanism})")
    err.write(f"audit: {name} {result.mode} {result.pair}: eps_lb {result.epsilon_lb:.3f} "
              f"{verdict} E {result.E:g} ({result.seconds:.1f} s)\n")
    err.flush()


def run(args: argparse.Namespace, out: TextIO | None = None,
        err: TextIO | None = None) -> int:
    """Run the empirical audit; returns 0 when every lower bound is at most its E, else 1."""
    out, err = out or sys.stdout, err or sys.stderr
    config = JobConfig()
    # the audit's mechanisms are imported when it runs, not by every command line
    from mechanisms.evaluation.privacy_audit import audit, format_table, settings_for

    settings = settings_for(args.mechanisms, config.mechanism, config.postprocess)
    plant = getattr(args, "plant", None)
    noise = getattr(args, "noise", "laplace")
    neighbouring = getattr(args, "neighbouring", config.neighbouring)
    results = audit(settings, modes=MODES, pairs=PAIRS, trials=args.trials, seed=args.seed,
                    plant=plant, noise=noise, neighbouring=neighbouring,
                    progress=lambda r: _progress(r, err))
    passed = all(r.passed for r in results)
    if getattr(args, "json", False):
        report = {"trials": args.trials, "seed": args.seed, "noise": noise,
                  "neighbouring": neighbouring, "plant": plant, "confidence": 0.95,
                  "passed": passed, "results": [r.as_dict() for r in results]}
        out.write(orjson.dumps(report).decode() + "\n")
    else:
        failed = sum(not r.passed for r in results)
        out.write(format_table(results) + "\n\n")
        out.write(f"{len(results)} pairs, {failed} with a lower bound above E (95% "
                  "confidence each)\n")
    return 0 if passed else 1
