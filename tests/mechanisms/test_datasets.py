"""Tests for the synthetic streams and the Taxi / Foursquare loaders."""

from __future__ import annotations

import csv
import gzip
import hashlib
import math
import shutil
import struct
import subprocess
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from mechanisms.evaluation.datasets import (
    JavaRandom,
    StreamData,
    fdlibm_log,
    log_probabilities,
    sin_probabilities,
    synthetic_stream,
    tlns_probabilities,
    tlns_trace,
)
from streams.data.loaders import load_foursquare, load_taxi

FIXTURES = Path(__file__).parents[1] / "fixtures"
ORACLE = FIXTURES / "tlns_oracle.txt"
CHECKINS = FIXTURES / "foursquare_checkins.tsv.gz"
POIS = FIXTURES / "foursquare_pois.tsv.gz"
EPOCH = datetime(1970, 1, 1)

# --------------------------------------------------------------------------------------------
# TLNS against the JDK
# --------------------------------------------------------------------------------------------


def _bits(x: float) -> int:
    """Bits as Java's Double.doubleToLongBits gives them (one canonical NaN)."""
    return 0x7FF8000000000000 if math.isnan(x) else struct.unpack("<Q", struct.pack("<d", x))[0]


def _double(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def _sha256(values: Iterable[float]) -> str:
    digest = hashlib.sha256()
    for value in values:
        digest.update(_bits(value).to_bytes(8, "big"))
    return digest.hexdigest()


def _python_oracle_mismatches(text: str) -> list[str]:
    """Every fact in the oracle text (see TlnsOracle.java) recomputed here; return mismatches."""
    facts: dict[str, str] = {}
    logs: list[tuple[int, int]] = []
    gauss: dict[int, int] = {}
    changes: dict[int, int] = {}
    clip_low: list[int] = []
    clip_high: list[int] = []
    for line in text.splitlines():
        key, *rest = line.split()
        if key == "log":
            logs.append((int(rest[0], 16), int(rest[1], 16)))
        elif key == "gauss":
            gauss[int(rest[0])] = int(rest[1], 16)
        elif key == "p":
            changes[int(rest[0])] = int(rest[1])
        elif key == "clip_low":
            clip_low.append(int(rest[0]))
        elif key == "clip_high":
            clip_high.append(int(rest[0]))
        else:
            facts[key] = rest[0]
    bad: list[str] = []
    for x_bits, y_bits in logs:
        got = _bits(fdlibm_log(_double(x_bits)))
        if got != y_bits:
            bad.append(f"log({x_bits:016x}) = {got:016x}, JDK {y_bits:016x}")

    rnd = JavaRandom(7)
    inputs = (_double(rnd.next_long() & 0x7FFFFFFFFFFFFFFF) for _ in range(20000))
    if _sha256(fdlibm_log(x) for x in inputs) != facts["log_positive_sha256"]:
        bad.append("log over random positive doubles")
    rnd = JavaRandom(11)
    if _sha256(fdlibm_log(rnd.next_double()) for _ in range(20000)) != facts["log_unit_sha256"]:
        bad.append("log over random nextDouble() values")

    slots = int(facts["slots"])
    trace = tlns_trace(slots)
    for t, g_bits in gauss.items():
        if _bits(trace.gaussians[t - 1]) != g_bits:
            bad.append(f"gaussian {t}")
    if _sha256(trace.gaussians.tolist()) != facts["gauss_sha256"]:
        bad.append("digest of all gaussians")
    p = np.concatenate([[0.05], trace.probabilities])
    moved = np.flatnonzero(p[1:] != p[:-1]) + 1
    ours = {0: 5} | {int(t): round(p[t] * 100) for t in moved}
    if ours != changes:
        bad.append("probability path")
    if not np.array_equal(p[[*changes]], [c / 100.0 for c in changes.values()]):
        bad.append("probability values are not the JDK's doubles")
    if np.flatnonzero(trace.clipped == -1).tolist() != [t - 1 for t in clip_low]:
        bad.append("slots clipped below 0")
    if np.flatnonzero(trace.clipped == 1).tolist() != [t - 1 for t in clip_high]:
        bad.append("slots clipped above 1")
    if _bits(p[-1]) != int(facts["final"], 16):
        bad.append("final probability")
    return bad


def test_tlns_matches_committed_jdk_oracle() -> None:
    assert _python_oracle_mismatches(ORACLE.read_text()) == []


def test_tlns_matches_live_jdk(tmp_path: Path) -> None:
    # the test set-up installs a JDK where none is present (setup.sh)
    assert shutil.which("javac") and shutil.which("java"), "a JDK is needed as the TLNS oracle"
    subprocess.run(
        ["javac", "-d", str(tmp_path), str(FIXTURES / "TlnsOracle.java")],
        check=True,
        capture_output=True,
    )
    run = subprocess.run(
        ["java", "-cp", str(tmp_path), "TlnsOracle", "10000"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert run.stdout == ORACLE.read_text()
    assert _python_oracle_mismatches(run.stdout) == []


def test_tlns_paper_statement() -> None:
    trace = tlns_trace(10_000)
    assert np.count_nonzero(trace.clipped) == 8
    assert np.all(trace.clipped[trace.clipped != 0] == -1)
    assert trace.probabilities[-1] == 0.23
    assert np.array_equal(tlns_probabilities(10_000), trace.probabilities)
    cents = np.round(trace.probabilities * 100)
    assert np.array_equal(trace.probabilities, cents / 100.0)
    assert np.all((trace.probabilities >= 0) & (trace.probabilities <= 1))
    assert np.array_equal(tlns_probabilities(100), trace.probabilities[:100])


def test_java_random_first_draws() -> None:
    # new Random(1).nextGaussian() == 1.561581040188955 and nextInt() of Random(42) == -1170105035
    assert JavaRandom(1).next_gaussian() == 1.561581040188955
    assert JavaRandom(42).next_bits(32) == -1170105035


def test_fdlibm_log_is_close_to_math_log() -> None:
    rnd = JavaRandom(3)
    for _ in range(2000):
        x = rnd.next_double() * 10.0 ** rnd.next_bits(5)
        if x > 0:
            assert abs(fdlibm_log(x) - math.log(x)) <= 2 * math.ulp(math.log(x))


# --------------------------------------------------------------------------------------------
# Sin, Log and the binary stream
# --------------------------------------------------------------------------------------------


def test_sin_probabilities() -> None:
    p = sin_probabilities(10_000)
    assert p.shape == (10_000,)
    # t=1: 0.0754999... -> 0.08; t=157: 0.12499998... -> 0.12 (half up, not beyond)
    assert p[0] == 0.08
    assert p[156] == 0.12
    assert set(np.round(p * 100).astype(int).tolist()) == set(range(3, 13))
    assert sin_probabilities(0).shape == (0,)


def test_log_probabilities() -> None:
    p = log_probabilities(10_000)
    assert p[0] == 0.13  # 0.25 / (1 + e^-0.01) = 0.12562...
    assert p[-1] == 0.25
    assert np.all(np.diff(p) >= 0)
    assert p[np.searchsorted(p, 0.2)] == 0.2


def test_synthetic_stream() -> None:
    probabilities = [0.0, 1.0, 0.3]
    slots = list(synthetic_stream(probabilities, 50_000, np.random.default_rng(5)))
    assert len(slots) == 3
    assert all(s.dtype == np.int64 and s.shape == (50_000,) for s in slots)
    assert not slots[0].any()
    assert slots[1].all()
    assert set(np.unique(slots[2]).tolist()) == {0, 1}
    assert abs(slots[2].mean() - 0.3) < 5 * math.sqrt(0.3 * 0.7 / 50_000)
    again = list(synthetic_stream(probabilities, 50_000, np.random.default_rng(5)))
    assert all(np.array_equal(a, b) for a, b in zip(slots, again, strict=True))


def test_synthetic_stream_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="slot 2"):
        list(synthetic_stream([0.5, 1.5], 10, np.random.default_rng(0)))
    with pytest.raises(ValueError, match="n_users"):
        list(synthetic_stream([0.5], -1, np.random.default_rng(0)))
    with pytest.raises(TypeError):
        list(synthetic_stream([0.5], 10, 3))  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Reference carry-forward, written the slow way
# --------------------------------------------------------------------------------------------


def _reference_cells(
    reports: list[tuple[int, int, int]], start: int, slot: int, T: int
) -> tuple[list[int], np.ndarray]:
    """reports: (user, seconds, cell) in input order; latest report up to each slot's end."""
    users = sorted({u for u, _, _ in reports})
    cells = np.full((T, len(users)), -1, dtype=np.int64)
    for i, user in enumerate(users):
        mine = [(s, k, c) for k, (u, s, c) in enumerate(reports) if u == user]
        for t in range(T):
            seen = [(s, k, c) for s, k, c in mine if s < start + (t + 1) * slot]
            if seen:
                cells[t, i] = max(seen)[2]
    return users, cells


def _seconds(text: str) -> int:
    return int((datetime.strptime(text, "%Y-%m-%d %H:%M:%S") - EPOCH).total_seconds())


# --------------------------------------------------------------------------------------------
# Taxi
# --------------------------------------------------------------------------------------------


def _taxi_reports() -> list[tuple[int, int, int]]:
    reports = []
    for file in sorted((FIXTURES / "tdrive").glob("*.txt")):
        for taxi, time, lon_s, lat_s in csv.reader(file.open()):
            lon, lat = float(lon_s), float(lat_s)
            if 116.0 <= lon <= 116.8 and 39.5 <= lat <= 40.3:
                row, col = min(int((lat - 39.5) / 0.08), 9), min(int((lon - 116.0) / 0.08), 9)
                reports.append((int(taxi), _seconds(time), row * 10 + col))
    return reports


def test_taxi_directory_and_single_file_agree_with_reference() -> None:
    from_dir = load_taxi(FIXTURES / "tdrive")
    from_csv = load_taxi(FIXTURES / "tdrive_points.csv.gz")
    reports = _taxi_reports()
    start = min(s for _, s, _ in reports) // 60 * 60
    T = (max(s for _, s, _ in reports) - start) // 60 + 1
    users, expected = _reference_cells(reports, start, 60, T)
    for data in (from_dir, from_csv):
        assert data.users.tolist() == users == [28, 34, 204, 1695]  # 818, 10130: outside
        assert data.d == 100 and data.labels.shape == (100,) and data.slot_seconds == 60
        assert data.cells.dtype == np.int64
        assert np.array_equal(data.cells, expected)
        assert data.slot_starts[0] == np.datetime64(start, "s")
        assert data.slot_starts[-1] == np.datetime64(start + 60 * (T - 1), "s")
    # taxi 204 has a straggler at 18:18:35 that decides the length
    assert from_dir.slot_starts[-1] == np.datetime64("2008-02-02T18:18:00")


def test_taxi_window_and_histograms() -> None:
    data = load_taxi(FIXTURES / "tdrive", start="2008-02-02 16:30:00", end="2008-02-02 17:59:59")
    assert data.T == 90
    hist = data.histograms()
    assert hist.shape == (90, 100)
    assert np.array_equal(hist.sum(axis=1), (data.cells >= 0).sum(axis=1))
    full = load_taxi(FIXTURES / "tdrive")
    offset = int(
        (np.datetime64("2008-02-02T16:30:00") - full.slot_starts[0]) // np.timedelta64(60, "s")
    )
    assert data.users.tolist() == full.users.tolist()
    assert np.array_equal(data.cells, full.cells[offset : offset + 90])


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_taxi_hand_made_case(tmp_path: Path) -> None:
    points = _write(
        tmp_path / "points.csv",
        "taxi_id,time,longitude,latitude\n"
        "7,2008-02-02 10:00:30,116.05,39.55\n"  # cell 0
        "7,2008-02-02 10:02:10,116.79,40.29\n"  # cell 99
        "7,2008-02-02 10:02:50,116.85,40.00\n"  # outside: dropped
        "3,2008-02-02 10:01:00,116.8,40.3\n"  # corner: cell 99
        "\n"
        "3,2008-02-02 10:01:59,116.41,39.5\n"  # cell 5, later in the same slot
        "9,2008-02-02 10:01:30,116.15,39.65\n"  # cell 11
        "9,2008-02-02 10:01:30,116.25,39.65\n",  # same second, later line wins: cell 13
    )
    data = load_taxi(points)
    assert data.users.tolist() == [3, 7, 9]
    assert data.cells.tolist() == [[-1, 0, -1], [5, 0, 13], [5, 99, 13]]
    assert data.slot_starts.tolist()[0] == datetime(2008, 2, 2, 10, 0)
    assert data.histograms()[1].tolist() == [1 if c in (0, 5, 13) else 0 for c in range(100)]
    window = load_taxi(points, start="2008-02-02 10:01:00", end="2008-02-02 10:01:59")
    assert window.cells.tolist() == [[5, 0, 13]]  # taxi 7 carried in from before the start
    coarse = load_taxi(points, grid=2, slot_seconds=120)
    assert coarse.d == 4
    assert coarse.cells.tolist() == [[1, 0, 0], [1, 3, 0]]  # 116.41 is east of 116.4


def test_taxi_errors(tmp_path: Path) -> None:
    header = "taxi_id,time,longitude,latitude\n"
    with pytest.raises(ValueError, match="missing column.*latitude"):
        load_taxi(_write(tmp_path / "a.csv", "taxi_id,time,longitude\n1,2008-02-02 10:00:00,1\n"))
    bad_lon = header + "1,2008-02-02 10:00:00,116.1,39.6\n1,2008-02-02 10:00:10,abc,39.6\n"
    with pytest.raises(ValueError, match=r"b\.csv:3: cannot parse longitude 'abc'"):
        load_taxi(_write(tmp_path / "b.csv", bad_lon))
    with pytest.raises(ValueError, match=r"c\.csv:2: cannot parse time '2008-02-02'"):
        load_taxi(_write(tmp_path / "c.csv", header + "1,2008-02-02,116.1,39.6\n"))
    with pytest.raises(ValueError, match=r"d\.csv:2: expected 4 fields, got 3"):
        load_taxi(_write(tmp_path / "d.csv", header + "1,2008-02-02 10:00:00,116.1\n"))
    with pytest.raises(ValueError, match=r"e\.csv:2: cannot parse latitude 'nan'"):
        load_taxi(_write(tmp_path / "e.csv", header + "1,2008-02-02 10:00:00,116.1,nan\n"))
    with pytest.raises(ValueError, match="no points inside"):
        load_taxi(_write(tmp_path / "f.csv", header + "1,2008-02-02 10:00:00,100,39.6\n"))
    folder = tmp_path / "taxis"
    folder.mkdir()
    _write(folder / "1.txt", "1,2008-02-02 10:00:00,116.1,39.6\n")
    _write(folder / "2.txt", "2,2008-02-02 10:00:00,116.1,39.6\nx,2008-02-02 10:00:01,116.1,39.6\n")
    with pytest.raises(ValueError, match=r"2\.txt:2: cannot parse taxi id 'x'"):
        load_taxi(folder)
    with pytest.raises(FileNotFoundError):
        load_taxi(tmp_path / "missing.csv")


# --------------------------------------------------------------------------------------------
# Foursquare
# --------------------------------------------------------------------------------------------


def _rows(path: Path) -> list[list[str]]:
    with gzip.open(path, "rt") as handle:
        return list(csv.reader(handle, delimiter="\t"))[1:]


def test_foursquare_countries() -> None:
    data = load_foursquare(CHECKINS, POIS)
    assert isinstance(data, StreamData)
    assert data.labels.tolist() == ["CA", "MX", "US"] and data.d == 3
    assert data.slot_seconds == 6000
    assert data.users.tolist() == [7, 27, 32, 40, 55, 75, 664, 2462]
    # hand-checked venues: 177 is LAX (US); user 2462 visits Mexico and Canada too
    venues = {poi: (float(lat), float(lon)) for poi, lat, lon in _rows(POIS)}
    assert venues["177"] == (33.943894, -118.405023)
    column = data.users.tolist().index(2462)
    assert set(data.cells[:, column].tolist()) == {-1, 0, 1, 2}


def test_foursquare_grid_matches_reference() -> None:
    data = load_foursquare(CHECKINS, POIS, regions="grid", grid_degrees=10.0)
    assert data.d == 18 * 36
    assert data.labels[0] == "lat-90:lon-180"
    venues = {}
    for poi, lat, lon in _rows(POIS):
        venues[poi] = math.floor((float(lat) + 90) / 10) * 36 + math.floor((float(lon) + 180) / 10)
    reports = [(int(u), int(float(t)), venues[p]) for u, p, t in _rows(CHECKINS)]
    start = min(s for _, s, _ in reports) // 6000 * 6000
    T = (max(s for _, s, _ in reports) - start) // 6000 + 1
    users, expected = _reference_cells(reports, start, 6000, T)
    assert data.users.tolist() == users
    assert np.array_equal(data.cells, expected)
    # the grid and country streams have the same reporting pattern
    countries = load_foursquare(CHECKINS, POIS)
    assert np.array_equal(countries.cells >= 0, data.cells >= 0)


def test_foursquare_errors(tmp_path: Path) -> None:
    pois = _write(tmp_path / "pois.tsv", "poi\tlatitude\tlongitude\n1\t40.7\t-74.0\n")
    checkins = _write(
        tmp_path / "c.tsv", "user\tpoi\tunix_time\n5\t1\t1333447208.0\n5\t2\t1333447300.0\n"
    )
    with pytest.raises(ValueError, match=r"c\.tsv:3: unknown venue '2'"):
        load_foursquare(checkins, pois, regions="grid")
    bad_time = _write(tmp_path / "t.tsv", "user\tpoi\tunix_time\n5\t1\tnoon\n")
    with pytest.raises(ValueError, match=r"t\.tsv:2: cannot parse unix_time 'noon'"):
        load_foursquare(bad_time, pois, regions="grid")
    no_lat = _write(tmp_path / "p2.tsv", "poi\tlat\tlongitude\n1\t40.7\t-74.0\n")
    with pytest.raises(ValueError, match="missing column.*latitude"):
        load_foursquare(checkins, no_lat)
    far = _write(tmp_path / "p3.tsv", "poi\tlatitude\tlongitude\n1\t40.7\t-74.0\n2\t95\t0\n")
    with pytest.raises(ValueError, match=r"p3\.tsv:3: coordinates out of range"):
        load_foursquare(checkins, far)
    twice = _write(tmp_path / "p4.tsv", "poi\tlatitude\tlongitude\n1\t40.7\t-74.0\n1\t0\t0\n")
    with pytest.raises(ValueError, match=r"p4\.tsv:3: duplicate venue '1'"):
        load_foursquare(checkins, twice)
    with pytest.raises(ValueError, match="regions"):
        load_foursquare(checkins, pois, regions="city")  # type: ignore[arg-type]
    ok = _write(tmp_path / "ok.tsv", "user\tpoi\tunix_time\n5\t1\t1333447208.0\n")
    data = load_foursquare(ok, pois)
    assert data.labels.tolist() == ["US"] and data.cells.tolist() == [[0]]
