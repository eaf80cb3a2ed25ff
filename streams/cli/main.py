"""The ``pwevent`` command line."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

#: Each sub-command and the module that adds its parser, in the order ``--help`` lists them.
#: A command line naming one imports that module alone.
COMMAND_MODULES = {
    "demo": "streams.cli.demo",
    "plan": "streams.cli.plan",
    "evaluate": "streams.cli.evaluate",
    "replay": "streams.cli.replay",
    "topics": "streams.cli.topics",
    "worker": "streams.cli.worker",
    "group": "streams.cli.group",
    "audit": "streams.cli.audit",
    "releases": "streams.cli.releases",
    "dashboard": "streams.cli.dashboard",
}


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


class _VersionAction(argparse.Action):
    """``--version``: prints ``pwevent <version>`` and exits; the installed version is looked
    up only then, not at every start (it reads the installed packages' metadata)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS,
                 help: str = "show program's version number and exit") -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(f"{parser.prog} {version()}")
        parser.exit()


#: The sub-commands that talk to Kafka: they take the connection flags of
#: :mod:`streams.kafka.settings`.
KAFKA_COMMANDS = ("demo", "replay", "topics", "worker", "group", "audit", "releases",
                  "dashboard")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every sub-command, or with ``only`` that one (a command line
    that names it needs no other: each command's module is imported only to add its parser)."""
    parser = argparse.ArgumentParser(
        prog="pwevent",
        description="Live histograms under personalised w-event differential privacy.",
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("--config", metavar="FILE", default=os.environ.get("PWEVENT_CONFIG"),
                        help="TOML file with defaults for any option: top-level keys for every "
                             "command, a table per command ([worker]); the environment "
                             "(PWEVENT_<OPTION>) and the command line take precedence "
                             "(env PWEVENT_CONFIG; default: none)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    names = [only] if only in COMMAND_MODULES else list(COMMAND_MODULES)
    for name in names:
        importlib.import_module(COMMAND_MODULES[name]).add_parser(sub)
    from streams.kafka import settings as kafka_settings

    for name in KAFKA_COMMANDS:
        if name in sub.choices:
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
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=os.environ.get("PWEVENT_CONFIG"))
    known, rest = pre.parse_known_args(argv)
    command = next((a for a in rest if not a.startswith("-")), None)
    parser = build_parser(command)
    commands = _subparsers(parser)
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
