"""Reading a batch of records at once: :func:`.checks.read_record`'s checks over many records,
vectorised where the records are in the clients' own form.

A record takes the quick way when its value is bytes that ``orjson`` reads as an object with
the wire's keys in the wire's order, every field of the exact type and range
:func:`mechanisms.local.parse_report` asks, belonging to the stream and its schedule (its bits
lowercase hex of the right length, read with numpy). Every other record is read alone by
:func:`.checks.read_record`, so each refusal is the one it gives. What the quick way accepts,
``read_record`` accepts with the same fields: orjson and ``json`` read the same objects where
orjson reads one (orjson refuses NaN, lone surrogates, a byte order mark; it reads integers of
2^64 or more as floats, which every field here refuses either way).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import orjson

from mechanisms.local import MAX_EPS, ParsedReport, plbu_uses_grr, reports_at
from mechanisms.local.rounds import POPULATION_PROTOCOLS, ROUND_PROTOCOLS, virtual_slot
from mechanisms.local.tree import TREE_PROTOCOL
from mechanisms.local.wire import MAX_ROUND_SLOT, MAX_SLOT, WIRE_VERSION, check_text
from streams.ldp_collector.checks import Refusal, Stream, read_record

_OUE_KEYS: Final = ("v", "protocol", "user", "slot", "eps", "E", "w", "d", "oracle", "bits",
                    "client")
_GRR_KEYS: Final = _OUE_KEYS[:9] + ("cell", "client")
#: A two-round report's keys: ``round`` after ``slot``.
_ROUND_KEYS: Final = _OUE_KEYS[:4] + ("round",) + _OUE_KEYS[4:]
#: An mtsp report's keys: ``cells`` after ``d``.
_TREE_KEYS: Final = _ROUND_KEYS[:9] + ("cells",) + _ROUND_KEYS[9:]
#: Lowercase hex digit -> its value; anything else 16.
_HEX: Final = np.full(256, 16, dtype=np.uint8)
_HEX[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint8)


@dataclass
class Reports:
    """Accepted reports as columns: their positions in the batch (increasing), users, slots,
    budgets, requirements, oracle (``grr``: True for GRR), OUE bits ((n, d + 1), zero rows for
    GRR; the last column "no value"), GRR cells (-1 for OUE), clients and the cells each
    report's bits run over (``width``: d + 1, or an mtsp report's ``cells``, its bits in the
    first columns).

    A two-round stream's reports are on the clients' ledger's time line: ``slot`` is the
    virtual slot 2 slot + round - 1 and ``w`` twice the stream's
    (:mod:`mechanisms.local.rounds`)."""

    index: np.ndarray
    users: list[str]
    slot: np.ndarray
    eps: np.ndarray
    E: np.ndarray  # noqa: N815 - the papers' name
    w: np.ndarray
    grr: np.ndarray
    bits: np.ndarray
    cell: np.ndarray
    clients: list[str]
    width: np.ndarray

    def take(self, rows: np.ndarray) -> Reports:
        """The reports at ``rows``."""
        pick = rows.tolist()
        return Reports(self.index[rows], [self.users[i] for i in pick], self.slot[rows],
                       self.eps[rows], self.E[rows], self.w[rows], self.grr[rows],
                       self.bits[rows], self.cell[rows], [self.clients[i] for i in pick],
                       self.width[rows])

    def keep(self, mask: np.ndarray) -> Reports:
        """The reports where ``mask`` holds, in order (these same reports when it holds
        everywhere)."""
        return self if mask.all() else self.take(np.flatnonzero(mask))

    def report(self, row: int, protocol: str) -> ParsedReport:
        """Row ``row`` as :func:`mechanisms.local.parse_report` gives it (a two-round report
        with its virtual slot and doubled window, as it is kept)."""
        grr, width = bool(self.grr[row]), int(self.width[row])
        return ParsedReport(protocol, self.users[row], int(self.slot[row]), float(self.eps[row]),
                            float(self.E[row]), int(self.w[row]), self.bits.shape[1] - 1,
                            "grr" if grr else "oue", None if grr else self.bits[row, :width],
                            int(self.cell[row]) if grr else None, self.clients[row],
                            cells=width)


def _empty(d: int) -> Reports:
    i, f = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    return Reports(i, [], i, f, f, i, np.zeros(0, dtype=bool), np.zeros((0, d), dtype=bool), i,
                   [], i)


def _concat(parts: list[Reports], d: int) -> Reports:
    """The reports of ``parts`` together, by position."""
    parts = [p for p in parts if p.index.size]
    if not parts:
        return _empty(d)
    if len(parts) == 1:
        return parts[0]
    joined = Reports(*(np.concatenate([getattr(p, f) for p in parts]) if f not in
                       ("users", "clients") else sum((getattr(p, f) for p in parts), [])
                       for f in Reports.__dataclass_fields__))
    return joined.take(np.argsort(joined.index, kind="stable"))


def _from_parsed(rows: list[tuple[int, ParsedReport]], d: int) -> Reports:
    """Reports ``read_record`` gave, at their positions (a two-round report at its virtual
    slot, with the doubled window)."""
    if not rows:
        return _empty(d)
    rows = [(i, r if not r.round else replace(r, slot=virtual_slot(r.slot, r.round), w=2 * r.w))
            for i, r in rows]
    bits = np.zeros((len(rows), d), dtype=bool)
    for k, (_, r) in enumerate(rows):
        if r.oracle == "oue":
            bits[k, : r.cells] = r.bits
    return Reports(np.array([i for i, _ in rows], dtype=np.int64), [r.user for _, r in rows],
                   np.array([r.slot for _, r in rows], dtype=np.int64),
                   np.array([r.eps for _, r in rows], dtype=np.float64),
                   np.array([r.E for _, r in rows], dtype=np.float64),
                   np.array([r.w for _, r in rows], dtype=np.int64),
                   np.array([r.oracle == "grr" for _, r in rows], dtype=bool), bits,
                   np.array([-1 if r.cell is None else r.cell for _, r in rows], dtype=np.int64),
                   [r.client for _, r in rows],
                   np.array([r.cells for _, r in rows], dtype=np.int64))


def _each(test: Callable[[object], bool], column: Sequence) -> np.ndarray:
    """``test`` of every item, as a bool array."""
    return np.fromiter(map(test, column), dtype=bool, count=len(column))


def _integers(column: Sequence, low: int, high: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, ok): ok where an item is an int (not a bool) in [low, high]; values there, else
    ``low``."""
    if set(map(type, column)) <= {int}:
        try:
            values = np.array(column, dtype=np.int64)
        except OverflowError:
            pass
        else:
            ok = (values >= low) & (values <= high)
            return np.where(ok, values, low), ok
    ok = _each(lambda x: type(x) is int and low <= x <= high, column)
    return np.array([x if o else low for x, o in zip(column, ok.tolist(), strict=True)],
                    dtype=np.int64), ok


def _numbers(column: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """(values as doubles, ok): ok where an item is an int or a float (not a bool); values
    there, else 1."""
    if set(map(type, column)) <= {int, float}:
        return np.array(column, dtype=np.float64), np.ones(len(column), dtype=bool)
    ok = _each(lambda x: type(x) in (int, float), column)
    return np.array([float(x) if o else 1.0 for x, o in zip(column, ok.tolist(), strict=True)],
                    dtype=np.float64), ok


def _equal(column: Sequence, value: object) -> np.ndarray:
    """Where an item is ``value``, of its very type."""
    kind = type(value)
    if column.count(value) == len(column) and set(map(type, column)) == {kind}:
        return np.ones(len(column), dtype=bool)
    return _each(lambda x: type(x) is kind and x == value, column)


def _texts(column: Sequence) -> np.ndarray:
    """Where an item is a string :func:`~mechanisms.local.wire.check_text` accepts (checked once
    per distinct string)."""
    if set(map(type, column)) != {str}:
        return _each(lambda x: type(x) is str and _text_ok(x), column)
    verdict = {t: _text_ok(t) for t in set(column)}
    return _each(verdict.__getitem__, column)


def _text_ok(text: str) -> bool:
    try:
        check_text("text", text)
    except ValueError:
        return False
    return True


def _users(keys: Sequence[bytes], users: Sequence) -> np.ndarray:
    """Where a user id is a string of 1 to 256 UTF-8 bytes that are the record's key."""
    if set(map(type, users)) == {str}:
        try:
            encoded = [u.encode("utf-8") for u in users]
        except UnicodeEncodeError:
            pass
        else:
            sizes = np.fromiter(map(len, encoded), dtype=np.int64, count=len(users))
            same = np.fromiter(map(bytes.__eq__, keys, encoded), dtype=bool, count=len(users))
            return same & (sizes >= 1) & (sizes <= 256)
    return np.array([type(u) is str and _text_ok(u) and k == u.encode("utf-8")
                     for k, u in zip(keys, users, strict=True)], dtype=bool)


def _bits(texts: Sequence, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(bits (n, d), ok): ok where a text is ceil(d/8) bytes as lowercase hex, unused bits 0
    (``d`` here counts every cell of the oracle)."""
    n, width = len(texts), 2 * ((d + 7) // 8)
    plain = (set(map(type, texts)) <= {str} and set(map(len, texts)) <= {width}
             and all(map(str.isascii, texts)))
    ok = np.ones(n, dtype=bool) if plain else _each(
        lambda t: type(t) is str and len(t) == width and t.isascii(), texts)
    chosen = texts if plain else [t for t, o in zip(texts, ok.tolist(), strict=True) if o]
    digits = _HEX[np.frombuffer("".join(chosen).encode("ascii"), dtype=np.uint8)]
    digits = digits.reshape(len(chosen), width)
    good = (digits < 16).all(axis=1)
    packed = (digits[:, 0::2] << 4) | (digits[:, 1::2] & 15)
    unpacked = np.unpackbits(packed, axis=1, bitorder="little").astype(bool)
    good &= ~unpacked[:, d:].any(axis=1)
    bits = np.zeros((n, d), dtype=bool)
    rows = np.flatnonzero(ok)
    bits[rows] = unpacked[:, :d]
    ok[rows] = good
    return bits, ok


def _parse(stream: Stream, keys: Sequence, values: Sequence) -> tuple[list[tuple], list[int]]:
    """The records orjson reads as objects with the wire's keys in order, as (position, key,
    is GRR, field values...); the positions of the others."""
    shapes = {_TREE_KEYS if stream.protocol == TREE_PROTOCOL else _ROUND_KEYS
              if stream.protocol in ROUND_PROTOCOLS else _OUE_KEYS: False}
    if stream.protocol == "plbu":
        shapes[_GRR_KEYS] = True
    docs = None
    if set(map(type, values)) == {bytes} and set(map(type, keys)) == {bytes}:
        with suppress(orjson.JSONDecodeError):  # one record orjson refuses: each alone
            docs = list(map(orjson.loads, values))
    if docs is None:
        docs = [_loads(key, value) for key, value in zip(keys, values, strict=True)]
    grr = [shapes.get(tuple(doc)) if type(doc) is dict else None for doc in docs]
    rows = [(i, keys[i], g, *docs[i].values()) for i, g in enumerate(grr) if g is not None]
    return rows, [i for i, g in enumerate(grr) if g is None]


def _loads(key: object, value: object) -> object:
    """What orjson reads in a bytes value with a bytes key; None otherwise."""
    if type(value) is not bytes or type(key) is not bytes:
        return None
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return None


def _screen(stream: Stream, rows: list[tuple]) -> tuple[Reports, list[int]]:
    """The parsed rows every check accepts, as :class:`Reports`; the positions of the rest."""
    d, cells = stream.d, stream.cells
    if not rows:
        return _empty(cells), []
    rounds = stream.protocol in ROUND_PROTOCOLS
    columns = list(zip(*rows, strict=True))
    tree = stream.protocol == TREE_PROTOCOL
    width_of = columns.pop(12) if tree else ()
    round_of = columns.pop(7) if rounds else ()
    (index, keys, grr, v, protocol, users, slot, eps, E, w, dd, oracle, payload,  # noqa: N806
     client) = columns
    n = len(index)
    grr_rows = np.array(grr, dtype=bool)
    ok = _equal(v, WIRE_VERSION) & _equal(protocol, stream.protocol) & _equal(dd, d)
    ok &= _users(keys, users) & _texts(client)
    slots, good = _integers(slot, 0, MAX_ROUND_SLOT if rounds else MAX_SLOT)
    ok &= good & (slots >= stream.start)
    ws, good = _integers(w, 1, 2**31 - 1)
    ok &= good
    epss, good = _numbers(eps)
    ok &= good & (epss > 0) & (epss <= MAX_EPS)
    Es, good = _numbers(E)  # noqa: N806
    ok &= good & (Es > 0) & (Es <= MAX_EPS * ws)
    if rounds:
        round_no, good = _integers(round_of, 1, 2)
        ok &= good
        ok &= (epss == Es) if stream.protocol in POPULATION_PROTOCOLS else np.where(
            round_no == 1, epss == Es / (2 * ws), epss <= Es / 2)
    else:
        ok &= epss == (Es / ws if stream.protocol in ("lbu", "plbu") else Es)
    if stream.protocol != "plbu":
        ok &= (ws == stream.w) & (Es == stream.E)
    if stream.protocol == "lsp":
        ok &= (slots - stream.start) % ws == 0
    ok &= _equal(oracle, "oue") if not grr_rows.any() else _each(
        lambda pair: type(pair[0]) is str and pair[0] == pair[1],
        list(zip(oracle, map(("oue", "grr").__getitem__, grr), strict=True)))
    if stream.protocol == "plbu":
        uses = {e: plbu_uses_grr(e, cells) for e in set(epss[ok].tolist())}
        ok &= np.array([uses.get(e, False) for e in epss.tolist()], dtype=bool) == grr_rows
    bits = np.zeros((n, cells), dtype=bool)
    widths = np.full(n, cells, dtype=np.int64)
    if tree:
        widths, good = _integers(width_of, 1, cells)
        ok &= good
    reported = np.full(n, -1, dtype=np.int64)
    for width in set(widths[ok & ~grr_rows].tolist()):
        oue_rows = np.flatnonzero(ok & ~grr_rows & (widths == width))
        got, good = _bits([payload[i] for i in oue_rows.tolist()], width)
        bits[oue_rows, :width] = got
        ok[oue_rows] = good
    grr_at = np.flatnonzero(ok & grr_rows)
    if grr_at.size:
        got, good = _integers([payload[i] for i in grr_at.tolist()], 0, d)
        reported[grr_at] = got
        ok[grr_at] = good
    if stream.protocol == "lpu":
        for i in np.flatnonzero(ok).tolist():
            ok[i] = reports_at("lpu", int(slots[i]), start=stream.start, w=int(ws[i]),
                               key=stream.lpu_key, user=users[i], rotate=stream.lpu_rotate)
    positions = np.array(index, dtype=np.int64)
    if rounds:
        slots, ws = 2 * slots + round_no - 1, 2 * ws
    accepted = Reports(positions, list(users), slots, epss, Es, ws, grr_rows, bits, reported,
                       list(client), widths).keep(ok)
    return accepted, positions[~ok].tolist()


def read_batch(stream: Stream, keys: Sequence, values: Sequence
               ) -> tuple[Reports, list[tuple[int, str]]]:
    """What :func:`.checks.read_record` makes of each (key, value): the accepted reports, and
    the refused ones' (position, reason), by position."""
    rows, others = _parse(stream, keys, values)
    quick, rejected = _screen(stream, rows)
    parsed: list[tuple[int, ParsedReport]] = []
    refused: list[tuple[int, str]] = []
    for i in sorted(others + rejected):
        try:
            parsed.append((i, read_record(stream, keys[i], values[i])))
        except Refusal as refusal:
            refused.append((i, refusal.reason))
    return _concat([quick, _from_parsed(parsed, stream.cells)], stream.cells), refused


def split_records(records: list, watermark: int | None
                  ) -> tuple[list, list, int | None, Exception | None]:
    """(keys, values, watermark, error) of (key, value, timestamp_ms) records: the watermark
    moved as :meth:`.LdpCollector.offer` moves it; up to the first record ``offer`` would raise
    at (not a triple, or a timestamp it cannot compare or make an int), and that exception."""
    try:
        whole = set(map(len, records)) == {3}
    except TypeError:
        whole = False
    if whole:
        keys, values, stamps = map(list, zip(*records, strict=True))
        if set(map(type, stamps)) <= {int, type(None)}:
            latest = max((t for t in stamps if t is not None), default=None)
            if latest is not None and (watermark is None or latest > watermark):
                watermark = latest
            return keys, values, watermark, None
    keys, values = [], []
    for record in records:
        try:
            key, value, timestamp_ms = record
            if timestamp_ms is not None and (watermark is None or timestamp_ms > watermark):
                watermark = int(timestamp_ms)
        except Exception as error:  # noqa: BLE001 - raised by the caller, as offer would
            return keys, values, watermark, error
        keys.append(key)
        values.append(value)
    return keys, values, watermark, None
