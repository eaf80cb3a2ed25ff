"""Random bits for the exact samplers: uniform 64-bit words from a keyed stream or a generator.

Randomness comes from a *bits* object whose ``words(n)`` returns ``n`` uniform ``np.uint64``:

* :class:`SecureBits`: the AES-256-CTR keystream (OpenSSL through the ``cryptography`` package;
  with AES-NI about 6.6 GB/s, against 5.7 for ChaCha20 and 0.6 for SHAKE-256 in ``hashlib``) under
  the key BLAKE2b-256(key, person="pwevent-bits"), the 128-bit big-endian counter block starting
  at zero, read as little-endian 64-bit words. It is a pure stream: the words returned depend only
  on the key and on how many were drawn before. Keystream is made in 64 KiB blocks, encrypted
  into a fresh buffer (no copy of the output).
* :class:`GeneratorBits`: a seeded ``np.random.Generator`` (tests, offline evaluation; not secure).

The samplers read the words as chunks of 8 to 64 bits (:func:`chunks`); :func:`uniform_below`
draws exactly uniform integers below a bound.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from typing import Protocol

import numpy as np

_U64 = np.uint64
_BLOCK = 1 << 16  # keystream bytes made per AES call


class RandomBits(Protocol):
    """A deterministic source of uniform 64-bit words."""

    def words(self, n: int) -> np.ndarray: ...


class SecureBits:
    """AES-256-CTR keystream keyed by BLAKE2b-256(key), as ``np.uint64`` words."""

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        if not isinstance(key, bytes) or len(key) < 16:
            raise ValueError("the key must be at least 16 bytes")
        k = hashlib.blake2b(key, digest_size=32, person=b"pwevent-bits").digest()
        self._stream = Cipher(algorithms.AES256(k), modes.CTR(bytes(16))).encryptor()
        self._buf, self._pos = np.empty(0, _U64), 0

    def words(self, n: int) -> np.ndarray:
        """The next ``n`` words of the stream."""
        have = self._buf.size - self._pos
        if n <= have:
            self._pos += n
            return self._buf[self._pos - n : self._pos]
        size = (max(_BLOCK, 8 * (n - have)) + 15) & ~15  # whole AES blocks
        out = bytearray(8 * have + size + 15)  # update_into may ask for a block's room more
        out[: 8 * have] = self._buf[self._pos :].tobytes()  # the words not yet read come first
        self._stream.update_into(_zeros(size), memoryview(out)[8 * have :])
        self._buf, self._pos = np.frombuffer(out, "<u8", count=have + size // 8), n
        return self._buf[:n]


@functools.cache
def _zeros(size: int) -> bytes:
    """``size`` zero bytes, the plaintext whose encryption is the keystream."""
    return bytes(size)


class GeneratorBits:
    """Words from a seeded numpy Generator: reproducible, not secure."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def words(self, n: int) -> np.ndarray:
        """``n`` uniform 64-bit words."""
        return self.rng.integers(0, 2**64, n, dtype=_U64)


def secure_bits(secret: bytes, *labels: bytes | str | int) -> SecureBits:
    """Stream keyed by HMAC-SHA256(secret, labels), each label typed and length-prefixed."""
    if not isinstance(secret, bytes) or not secret:
        raise ValueError("the randomness secret must be non-empty bytes")
    msg = [b"pwevent-exact-noise"]
    for label in labels:
        if isinstance(label, bytes):
            tag, raw = b"b", label
        elif isinstance(label, str):
            tag, raw = b"s", label.encode()
        elif isinstance(label, int) and not isinstance(label, bool):
            tag, raw = b"i", label.to_bytes(label.bit_length() // 8 + 1, "big", signed=True)
        else:
            raise TypeError(f"labels must be bytes, str or int, got {type(label).__name__}")
        msg.append(tag + len(raw).to_bytes(8, "big") + raw)
    return SecureBits(hmac.digest(secret, b"".join(msg), "sha256"))


def chunks(bits: RandomBits, n: int, width: int) -> np.ndarray:
    """``n`` uniform unsigned integers of ``width`` (8, 16, 32 or 64) bits."""
    words = bits.words(-(-n * width // 64)).astype("<u8", copy=False)
    return words.view(f"<u{width // 8}")[:n]


def chunk_width(top: int) -> int:
    """The narrowest chunk width holding ``top``."""
    return next(w for w in (8, 16, 32, 64) if top < 2**w)


def uniform_below(n: np.ndarray | int, bits: RandomBits) -> np.ndarray:
    """Exactly uniform ``np.uint64`` in ``[0, n)`` for each bound ``1 <= n < 2**64``: random
    bits masked to the bound's bit length, redrawn while ``>= n``."""
    bound = np.asarray(n, dtype=_U64).ravel()
    if not bound.min(initial=1) >= 1:
        raise ValueError("bounds must be >= 1")
    mask = bound - _U64(1)
    for shift in (1, 2, 4, 8, 16, 32):
        mask |= mask >> _U64(shift)
    width = chunk_width(int(mask.max(initial=0)))
    out, idx = np.zeros(mask.size, _U64), np.arange(mask.size)
    while idx.size:
        x = chunks(bits, idx.size, width) & mask[idx]
        ok = x < bound[idx]
        out[idx[ok]] = x[ok]
        idx = idx[~ok]
    return out.reshape(np.shape(n))
