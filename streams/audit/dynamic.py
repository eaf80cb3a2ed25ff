"""Per-user audit of a dynamic mechanism (DPBD, DPBA) from its declaration records.

Each partition of a dynamic job publishes, on the decisions topic, which of its users'
declarations took effect at which slot, and which users' ledgers were suspended (key
``<stream>/declared/<slot>/<partition>/<chunk>``). From those and the decisions' publish flags
the audit rebuilds every user's ledger with the mechanism's own ledger code and then, with code of
its own, checks:

* the job's ledgers: at every slot each budget level the decision names (grid codes of eps1 and
  eps2) is one the rebuilt users are at, with no more users than are there, charged the level's
  budgets, and with no more users projected, nor more not projected, than the rebuilt users of
  the level; the slot is nullified exactly when the rebuilt users nullify it;
* every user's windows: at every slot where a requirement (wB, EB, wF, EF) is in force, the
  slot's charge fits what the backward window leaves, ``max(0, EB - spent in the wB - 1 slots
  before)`` (a lowered budget below what was already spent is projected: nothing more is charged),
  and the forward window from the slot spends at most EF.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import numpy as np

from mechanisms.ledgers.columns import UNIT, grid_table
from mechanisms.run.dynamic import dynamic_ledger
from streams.audit.report import TOLERANCE, AuditReport, Record
from streams.job.slot_protocol import GRID_BITS, level_name

MAX_CELLS: Final = 50_000_000  # users x slots held for the per-user window checks


def declarations(records: Iterable[Record], stream: str) -> dict[int, dict[str, list | None]]:
    """Per slot, the users whose declaration took effect (``[wB, EB, wF, EF]``) or whose ledger
    was suspended (``None``), from the declaration records (repeats after a restart merged)."""
    prefix = f"{stream}/declared/"
    out: dict[int, dict[str, list | None]] = {}
    for rec in records:
        doc = rec.value
        if rec.key is None or not rec.key.startswith(prefix) or type(doc) is not dict:
            continue
        slot, users = doc.get("declared"), doc.get("users")
        if type(slot) is int and type(users) is dict:
            out.setdefault(slot, {}).update(users)
    return out


def check_users(report: AuditReport, records: Iterable[Record], good: dict[int, dict[str, Any]],
                first: int, last: int, stream: str, config: dict[str, Any]) -> None:
    """Rebuild every user's ledger and check it against the decisions and each window."""
    declared = declarations(records, stream)
    if not declared:
        report.notes.append("no declaration records: per-user windows not re-derived")
        return
    mechanism, max_window = str(config.get("mechanism")), int(config.get("max_window") or 200)
    ledger = dynamic_ledger(mechanism, max_window, GRID_BITS)
    table = grid_table(GRID_BITS) * UNIT
    index: dict[str, int] = {}
    rows: list[np.ndarray] = []
    reqs: list[np.ndarray] = []
    current = np.zeros((0, 4))  # the requirement in force per user (NaN: none)
    for slot in range(first, last + 1):
        doc = good.get(slot)
        if doc is None:
            report.notes.append(f"per-user windows checked up to slot {slot - 1}: no decision "
                                f"for slot {slot}")
            break
        current = _apply(ledger, index, declared.get(slot, {}), current)
        plan = ledger.plan_columns()
        group = ledger.group[: ledger.n]
        live = ~np.isnan(current[:, 0])
        code1, code2 = plan.stored1[group], plan.stored2[group]
        _compare(report, slot, doc, code1[live], code2[live], plan.projected[group][live], table,
                 bool(plan.nullified))
        ledger.commit_columns(bool(doc["published"]))
        charge = table[code1] + (table[code2] if doc["published"] else 0.0)
        rows.append(np.where(live, charge, 0.0))
        reqs.append(current.copy())
        if len(rows) * ledger.n > MAX_CELLS:
            report.notes.append(f"per-user windows checked up to slot {slot}: the stream is "
                                "too large to hold")
            break
    check_windows(report, rows, reqs, first)


def _apply(ledger: Any, index: dict[str, int], users: dict[str, list | None],
           current: np.ndarray) -> np.ndarray:
    """Apply one slot's declarations and suspensions to the ledger and the requirements."""
    for user in users:
        if user not in index:
            index[user] = len(index)
    if len(index) > current.shape[0]:
        grown = np.full((len(index), 4), np.nan)
        grown[: current.shape[0]] = current
        current = grown
    made = [(index[u], d) for u, d in users.items() if d is not None]
    gone = np.array(sorted(index[u] for u, d in users.items() if d is None), dtype=np.int64)
    if made:
        made.sort()
        idx = np.array([i for i, _d in made], dtype=np.int64)
        decl = np.array([d for _i, d in made], dtype=np.float64)
        ledger.declare(idx, decl[:, 0].astype(np.int64), decl[:, 1],
                       decl[:, 2].astype(np.int64), decl[:, 3])
        current[idx] = decl
    if gone.size:
        ledger.suspend(gone)
        current[gone] = np.nan
    return current


def _compare(report: AuditReport, slot: int, doc: dict[str, Any], code1: np.ndarray,
             code2: np.ndarray, projected: np.ndarray, table: np.ndarray,
             nullified: bool) -> None:
    """The decision's levels, user counts (projected ones among them), budgets and
    nullification against the rebuilt ones (``projected``: whether each rebuilt user's backward
    budget is projected).

    On a nullified slot a partition whose own users do not nullify it names its levels with the
    eps2 it would have charged; nothing is charged, so there levels are compared by eps1 alone.
    A decision may count fewer users than the rebuilt ledgers hold (a removed user is charged
    until its suspension), never more: neither more projected users nor more others.
    """
    plain = bool(doc["nullified"])
    pairs, level, counts = np.unique((code1.astype(np.int64) << 16) | (0 if plain else code2),
                                     return_inverse=True, return_counts=True)
    held = np.bincount(level.reshape(-1), weights=projected, minlength=pairs.size)
    names = [level_name(int(p) >> 16, int(p) & 0xFFFF) for p in pairs.tolist()]
    rebuilt = dict(zip(names, counts.tolist(), strict=True))
    rebuilt_projected = dict(zip(names, held.astype(np.int64).tolist(), strict=True))

    def merged(part: dict[str, int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for name, n in part.items():
            key = f"{name.partition(':')[0]}:0" if plain else name
            out[key] = out.get(key, 0) + n
        return out

    users, claimed = merged(doc["users"]), merged(doc.get("projected", {}))
    problems = [f"level {name} has {n} projected users but none counted"
                for name, n in claimed.items() if n and name not in users]
    for name, n in users.items():
        total, held_here = rebuilt.get(name, 0), rebuilt_projected.get(name, 0)
        p = claimed.get(name, 0)
        if n > total:
            problems.append(f"level {name} counts {n} users, the rebuilt ledgers {total}")
        elif p > held_here or n - p > total - held_here:
            problems.append(f"level {name} has {p} of its {n} users projected, the rebuilt "
                            f"ledgers {held_here} of {total}")
    for name in doc["users"]:
        c1, _, c2 = name.partition(":")
        want1 = float(table[int(c1)])
        want2 = float(table[int(c2)]) if doc["published"] else 0.0
        got1, got2 = doc["eps1"].get(name), doc["eps2"].get(name)
        if got1 is None or got2 is None or abs(got1 - want1) > TOLERANCE * max(1.0, want1) \
                or abs(got2 - want2) > TOLERANCE * max(1.0, want2):
            problems.append(f"level {name} charged ({got1}, {got2}), its codes say "
                            f"({want1:.12g}, {want2:.12g})")
    if nullified != bool(doc["nullified"]):
        problems.append(f"nullified is {doc['nullified']}, the rebuilt ledgers say {nullified}")
    for problem in problems:
        report.add("ledger_mismatch", slot, problem)


def check_windows(report: AuditReport, rows: list[np.ndarray], reqs: list[np.ndarray],
                  first: int) -> None:
    """Every user's backward and forward windows, vectorised over (slot, user)."""
    if not rows:
        return
    n = reqs[-1].shape[0]
    charges = np.zeros((len(rows), n))
    req = np.full((len(rows), n, 4), np.nan)
    for t, (row, r) in enumerate(zip(rows, reqs, strict=True)):
        charges[t, : row.shape[0]] = row
        req[t, : r.shape[0]] = r
    T = charges.shape[0]
    csum = np.vstack([np.zeros((1, n)), np.cumsum(charges, axis=0)])
    t_idx = np.arange(T)[:, None]
    on = ~np.isnan(req[:, :, 0])
    wB = np.where(on, req[:, :, 0], 1).astype(np.int64)
    wF = np.where(on, req[:, :, 2], 1).astype(np.int64)
    cols = np.arange(n)[None, :]
    before = csum[t_idx, cols] - csum[np.maximum(t_idx - wB + 1, 0), cols]
    room = np.maximum(req[:, :, 1] - before, 0.0)
    backward = on & (charges > room + TOLERANCE * np.maximum(req[:, :, 1], 1.0))
    ahead = csum[np.minimum(t_idx + wF, T), cols] - csum[t_idx, cols]
    forward = on & (ahead > req[:, :, 3] * (1 + TOLERANCE))
    report.windows_checked += 2 * int(on.sum())
    for kind, mask in (("backward", backward), ("forward", forward)):
        for t in np.flatnonzero(mask.any(axis=1)).tolist():
            users = np.flatnonzero(mask[t])
            report.add("overspend", first + t, f"{users.size} users overspend their {kind} "
                       f"window at this slot (user indices {users[:5].tolist()})")
