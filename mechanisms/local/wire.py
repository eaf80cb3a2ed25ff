"""The wire format of a local report (docs/ldp-reports.md): one JSON object per report, written
byte for byte alike by every client library.

Keys in this order, no spaces::

    {"v":2,"protocol":"lbu","user":"alice","slot":1042,"eps":0.1,"E":1,"w":10,"d":8,
     "oracle":"oue","bits":"a501","client":"pwevent-ldp-python/0.3.0"}

``d`` is the number of value cells; the oracle runs over ``d + 1`` (:func:`oracle_cells`), cell
``d`` meaning "no value", so that a user reports whether it holds a value or not and the reports'
presence says nothing. GRR reports carry ``"cell":3`` in place of ``"bits"``. The two-round
protocols (``lbd``, ``lba``, ``lpd``, ``lpa``, ``mtsp``: :mod:`mechanisms.local.rounds`) write
``"round":1`` or ``"round":2`` after ``"slot"``; ``mtsp`` (:mod:`mechanisms.local.tree`) writes
``"cells":k`` after ``"d"``, the cells its OUE bits run over (its level's nodes in round 1, the
decision's intervals in round 2).
Numbers are written as JavaScript's ``String(x)`` writes them (the shortest digits that read back to
the same double, plain from 1e-6 to 1e21, else with an exponent: ``1e-7``, ``1.5e+21``); strings
escape ``"``, ``\\`` and U+0000..U+001F (as ``\\u00xx``) and nothing else. :func:`parse_report` is
the reading side the collector uses: it checks a record against the same rules, whatever client
wrote it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from mechanisms.local.oracles import MAX_EPS, unpack_bits

#: Version 2: the oracle's extra cell for "no value" (version 1 had none).
WIRE_VERSION: Final = 2
#: The largest user id or client name, in UTF-8 bytes.
MAX_TEXT_BYTES: Final = 256
#: The most cells an oracle runs over: at most MAX_CELLS - 1 value cells and "no value".
MAX_CELLS: Final = 65536
#: The largest slot (JavaScript's largest exact integer).
MAX_SLOT: Final = 2**53 - 1
#: The largest slot of a two-round report (its virtual slot, 2 slot + 1, stays exact).
MAX_ROUND_SLOT: Final = 2**52 - 1
_PROTOCOLS: Final = ("lbu", "lsp", "lpu", "plbu", "lbd", "lba", "lpd", "lpa", "mtsp")
_ROUNDS: Final = ("lbd", "lba", "lpd", "lpa", "mtsp")
_POPULATION: Final = ("lpd", "lpa")


def oracle_cells(d: int) -> int:
    """The cells the oracle runs over for ``d`` value cells: ``d + 1``, the last "no value"."""
    return int(d) + 1


def format_number(x: float) -> str:
    """A finite double as JavaScript's ``String(x)`` writes it (ECMAScript Number::toString)."""
    if not math.isfinite(x):
        raise ValueError(f"the wire holds finite numbers only, got {x!r}")
    if x == 0:
        return "0"
    if x < 0:
        return "-" + format_number(-x)
    sign, digits, exponent = Decimal(repr(float(x))).normalize().as_tuple()
    text = "".join(map(str, digits))
    k = len(text)
    n = k + int(exponent)  # x = 0.text * 10^n
    if k <= n <= 21:
        return text + "0" * (n - k)
    if 0 < n <= 21:
        return text[:n] + "." + text[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + text
    e = n - 1
    mantissa = text if k == 1 else text[0] + "." + text[1:]
    return f"{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"


def format_string(text: str) -> str:
    """``text`` as a JSON string: ``"`` and ``\\`` escaped with a backslash, U+0000..U+001F as
    ``\\u00xx``, everything else as it is (UTF-8 on the wire)."""
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch < " ":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def check_text(what: str, text: object) -> str:
    """``text`` if it is a string of 1 to 256 UTF-8 bytes (no lone surrogate), else
    ValueError."""
    if not isinstance(text, str):
        raise ValueError(f"{what} must be a string, got {type(text).__name__}")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{what} holds a lone surrogate") from None
    if not 1 <= size <= MAX_TEXT_BYTES:
        raise ValueError(f"{what} must take 1 to {MAX_TEXT_BYTES} UTF-8 bytes, got {size}")
    return text


def encode_report(protocol: str, user: str, slot: int, eps: float, E: float,  # noqa: N803
                  w: int, d: int, payload: bytes | int, client: str,
                  round_: int | None = None, cells: int | None = None) -> bytes:
    """One report's bytes: ``payload`` is OUE's packed bits (bytes) or GRR's cell (int);
    ``round_`` (1 or 2) for the two-round protocols, None for the others; ``cells`` for mtsp
    (the cells the bits run over), None for the others."""
    if isinstance(payload, bytes):
        tail = f'"oracle":"oue","bits":"{payload.hex()}"'
    else:
        tail = f'"oracle":"grr","cell":{int(payload)}'
    rounds = "" if round_ is None else f'"round":{int(round_)},'
    width = "" if cells is None else f'"cells":{int(cells)},'
    return (f'{{"v":{WIRE_VERSION},"protocol":"{protocol}","user":{format_string(user)},'
            f'"slot":{int(slot)},{rounds}"eps":{format_number(eps)},"E":{format_number(E)},'
            f'"w":{int(w)},"d":{int(d)},{width}{tail},"client":{format_string(client)}}}'
            ).encode()


@dataclass(frozen=True)
class ParsedReport:
    """A report as the collector reads it: ``bits`` (OUE, a bool array of ``cells``) or
    ``cell`` (GRR, in [0, d], d for "no value");
    ``round`` is 1 or 2 for the two-round protocols, 0 for the others; ``cells`` the cells the
    oracle ran over: d + 1, or for mtsp its ``cells`` key."""

    protocol: str
    user: str
    slot: int
    eps: float
    E: float  # noqa: N815 - the papers' name
    w: int
    d: int
    oracle: str
    bits: object | None
    cell: int | None
    client: str
    round: int = 0
    cells: int = 0

    def __post_init__(self) -> None:
        """``cells`` defaults to the oracle's d + 1."""
        if not self.cells:
            object.__setattr__(self, "cells", oracle_cells(self.d))


def _integer(record: dict, key: str, low: int, high: int) -> int:
    value = record.get(key)
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{key!r} must be an integer in [{low}, {high}], got {value!r}"[:200])
    return value


def _positive(record: dict, key: str, high: float) -> float:
    value = record.get(key)
    if type(value) not in (int, float) or not 0 < value <= high:
        raise ValueError(f"{key!r} must be a number in (0, {high}], got {value!r}"[:200])
    return float(value)


def parse_report(data: bytes) -> ParsedReport:
    """Read and check one report's bytes; ValueError says what is wrong. Unknown keys are
    refused (version 2 has none), and so are budgets inconsistent with the protocol
    (``eps`` must be E/w for ``lbu``/``plbu``, E for ``lsp``/``lpu`` and both rounds of
    ``lpd``/``lpa``, E/(2w) in round 1 of ``lbd``/``lba``/``mtsp`` and at most E/2 in their
    round 2, whose exact budget the collector's decision names; ``mtsp`` through OUE only, its
    bits over its ``cells``)."""
    record = json.loads(data)
    if not isinstance(record, dict):
        raise ValueError("a report is a JSON object")
    if record.get("v") != WIRE_VERSION or type(record.get("v")) is not int:
        raise ValueError(f"unknown report version {record.get('v')!r}"[:200])
    protocol = record.get("protocol")
    if protocol not in _PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}"[:200])
    oracle = record.get("oracle")
    keys = {"v", "protocol", "user", "slot", "eps", "E", "w", "d", "oracle", "client"}
    keys.add("bits" if oracle == "oue" else "cell")
    if protocol in _ROUNDS:
        keys.add("round")
    if protocol == "mtsp":
        keys.add("cells")
    if oracle not in ("oue", "grr") or set(record) != keys:
        raise ValueError(f"a report has exactly the keys {sorted(keys)}, got {sorted(record)}")
    if protocol == "mtsp" and oracle != "oue":
        raise ValueError("mtsp reports through OUE only")
    user, client = check_text("user", record["user"]), check_text("client", record["client"])
    slot = _integer(record, "slot", 0, MAX_ROUND_SLOT if protocol in _ROUNDS else MAX_SLOT)
    w, d = _integer(record, "w", 1, 2**31 - 1), _integer(record, "d", 1, MAX_CELLS - 1)
    eps, E = _positive(record, "eps", MAX_EPS), _positive(record, "E", MAX_EPS * w)
    round_ = _integer(record, "round", 1, 2) if protocol in _ROUNDS else 0
    if round_ == 2 and protocol not in _POPULATION:
        if not eps <= E / 2:
            raise ValueError(f"a publication report spends at most E/2 = {E / 2!r}, not {eps!r}")
    elif eps != (E / w if protocol in ("lbu", "plbu")
                 else E / (2 * w) if round_ and protocol not in _POPULATION else E):
        raise ValueError(f"eps {eps!r} is not what {protocol} spends with E = {E!r}, w = {w}")
    cells = _integer(record, "cells", 1, oracle_cells(d)) if "cells" in keys else oracle_cells(d)
    bits, cell = None, None
    if oracle == "oue":
        text = record["bits"]
        if not isinstance(text, str) or text != text.lower():
            raise ValueError("'bits' must be lowercase hex")
        bits = unpack_bits(bytes.fromhex(text), cells)
    else:
        cell = _integer(record, "cell", 0, d)
    return ParsedReport(protocol, user, slot, eps, E, w, d, oracle, bits, cell, client, round_,
                        cells)
