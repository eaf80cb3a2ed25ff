"""Parsing of the requirements topic: a user's fixed (w-event) or dynamic requirement, or its
removal (:func:`parse_requirement`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from streams.records.field_formats import WINDOW_MIN, Reason
from streams.records.field_parsing import RecordError, json_type, parse_user
from streams.records.input_formats import DYNAMIC_FIELDS, FIXED_FIELDS
from streams.records.json_limits import screen_one

__all__ = [
    "DynamicRequirement",
    "FixedRequirement",
    "Requirement",
    "RequirementRemoval",
    "parse_requirement",
]


@dataclass(frozen=True, slots=True)
class FixedRequirement:
    """w-event requirement: at most ``E`` over any ``w`` consecutive slots."""

    user: str
    w: int
    E: float


@dataclass(frozen=True, slots=True)
class DynamicRequirement:
    """Dynamic requirement: backward window ``(wB, EB)`` and forward window ``(wF, EF)``."""

    user: str
    wB: int
    EB: float
    wF: int
    EF: float


@dataclass(frozen=True, slots=True)
class RequirementRemoval:
    """A tombstone on the compacted requirements topic: the user is unregistered."""

    user: str


Requirement = FixedRequirement | DynamicRequirement

_FIXED: Final = FIXED_FIELDS
_DYNAMIC: Final = DYNAMIC_FIELDS


def _window(doc: Mapping[str, Any], name: str) -> int:
    w = doc[name]
    if type(w) is not int:
        raise RecordError(Reason.BAD_TYPE, f"{name} must be an integer, not {json_type(w)}")
    if w < WINDOW_MIN:
        raise RecordError(Reason.INVALID_REQUIREMENT, f"{name} = {w} must be at least {WINDOW_MIN}")
    return w


def _budget(doc: Mapping[str, Any], name: str) -> float:
    e = doc[name]
    if type(e) is not int and type(e) is not float:
        raise RecordError(Reason.BAD_TYPE, f"{name} must be a number, not {json_type(e)}")
    if not math.isfinite(e) or e <= 0:
        raise RecordError(Reason.INVALID_REQUIREMENT, f"{name} = {e} must be positive and finite")
    return float(e)


def parse_requirement(
    value: bytes | None, key: bytes | None = None
) -> FixedRequirement | DynamicRequirement | RequirementRemoval:
    """Parse one record of the requirements topic; raise :class:`RecordError` with a reason.

    Fixed ``{user, w, E}`` or dynamic ``{user, wB, EB, wF, EF}``; mixing the two, or giving only
    part of either, is ``invalid_requirement``. A ``None`` value with a key is a removal.
    """
    if value is None:
        if key is None:
            raise RecordError(Reason.MISSING_FIELD, "tombstone without a key")
        try:
            return RequirementRemoval(parse_user(key.decode()))
        except UnicodeDecodeError:
            raise RecordError(Reason.BAD_TYPE, "key is not UTF-8") from None
    refused = screen_one(value)
    if refused is not None:
        raise RecordError(*refused)
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise RecordError(Reason.MALFORMED_JSON, str(exc)[:200]) from None
    if type(doc) is not dict:
        raise RecordError(Reason.BAD_TYPE, f"requirement must be an object, not {json_type(doc)}")
    if "user" not in doc:
        raise RecordError(Reason.MISSING_FIELD, "missing user")
    user = parse_user(doc["user"])
    if key is not None and key != user.encode():
        raise RecordError(Reason.BAD_TYPE, f"record key {key[:64]!r} differs from user")
    fixed = [f for f in _FIXED if f in doc]
    dynamic = [f for f in _DYNAMIC if f in doc]
    if fixed and dynamic:
        raise RecordError(
            Reason.INVALID_REQUIREMENT,
            f"mixes fixed ({', '.join(fixed)}) and dynamic ({', '.join(dynamic)}) fields",
        )
    if not fixed and not dynamic:
        raise RecordError(Reason.MISSING_FIELD, "needs w and E, or wB, EB, wF and EF")
    if fixed:
        missing = [f for f in _FIXED if f not in doc]
        if missing:
            raise RecordError(Reason.MISSING_FIELD, f"fixed requirement lacks {missing[0]}")
        w, e = _FIXED
        return FixedRequirement(user, _window(doc, w), _budget(doc, e))
    missing = [f for f in _DYNAMIC if f not in doc]
    if missing:
        raise RecordError(Reason.MISSING_FIELD, f"dynamic requirement lacks {', '.join(missing)}")
    wb, eb, wf, ef = _DYNAMIC
    return DynamicRequirement(
        user,
        _window(doc, wb),
        _budget(doc, eb),
        _window(doc, wf),
        _budget(doc, ef),
    )
