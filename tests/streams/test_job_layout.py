"""The job's folders follow a record's path (docs/design.md, "Layers"): the partition and
coordinator sides run without Kafka, in one process as well, so they import neither the
Kafka/Faust adapter nor the source stage (``mechanisms/``'s own layout, which imports nothing of
``streams``, is checked by ``tests/mechanisms/test_layout.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports by absolute name (``from x import y`` counts as ``x.y`` too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def offending(folder: str, forbidden: tuple[str, ...]) -> list[str]:
    """``file: module`` for each import under ``folder`` (or in that one file) of a module in
    ``forbidden``."""
    bad = []
    root = ROOT / folder
    for path in sorted(root.rglob("*.py") if root.is_dir() else [root]):
        for module in sorted(imported_modules(path)):
            if module.startswith(forbidden) or module in {f.rstrip(".") for f in forbidden}:
                bad.append(f"{path.relative_to(ROOT)}: {module}")
    return bad


@pytest.mark.parametrize("folder", ["streams/job/partitions", "streams/job/coordination"])
def test_the_sides_do_not_import_the_adapter_or_the_source_stage(folder: str) -> None:
    assert not offending(folder, ("streams.job.worker.", "streams.job.source.",
                                  "streams.job.operations.", "faust", "aiokafka"))


def test_the_source_stage_does_not_import_the_adapter() -> None:
    """The adapter runs the source stage (it wires the re-keyer into the Faust app), never the
    other way round."""
    assert not offending("streams/job/source", ("streams.job.worker.", "streams.job.operations.",
                                                "faust"))


@pytest.mark.parametrize("module", ["config", "slot_clock", "slot_protocol", "batch_handling"])
def test_what_the_stages_share_imports_none_of_them(module: str) -> None:
    stages = tuple(f"streams.job.{name}." for name in
                   ("partitions", "coordination", "worker", "source", "operations"))
    assert not offending(f"streams/job/{module}.py", stages)


def test_the_check_sees_an_offending_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from streams.job.worker import ingest\nimport faust\n")
    assert imported_modules(sample) >= {"streams.job.worker", "streams.job.worker.ingest", "faust"}
