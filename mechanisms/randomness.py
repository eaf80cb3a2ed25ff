"""Counter-based randomness per slot (DESIGN.md, decision 5).

The generator for slot t of a stream is Philox keyed by SHA-256(secret, stream, t): a
recomputation after a crash draws the same numbers, and no slot's draws depend on another's.
"""

from __future__ import annotations

import hashlib

import numpy as np


def slot_generator(secret: bytes, stream: str, slot: int) -> np.random.Generator:
    """The generator for one slot of one stream; the secret must stay private."""
    if not secret:
        raise ValueError("the randomness secret must not be empty")
    digest = hashlib.sha256(
        b"pwevent-slot\0" + secret + b"\0" + stream.encode() + b"\0" + int(slot).to_bytes(8, "big",
                                                                                     signed=True)
    ).digest()
    return np.random.Generator(np.random.Philox(key=int.from_bytes(digest[:16], "big")))
