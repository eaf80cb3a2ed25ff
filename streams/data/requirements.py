"""Reading requirement files (CSV) with one-line errors that name the row."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from mechanisms.requirements import FixedRequirements


class InputError(ValueError):
    """A bad input file; the message names the file and row."""


def _number(path: Path, row: int, field: str, text: str | None, integer: bool) -> float:
    if text is None or text.strip() == "":
        raise InputError(f"{path}:{row}: field {field} is empty")
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{path}:{row}: field {field}={text!r} is not a number") from None
    if not math.isfinite(value):
        raise InputError(f"{path}:{row}: field {field}={text!r} is not finite")
    if integer and value != int(value):
        raise InputError(f"{path}:{row}: field {field}={text!r} is not an integer")
    return value


def read_rows(path: Path, columns: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """CSV rows as (line number, row) after checking the header has ``columns``."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    with handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in columns if c not in header]
        if missing:
            raise InputError(f"{path}:1: missing column {missing[0]!r} (header must have "
                             f"{','.join(columns)})")
        reader.fieldnames = header
        rows = [(reader.line_num, row) for row in reader]
    if not rows:
        raise InputError(f"{path}: no rows after the header")
    return rows


def read_fixed_requirements(path: str | Path) -> FixedRequirements:
    """A CSV with header ``user,w,E``: w an integer >= 1, E finite and > 0, users unique."""
    path = Path(path)
    users: list[str] = []
    ws: list[int] = []
    Es: list[float] = []
    seen: dict[str, int] = {}
    for line, row in read_rows(path, ("user", "w", "E")):
        user = (row.get("user") or "").strip()
        if not user:
            raise InputError(f"{path}:{line}: field user is empty")
        if user in seen:
            raise InputError(f"{path}:{line}: duplicate user {user!r} (first on row {seen[user]})")
        seen[user] = line
        w = _number(path, line, "w", row.get("w"), integer=True)
        if w < 1:
            raise InputError(f"{path}:{line}: field w={row['w'].strip()} must be >= 1")
        E = _number(path, line, "E", row.get("E"), integer=False)
        if E <= 0:
            raise InputError(f"{path}:{line}: field E={row['E'].strip()} must be > 0")
        users.append(user)
        ws.append(int(w))
        Es.append(E)
    return FixedRequirements.from_arrays(users, ws, Es)


def read_dynamic_requirements(path: str | Path):
    """A CSV with header ``slot,user,wB,EB,wF,EF``: rows where a requirement starts or changes.

    Slots are integers >= 1, windows integers >= 1, budgets finite and > 0; a user may not
    declare twice at one slot. Returns a ``mechanisms.requirements.DynamicRequirements``.
    """
    from mechanisms.requirements import DynamicRequirements

    path = Path(path)
    rows: list[tuple[int, str, int, float, int, float]] = []
    seen: dict[tuple[int, str], int] = {}
    for line, row in read_rows(path, ("slot", "user", "wB", "EB", "wF", "EF")):
        user = (row.get("user") or "").strip()
        if not user:
            raise InputError(f"{path}:{line}: field user is empty")
        slot = _number(path, line, "slot", row.get("slot"), integer=True)
        if slot < 1:
            raise InputError(f"{path}:{line}: field slot={row['slot'].strip()} must be >= 1")
        key = (int(slot), user)
        if key in seen:
            raise InputError(f"{path}:{line}: duplicate user {user!r} at slot {int(slot)} "
                             f"(first on row {seen[key]})")
        seen[key] = line
        values = []
        for field in ("wB", "EB", "wF", "EF"):
            integer = field.startswith("w")
            v = _number(path, line, field, row.get(field), integer=integer)
            if integer and v < 1:
                raise InputError(f"{path}:{line}: field {field}={row[field].strip()} must be >= 1")
            if not integer and v <= 0:
                raise InputError(f"{path}:{line}: field {field}={row[field].strip()} must be > 0")
            values.append(int(v) if integer else v)
        rows.append((int(slot), user, values[0], values[1], values[2], values[3]))
    try:
        return DynamicRequirements.from_rows(rows)
    except ValueError as exc:
        raise InputError(f"{path}: {exc}") from None
