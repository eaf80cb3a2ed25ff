"""The layout of ``mechanisms/`` (docs/design.md, "Layers"): a small root, packages grouped by
role that import each other without cycles, short modules, pure numpy without I/O, and no
private name imported across modules anywhere in the repository."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MECHANISMS = ROOT / "mechanisms"
MAX_ROOT_MODULES = 6
MAX_LINES = 500
#: modules that read or write outside the process (files, sockets, brokers, subprocesses)
IO_MODULES = ("streams", "local_kafka", "aiokafka", "faust", "asyncio", "socket", "http",
              "urllib", "requests", "os", "pathlib", "shutil", "subprocess", "tempfile", "glob",
              "sqlite3")
SKIPPED_DIRS = {".venv", "venv", "build", "dist", "node_modules", "__pycache__"}


def python_files(root: Path) -> Iterator[Path]:
    """The repository's Python files under ``root`` (no virtual environment, build output or
    hidden folder)."""
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts[:-1]
        if not any(p in SKIPPED_DIRS or p.startswith(".") or p.endswith(".egg-info")
                   for p in parts):
            yield path


def module_name(path: Path) -> str:
    """The dotted name of a file of the repository (a package by its ``__init__``)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> Iterator[tuple[str, str | None, int]]:
    """(module, name, line) of every import in a file, at any depth (function-level imports
    too): ``import a.b`` gives ("a.b", None), ``from a import b`` gives ("a", "b"); relative
    imports are resolved against the file's package."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module_name(path).split(".")
                if path.name != "__init__.py":
                    package = package[:-1]
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                yield module, alias.name, node.lineno


def is_module(dotted: str, bases: tuple[Path, ...] = (ROOT,)) -> bool:
    """Whether ``dotted`` names a module or package of the repository under one of ``bases``."""
    rel = Path(*dotted.split("."))
    return any((b / rel).with_suffix(".py").is_file() or (b / rel / "__init__.py").is_file()
               for b in bases)


def mechanisms_graph(node_of) -> dict[str, set[str]]:
    """Imports between the nodes ``node_of`` maps ``mechanisms``' modules to."""
    graph: dict[str, set[str]] = {}
    for path in python_files(MECHANISMS):
        source = node_of(module_name(path))
        edges = graph.setdefault(source, set())
        for module, name, _ in imports(path):
            if not (module == "mechanisms" or module.startswith("mechanisms.")):
                continue
            target = f"{module}.{name}" if name and is_module(f"{module}.{name}") else module
            if node_of(target) != source:
                edges.add(node_of(target))
    return graph


def package_of(module: str) -> str:
    """A module's node in the package graph: its subpackage of ``mechanisms`` (``mechanisms.
    run``), a root module itself (``mechanisms.build``), ``mechanisms`` for the package's
    ``__init__``."""
    return ".".join(module.split(".")[:2])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_at_most_six_modules_at_the_root() -> None:
    root = sorted(p.name for p in MECHANISMS.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


def test_no_module_is_longer_than_500_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in python_files(MECHANISMS)
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long


def test_no_private_name_is_imported_from_another_module() -> None:
    """Across the repository's own modules (a third-party library's internals are its own
    business): a name shared between modules is public."""
    bad = []
    for path in python_files(ROOT):
        here = (ROOT, ROOT / "tests", path.parent)  # the import roots pytest and the job use
        for module, name, line in imports(path):
            if name is None or not name.startswith("_") or name.startswith("__"):
                continue
            if is_module(module, here) and not is_module(f"{module}.{name}", here):
                bad.append(f"{path.relative_to(ROOT)}:{line}: from {module} import {name}")
    assert not bad


def test_the_packages_import_each_other_without_cycles() -> None:
    graph = mechanisms_graph(package_of)
    assert {"mechanisms.run", "mechanisms.batch", "mechanisms.release"} <= set(graph)
    assert not cycles(graph)


def test_the_modules_import_each_other_without_cycles() -> None:
    assert not cycles(mechanisms_graph(lambda module: module))


def test_mechanisms_import_nothing_of_streams_and_do_no_io() -> None:
    bad = []
    for path in python_files(MECHANISMS):
        for module, _, line in imports(path):
            if module.split(".")[0] in IO_MODULES:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module}")
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("open", "input", "print")):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}()")
    assert not bad


def test_the_checks_see_a_cycle_and_a_private_import(tmp_path: Path) -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert not cycles({"a": {"b"}, "b": set()})
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from mechanisms.run.fixed import (\n        FIXED_LEDGERS,"
                      "\n        _hidden,\n    )\n")
    assert ("mechanisms.run.fixed", "_hidden", 2) in set(imports(sample))
