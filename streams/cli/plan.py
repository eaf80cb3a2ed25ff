"""``pwevent plan``: a dry run of a mechanism's budget ledger under a given schedule."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import TextIO

import orjson

from mechanisms.defaults import DEFAULT, DefaultChoice
from mechanisms.registry import names
from streams.cli.options import add_options, option

#: every mechanism the job runs (pbd_ipw and pba_ipw plan as PBD and PBA: the same ledgers),
#: and the default configuration, which plans as the mechanism it chooses
PLAN_MECHANISMS = (DEFAULT, *names(in_job=True))


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``plan`` sub-command."""
    p = sub.add_parser(
        "plan",
        help="dry-run a mechanism's budget ledger under a publish/approximate schedule",
        description=(
            "Print what each user is charged at each slot when the release rule follows "
            "SCHEDULE ('1' publish, '0' approximate, one character per slot; a nullified slot "
            "ignores its bit; uniform, pbu and sample publish whenever they do not nullify). "
            "Fixed mechanisms read a CSV with header user,w,E; dpbd and dpba read "
            "slot,user,wB,EB,wF,EF. The default configuration ('--mechanism default', what the "
            "job runs without the flag) first says which mechanism and post-processing the "
            "requirements and --cells choose, and why, then plans that mechanism; the job "
            "makes the same choice from the users registered at the stream's first slot."
        ),
    )
    add_options(p, (
        option("--mechanism", "the mechanism whose ledger is planned", required=True,
               choices=PLAN_MECHANISMS),
        option("--requirements", "CSV of the users' requirements: user,w,E for the fixed "
               "mechanisms, slot,user,wB,EB,wF,EF for dpbd and dpba", required=True,
               metavar="FILE"),
        option("--schedule", "the release rule's choice per slot: 1 publish, 0 approximate",
               required=True, metavar="BITS"),
        option("--cells", "the domain size the default configuration weighs the users "
               "against (default: %(default)s, as the job)", type=int, default=2),
        option("--json", "one JSON object per line per slot; under the default each also "
               "carries the choice, as 'default': {mechanism, postprocess, snr}",
               action="store_true"),
    ))
    p.set_defaults(func=run)


def _records(args: argparse.Namespace) -> tuple[DefaultChoice | None, Iterator[dict]]:
    """The default's choice (``None``: a mechanism was named) and the plan's records."""
    from mechanisms.defaults import choose
    from mechanisms.run.planning import parse_schedule, plan_fixed
    from streams.data.requirements import read_fixed_requirements

    parse_schedule(args.schedule)
    if args.mechanism == DEFAULT:
        reqs = read_fixed_requirements(args.requirements)
        choice = choose(reqs, args.cells)
        return choice, plan_fixed(choice.mechanism, reqs, args.schedule)
    if args.mechanism in ("dpbd", "dpba"):
        from mechanisms.run.dynamic import plan_dynamic
        from streams.data.requirements import read_dynamic_requirements

        reqs = read_dynamic_requirements(args.requirements)
        return None, plan_dynamic(args.mechanism, reqs, args.schedule)
    return None, plan_fixed(args.mechanism, read_fixed_requirements(args.requirements),
                            args.schedule)


def explain(choice: DefaultChoice, users: int, d: int) -> str:
    """Why the default configuration runs what it runs, in one line."""
    from mechanisms.defaults import SNR_THRESHOLD

    side = ">=" if choice.snr >= SNR_THRESHOLD else "<"
    why = ("a release every slot carries signal, filtered per cell" if side == ">=" else
           "a slot's noise exceeds a cell's mean count: fewer, larger publications")
    return (f"default configuration: {users} users over {d} cells, per-slot signal-to-noise "
            f"(n/d) / (sqrt(2) w_min/E_min) = {choice.snr:.4g} {side} {SNR_THRESHOLD:g}: "
            f"{choice.mechanism} with {choice.postprocess} ({why})\n")


def _decision(rec: dict) -> str:
    if rec["nullified"]:
        return "nullified"
    return "published" if rec["published"] else "approximated"


def _write_table(records: Iterator[dict], out: TextIO) -> None:
    out.write(f"{'slot':>5}  {'decision':<12}  charges per user (eps1 + eps2)\n")
    for rec in records:
        charges = "  ".join(
            f"{u}={e1:.6g}+{rec['eps2'][u]:.6g}" for u, e1 in rec["eps1"].items()
        )
        out.write(f"{rec['slot']:>5}  {_decision(rec):<12}  {charges}\n")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Execute ``pwevent plan``; returns the exit status."""
    out = out or sys.stdout
    try:
        if args.cells < 1:
            raise ValueError(f"--cells must be >= 1, got {args.cells}")
        choice, records = _records(args)
        if args.json:
            extra = {} if choice is None else {"default": {
                "mechanism": choice.mechanism, "postprocess": choice.postprocess,
                "snr": choice.snr}}
            for rec in records:
                out.write(orjson.dumps({**rec, **extra}).decode() + "\n")
        else:
            if choice is not None:
                from streams.data.requirements import read_fixed_requirements

                users = read_fixed_requirements(args.requirements).n
                out.write(explain(choice, users, args.cells))
            _write_table(records, out)
    except ValueError as exc:
        print(f"pwevent plan: error: {exc}", file=sys.stderr)
        return 2
    return 0
