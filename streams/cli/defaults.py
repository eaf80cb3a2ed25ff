"""Defaults of every command-line option from the environment and from a configuration file.

Precedence, highest first: the flag on the command line, the environment variable
``PWEVENT_<OPTION>`` (``--max-clock-skew-ms`` -> ``PWEVENT_MAX_CLOCK_SKEW_MS``; ``PWEVENT_BROKER``
and ``PWEVENT_SECRET`` keep the meaning their commands give them), the
configuration file (``--config FILE`` before the command, or ``PWEVENT_CONFIG``), the built-in
default. The file is TOML: top-level keys apply to every command that has the option, a table
named after a command (``[worker]``) to that command only; keys are option names with dashes or
underscores (``slot-ms`` or ``slot_ms``)::

    broker = "kafka-0:9092"
    prefix = "prod"
    security-protocol = "SASL_SSL"

    [worker]
    mechanism = "pbd"
    slot-ms = 60000
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_TRUE = ("1", "true", "yes", "on")
#: Options whose environment variable the commands read themselves, with their own meaning
#: (``PWEVENT_BROKER`` is a fallback where a broker is needed, not a default that would stop
#: ``pwevent audit`` from reading dump files; ``PWEVENT_SECRET`` is read by the job's
#: configuration, so that it never appears in an argument list).
OWN_ENVIRONMENT = frozenset({"broker", "secret", "config"})
_FALSE = ("0", "false", "no", "off")


class ConfigError(ValueError):
    """A configuration file or environment value that cannot be used; the message is one line."""


def load_config(path: str | Path | None) -> dict[str, Any]:
    """The TOML configuration at ``path`` (``{}`` for ``None``)."""
    if path is None:
        return {}
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read the configuration file {path}: "
                          f"{exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file {path} is not valid TOML: {exc}") from None


def _settable(action: argparse.Action) -> bool:
    return bool(action.option_strings) and not isinstance(
        action, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction)


def _convert(action: argparse.Action, value: Any, where: str, by_dest: bool) -> Any:
    """``value`` (a string from the environment, or a TOML value) as the option's default.
    ``by_dest``: the value names the option's destination (``ssl_check_hostname``) rather than
    its flag (``no-ssl-check-hostname``), which differ in sense for a ``--no-...`` flag."""
    flag = action.option_strings[-1]
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
            value = value.lower() in _TRUE
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: {flag} takes true or false, not {value!r}")
        if by_dest:
            return value
        return action.const if value else action.default
    if action.nargs not in (None, "?"):
        items = value.split() if isinstance(value, str) else value
        if not isinstance(items, list):
            raise ConfigError(f"{where}: {flag} takes a list, not {value!r}")
        return [_one(action, item, where) for item in items]
    return _one(action, value, where)


def _one(action: argparse.Action, value: Any, where: str) -> Any:
    flag = action.option_strings[-1]
    if action.type is not None and isinstance(value, str | int | float):
        try:
            value = action.type(value if isinstance(value, str) else str(value))
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            raise ConfigError(f"{where}: {flag} {value!r}: {exc}") from None
    if action.choices is not None and value not in action.choices:
        raise ConfigError(f"{where}: {flag} must be one of "
                          f"{', '.join(map(str, action.choices))}, not {value!r}")
    return value


def _names(action: argparse.Action) -> tuple[set[str], set[str]]:
    """Keys naming the option's flag, and keys naming its destination, as written in a file."""
    flag = action.option_strings[-1].lstrip("-")
    by_flag = {flag, flag.replace("-", "_")}
    by_dest = {action.dest, action.dest.replace("_", "-")}
    return by_flag - by_dest, by_dest


def apply(parser: argparse.ArgumentParser, command: str, config: Mapping[str, Any],
          environ: Mapping[str, str] | None = None, config_name: str = "configuration") -> None:
    """Set the defaults of ``parser`` (the sub-parser of ``command``) from ``config`` and the
    environment; raises :class:`ConfigError` for a value the option does not take or an unknown
    key in the command's table."""
    env = os.environ if environ is None else environ
    section = config.get(command, {})
    if not isinstance(section, Mapping):
        raise ConfigError(f"{config_name}: {command} must be a table of options")
    known: set[str] = set()
    for action in parser._actions:
        if not _settable(action):
            continue
        by_flag, by_dest = _names(action)
        known |= by_flag | by_dest
        found: tuple[Any, str, bool] | None = None
        for scope, label in ((config, ""), (section, f"[{command}] ")):
            for key in sorted(by_flag | by_dest):
                if key in scope and not isinstance(scope[key], Mapping):
                    found = (scope[key], f"{config_name}: {label}{key}", key in by_dest)
        env_name = f"PWEVENT_{action.dest.upper()}"
        if action.dest not in OWN_ENVIRONMENT and env.get(env_name, "") != "":
            found = (env[env_name], env_name, True)
        if found is not None:
            action.default = _convert(action, *found)
    unknown = sorted(k for k in section if k not in known)
    if unknown:
        raise ConfigError(f"{config_name}: [{command}] has unknown options: "
                          f"{', '.join(unknown)}")
