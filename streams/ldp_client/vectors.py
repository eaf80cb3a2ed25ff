"""The shared test vectors of the client libraries: ``clients/vectors/ldp-vectors.json``.

``python -m streams.ldp_client.vectors --write`` writes them from the Python implementation;
``--check`` fails if the file differs from what it computes now. The TypeScript and Java tests
read the same file and must reproduce every value: portable exp bits, thresholds, number
formatting, the counter words, LPU groups, GRR draws, refused configurations, and clients
(seeded with :class:`~mechanisms.local.CounterWords`) stepping through slots: their reports'
exact bytes, refusals, ledgers and words drawn.
"""

from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from pathlib import Path

from mechanisms.local import (
    CounterWords,
    LedgerRefusal,
    ReportConfig,
    Reporter,
    format_number,
    grr_cell,
    grr_keep_threshold,
    lpu_phase,
    oue_threshold,
    plbu_uses_grr,
    portable_exp,
)
from mechanisms.local.population import HALF, phase, position
from mechanisms.local.rounds import Decision, encode_decision, parse_decision
from mechanisms.local.tree import level_cells, node_of, tree_height, tree_level

PATH = Path(__file__).resolve().parents[2] / "clients" / "vectors" / "ldp-vectors.json"
CLIENT = "vectors"
EXP_INPUTS = [0.0, 1e-12, 1e-6, 0.01, 0.1, 0.25, 0.5, math.log(2), 1.0, 1.5, 2.0, 2.5, 3.0,
              math.pi, 5.0, 7.75, 10.0, 20.0, 33.3, 50.0, 100.0, 250.0, 499.9, 500.0]
THRESHOLD_CASES = [(1e-12, 2), (0.001, 2), (0.05, 16), (0.1, 8), (0.5, 2), (0.5, 4), (1.0, 3),
                   (1.0, 10), (1.0986122886681098, 4), (2.0, 5), (2.0, 9), (3.0, 20),
                   (5.0, 100), (10.0, 1000), (40.0, 2), (500.0, 65536)]


def double_bits(x: float) -> str:
    """A double's IEEE 754 bits as 16 hex digits."""
    return struct.pack(">d", x).hex()


def number_cases() -> list[float]:
    """Doubles across magnitudes whose formatting every language must match."""
    fixed = [1.0, 0.1, 0.3, 1 / 3, 2 / 3, 0.1 + 0.2, 1e-6, 1e-7, 1.5e-7, 123456.789, 1e20, 1e21,
             1.5e21, 5e-324, 1.7976931348623157e308, 100.0, 0.5, 3.0000000000000004, 1e-3,
             0.000123, 9.999999999999999e20, 2.5e-5, 1e16, 12345678901234567890.0]
    words = CounterWords("numbers").take(400).astype("u8")
    drawn = []
    for i in range(0, 400, 2):
        mantissa = (int(words[i]) << 20 | int(words[i + 1]) >> 12) & ((1 << 52) - 1)
        exponent = 1023 + (int(words[i + 1]) % 160) - 80  # 2^-80 .. 2^79
        drawn.append(struct.unpack(">d", struct.pack(">Q", exponent << 52 | mantissa))[0])
    return fixed + drawn + [x / 7 for x in range(1, 40)]


def grr_draws() -> list[dict]:
    """GRR from given words, the rejection path included (a word at or above the largest
    multiple of d - 1 below 2**32 is skipped)."""
    cases = []
    for cell, d, keep, words in [
        (0, 4, 100, [99]), (0, 4, 100, [100, 5]), (3, 4, 100, [4294967295, 4294967294, 7]),
        (2, 4, 100, [200, 4294967295, 4294967295, 1]), (1, 2, 0, [0, 123]),
        (0, 7, 2**31, [2**31, 4294967292, 4294967291]), (5, 6, 10, [11, 4294967294, 0]),
        (0, 1, 0, []), (1, 3, 2**32, [4294967295]),
    ]:
        it = iter(words)
        used = [0]

        def nxt(it=it, used=used) -> int:
            used[0] += 1
            return next(it)
        out = grr_cell(cell, d, keep, nxt)
        cases.append({"cell": cell, "d": d, "keep": keep, "words": words, "out": out,
                      "used": used[0]})
    return cases


CLIENT_CASES = [
    ("lbu", {"protocol": "lbu", "user": "alice", "d": 8, "w": 4, "E": 1.0, "start": 10},
     None, [(8, 1), (10, 3), (11, 0), (12, None), (13, 7), (14, 7), (15, 2), (16, 5),
            (40, 4)]),
    ("lbu slack: 7 x (0.1/7) sum above E = 0.1", {"protocol": "lbu", "user": "bob", "d": 3,
                                                   "w": 7, "E": 0.1},
     None, [(s, s % 3) for s in range(9)]),
    ("lsp", {"protocol": "lsp", "user": "carol", "d": 5, "w": 3, "E": 2.0, "start": 2},
     None, [(s, (s * 2) % 5) for s in range(0, 12)]),
    ("lpu", {"protocol": "lpu", "user": "dave", "d": 6, "w": 4, "E": 1.0, "start": 0,
             "lpu_key": "stream-key"}, None, [(s, s % 6) for s in range(13)]),
    ("lpu rotating", {"protocol": "lpu", "user": "", "d": 4, "w": 5, "E": 1.5, "start": 3,
                      "lpu_key": "stream-key", "rotate": 1}, None, []),
    ("plbu grr", {"protocol": "plbu", "user": "erin", "d": 4, "w": 2, "E": 4.0},
     None, [(s, s % 4) for s in range(6)]),
    ("plbu grr two cells", {"protocol": "plbu", "user": "frank", "d": 2, "w": 1, "E": 0.7},
     None, [(s, s % 2) for s in range(8)]),
    ("no value: grr", {"protocol": "plbu", "user": "faye", "d": 3, "w": 1, "E": 2.0},
     None, [(0, None), (1, 2), (2, None), (3, None), (4, 0), (5, None)]),
    ("no value: oue over d + 1 = 9 cells", {"protocol": "lsp", "user": "gil", "d": 8, "w": 2,
                                            "E": 1.0}, None, [(0, None), (2, 7), (4, None)]),
    ("plbu oue", {"protocol": "plbu", "user": "grace", "d": 12, "w": 10, "E": 1.0},
     None, [(s, 11 - s % 12) for s in range(5)]),
    ("plbu one cell", {"protocol": "plbu", "user": "heidi", "d": 1, "w": 2, "E": 1.0},
     None, [(0, 0), (1, 0)]),
    ("lbu one cell", {"protocol": "lbu", "user": "ivan", "d": 1, "w": 2, "E": 1.0},
     None, [(0, 0), (1, 0)]),
    ("edge budgets: eps = 500", {"protocol": "lsp", "user": "judy", "d": 9, "w": 2,
                                 "E": 500.0}, None, [(0, 4), (2, 8), (3, 1)]),
    ("edge budgets: plbu eps = 500", {"protocol": "plbu", "user": "ken", "d": 3, "w": 3,
                                      "E": 1500.0}, None, [(0, 2), (1, 1)]),
    ("edge budgets: eps = 1e-12", {"protocol": "lbu", "user": "leo", "d": 10, "w": 1000,
                                   "E": 1e-9}, None, [(0, 9), (1, 0)]),
    ("refusal: a kept ledger over a lowered E", {"protocol": "lbu", "user": "mallory", "d": 4,
                                                 "w": 3, "E": 1.0},
     [[3, 1.0], [5, 0.5]], [(5, 1), (6, 1), (7, 2), (8, 3), (9, 0), (10, 1)]),
    ("refusal: a slot not after the last", {"protocol": "plbu", "user": "niaj", "d": 6,
                                            "w": 2, "E": 1.0}, None,
     [(4, 1), (4, 2), (3, 2), (5, 3)]),
    ("unicode user", {"protocol": "lbu", "user": "zo\u00eb \U0001f680 \"q\" \\ \u0001\u007f",
                      "d": 4, "w": 2, "E": 2.0}, None, [(0, 3), (1, 2)]),
]

BAD_CONFIGS = [
    {"protocol": "mtsp", "user": "u", "d": 4, "w": 2, "E": 1.0},
    {"protocol": "lpd", "user": "u", "d": 4, "w": 2, "E": 1.0},  # no public key
    {"protocol": "lbu", "user": "", "d": 4, "w": 2, "E": 1.0},
    {"protocol": "lbu", "user": "u" * 257, "d": 4, "w": 2, "E": 1.0},
    {"protocol": "lbu", "user": "u", "d": 0, "w": 2, "E": 1.0},
    {"protocol": "lbu", "user": "u", "d": 65536, "w": 2, "E": 1.0},
    {"protocol": "lbu", "user": "u", "d": 4, "w": 0, "E": 1.0},
    {"protocol": "lbu", "user": "u", "d": 4, "w": 2, "E": 0.0},
    {"protocol": "lbu", "user": "u", "d": 4, "w": 2, "E": -1.0},
    {"protocol": "lsp", "user": "u", "d": 4, "w": 2, "E": 500.5},
    {"protocol": "plbu", "user": "u", "d": 4, "w": 2, "E": 1001.0},
    {"protocol": "lpu", "user": "u", "d": 4, "w": 2, "E": 1.0, "lpu_key": ""},
    {"protocol": "lbu", "user": "u", "d": 4, "w": 2, "E": 1.0, "start": -1},
    {"protocol": "lpu", "user": "u", "d": 4, "w": 2, "E": 1.0, "lpu_key": "k", "rotate": -1},
]


def decision(protocol: str, slot: int, eps: float, nxt: float, lo: int = 0,
             size: int = 0, starts: tuple[int, ...] = ()) -> str:
    """A decision's text, for the round clients' steps."""
    return encode_decision(Decision("app", protocol, slot, eps, nxt, lo, size, starts)).decode()


TREE_KEY = "tree-key"


def tree_user(prefix: str, d: int, level: int) -> str:
    """The first user ``<prefix>-<i>`` at ``level`` of the tree over d + 1 cells."""
    h = tree_height(d + 1)
    for i in range(10_000):
        user = f"{prefix}-{i}"
        if tree_level(position(TREE_KEY, user), h) == level:
            return user
    raise AssertionError("no such user")


def tree_cases() -> list[tuple[str, dict, list]]:
    """mtsp clients: a leaf-level user and a root-level one through published and skipped
    slots, a missed decision, and decisions that do not fit (past the cells, over E/2)."""
    d, w, E, start = 6, 2, 1.0, 3
    one = E / (2 * w)
    leaf = {"protocol": "mtsp", "user": tree_user("leaf", d, 3), "d": d, "w": w, "E": E,
            "start": start, "lpu_key": TREE_KEY}
    top = {"protocol": "mtsp", "user": tree_user("top", d, 1), "d": d, "w": w, "E": E,
           "start": start, "lpu_key": TREE_KEY}
    parts = (0, 2, 4, 6)
    steps = [(1, 3, 5, None), (2, 3, 5, decision("mtsp", 3, 0.5, one, starts=parts)),
             (1, 4, None, decision("mtsp", 3, 0.5, one, starts=parts)),
             (2, 4, None, decision("mtsp", 4, 0, one)),
             (1, 5, 0, decision("mtsp", 4, 0, one)),
             (2, 5, 0, decision("mtsp", 5, 0.25, one, starts=(0,))),
             (1, 6, 3, decision("mtsp", 5, 0.25, one, starts=(0,))),
             (2, 6, 3, decision("mtsp", 6, 0.25, one, starts=(0, 1, 2, 3, 4, 5, 6))),
             (1, 7, 5, None), (2, 7, 5, decision("mtsp", 7, 0.25, one, starts=(0, 3))),
             (1, 8, 2, decision("mtsp", 7, 0.25, one, starts=(0, 3)))]
    forged = [(1, 3, 1, None), (2, 3, 1, decision("mtsp", 3, 0.5, one, starts=(0, 7))),
              (2, 3, 1, decision("mtsp", 3, 0.75, one, starts=(0, 4))),
              (2, 3, 1, decision("lbd", 3, 0.25, one)),
              (2, 3, 1, decision("mtsp", 3, 0.5, one, starts=(0, 4))),
              (1, 4, 4, decision("mtsp", 3, 0.5, one, starts=(0, 4))),
              (2, 4, 4, decision("mtsp", 4, 0.5, one, starts=(0, 1))),
              (1, 5, None, decision("mtsp", 4, 0.5, one, starts=(0, 1))),
              (2, 5, 5, decision("mtsp", 5, 0.5, one, starts=(0, 5))),
              (2, 5, 6, decision("mtsp", 5, 0.5, one, starts=(0, 5)))]
    return [("mtsp: a leaf-level user", leaf, steps),
            ("mtsp: a root-level user, decisions that do not fit", top, forged)]


def query_releases() -> list[dict]:
    """Six releases of a stream of 5 value cells, as the collector writes their counts, bars
    and (mtsp) intervals, with counts drawn from the counter words."""
    words = CounterWords("queries").take(64).tolist()
    docs = []
    for t in range(6):
        counts = [(words[8 * t + j] % 100_000) / 997.0 - 20.0 for j in range(5)]
        doc: dict = {"slot": t, "counts": counts,
                     "no_value": (words[8 * t + 5] % 5000) / 101.0}
        if t % 3 == 0:  # an mtsp release: intervals [0, 2), [2, 3), [3, 6)
            doc["std"] = [None, None, 3.25, None, None]
            doc["intervals"] = {"starts": [0, 2, 3], "counts": [counts[0] + counts[1],
                                                               counts[2], 7.5],
                                "std": [4.5, 3.25, 6.125]}
        elif t % 3 == 1:  # every cell estimated alone
            doc["std"] = [1.5 + j / 8 for j in range(5)]
        else:  # no bars yet
            doc["std"] = None
        docs.append(doc)
    return docs


def range_query_cases() -> list[dict]:
    """Range queries (MTSP-LDP's M4) over :func:`query_releases`: each query's ``range`` per
    release, or ``error`` when refused."""
    from streams.releases.ldp import range_queries

    cases = []
    for a, b, delta, ratio, margin in [(0, 0, 1, None, 0.0), (0, 1, 2, 1.5, 0.0),
                                       (2, 2, 3, 0.5, -1.0), (1, 4, 1, 1.0, 2.5),
                                       (0, 4, 6, 1.0, 0.0), (3, 5, 1, None, 0.0),
                                       (2, 1, 1, None, 0.0), (0, 1, 7, None, 0.0)]:
        case: dict = {"from": a, "to": b, "delta": delta, "ratio": ratio, "margin": margin}
        try:
            docs = range_queries(query_releases(), a, b, delta=delta, ratio=ratio,
                                 margin=margin)
            case["ranges"] = [doc["range"] for doc in docs]
        except ValueError:
            case["error"] = True
        cases.append(case)
    return cases


def tree_level_cases() -> list[dict]:
    """Users' levels of the tree (mtsp) over several domains, each level's width and the node
    of some cells."""
    cases = []
    for i in range(16):
        key, user = ["k", TREE_KEY, "\u00e9t\u00e9", "x" * 100][i % 4], f"u{i * 13}"
        d = [1, 2, 3, 6, 7, 8, 100, 65535][i % 8]
        cells = d + 1
        h = tree_height(cells)
        level = tree_level(position(key, user), h)
        cases.append({"key": key, "user": user, "d": d, "height": h, "level": level,
                      "widths": [level_cells(cells, h, lv) for lv in range(1, h + 1)],
                      "nodes": [[x, node_of(x, h, level)] for x in (0, d // 2, d)]})
    return cases


POPULATION_KEY = "pop-key"


def population_user(prefix: str, upper: bool) -> tuple[str, int]:
    """The first user ``<prefix>-<i>`` whose position lies in the upper half (or the lower),
    and its position."""
    for i in range(10_000):
        user = f"{prefix}-{i}"
        at = position(POPULATION_KEY, user)
        if (at >= HALF) == upper:
            return user, at
    raise AssertionError("no such user")


def population_cases() -> list[tuple[str, dict, list]]:
    """lpd and lpa clients: a dissimilarity user at its phase and a publication user inside and
    outside the decisions' intervals (one wrapping around the half), with forged decisions."""
    low, at_low = population_user("low", upper=False)
    high, at_high = population_user("high", upper=True)
    w, E, start = 3, 2.0, 5
    k = start + phase(at_low, w)  # type: ignore[operator]
    off = at_high - HALF  # the publication user's offset in the upper half
    lpd = {"protocol": "lpd", "user": low, "d": 4, "w": w, "E": E, "start": start,
           "lpu_key": POPULATION_KEY}
    lpa = {"protocol": "lpa", "user": high, "d": 3, "w": w, "E": E, "start": start,
           "lpu_key": POPULATION_KEY}
    low_steps = [(1, start, 1, None)]
    for t in range(start + 1, start + 8):
        low_steps.append((1, t, t % 4 if t % 3 else None, decision("lpd", t - 1, 0, E)))
    low_steps += [
        (2, k + 3, 2, decision("lpd", k + 3, E, E, 0, HALF)),  # names every upper user only
        (1, k + 9, 2, decision("lpd", k + 8, 0, 0)),  # a nullified dissimilarity round
        (1, k + 12, 2, decision("lpd", k + 11, 0, 1.0)),  # forged: another budget
        (1, k + 12, 0, decision("lpd", k + 11, E, E, 7, 9))]
    high_steps = [
        (1, start, 1, None),  # never a dissimilarity user
        (2, start, 1, decision("lpa", start, E, E, off, 1)),  # exactly its position
        (2, start + 1, 2, decision("lpa", start + 1, E, E, (off + 1) % HALF, HALF - 1)),
        (2, start + 2, None, decision("lpa", start + 2, E, E, (off + HALF - 5) % HALF, 10)),
        (2, start + 3, 0, decision("lpa", start + 3, E, E, (off + HALF - 5) % HALF, 10)),
        (2, start + 5, 2, decision("lpa", start + 5, 1.0, E, off, 1)),  # forged budget
        (2, start + 6, 2, decision("lpa", start + 6, 0, E)),
        (2, start + 7, 1, decision("lpa", start + 7, E, 0, 0, HALF))]
    return [("lpd: a dissimilarity user", lpd, low_steps),
            ("lpa: a publication user", lpa, high_steps)]


#: Two-round clients: (name, config, steps); a step is (round, slot, value, the decision's text
#: or None): round 1 takes the previous slot's decision, round 2 its slot's.
ROUND_CASES = [
    ("lbd", {"protocol": "lbd", "user": "olivia", "d": 6, "w": 3, "E": 1.2, "start": 4},
     [(1, 4, 2, None), (2, 4, 2, decision("lbd", 4, 0.3, 0.2)),
      (1, 5, 5, decision("lbd", 4, 0.3, 1.2 / 6)), (2, 5, 5, decision("lbd", 5, 0, 1.2 / 6)),
      (1, 6, None, decision("lbd", 5, 0, 1.2 / 6)), (2, 6, 1, decision("lbd", 6, 0.15, 0.2)),
      (1, 7, 0, None), (1, 8, 3, decision("lbd", 7, 0.075, 1.2 / 6)),
      (2, 8, 3, decision("lbd", 8, 0.075, 1.2 / 6)), (1, 3, 1, None)]),
    ("lba: a nullified slot, a refused answer", {"protocol": "lba", "user": "peggy", "d": 4,
                                                "w": 2, "E": 1.0, "start": 0},
     [(1, 0, 1, None), (2, 0, 1, decision("lba", 0, 0.5, 0)),
      (1, 1, 2, decision("lba", 0, 0.5, 0)), (2, 1, 2, decision("lba", 1, 0, 0.25)),
      (1, 2, 3, decision("lba", 1, 0, 0.25)), (2, 2, 3, decision("lba", 2, 0.5, 0.25)),
      (1, 3, 0, decision("lba", 2, 0.5, 0.25)), (2, 3, 0, decision("lba", 3, 0.5, 0.25))]),
    ("lbd: decisions that do not fit", {"protocol": "lbd", "user": "quinn", "d": 3, "w": 2,
                                        "E": 1.0},
     [(1, 0, 0, None), (2, 0, 0, decision("lba", 0, 0.25, 0.25)),
      (2, 0, 0, decision("lbd", 0, 0.75, 0.25)), (1, 1, 1, decision("lbd", 0, 0, 0.5)),
      (1, 1, 1, decision("lbd", 1, 0, 0.25)), (1, 2, 1, decision("lbd", 0, 0, 0.25)),
      (2, 0, 2, decision("lbd", 0, 0.25, 0.25)), (1, 1, 1, decision("lbd", 0, 0.25, 0.25)),
      (2, 0, 1, decision("lbd", 0, 0.25, 0.25)), (1, 1, 2, None),
      (1, 2**52, 1, decision("lbd", 2**52 - 1, 0, 0.25)),
      (2, 2**52 - 1, 1, decision("lbd", 2**52 - 1, 0.25, 0.25)),
      (2, 2**52, 1, decision("lbd", 2**52, 0.25, 0.25))]),
]

DECISION_TEXTS = [
    decision("lbd", 7, 0.025, 0.05), decision("lba", 0, 0, 0),
    '{"v":1,"stream":"zo\u00eb","protocol":"lba","slot":9007199254740991,"eps":500,"next":1e-7}',
    '{"v":2,"stream":"app","protocol":"lbd","slot":1,"eps":0,"next":0}',
    '{"v":1,"stream":"app","protocol":"lbu","slot":1,"eps":0,"next":0}',
    '{"v":1,"stream":"app","protocol":"lbd","slot":-1,"eps":0,"next":0}',
    '{"v":1,"stream":"app","protocol":"lbd","slot":1,"eps":-0.5,"next":0}',
    '{"v":1,"stream":"app","protocol":"lbd","slot":1,"eps":500.5,"next":0}',
    '{"v":1,"stream":"","protocol":"lbd","slot":1,"eps":0,"next":0}',
    '{"v":1,"protocol":"lbd","stream":"app","slot":1,"eps":0,"next":0}',
    '{"v":1,"stream":"app","protocol":"lbd","slot":1,"eps":0}',
    '{"v":1,"stream":"app","protocol":"lbd","slot":1.5,"eps":0,"next":0}',
    '{"v":1,"stream":"app","protocol":"lbd","slot":1,"eps":"0","next":0}',
    '[1]',
    decision("lpd", 12, 1, 1, 2**31 - 1, 2**31), decision("lpa", 0, 0, 0),
    '{"v":1,"stream":"app","protocol":"lpd","slot":1,"eps":1,"next":1}',
    '{"v":1,"stream":"app","protocol":"lpd","slot":1,"eps":0,"next":1,"from":0,"size":5}',
    '{"v":1,"stream":"app","protocol":"lpd","slot":1,"eps":1,"next":1,"from":0,"size":0}',
    '{"v":1,"stream":"app","protocol":"lpa","slot":1,"eps":1,"next":1,"from":2147483648,'
    '"size":5}',
    '{"v":1,"stream":"app","protocol":"lpa","slot":1,"eps":1,"next":1,"from":0,'
    '"size":2147483649}',
    '{"v":1,"stream":"app","protocol":"lpa","slot":1,"eps":1,"next":1,"from":0.5,"size":5}',
    '{"v":1,"stream":"app","protocol":"lpa","slot":1,"eps":1,"next":1,"size":5,"from":0}',
    '{"v":1,"stream":"app","protocol":"lbd","slot":1,"eps":0,"next":0,"from":0,"size":0}',
    decision("mtsp", 4, 0.25, 0.125, starts=(0, 2, 65535)), decision("mtsp", 0, 0, 0.125),
    '{"v":1,"stream":"app","protocol":"mtsp","slot":1,"eps":0.5,"next":0.1,"starts":[1,2]}',
    '{"v":1,"stream":"app","protocol":"mtsp","slot":1,"eps":0.5,"next":0.1,"starts":[0,2,2]}',
    '{"v":1,"stream":"app","protocol":"mtsp","slot":1,"eps":0.5,"next":0.1,"starts":[0,3,2]}',
    '{"v":1,"stream":"app","protocol":"mtsp","slot":1,"eps":0.5,"next":0.1,"starts":[0,1.5]}',
    '{"v":1,"stream":"app","protocol":"mtsp","slot":1,"eps":0.5,"next":0.1,"starts":[0,65536]}',
    '{"v":1,"stream":"app","protocol":"mtsp","slot":1,"eps":0.5,"next":0.1,"starts":[]}',
    '{"v":1,"stream":"app","protocol":"mtsp","slot":1,"eps":0,"next":0.1,"starts":[0]}',
    '{"v":1,"stream":"app","protocol":"mtsp","slot":1,"eps":0.5,"next":0.1,"starts":"0"}',
    '{"v":1,"stream":"app","protocol":"mtsp","slot":1,"eps":0.5,"next":0.1}',
    '{"v":1,"stream":"app","protocol":"mtsp","slot":1,"eps":0.5,"next":0.1,"starts":[true]}',
    '{"v":1,"stream":"app","protocol":"lbd","slot":1,"eps":0,"next":0,"starts":[]}',
]


def decision_cases() -> list[dict]:
    """Decision texts and what a client reads from each (None: refused)."""
    cases = []
    for text in DECISION_TEXTS:
        try:
            d = parse_decision(text.encode())
            read: dict | None = {"stream": d.stream, "protocol": d.protocol, "slot": d.slot,
                                 "eps": d.eps, "next": d.next, "from": d.lo, "size": d.size,
                                 "starts": list(d.starts)}
        except ValueError:
            read = None
        cases.append({"text": text, "read": read})
    return cases


def run_round_client(name: str, config: dict, steps: list) -> dict:
    """One two-round client case: its config, seed and each step's outcome (``error``: the
    client refused the decision as not fitting the step)."""
    seed = f"client:{name}"
    words = CounterWords(seed)
    reporter = Reporter(ReportConfig(**config), words, CLIENT)
    out = []
    for round_, slot, value, text in steps:
        step: dict = {"round": round_, "slot": slot, "value": value, "decision": text}
        given = None if text is None else parse_decision(text.encode())
        try:
            if round_ == 1:
                data = reporter.report(slot, value, given)
            else:
                assert given is not None and given.slot == slot
                data = reporter.answer(given, value)
            step["report"] = None if data is None else data.decode("utf-8")
        except LedgerRefusal as exc:
            step["refused"] = exc.code
        except ValueError:
            step["error"] = True
        step["spends"] = reporter.ledger.dump()
        step["words"] = words.drawn
        out.append(step)
    return {"name": name, "config": config, "seed": seed, "client": CLIENT, "steps": out}


def rotating_user(w: int, key: str) -> str:
    """The first user ``user-<i>`` whose LPU group falls between epochs 1 and 2 (so it skips a
    block)."""
    for i in range(10_000):
        user = f"user-{i}"
        if lpu_phase(key, user, w, 2) < lpu_phase(key, user, w, 1):
            return user
    raise AssertionError("no user skips")


def run_client(name: str, config: dict, state: list | None, steps: list) -> dict:
    """One client case: its config, seed, initial ledger and each step's outcome."""
    if config["protocol"] == "lpu" and config.get("rotate") and not config["user"]:
        config = config | {"user": rotating_user(config["w"], config["lpu_key"])}
        steps = [(s, s % config["d"]) for s in range(0, 3 + 5 * config["w"])]
    seed = f"client:{name}"
    words = CounterWords(seed)
    reporter = Reporter(ReportConfig(**config), words, CLIENT)
    if state is not None:
        reporter.ledger.load(state)
    out = []
    for slot, value in steps:
        step: dict = {"slot": slot, "value": value}
        try:
            data = reporter.report(slot, value)
            step["report"] = None if data is None else data.decode("utf-8")
        except LedgerRefusal as exc:
            step["refused"] = exc.code
        step["spends"] = reporter.ledger.dump()
        step["words"] = words.drawn
        out.append(step)
    return {"name": name, "config": config, "seed": seed, "client": CLIENT,
            "state": state, "steps": out}


def position_cases() -> list[dict]:
    """Users' public positions (lpd, lpa) under several keys, and their phases."""
    cases = []
    for i in range(16):
        key, user = ["k", POPULATION_KEY, "\u00e9t\u00e9", "x" * 100][i % 4], f"u{i * 11}"
        at = position(key, user)
        cases.append({"key": key, "user": user, "position": at,
                      "phases": [[w, phase(at, w)] for w in (1, 3, 10, 2**31 - 1)]})
    return cases


def build() -> dict:
    """Every vector, computed now."""
    lpu = []
    for i in range(24):
        key, user = ["k", "stream-key", "\u00e9t\u00e9", "x" * 100][i % 4], f"u{i * 7}"
        w, epoch = [1, 2, 3, 5, 10, 16, 100, 2**31 - 1][i % 8], [0, 1, 7, 123456789][i % 4]
        lpu.append({"key": key, "user": user, "w": w, "epoch": epoch,
                    "group": lpu_phase(key, user, w, epoch)})
    return {
        "version": 1,
        "about": "Shared vectors of the pwevent local-DP clients (docs/ldp-reports.md); "
                 "written by python -m streams.ldp_client.vectors --write",
        "words": {"seed": "pwevent", "first": CounterWords("pwevent").take(20).tolist()},
        "exp": [{"x": x, "bits": double_bits(portable_exp(x))} for x in EXP_INPUTS],
        "thresholds": [{"eps": e, "d": d, "oue": oue_threshold(e),
                        "grr": grr_keep_threshold(e, d), "plbu_grr": plbu_uses_grr(e, d)}
                       for e, d in THRESHOLD_CASES],
        "numbers": [{"x": x, "text": format_number(x)} for x in number_cases()],
        "lpu_groups": lpu,
        "positions": position_cases(),
        "tree_levels": tree_level_cases(),
        "query_releases": query_releases(),
        "range_queries": range_query_cases(),
        "grr_draws": grr_draws(),
        "bad_configs": BAD_CONFIGS,
        "clients": [run_client(*case) for case in CLIENT_CASES],
        "decisions": decision_cases(),
        "round_clients": [run_round_client(*case)
                          for case in [*ROUND_CASES, *population_cases(), *tree_cases()]],
    }


def render(vectors: dict) -> str:
    """The file's text: JSON, one vector per line inside each section."""
    lines = ["{"]
    items = list(vectors.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, list):
            inner = ",\n".join("  " + json.dumps(v, ensure_ascii=False) for v in value)
            lines.append(f"  {json.dumps(key)}: [\n{inner}\n  ]{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}{comma}")
    return "\n".join(lines) + "\n}\n"


def main(argv: list[str] | None = None) -> int:
    """``--write`` the vectors or ``--check`` them; 1 when the check fails."""
    parser = argparse.ArgumentParser(prog="python -m streams.ldp_client.vectors",
                                     description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="write the vectors file")
    group.add_argument("--check", action="store_true", help="fail if the file is not current")
    parser.add_argument("--path", type=Path, default=PATH, help="the vectors file")
    args = parser.parse_args(argv)
    text = render(build())
    if args.write:
        args.path.parent.mkdir(parents=True, exist_ok=True)
        args.path.write_text(text, encoding="utf-8")
        sys.stdout.write(f"wrote {args.path}\n")
        return 0
    current = args.path.read_text(encoding="utf-8") if args.path.exists() else ""
    if current != text:
        sys.stdout.write(f"{args.path} is not what the Python implementation computes: run "
                         "python -m streams.ldp_client.vectors --write and review the diff\n")
        return 1
    sys.stdout.write(f"{args.path} is current\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
