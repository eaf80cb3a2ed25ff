"""The TypeScript and Java clients pass their tests, the shared vectors among them
(``npm test`` in clients/typescript, ``mvn test`` in clients/java; ``./setup.sh test`` installs
what they need). A missing node, npm or mvn fails here, never skips."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parents[2] / "clients"


def run(command: list[str], where: Path, timeout: float) -> None:
    """Run ``command`` in ``where``; fail with its output unless it succeeds."""
    missing = [c for c in (command[0],) if shutil.which(c) is None]
    if missing:
        pytest.fail(f"{missing[0]} is not on PATH: the client tests need it (./setup.sh test "
                    "installs what they need)")
    done = subprocess.run(command, cwd=where, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} in {where} failed ({done.returncode}):\n"
                    f"{done.stdout[-6000:]}\n{done.stderr[-4000:]}")


def test_the_typescript_client() -> None:
    where = CLIENTS / "typescript"
    if shutil.which("node") is None:
        pytest.fail("node is not on PATH: the TypeScript client's tests need Node >= 20")
    if not (where / "node_modules" / "typescript").is_dir():
        pytest.fail(f"{where}/node_modules is missing: run ./setup.sh test (npm ci there)")
    run(["npm", "test", "--silent"], where, timeout=300)


def test_the_java_client() -> None:
    run(["mvn", "-q", "-B", "-o", "test"], CLIENTS / "java", timeout=600)
