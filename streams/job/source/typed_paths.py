"""Reading the mapped fields of a batch of source records without a dict per record.

:class:`PathDecoder` builds, from the mapping's dotted paths, a msgspec type that holds just
those fields (nested objects as nested structs, every other field of the record skipped while
parsing) and decodes each record into it: about half the time of ``orjson.loads`` on telemetry
events, and the fields come out as columns. It is a fast path only. A record it cannot take
(beyond the bounds of :mod:`streams.records.json_limits`, not JSON, not an object, a required
path absent or not under objects, a leaf it does not pass, anything its decoder raises on) is
handed back by position, and the mapping runs its general per-record code on it, so every
rejection and every edge case (integers beyond 64 bits, which ``orjson`` reads as floats) stays
exactly as that code decides. A leaf passes when it is a string, a float, a boolean, null or an
integer within 64 bits; strings, floats and such integers decode to the same values under both
parsers (tests/streams/test_source_columns.py holds the two paths equal on generated records).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any, Final

import msgspec

from streams.records.json_limits import screen

__all__ = ["PathDecoder"]

_INT_LOW: Final = -(2**63)
_INT_HIGH: Final = 2**63
#: Leaf types that decode alike under both parsers whatever their value.
_PLAIN_TYPES: Final = frozenset({str, float, bool, type(None)})


class _Node:
    """One object level of the paths: its keys, each a leaf or a further node."""

    def __init__(self) -> None:
        self.children: dict[str, _Node | None] = {}  # None: a leaf
        self.required: set[str] = set()


def _plain(value: Any) -> bool:
    """Whether a leaf decodes to the same value under msgspec and orjson (module doc)."""
    t = type(value)
    return (t is str or t is float or value is None or t is bool
            or (t is int and _INT_LOW <= value < _INT_HIGH))


class PathDecoder:
    """Decodes ``required`` paths (absent: the record goes to the general path) and
    ``optional`` ones (absent: ``None``) of JSON records (module doc)."""

    def __init__(self, required: Sequence[tuple[str, ...]],
                 optional: Sequence[tuple[str, ...]] = ()) -> None:
        root = _Node()
        self.usable = True
        for keys, needed in [(k, True) for k in required] + [(k, False) for k in optional]:
            node = root
            for depth, key in enumerate(keys):
                leaf = depth == len(keys) - 1
                if needed:
                    node.required.add(key)
                have = node.children.get(key, "absent")
                if have == "absent":
                    node.children[key] = None if leaf else _Node()
                elif (have is None) != leaf:  # a key both a leaf and an object: no fast path
                    self.usable = False
                    return
                if not leaf:
                    node = node.children[key]  # type: ignore[assignment]
        self._count = 0
        self._names: dict[tuple[str, ...], str] = {}
        struct = self._struct(root, ())
        self._decode = msgspec.json.Decoder(struct).decode
        self._required = [attrgetter(self._names[k]) for k in required]
        self._optional = [self._names[k] for k in optional]
        self._optional_get = [attrgetter(self._names[k]) for k in optional]

    def _struct(self, node: _Node, prefix: tuple[str, ...]) -> type:
        """The msgspec struct of one object level, fields named ``f0``, ``f1``... (JSON keys
        need not be identifiers) and renamed to their keys."""
        fields: list[Any] = []
        rename: dict[str, str] = {}
        for key, child in node.children.items():
            name = f"f{self._count}"
            self._count += 1
            rename[name] = key
            path = (*prefix, key)
            self._names[path] = name if not prefix else f"{self._names[prefix]}.{name}"
            kind: Any = Any if child is None else self._struct(child, path)
            if key in node.required:
                fields.append((name, kind))
            else:
                fields.append((name, kind | msgspec.UnsetType, msgspec.UNSET))
        # gc=False: a decoded record holds decoded JSON only, so it can be in no reference
        # cycle; the cycle collector then need not walk a batch's records alive in every young
        # collection (docs/performance.md, "The source stage").
        return msgspec.defstruct(f"Level{self._count}", fields, rename=rename, kw_only=True,
                                 gc=False)

    def _structs(self, values: Sequence[bytes | None]) -> tuple[list[int], list[Any], list[int]]:
        """The records decoded: the positions taken, their structs, the positions left."""
        refused = {r.index for r in screen(values)}  # the general path rejects them
        if not refused:
            try:
                return list(range(len(values))), list(map(self._decode, values)), []
            except Exception:  # noqa: BLE001 - a record to leave (None: a TypeError)
                pass
        decode = self._decode
        taken: list[int] = []
        structs = []
        left: list[int] = []
        for i, raw in enumerate(values):
            if raw is None or i in refused:
                left.append(i)
                continue
            try:
                structs.append(decode(raw))
            except Exception:  # noqa: BLE001 - the general path says why
                left.append(i)
                continue
            taken.append(i)
        return taken, structs, left

    def decode(self, values: Sequence[bytes | None]
               ) -> tuple[list[int], list[list[Any]], list[tuple[Any, ...]], list[int]]:
        """The records taken: their positions, one column per required path (in order) and
        per record its optional leaves (``None`` where absent); and the positions of the
        records it leaves to the general path."""
        taken, structs, left = self._structs(values)
        columns = [list(map(get, structs)) for get in self._required]
        leaves = [_leaves(structs, name, get)
                  for name, get in zip(self._optional, self._optional_get, strict=True)]
        optional = list(zip(*leaves, strict=True)) if leaves else []
        bad = _not_plain([*columns, *leaves])
        if not bad:
            return taken, columns, optional, left
        keep = [j for j in range(len(taken)) if j not in bad]
        left = sorted(left + [taken[j] for j in bad])
        return ([taken[j] for j in keep], [[col[j] for j in keep] for col in columns],
                [optional[j] for j in keep] if optional else [], left)


def _not_plain(columns: list[list[Any]]) -> set[int]:
    """Rows holding a leaf that is not plain (module doc), checked a column at a time."""
    bad: set[int] = set()
    for col in columns:
        kinds = set(map(type, col))
        if kinds <= _PLAIN_TYPES:
            continue
        bad.update(j for j, v in enumerate(col) if not _plain(v))
    return bad


def _leaves(structs: list[Any], dotted: str, get: Callable[[Any], Any]) -> list[Any]:
    """An optional path's leaf of every struct, ``None`` where it or a parent is absent: a
    column at a time, record by record only where a parent level is absent."""
    try:
        column = list(map(get, structs))
    except AttributeError:  # a parent level absent (UNSET) in some record
        return [_optional(s, dotted) for s in structs]
    if msgspec.UnsetType in set(map(type, column)):
        return [None if v is msgspec.UNSET else v for v in column]
    return column


def _optional(struct: Any, dotted: str) -> Any:
    """An optional leaf by its dotted field names, ``None`` where it or a parent is absent."""
    value = struct
    for name in dotted.split("."):
        value = getattr(value, name)
        if value is msgspec.UNSET:
            return None
    return value
