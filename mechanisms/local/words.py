"""Uniform 32-bit words, the only randomness a client draws (docs/ldp-reports.md).

A client takes its words from the platform's CSPRNG. The shared test vectors take them from
:class:`CounterWords`, which any language reproduces: block ``i`` (from 0) is SHA-256 over the
seed's UTF-8 bytes and ``i`` as 8 big-endian bytes; its 32 bytes are 8 words, big-endian, used
in order, block after block.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

import numpy as np


class WordSource(Protocol):
    """Uniform words in [0, 2**32), drawn in order."""

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` words (uint32)."""
        ...


class CounterWords:
    """The deterministic words of the test vectors: SHA-256 of (seed, block counter)."""

    def __init__(self, seed: str) -> None:
        """Words from ``seed``, starting at block 0."""
        self.seed = seed.encode("utf-8")
        self.block = 0
        self.buffer = np.zeros(0, dtype=np.uint32)
        self.drawn = 0

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` words."""
        while self.buffer.size < n:
            digest = hashlib.sha256(self.seed + self.block.to_bytes(8, "big")).digest()
            self.block += 1
            block = np.frombuffer(digest, dtype=">u4").astype(np.uint32)
            self.buffer = np.concatenate([self.buffer, block])
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        self.drawn += n
        return out
