"""The ``pwevent`` command line."""

from __future__ import annotations

import argparse
import os
import sys

from streams.cli import (
    audit,
    dashboard,
    demo,
    evaluate,
    group,
    plan,
    releases,
    replay,
    topics,
    worker,
)


def version() -> str:
    """The installed package's version, else the one in a source checkout's pyproject.toml."""
    from importlib import metadata

    try:
        return metadata.version("pwevent")
    except metadata.PackageNotFoundError:
        import tomllib
        from pathlib import Path

        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        try:
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"


#: The sub-commands that talk to Kafka: they take the connection flags of
#: :mod:`streams.kafka.settings`.
KAFKA_COMMANDS = ("demo", "replay", "topics", "worker", "group", "audit", "releases",
                  "dashboard")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="pwevent",
        description="Live histograms under personalised w-event differential privacy.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    parser.add_argument("--config", metavar="FILE", default=os.environ.get("PWEVENT_CONFIG"),
                        help="TOML file with defaults for any option: top-level keys for every "
                             "command, a table per command ([worker]); the environment "
                             "(PWEVENT_<OPTION>) and the command line take precedence "
                             "(env PWEVENT_CONFIG; default: none)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo.add_parser(sub)
    plan.add_parser(sub)
    evaluate.add_parser(sub)
    replay.add_parser(sub)
    topics.add_parser(sub)
    worker.add_parser(sub)
    group.add_parser(sub)
    audit.add_parser(sub)
    releases.add_parser(sub)
    dashboard.add_parser(sub)
    from streams.kafka import settings as kafka_settings

    for name in KAFKA_COMMANDS:
        kafka_settings.add_arguments(sub.choices[name])
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``pwevent`` console script."""
    from streams.cli import defaults as cli_defaults
    from streams.kafka import settings as kafka_settings

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=os.environ.get("PWEVENT_CONFIG"))
    known, rest = pre.parse_known_args(argv)
    commands = _subparsers(parser)
    command = next((a for a in rest if not a.startswith("-")), None)
    if command in commands:
        try:
            config = cli_defaults.load_config(known.config)
            cli_defaults.apply(commands[command], command, config,
                               config_name=known.config or "configuration")
        except cli_defaults.ConfigError as exc:
            print(f"pwevent {command}: error: {exc}", file=sys.stderr)
            return 2
    args = parser.parse_args(argv)
    if hasattr(args, "security_protocol"):
        try:
            kafka_settings.configure(kafka_settings.from_args(args))
        except ValueError as exc:
            print(f"pwevent {args.command}: error: {exc}", file=sys.stderr)
            return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
