"""README.md and docs/*.md: the README stays short and starts with the set-up commands, every
relative link and anchor resolves, every ``pwevent`` command shown in a code block parses with the
real command line, and every configuration and release example is one the code takes."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

from streams.cli import defaults as cli_defaults
from streams.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
MAX_README_LINES = 150

#: Commands shown in a code block that are not meant to parse, each with the reason. Empty: every
#: command shown is one the parser takes.
NOT_COMMANDS: dict[str, str] = {}

#: An upper-case placeholder standing for a value (``HOST:PORT``, ``MS``, ``INSTANCE_ID``) or a
#: value left out (``...``).
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(?:[:=][A-Z0-9_]+)*|\.\.\.")
FENCE = re.compile(r"^\s*(```|~~~)\s*(\w*)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
COMMAND_START = re.compile(r"(?:\.venv/bin/)?pwevent\s")
ENV_ASSIGNMENT = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)+")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# -- reading Markdown ------------------------------------------------------------------------------

def prose_lines(text: str) -> Iterator[str]:
    """The lines outside fenced code blocks."""
    fenced = None
    for line in text.splitlines():
        m = FENCE.match(line)
        if m and (fenced is None or m.group(1) == fenced):
            fenced = m.group(1) if fenced is None else None
            continue
        if fenced is None:
            yield line


def code_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line in a code block: fenced, or indented by 4 spaces or more
    outside a fence."""
    fenced = None
    for number, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m and (fenced is None or m.group(1) == fenced):
            fenced = m.group(1) if fenced is None else None
            continue
        if fenced is not None or line.startswith("    "):
            yield number, line


def fenced_blocks(text: str, language: str) -> list[str]:
    """The contents of the fenced code blocks of ``language``."""
    blocks, current, fenced = [], None, None
    for line in text.splitlines():
        m = FENCE.match(line)
        if m and fenced is None:
            fenced, current = m.group(1), ([] if m.group(2) == language else None)
        elif m and m.group(1) == fenced:
            if current is not None:
                blocks.append("\n".join(current))
            fenced, current = None, None
        elif current is not None:
            current.append(line)
    return blocks


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: its text lower-cased, punctuation but '-' and '_' dropped,
    spaces turned into '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor of a Markdown file's headings (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if not m:
            continue
        slug = anchor(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return frozenset(found)


def links(path: Path) -> Iterator[str]:
    """The targets of the Markdown links and images of a file, code left out."""
    text = "\n".join(prose_lines(path.read_text(encoding="utf-8")))
    for m in LINK.finditer(CODE_SPAN.sub("code", text)):
        yield m.group(1)


# -- the README's top ------------------------------------------------------------------------------

def test_readme_is_short_and_starts_with_the_setup_commands():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"
    assert lines[:2] == ["# pwevent", ""]
    assert lines[2].startswith("    ./setup.sh && .venv/bin/pwevent demo ")
    assert lines[3].startswith("    ./setup.sh test && .venv/bin/python -m pytest ")
    # .ci/run runs the first line marked so
    marked = [line for line in lines if "# run the tests" in line]
    assert marked and marked[0] == lines[3]


# -- links -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_relative_links_resolve(page: Path):
    broken = []
    for target in links(page):
        if re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        path = path.partition("?")[0]
        file = (page.parent / unquote(path)).resolve() if path else page
        if not file.is_relative_to(ROOT) or not file.exists():
            broken.append(f"{target}: no such file")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target}: no heading #{fragment} in {rel(file)}")
    assert not broken, f"{rel(page)}: {broken}"


def test_every_docs_page_links_back_to_the_readme():
    for page in PAGES[1:]:
        assert "../README.md" in set(links(page)) or page.name in {
            "design.md", "performance.md", "results.md", "spas.md"}, rel(page)


# -- commands --------------------------------------------------------------------------------------

def shown_commands(page: Path) -> Iterator[tuple[str, str]]:
    """(where, command) of every ``pwevent`` command in a code block of ``page``: a line starting
    with ``pwevent`` or ``.venv/bin/pwevent`` (after ``$ ``, environment assignments or another
    command and ``&&``), joined across trailing backslashes, its comment dropped."""
    lines = list(code_lines(page.read_text(encoding="utf-8")))
    i = 0
    while i < len(lines):
        number, line = lines[i]
        text = line.strip()
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1].rstrip() + " " + lines[i][1].strip()
        i += 1
        text = re.sub(r"^\$ ", "", text)
        text = re.split(r"\s#", text, maxsplit=1)[0].strip()
        for part in text.split("&&"):
            part = ENV_ASSIGNMENT.sub("", part.strip())
            if COMMAND_START.match(part + " "):
                yield f"{rel(page)}:{number}", part


COMMANDS = [c for page in PAGES for c in shown_commands(page)]


class ParseError(Exception):
    pass


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def _placeholder_type(convert):
    def accept(text: str):
        return text if PLACEHOLDER.fullmatch(text) else convert(text)
    accept.__name__ = getattr(convert, "__name__", "value")
    return accept


class _Choices(tuple):
    def __contains__(self, value: object) -> bool:
        return (isinstance(value, str) and PLACEHOLDER.fullmatch(value) is not None) or \
            super().__contains__(value)


@cache
def parser(from_config: bool) -> argparse.ArgumentParser:
    """The real ``pwevent`` parser that raises instead of exiting and takes a placeholder for any
    value; ``from_config``: no option is required (a configuration file may give it)."""
    top = build_parser()

    def fail(message: str) -> None:
        raise ParseError(message)

    for p in _parsers(top):
        p.error = fail
        p.allow_abbrev = False
        p.exit = lambda status=0, message=None: fail(message or f"exit {status}")
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if action.type is not None:
                action.type = _placeholder_type(action.type)
            if action.choices is not None:
                action.choices = _Choices(action.choices)
            if from_config and action.option_strings:
                action.required = False
    return top


def subcommands(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((dict(a.choices) for a in p._actions
                 if isinstance(a, argparse._SubParsersAction)), {})


def takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def check_value(action: argparse.Action, value: str) -> None:
    """Each alternative of a synopsis value (``{a,b}``, ``a|b``) is one the option takes."""
    m = re.match(r"\{([^}]*)\}", value)
    options = m.group(1).split(",") if m else value.split("|")
    for alternative in options:
        if not alternative or PLACEHOLDER.fullmatch(alternative):
            continue
        converted = action.type(alternative) if action.type is not None else alternative
        if action.choices is not None and converted not in action.choices:
            raise ParseError(f"{'/'.join(action.option_strings)}: {alternative!r} is no choice")


def check_synopsis(argv: list[str]) -> None:
    """A synopsis (optional parts in brackets, alternatives, ``...``): its command exists, every
    flag is one of that command, every alternative given is one the flag takes and every word is
    a positional argument of the command."""
    top = parser(True)
    current = top
    words: list[str] = []
    tokens = [t.strip("[]") for t in argv]
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token in ("", "|", "...") or token.startswith("..."):
            continue
        if token.startswith("-"):
            flag, _, inline = token.partition("=")
            action = current._option_string_actions.get(flag)
            if action is None:
                raise ParseError(f"unknown flag {flag} of {current.prog}")
            if takes_value(action):
                value = inline or (tokens[i] if i < len(tokens) else "")
                i += 0 if inline else 1
                check_value(action, value)
            continue
        commands = subcommands(current)
        if current is top:
            if token not in commands:
                raise ParseError(f"no command {token!r}")
            current = commands[token]
            continue
        words.append(token)
    positionals = [a for a in current._actions if not a.option_strings]
    if len(words) > len(positionals):
        raise ParseError(f"{current.prog} takes no argument {words[len(positionals)]!r}")
    for action, word in zip(positionals, words, strict=False):
        check_value(action, word)


def is_synopsis(argv: list[str]) -> bool:
    return any(set(t) & set("[]{}|") or t == "..." for t in argv)


@pytest.mark.parametrize("where, command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_shown_command_parses(where: str, command: str):
    if command in NOT_COMMANDS:
        pytest.skip(NOT_COMMANDS[command])
    argv = shlex.split(command)[1:]
    try:
        if is_synopsis(argv):
            check_synopsis(argv)
        else:
            p = parser(from_config="--config" in argv)
            args = p.parse_args(argv)
            assert args.command in subcommands(p)
    except ParseError as exc:
        pytest.fail(f"{where}: `{command}` does not parse: {exc}")


def test_commands_are_found():
    """The extraction above finds the commands it should: the README's own and every
    sub-command's synopsis."""
    found = set()
    for _, command in COMMANDS:
        argv = shlex.split(command)[1:]
        if argv[:1] == ["--config"]:
            argv = argv[2:]
        found.add(argv[0])
    assert set(subcommands(build_parser())) <= found
    readme = [c for w, c in COMMANDS if w.startswith("README.md:")]
    assert any("--config pwevent.toml worker" in c for c in readme)
    assert any(c.startswith("pwevent releases") for c in readme)


@pytest.mark.parametrize("command, why", [
    ("pwevent worker --no-such-flag 1", "unknown flag"),
    ("pwevent worker --mechanism nope", "no such mechanism"),
    ("pwevent plan --mechanism pbd", "a required flag left out"),
    ("pwevent nothing", "no such command"),
    ("pwevent worker [--mechanism {pbd,nope}]", "no such mechanism in a synopsis"),
    ("pwevent group remove X --flag", "unknown flag in a synopsis"),
    ("pwevent topics create extra [--prefix P]", "a word too many in a synopsis"),
])
def test_a_wrong_command_is_caught(command: str, why: str):
    argv = shlex.split(command)[1:]
    with pytest.raises(ParseError):
        if is_synopsis(argv):
            check_synopsis(argv)
        else:
            parser(from_config="--config" in argv).parse_args(argv)


# -- examples the code must take -------------------------------------------------------------------

def option_names(p: argparse.ArgumentParser) -> set[str]:
    return {name for a in p._actions for name in
            [a.dest, *(s.lstrip("-") for s in a.option_strings)]}


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_toml_examples_are_valid_configurations(page: Path):
    """Every TOML block is a configuration ``--config`` takes: a command's table holds only that
    command's options, with values they take; a top-level key is an option of some command."""
    for block in fenced_blocks(page.read_text(encoding="utf-8"), "toml"):
        config = tomllib.loads(block)
        commands = subcommands(build_parser())
        known = set().union(*(option_names(p) for p in commands.values()))
        for key, value in config.items():
            if isinstance(value, dict):
                assert key in commands, f"{rel(page)}: no command [{key}]"
                cli_defaults.apply(subcommands(build_parser())[key], key, config, environ={},
                                   config_name=rel(page))
            else:
                assert key in known, f"{rel(page)}: no command has an option {key}"


def test_release_examples_match_the_schema():
    """Every JSON block holding a release is valid JSON that the release schema accepts."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "streams/records/schemas/releases.json").read_text())
    releases = [json.loads(block) for page in PAGES
                for block in fenced_blocks(page.read_text(encoding="utf-8"), "json")
                if '"schema_version"' in block]
    assert releases, "README.md shows a release"
    for release in releases:
        jsonschema.validate(release, schema)


#: A metric's name where the code defines it (a string literal).
METRIC_NAME = re.compile(r"""["'](pwevent_[a-z0-9_]+)["']""")


def documents() -> str:
    """The README and every page under docs/, one text."""
    return "\n".join(page.read_text(encoding="utf-8") for page in PAGES)


def test_every_flag_is_documented():
    """The README or a page under docs/ names each flag of each command, where a user looks it
    up."""
    text = documents()
    missing = [f"pwevent {name} {flag}" for name, command in subcommands(build_parser()).items()
               for action in command._actions for flag in action.option_strings
               if flag.startswith("--") and flag != "--help"
               and not re.search(re.escape(flag) + r"(?![\w-])", text)]
    assert missing == []


def test_every_metric_and_dead_letter_reason_is_documented():
    """An operator finds each metric a worker serves and each reason a dead letter carries in
    the documents (docs/operations.md, docs/job.md)."""
    from streams.records.field_formats import Reason

    text = documents()
    metrics = {name for path in sorted((ROOT / "streams").rglob("*.py"))
               for name in METRIC_NAME.findall(path.read_text(encoding="utf-8"))}
    assert {"pwevent_reports", "pwevent_ldp_records"} <= metrics  # the scan finds them
    assert sorted(m for m in metrics if m not in text) == []
    assert sorted(r.value for r in Reason if f"`{r.value}`" not in text) == []
