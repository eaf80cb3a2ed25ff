"""Options declared as data: an :class:`Option` is a flag with its ``add_argument`` keywords, and a
command adds a table of them in one loop (:func:`add_options`). The options several commands take
are declared once here; a command that takes one with another default says so with
:meth:`Option.but`."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streams.job.config import JOB_MECHANISMS


@dataclass(frozen=True)
class Option:
    """One command-line option: its flag, its help text and ``add_argument``'s other keywords."""

    flag: str
    help: str
    keywords: Mapping[str, Any] = field(default_factory=dict)

    def but(self, **changes: Any) -> Option:
        """This option with some keywords changed: another default, another help text."""
        keywords = {**self.keywords, **changes}
        return Option(self.flag, keywords.pop("help", self.help), keywords)

    def add_to(self, parser: argparse.ArgumentParser) -> argparse.Action:
        """Add the option to ``parser``; returns its action."""
        return parser.add_argument(self.flag, help=self.help, **self.keywords)


def option(flag: str, help: str, **keywords: Any) -> Option:
    """An :class:`Option`: ``flag``, its ``help`` and the rest of ``add_argument``'s keywords."""
    return Option(flag, help, keywords)


def add_options(parser: argparse.ArgumentParser, options: Iterable[Option]) -> None:
    """Add ``options`` to ``parser`` in their order (the order ``--help`` lists them in)."""
    for opt in options:
        opt.add_to(parser)


# -- options several commands take ----------------------------------------------------------------

PREFIX = option("--prefix", "topic name prefix (default: %(default)s)", default="pwevent")
PARTITIONS = option("--partitions", "partitions of the reports and requirements topics "
                    "(default: %(default)s)", type=int, default=4)
MECHANISM = option("--mechanism", "default: the default configuration, which chooses pbu "
                   "with kalman_split or pbad with round from the public requirements and the "
                   "domain size at the stream's first slot; pbd, pba and the baselines take "
                   "fixed requirements {user, w, E}; dpbd and dpba take dynamic ones "
                   "{user, wB, EB, wF, EF} (default: %(default)s)", choices=JOB_MECHANISMS,
                   default="default")
SLOT_MS = option("--slot-ms", "slot length in ms (default: %(default)s)", type=int,
                 default=60_000)
RATE = option("--rate", "reports per second, 0 for as fast as possible (default: %(default)s)",
              type=float, default=0.0)
USERS = option("--users", "synthetic users (default: %(default)s)", type=int, default=2000)
