"""The default order: a keyed, seekable pseudo-random permutation (Feistel network + cycle walking).

Why a Feistel network. The order must be a pure function of (seed, epoch, position) that reads any
position in O(1) time and memory, is a bijection for *every* n (not only powers of two), and is
fast enough vectorised in numpy to feed a loader (>= 20 M indices/s). A Feistel network over a
power-of-two domain is a bijection by construction whatever its round function is, and the
standard way to narrow it to an arbitrary n is cycle walking (Black & Rogaway, 2002): re-encrypt
until the value falls below n, which stays a bijection of [0, n). We considered the swap-or-not
shuffle (works on [0, n) directly, no walking), but it needs several times more rounds for the same
mixing, each as costly as a Feistel round.

Details that matter:
- Domain: 2**w with w = max(6, bit_length(n - 1)), so for n > 64, 2**w < 2n and cycle walking
  takes < 2 encryptions per index on average. The floor of 6 bits matters for tiny n: with 1- or
  2-bit halves the round functions have too few inputs to mix, and n = 8 failed the fixed-point
  test at w = 3; tiny n pays more walking, which costs nothing that matters. The halves may be
  unequal (w odd): the network alternates
  which side is wider, which keeps every round invertible. This is the spot where a well-known
  seekable shuffle breaks at n = 4**k + 1: it rounds the width so that n - 1 = 2**w no longer
  fits. Here the width is computed from n - 1 exactly and tested exhaustively on such sizes.
- Halves are at most 31 bits, so every round runs on uint32 arrays (vectorised multiplies); n may
  be as large as 2**62.
- Round function: (right half XOR round key), multiplied, xor-shifted and multiplied again (the
  core of murmur3's 32-bit finaliser); its top bits are used, which depend on every input bit.
- Rounds: 8. Luby-Rackoff needs 4 for a strong pseudo-random permutation with ideal round
  functions; ours are cheap mixers, and the statistical tests against ``torch.randperm`` (position
  uniformity, fixed points, adjacent pairs; tests/order/test_orders.py) pass with margin at 8 on the small
  domains where weaknesses would show first. 8 rounds still generate > 20 M indices/s here.
- Parity: every Feistel permutation of a power-of-two domain is even, so on small n it reaches
  only half of all permutations and the fixed-point count is visibly biased (n = 8 fails the test
  without this). A final swap-or-not round on [0, n) (Hoang, Morris & Rogaway, 2012: swap each
  pair {x, pivot - x mod n} or not, by a keyed bit) makes the parity a coin flip. It is an
  involution on [0, n), so the whole stays a bijection.
- Keys: 9 32-bit round keys from splitmix64 over (seed, epoch). This is the specification of
  order version 1: changing any constant changes every order, which the golden tests catch.
"""

from __future__ import annotations

import numpy as np

from shufflepoint._order.walking import WalkedInverse, walk_table, walked_take

NAME = "feistel"
VERSION = 1
ROUNDS = 8
MIN_WIDTH = 6
MAX_N = 2**62

_M64 = (1 << 64) - 1
_M32 = (1 << 32) - 1
_C1 = 0x85EBCA6B
_C2 = 0xC2B2AE35
_TABLE_WIDTH = 16  # domains up to 2**16 are computed whole once (<= 512 KiB), then looked up
_TABLE_AFTER = 16  # ... once the calls have asked for 1/16 of n; before, each position is encrypted alone
_U32_15, _U32_C1, _U32_C2 = np.uint32(15), np.uint32(_C1), np.uint32(_C2)


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _base_key(seed: int, epoch: int) -> int:
    return _splitmix64(_splitmix64(seed & _M64) ^ (epoch & _M64))


def round_keys(seed: int, epoch: int) -> tuple[int, ...]:
    base = _base_key(seed, epoch)
    return tuple(_splitmix64(base + i) & _M32 for i in range(ROUNDS + 1))


def _mix32(value: int) -> int:
    h = (value * _C1) & _M32
    h ^= h >> 15
    return (h * _C2) & _M32


class FeistelOrder(WalkedInverse):
    """A permutation of range(n) for one (seed, epoch); ``take`` maps positions to sample indices."""

    name = NAME
    version = VERSION

    def __init__(self, n: int, seed: int, epoch: int) -> None:
        self.n = n
        width = max(MIN_WIDTH, (n - 1).bit_length())
        # Round i splits the value into a high part of `high[i]` bits and a low part of `low[i]`.
        first_high, first_low = width - width // 2, width // 2
        self._splits = tuple(
            (first_high, first_low) if i % 2 == 0 else (first_low, first_high) for i in range(ROUNDS)
        )
        keys = round_keys(seed, epoch)
        self._keys, self._swap_key32 = keys[:ROUNDS], keys[ROUNDS]
        self._keys32 = tuple(np.uint32(k) for k in self._keys)
        # The swap-or-not pivot: a keyed point of [0, n).
        self._pivot = _splitmix64(_base_key(seed, epoch) ^ 0x5EED) % max(n, 1)
        self._width = width
        self._table: np.ndarray | None = None
        self._inverse: np.ndarray | None = None
        self._asked = 0  # positions asked so far: the table is built once they reach 1/16 of n
        # The vectorised path's constants, as numpy scalars once (not per call).
        self._split0 = (np.uint64(first_low), np.uint64((1 << first_low) - 1))
        self._rounds32 = tuple(
            (key, np.uint32(32 - high)) for (high, _low), key in zip(self._splits, self._keys32, strict=True)
        )
        self._last_high = np.uint64(self._splits[-1][0])

    # -- scalar path: the specification, in plain integers ---------------------------------------
    def _encrypt_one(self, x: int) -> int:
        for (high, low), key in zip(self._splits, self._keys, strict=True):
            right = x & ((1 << low) - 1)
            left = x >> low
            h = ((right ^ key) * _C1) & _M32
            h ^= h >> 15
            h = (h * _C2) & _M32
            x = (right << high) | (left ^ (h >> (32 - high)))
        return x

    def _swap_one(self, x: int) -> int:
        partner = (self._pivot - x) % self.n
        m = max(x, partner)
        h = _mix32((m & _M32) ^ ((m >> 32) * _C2 & _M32) ^ self._swap_key32)
        return partner if h >> 31 else x

    def index(self, position: int) -> int:
        x = self._encrypt_one(position)
        return self._swap_one(self._walk_one(x) if x >= self.n else x)

    # -- vectorised path: the same arithmetic on uint32 halves ------------------------------------
    def _encrypt(self, values: np.ndarray) -> np.ndarray:
        """Encrypt uint64 values of the 2**w domain; returns a new uint64 array."""
        shift0, mask0 = self._split0
        right = (values & mask0).astype(np.uint32)
        left = (values >> shift0).astype(np.uint32)
        h = np.empty_like(right)
        tmp = np.empty_like(right)
        for key, shift in self._rounds32:
            np.bitwise_xor(right, key, out=h)
            np.multiply(h, _U32_C1, out=h)
            np.right_shift(h, _U32_15, out=tmp)
            np.bitwise_xor(h, tmp, out=h)
            np.multiply(h, _U32_C2, out=h)
            np.right_shift(h, shift, out=h)
            np.bitwise_xor(h, left, out=h)
            # new (left, right) = (old right, old left ^ F): the old right becomes the high part.
            left, right, h = right, h, left
        out: np.ndarray = left.astype(np.uint64)
        np.left_shift(out, self._last_high, out=out)
        np.bitwise_or(out, right, out=out)
        return out

    def _small_table(self) -> np.ndarray:
        """The whole order of a small domain: cycle walking by table lookups, not re-encryption."""
        if self._table is None:
            step = self._encrypt(np.arange(1 << self._width, dtype=np.uint64)).view(np.int64)
            self._table = self._swap(walk_table(step, self.n))
        return self._table

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Sample indices (int64) at the given positions (int64, each in [0, n))."""
        positions = np.asarray(positions, dtype=np.int64)
        self._asked += positions.size
        if self._width <= _TABLE_WIDTH and (self._table is not None or self._asked * _TABLE_AFTER >= self.n):
            found: np.ndarray = self._small_table()[positions]
            return found
        # A few positions of a domain whose table is not built yet (a resume's first batch in a
        # block of 65,536): encrypt just those, the same values the table holds.
        return walked_take(positions, self.n, self._encrypt, self._walk_one, self._swap_into)

    def _walk_one(self, x: int) -> int:
        """Re-encrypt ``x`` until it falls in [0, n) (cycle walking), in plain integers."""
        x = self._encrypt_one(x)
        while x >= self.n:
            x = self._encrypt_one(x)
        return x

    def _swap(self, x: np.ndarray) -> np.ndarray:
        """One swap-or-not round on [0, n): pairs {x, pivot - x mod n} swap or not, by a keyed bit."""
        out = np.empty_like(x)
        self._swap_into(x, out)
        return out

    def _swap_into(self, x: np.ndarray, out: np.ndarray) -> None:
        """``_swap(x)`` written into ``out`` (int64 arrays of values in [0, n))."""
        partner = np.subtract(np.int64(self._pivot), x)
        np.add(partner, np.int64(self.n), out=partner, where=partner < 0)
        m = np.maximum(x, partner)
        h = m.astype(np.uint32)  # the low 32 bits (m >= 0)
        if self.n > 1 << 32:  # below, the high 32 bits are all 0 and mixing them in changes nothing
            high = (m >> np.int64(32)).astype(np.uint32)
            np.multiply(high, _U32_C2, out=high)
            np.bitwise_xor(h, high, out=h)
        np.bitwise_xor(h, np.uint32(self._swap_key32), out=h)
        np.multiply(h, _U32_C1, out=h)
        tmp = np.right_shift(h, _U32_15)
        np.bitwise_xor(h, tmp, out=h)
        np.multiply(h, _U32_C2, out=h)
        out[...] = x
        np.copyto(out, partner, where=h >= np.uint32(1 << 31))

    # -- the inverse: index -> position, for exclusion (``_core/exclusion.py``) -----------------------
    def _decrypt(self, values: np.ndarray) -> np.ndarray:
        """The inverse of ``_encrypt``: each round (left, right) -> (right, left ^ f(right)) undone,
        last round first (uint64 in and out)."""
        high_last = int(self._last_high)
        right = (values & np.uint64((1 << high_last) - 1)).astype(np.uint32)
        left = (values >> self._last_high).astype(np.uint32)
        for key, shift in reversed(self._rounds32):
            h = left ^ key
            h *= _U32_C1
            h ^= h >> _U32_15
            h *= _U32_C2
            h >>= shift
            left, right = right ^ h, left
        out: np.ndarray = left.astype(np.uint64)
        np.left_shift(out, self._split0[0], out=out)
        np.bitwise_or(out, right, out=out)
        return out

    def _unwalked(self, indices: np.ndarray) -> np.ndarray:
        """The swap-or-not round is its own inverse: undone first, then the walk and the rounds."""
        return self._swap(indices.reshape(-1)).reshape(indices.shape)
