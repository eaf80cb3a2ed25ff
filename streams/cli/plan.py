"""``pwevent plan``: a dry run of a mechanism's budget ledger under a given schedule."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import TextIO

import orjson

from mechanisms.registry import names
from streams.cli.options import add_options, option

#: every mechanism the job runs (pbd_ipw and pba_ipw plan as PBD and PBA: the same ledgers)
PLAN_MECHANISMS = names(in_job=True)


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
            "slot,user,wB,EB,wF,EF."
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
        option("--json", "one JSON object per line per slot", action="store_true"),
    ))
    p.set_defaults(func=run)


def _records(args: argparse.Namespace) -> Iterator[dict]:
    from mechanisms.run.planning import parse_schedule, plan_fixed
    from streams.data.requirements import read_fixed_requirements

    parse_schedule(args.schedule)
    if args.mechanism in ("dpbd", "dpba"):
        from mechanisms.run.dynamic import plan_dynamic
        from streams.data.requirements import read_dynamic_requirements

        reqs = read_dynamic_requirements(args.requirements)
        return plan_dynamic(args.mechanism, reqs, args.schedule)
    return plan_fixed(args.mechanism, read_fixed_requirements(args.requirements), args.schedule)


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
        records = _records(args)
        if args.json:
            for rec in records:
                out.write(orjson.dumps(rec).decode() + "\n")
        else:
            _write_table(records, out)
    except ValueError as exc:
        print(f"pwevent plan: error: {exc}", file=sys.stderr)
        return 2
    return 0
