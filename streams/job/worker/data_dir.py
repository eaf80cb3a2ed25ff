"""The data directory a worker keeps its tables in, bound to one (prefix, stream)
(:func:`bind_data_dir`): a directory holding another stream's RocksDB state would make the
worker crash while it recovers its tables, so it is refused at start with a one-line
:class:`~streams.job.worker.preflight.StartupError`."""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from streams.job.worker.preflight import StartupError

__all__ = ["BINDING_FILE", "RESET", "TABLES_DIR", "bind_data_dir"]

#: The file in a data directory that names the (prefix, stream) whose state it holds.
BINDING_FILE: Final = "pwevent-binding.json"
#: Where Faust keeps a table's RocksDB store per partition, under the data directory.
TABLES_DIR: Final = Path("v1") / "tables"
#: How the state of a data directory is given up; true because every table of the job
#: (``users``, ``checkpoints``, ``coordinator``) is RocksDB with a changelog topic.
RESET: Final = ("to reuse it for another stream, stop the worker and delete the directory "
                "(its state is rebuilt from the changelog topics)")


def bind_data_dir(data_dir: Path, prefix: str, stream: str, reset: bool = False) -> bool:
    """Make sure ``data_dir`` holds (or will hold) the state of this (prefix, stream) only;
    returns whether it was bound to them before.

    The job's tables (``users``, ``checkpoints``, ``coordinator``) live as RocksDB files in the
    data directory under names that do not say which deployment they belong to, so a directory
    reused for another prefix or stream would be read as that stream's state. On first use this
    writes ``data_dir/pwevent-binding.json`` (``{"prefix", "stream"}``), creating the directory
    if need be; on later starts it compares and raises :class:`StartupError` on a mismatch.

    A directory that holds table state but no binding file (written by a version that wrote
    none, or copied from elsewhere) may be another stream's: it is refused, unless ``reset``
    (``--reset-local-state``), which deletes that state before the worker starts; files other
    than table state do not count.
    """
    path = data_dir / BINDING_FILE
    wanted = {"prefix": prefix, "stream": stream}
    if data_dir.exists() and not data_dir.is_dir():
        raise StartupError(f"--data-dir {data_dir} is not a directory")
    if path.exists():
        try:
            bound = json.loads(path.read_text(encoding="utf-8"))
            bound = {"prefix": str(bound["prefix"]), "stream": str(bound["stream"])}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StartupError(f"data directory {data_dir} has an unreadable {BINDING_FILE} "
                               f"({type(exc).__name__}); {RESET}") from None
        if bound != wanted:
            raise StartupError(
                f"data directory {data_dir} holds the state of {_binding(bound)}, not of "
                f"{_binding(wanted)}: use another --data-dir, or, {RESET}")
        return True
    tables = data_dir / TABLES_DIR
    if not reset and tables.is_dir() and any(tables.iterdir()):
        raise StartupError(
            f"data directory {data_dir} holds table state but no {BINDING_FILE}, so it may be "
            f"another stream's: start the worker with --reset-local-state to rebuild its tables "
            f"from the changelog topics of {_binding(wanted)}, or use another --data-dir")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        partial = data_dir / f".{BINDING_FILE}.tmp"
        partial.write_text(json.dumps(wanted) + "\n", encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        raise StartupError(f"cannot write {path}: {exc.strerror or exc}") from None
    return False


def _binding(binding: Mapping[str, str]) -> str:
    return (f"--prefix {shlex.quote(binding['prefix'])} "
            f"--stream {shlex.quote(binding['stream'])}")


