"""``pwevent demo``: the quickest way to see pwevent work on this machine."""

from __future__ import annotations

import argparse
import sys

from streams.replay_in_process import SYNTHETIC, print_table, replay


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``demo`` sub-command."""
    p = sub.add_parser(
        "demo",
        help="replay a synthetic stream through PBD and PBA and print the error",
        description="Replay a synthetic stream (papers/000 section 6.1) through the mechanisms "
                    "and print each one's error against the true histograms.",
    )
    p.add_argument("--dataset", choices=sorted(SYNTHETIC), default="sin")
    p.add_argument("--mechanisms", default="pbd,pba")
    p.add_argument("--users", type=int, default=2000)
    p.add_argument("--slots", type=int, default=300)
    p.add_argument("--epsilon", type=float, default=0.6)
    p.add_argument("--window", type=int, default=120)
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute ``pwevent demo``."""
    from mechanisms.evaluation import KNOWN

    mechs = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    bad = [m for m in mechs if m not in KNOWN]
    if bad or not mechs:
        print(f"pwevent demo: error: unknown mechanism {bad[0] if bad else ''!r}; choose from "
              f"{', '.join(KNOWN)}", file=sys.stderr)
        return 2
    if args.users < 1 or args.slots < 1 or args.window < 1 or not args.epsilon > 0:
        print("pwevent demo: error: --users, --slots, --window must be >= 1 and --epsilon > 0",
              file=sys.stderr)
        return 2
    print(f"replaying {args.slots} slots of the {args.dataset} stream from {args.users} users "
          f"(requirements around E={args.epsilon:g}, w={args.window})")
    print_table(replay(mechs, args.dataset, args.users, args.slots, args.epsilon, args.window,
                       args.seed))
    return 0
