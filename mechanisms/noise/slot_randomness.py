"""Counter-based randomness per slot (docs/design.md, privacy decision 5).

The randomness of slot t of a stream is keyed by HMAC-SHA256(secret; stream, nonce, t): a
recomputation after a crash draws the same numbers, no slot's draws depend on another's, and a
fresh nonce (drawn when a stream starts) gives a re-run under the same stream name fresh noise.
Two sources come out of one key: a numpy generator (Philox) for the Sampling Mechanism's
binomial thinning, and a cryptographically secure bit stream for the integer noise.
"""

from __future__ import annotations

import hashlib
import hmac

import numpy as np

from mechanisms.noise.bits import SecureBits, secure_bits


class SlotGenerator(np.random.Generator):
    """A numpy generator that also carries ``bits``, the slot's secure stream for noise."""

    def __init__(self, bit_generator: np.random.BitGenerator, bits: SecureBits) -> None:
        super().__init__(bit_generator)
        self.bits = bits


def _label(value: str | int) -> bytes:
    data = value.encode() if isinstance(value, str) else int(value).to_bytes(8, "big",
                                                                              signed=True)
    return len(data).to_bytes(4, "big") + data


def slot_generator(secret: bytes, stream: str, slot: int, nonce: str = "") -> SlotGenerator:
    """The randomness of one slot of one stream; the secret must stay private."""
    if not secret:
        raise ValueError("the randomness secret must not be empty")
    labels = b"pwevent-slot" + _label(stream) + _label(nonce) + _label(slot)
    digest = hmac.new(secret, labels, hashlib.sha256).digest()
    philox = np.random.Philox(key=int.from_bytes(digest[:16], "big"))
    return SlotGenerator(philox, secure_bits(secret, "pwevent-noise", stream, nonce, int(slot)))
