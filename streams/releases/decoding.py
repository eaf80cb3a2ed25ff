"""A release record as a typed :class:`Release`, and the decoding, deduplication and filtering of
records read from the releases topic (:func:`decode_releases`)."""

from __future__ import annotations

import contextlib
import hashlib
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson

from streams.records.output_formats import RELEASE_VERSION
from streams.releases.error_bars import (
    DEFAULT_CONFIDENCE,
    DISTRIBUTIONS,
    Noise,
    Number,
    check_confidence,
    error_bars,
)

#: The newest release format this client knows.
KNOWN_VERSION: Final = RELEASE_VERSION

#: A record as read: key, value and Kafka timestamp (ms).
RawRecord = tuple[bytes | None, bytes | None, int | None]


class ReleaseFormatWarning(UserWarning):
    """A record on the releases topic was skipped: it could not be read, or it is a second,
    different record under a key already seen."""


class UnreadableRelease(ValueError):
    """A release record lacks a field or has one of the wrong type."""


@dataclass(frozen=True)
class Release:
    """One slot's release with its error bars (:mod:`streams.releases.client`)."""

    key: str
    stream: str
    slot: int
    start: int
    end: int
    mechanism: str
    published: bool
    nullified: bool
    histogram: tuple[Number, ...]
    threshold: float
    users: int
    schema_version: int
    #: the cell labels (None: a version-1 record, or a reference not resolved)
    cells: tuple[str, ...] | None
    #: the key of the start record holding the labels of a large domain
    cells_ref: str | None
    noise: Noise | None
    approximates: int | None
    confidence: float
    #: per cell, the interval holding the noised count with probability >= confidence
    lower: tuple[Number, ...] | None
    upper: tuple[Number, ...] | None
    #: the Kafka record's timestamp (the job sets it to ``end``)
    timestamp_ms: int | None = None
    #: the post-processed histogram (``--postprocess``) and its method; no error bars
    estimate: tuple[int, ...] | None = None
    estimate_method: str | None = None

    @property
    def status(self) -> str:
        """``"published"``, ``"approximated"`` or ``"nullified"``."""
        if self.published:
            return "published"
        return "nullified" if self.nullified else "approximated"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with stable field names (``pwevent releases --json``)."""
        noise = None if self.noise is None else {"distribution": self.noise.distribution,
                                                 "scale": list(self.noise.scale)}
        if self.noise is not None and self.noise.thinned:
            noise["thinned"] = True  # (no bars: lower and upper are null)
        return {
            "key": self.key,
            "stream": self.stream,
            "slot": self.slot,
            "start": self.start,
            "end": self.end,
            "timestamp_ms": self.timestamp_ms,
            "mechanism": self.mechanism,
            "status": self.status,
            "published": self.published,
            "nullified": self.nullified,
            "approximates": self.approximates,
            "cells": None if self.cells is None else list(self.cells),
            "histogram": list(self.histogram),
            "confidence": self.confidence,
            "lower": None if self.lower is None else list(self.lower),
            "upper": None if self.upper is None else list(self.upper),
            "noise": noise,
            "threshold": self.threshold,
            "users": self.users,
            "schema_version": self.schema_version,
            "estimate": None if self.estimate is None else {
                "method": self.estimate_method, "histogram": list(self.estimate)},
        }


def _get(doc: dict[str, Any], name: str, kinds: tuple[type, ...]) -> Any:
    if name not in doc:
        raise UnreadableRelease(f"no {name}")
    value = doc[name]
    if type(value) not in kinds:
        raise UnreadableRelease(f"{name} is {type(value).__name__}")
    return value


def _numbers(value: Any, name: str) -> tuple[Number, ...]:
    if type(value) is not list or not value or \
            not all(type(x) in (int, float) for x in value):
        raise UnreadableRelease(f"{name} is not a non-empty list of numbers")
    return tuple(value)


def _cells(doc: dict[str, Any], d: int) -> tuple[tuple[str, ...] | None, str | None]:
    cells = doc.get("cells")
    if cells is None:
        return None, None
    if type(cells) is dict and type(cells.get("ref")) is str:
        return None, cells["ref"]
    if type(cells) is list and len(cells) == d and all(type(c) is str for c in cells):
        return tuple(cells), None
    raise UnreadableRelease("cells are neither one label per cell nor a reference")


def _noise(doc: dict[str, Any], d: int) -> Noise | None:
    noise = doc.get("noise")
    if noise is None:
        return None
    if type(noise) is not dict or type(noise.get("distribution")) is not str:
        raise UnreadableRelease("noise has no distribution")
    scale = _numbers(noise.get("scale"), "noise.scale")
    if len(scale) != d:
        raise UnreadableRelease(f"{len(scale)} noise scales for {d} cells")
    thinned = noise.get("thinned", False)
    if type(thinned) is not bool:
        raise UnreadableRelease("noise.thinned is not a boolean")
    return Noise(noise["distribution"], tuple(float(x) for x in scale), thinned)


def _estimate(doc: dict[str, Any], d: int) -> tuple[tuple[int, ...] | None, str | None]:
    estimate = doc.get("estimate")
    if estimate is None:
        return None, None
    if type(estimate) is not dict or type(estimate.get("method")) is not str:
        raise UnreadableRelease("estimate has no method")
    values = estimate.get("histogram")
    if type(values) is not list or len(values) != d or \
            not all(type(x) is int and x >= 0 for x in values):
        raise UnreadableRelease(f"estimate.histogram is not {d} counts")
    return tuple(values), estimate["method"]


def parse_release(value: bytes | dict[str, Any], *, confidence: float = DEFAULT_CONFIDENCE,
                  timestamp_ms: int | None = None) -> Release:
    """One release record as a :class:`Release`; :class:`UnreadableRelease` when a field it
    needs is missing or mistyped. Unknown fields are ignored."""
    check_confidence(confidence)
    try:
        doc = orjson.loads(value) if isinstance(value, bytes | bytearray) else value
    except orjson.JSONDecodeError:
        raise UnreadableRelease("not JSON") from None
    if type(doc) is not dict:
        raise UnreadableRelease("not a JSON object")
    version = doc.get("schema_version", 1)
    if type(version) is not int:
        raise UnreadableRelease("schema_version is not an integer")
    stream = _get(doc, "stream", (str,))
    slot = _get(doc, "slot", (int,))
    histogram = _numbers(doc.get("histogram"), "histogram")
    published = _get(doc, "published", (bool,))
    cells, ref = _cells(doc, len(histogram))
    noise = _noise(doc, len(histogram)) if published else None
    lower = upper = None
    if noise is not None and noise.distribution in DISTRIBUTIONS and not noise.thinned:
        lower, upper = error_bars(histogram, noise, confidence)
    estimate, method = _estimate(doc, len(histogram))
    approximates = doc.get("approximates")
    if approximates is not None and type(approximates) is not int:
        raise UnreadableRelease("approximates is not an integer")
    return Release(
        key=f"{stream}/{slot}", stream=stream, slot=slot,
        start=_get(doc, "start", (int,)), end=_get(doc, "end", (int,)),
        mechanism=_get(doc, "mechanism", (str,)), published=published,
        nullified=_get(doc, "nullified", (bool,)), histogram=histogram,
        threshold=float(_get(doc, "threshold", (int, float))),
        users=_get(doc, "users", (int,)), schema_version=version, cells=cells, cells_ref=ref,
        noise=noise, approximates=None if published else approximates, confidence=confidence,
        lower=lower, upper=upper, timestamp_ms=timestamp_ms, estimate=estimate,
        estimate_method=method,
    )


def _key_of(key: bytes | None, value: bytes) -> tuple[str, str, int] | None:
    """``(key, stream, slot)`` of a record, from its key (``<stream>/<slot>``) or its value."""
    if key is not None:
        text = key.decode("utf-8", "replace")
        stream, _, slot = text.rpartition("/")
        digits = slot[1:] if slot.startswith("-") else slot
        if stream and digits.isascii() and digits.isdigit():
            return text, stream, int(slot)
    with contextlib.suppress(orjson.JSONDecodeError):
        doc = orjson.loads(value)
        if type(doc) is dict and type(doc.get("stream")) is str \
                and type(doc.get("slot")) is int:
            return f"{doc['stream']}/{doc['slot']}", doc["stream"], doc["slot"]
    return None


def decode_releases(records: Iterable[RawRecord], *, stream: str | None = None,
                    from_slot: int | None = None, confidence: float = DEFAULT_CONFIDENCE,
                    seen: dict[str, bytes] | None = None) -> Iterator[Release]:
    """Releases of raw ``(key, value, timestamp_ms)`` records, in order: only ``stream``'s (all
    when None), from ``from_slot`` on, the first per key. ``seen`` (key to value digest) carries
    the keys already yielded across calls. Unreadable records are skipped with a
    :class:`ReleaseFormatWarning`."""
    check_confidence(confidence)
    seen = {} if seen is None else seen
    for key, value, timestamp in records:
        if value is None:
            continue  # a tombstone
        ident = _key_of(key, value)
        if ident is None:
            warnings.warn(f"release record without a <stream>/<slot> key or fields skipped "
                          f"({value[:80]!r})", ReleaseFormatWarning, stacklevel=2)
            continue
        name, rec_stream, slot = ident
        if stream is not None and rec_stream != stream:
            continue
        if from_slot is not None and slot < from_slot:
            continue
        digest = hashlib.blake2b(value, digest_size=16).digest()
        if name in seen:
            if seen[name] != digest:
                warnings.warn(f"release {name} seen again with other content: the first is "
                              "kept", ReleaseFormatWarning, stacklevel=2)
            continue
        seen[name] = digest
        try:
            yield parse_release(value, confidence=confidence, timestamp_ms=timestamp)
        except UnreadableRelease as exc:
            version = _version(value)
            newer = (f" of schema version {version}, newer than the {KNOWN_VERSION} this "
                     "client knows," if version is not None and version > KNOWN_VERSION else "")
            warnings.warn(f"release {name}{newer} cannot be read ({exc}): skipped",
                          ReleaseFormatWarning, stacklevel=2)


def _version(value: bytes) -> int | None:
    with contextlib.suppress(orjson.JSONDecodeError):
        doc = orjson.loads(value)
        if type(doc) is dict and type(doc.get("schema_version")) is int:
            return int(doc["schema_version"])
    return None
