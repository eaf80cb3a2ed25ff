"""The ``pwevent`` command line."""

from __future__ import annotations

import argparse
import sys

from streams import (
    audit_command,
    demo_command,
    evaluate_command,
    plan_command,
    replay_command,
    topics_command,
    worker_command,
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="pwevent",
        description="Live histograms under personalised w-event differential privacy.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo_command.add_parser(sub)
    plan_command.add_parser(sub)
    evaluate_command.add_parser(sub)
    replay_command.add_parser(sub)
    topics_command.add_parser(sub)
    worker_command.add_parser(sub)
    audit_command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pwevent`` console script."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
