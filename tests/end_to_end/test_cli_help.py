"""The command line's surface: help texts, defaults shown, ``--version``, missing extras."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from streams.cli import main as cli
from streams.cli.evaluate_report import SUMMARY_FILE

ROOT = Path(__file__).resolve().parents[2]
MARKUP = ("``", ":func:", ":class:", ":mod:")
#: a path into the repository or a relative path up: help is read where the source tree is not
INTERNAL_PATH = re.compile(r"\b(docs|streams|tests|mechanisms)/|\.\./")
#: a Markdown file's name: the repository's documents are not at hand either...
MARKDOWN_NAME = re.compile(r"[\w.-]+\.md\b")
#: ...but the files a command writes into the user's directory are named in its help
WRITTEN_MARKDOWN = frozenset({SUMMARY_FILE})
SHOWN_DEFAULT = re.compile(r"\(default: ([^)]*)\)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e-?\d+)?")


@pytest.fixture(autouse=True)
def _no_broker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defaults read from the environment are those of a clean shell."""
    monkeypatch.delenv("PWEVENT_BROKER", raising=False)


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every sub-command's parser, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("pwevent has no sub-commands")


#: Sub-command names (the modules the parser is built from, so that collecting this file does
#: not import every command); each test builds its parser anew, after the environment is cleaned.
COMMANDS = sorted(cli.COMMAND_MODULES)


def command(name: str) -> argparse.ArgumentParser:
    """A fresh parser of sub-command NAME."""
    return subparsers(cli.build_parser())[name]


def flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Optional actions, without -h/--help and --version."""
    skip = argparse._HelpAction | argparse._VersionAction
    return [a for a in parser._actions if a.option_strings and not isinstance(a, skip)]


def expanded_help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The action's help as ``--help`` prints it (``%(default)s`` and the like filled in)."""
    return " ".join(parser._get_formatter()._expand_help(action).split())


def names_value(text: str, value: object) -> bool:
    """Whether ``text`` names ``value``: its text, or for a number an equal number (30 for 30.0)."""
    if str(value) in text:
        return True
    if isinstance(value, int | float) and not isinstance(value, bool):
        return any(float(n) == value for n in NUMBER.findall(text))
    return False


def internal_path(text: str) -> bool:
    """Whether ``text`` names a path of the repository, a path up, or a document of it."""
    return bool(INTERNAL_PATH.search(text)) or any(
        name not in WRITTEN_MARKDOWN for name in MARKDOWN_NAME.findall(text))


def test_the_internal_path_check_rejects_what_it_should() -> None:
    for bad in ("see docs/design.md", "as README.md says", "the ../notes directory",
                "in deploy/README.md", "../x"):
        assert internal_path(bad), bad
    for good in ("writes results.csv and summary.md into --out", "a 0.5 md bound",
                 "epsilon 1.5, mode x.mdx", "default: 9464"):
        assert not internal_path(good), good


def user_texts(name: str, parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(where, text) of everything ``pwevent NAME --help`` shows besides usage."""
    texts = [(f"{name} description", parser.description or ""),
             (f"{name} epilog", parser.epilog or "")]
    texts += [(f"{name} {a.option_strings or a.dest}", expanded_help(parser, a))
              for a in parser._actions if a.help and a.help != argparse.SUPPRESS]
    return texts


def test_every_command_is_walked() -> None:
    assert {"demo", "plan", "evaluate", "replay", "topics", "worker", "audit"} <= set(COMMANDS)
    assert sorted(subparsers(cli.build_parser())) == COMMANDS


@pytest.mark.parametrize("name", COMMANDS)
def test_every_flag_has_help(name: str) -> None:
    parser = command(name)
    missing = [a.option_strings for a in flags(parser)
               if not (a.help and a.help.strip() and a.help != argparse.SUPPRESS)]
    assert not missing, f"pwevent {name}: flags without help: {missing}"


@pytest.mark.parametrize("name", COMMANDS)
def test_help_has_no_markup_or_internal_paths(name: str) -> None:
    parser = command(name)
    bad = [(where, text) for where, text in user_texts(name, parser)
           if any(m in text for m in MARKUP) or internal_path(text)]
    assert not bad, f"pwevent {name}: markup or internal paths in help: {bad}"


def test_command_summaries_have_no_markup() -> None:
    parser = cli.build_parser()
    texts = [parser.description or ""]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            texts += [choice.help or "" for choice in action._choices_actions]
    assert not [t for t in texts if any(m in t for m in MARKUP) or internal_path(t)]


@pytest.mark.parametrize("name", COMMANDS)
def test_help_shows_every_default(name: str) -> None:
    """A flag with a default (not None, False or an empty list to append to) shows it as
    ``(default: ...)`` naming the value the flag really takes when it is left out."""
    parser = command(name)
    wrong = []
    for action in flags(parser):
        default = action.default
        if default is None or default is False or default == [] or default == argparse.SUPPRESS:
            continue
        shown = SHOWN_DEFAULT.search(expanded_help(parser, action))
        if shown is None or not names_value(shown.group(1), default):
            wrong.append((action.option_strings, default, expanded_help(parser, action)))
    assert not wrong, f"pwevent {name}: help does not show the default: {wrong}"


@pytest.mark.parametrize("name", COMMANDS)
def test_shown_default_is_the_one_in_force(name: str) -> None:
    """``set_defaults`` after ``add_argument`` overrides a flag's default; help must follow."""
    parser = command(name)
    stale = [(a.dest, a.default, parser._defaults[a.dest]) for a in flags(parser)
             if a.dest in parser._defaults and a.default != parser._defaults[a.dest]]
    assert not stale


def test_demo_help_tells_the_slots_it_replays(capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.build_parser()
    slots = parser.parse_args(["demo"]).slots
    with pytest.raises(SystemExit):
        parser.parse_args(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"slots to replay (default: {slots})" in text
    assert slots == 240  # two windows of the demo requirements' w = 120


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"pwevent {metadata.version('pwevent')}\n"


def test_version_of_a_source_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert cli.version() == pyproject["project"]["version"]


def test_version_from_the_console() -> None:
    done = subprocess.run([sys.executable, "-m", "streams.cli", "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    assert re.fullmatch(r"pwevent \d+\.\d+\.\d+\S*\n", done.stdout)


def test_the_console_script_runs_the_command_line() -> None:
    """The ``pwevent`` script that installing the package writes: the entry point declared in
    pyproject.toml resolves to the command line's entry function, and ``pwevent --version`` runs
    through it as the script runs it (import the object, exit with what it returns)."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    entry = metadata.EntryPoint("pwevent", declared["pwevent"], "console_scripts")
    assert entry.load() is cli.main
    module, _, attr = entry.value.partition(":")
    script = (f"import sys\nfrom {module} import {attr}\n"
              f"sys.argv[0] = 'pwevent'\nsys.exit({attr}())")
    done = subprocess.run([sys.executable, "-c", script, "--version"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout == f"pwevent {cli.version()}\n"


def _imported_distributions() -> dict[str, set[str]]:
    """The distributions the package's modules import, each with the modules importing it."""
    import ast

    owners = metadata.packages_distributions()
    found: dict[str, set[str]] = {}
    for path in sorted([*(ROOT / "streams").rglob("*.py"), *(ROOT / "mechanisms").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("streams", "mechanisms"):
                    continue
                for dist in owners.get(top, [top]):
                    found.setdefault(canonical(dist), set()).add(str(path.relative_to(ROOT)))
    return found


def canonical(name: str) -> str:
    """A distribution's normalised name (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_package_imported_is_declared() -> None:
    """A package the code imports is a dependency (or an extra's) of its own, never one that
    only comes along with another."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"],
                *(d for extra in project["optional-dependencies"].values() for d in extra)]
    names = {canonical(re.split(r"[\s\[<>=!~;]", d, maxsplit=1)[0]) for d in declared}
    imported = _imported_distributions()
    assert {"aiohttp", "aiokafka", "faust-streaming", "mode-streaming"} <= set(imported)
    missing = {dist: sorted(where) for dist, where in imported.items() if dist not in names}
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_evaluate_without_the_eval_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails, find_spec says None
    out = tmp_path / "out"
    assert cli.main(["evaluate", "--dataset", "sin", "--out", str(out)]) == 2
    assert capsys.readouterr().err == ("pwevent evaluate: error: plots need the eval extra: "
                                       "pip install 'pwevent[eval]'\n")
    assert not out.exists()  # refused before any work


def test_foursquare_regions_without_the_eval_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from streams.data.loaders import country_codes

    monkeypatch.setitem(sys.modules, "reverse_geocode", None)
    with pytest.raises(ImportError, match=re.escape("pip install 'pwevent[eval]'")):
        country_codes(np.array([52.5]), np.array([13.4]))


def test_demo_without_the_demo_extra(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from local_kafka.embedded import BrokerError, broker_binary

    monkeypatch.setitem(sys.modules, "noida_db", None)
    with pytest.raises(BrokerError, match=re.escape("pip install 'pwevent[demo]'")):
        broker_binary()
    assert cli.main(["demo", "--json-summary"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pwevent demo: error: the embedded broker needs the demo extra: "
                          "pip install 'pwevent[demo]'")
    assert err.count("\n") == 1


def test_avro_source_without_the_avro_extra(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "fastavro", None)
    monkeypatch.setenv("PWEVENT_SECRET", "s")
    assert cli.main(["worker", "--broker", "127.0.0.1:1", "--source-topic", "t",
                     "--user-field", "u", "--value-field", "v", "--source-format", "avro",
                     "--schema-registry", "http://127.0.0.1:1"]) == 2
    assert capsys.readouterr().err == ("pwevent worker: error: --source-format avro needs the "
                                       "avro extra: pip install 'pwevent[avro]'\n")


@pytest.mark.parametrize("argv", [["worker", "--cells", "3"], ["worker", "--mechanism", "lbu"],
                                  ["replay", "--mechanism", "lbu", "--secret", "x"],
                                  ["topics", "create"],
                                  ["group", "describe"], ["replay", "--dataset", "sin"],
                                  ["releases"], ["dashboard"], ["audit", "--stream", "s"]])
def test_a_command_without_a_broker_says_how_to_give_one(argv: list[str], capsys) -> None:
    """Every command that reads or writes Kafka, run without ``--broker`` in a clean shell
    (no ``PWEVENT_BROKER``), ends with status 2 and one line in the same words, after its
    name."""
    assert cli.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"pwevent {argv[0]}: error: give --broker HOST:PORT (or set "
                               f"PWEVENT_BROKER)"), lines
