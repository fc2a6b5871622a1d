"""A faster keyed, seekable permutation: a Feistel network over a mixed-radix domain a x 2**k.

Why another order. ``feistel`` (order version 1, pinned) works on the power-of-two domain 2**w
with 2**w >= n, and cycle-walks the values that land in [n, 2**w): just above a power of two
almost half of them, so its speed dips there, and its parity fix is a swap-or-not round on int64
arrays. Its meaning is pinned by golden values, so it cannot change; this is a
new order with its own name and golden values, and states keep loading under the order they record.

The domain here is a x b with b = 2**k, k = w // 2, and a = ceil(n / b) (at least 8): it exceeds n
by less than b, about sqrt(n), so cycle walking touches a fraction 1/a ~ 2**-(w/2) of the values
(none worth a second numpy pass once n > 2**20). A value is the pair (hi, lo) = divmod(x, b),
split by a shift because b is a power of two. Each round changes one side by a keyed function of
the other, so each round is a bijection whatever the function is (an unbalanced Feistel network):
- even rounds: lo ^= top k bits of mix(hi ^ key);
- odd rounds:  hi = (hi + (mix(lo ^ key) * a) >> 32) mod a: the added value is uniform on [0, a)
  up to a relative a / 2**32 (at most 2**-12 for n <= 2**40; coarser near n = 2**62), and the
  addition mod a is three uint32 operations (add, subtract a, minimum: the subtraction wraps when
  hi < a). Adding only values below a power of two <= a is not enough: the sums mod a are then
  far from uniform (tests/order/test_orders.py at n = 100 failed at z = 25).
``mix`` is the core of murmur3's 32-bit finaliser, as in ``feistel``. 8 rounds, 8 keys from
splitmix64 over (seed, epoch) with a constant of this order (its keys differ from ``feistel``'s).

Parity: the additions mod a reach odd permutations when a is even, and no parity round is applied;
the small-n statistical tests against ``torch.randperm`` (tests/order/test_orders.py) decide.
Small domains (n <= 2**16) are computed whole once and looked up, as in ``feistel``.
"""

from __future__ import annotations

import numpy as np

from shufflepoint._order.feistel import _C1, _C2, _M32, _base_key, _mix32, _splitmix64
from shufflepoint._order.walking import WalkedInverse, walk_table, walked_take

NAME = "radix-feistel"
VERSION = 1
ROUNDS = 8
MIN_WIDTH = 6
MAX_N = 2**62
_KEY_DOMAIN = 0x52414449585F4645  # b"RADIX_FE": this order's keys are not feistel's
_TABLE_N = 1 << 16  # n up to this: the whole order computed once (<= 512 KiB), then looked up
_U32_15, _U32_C1, _U32_C2, _U64_32 = np.uint32(15), np.uint32(_C1), np.uint32(_C2), np.uint64(32)


def _copy_into(values: np.ndarray, out: np.ndarray) -> None:
    out[...] = values


def round_keys(seed: int, epoch: int) -> tuple[int, ...]:
    base = _base_key(seed, epoch) ^ _KEY_DOMAIN
    return tuple(_splitmix64(base + i) & _M32 for i in range(ROUNDS))


class RadixFeistelOrder(WalkedInverse):
    """A permutation of range(n) for one (seed, epoch); ``take`` maps positions to sample indices."""

    name = NAME
    version = VERSION

    def __init__(self, n: int, seed: int, epoch: int) -> None:
        self.n = n
        width = max(MIN_WIDTH, (n - 1).bit_length())
        self._k = width // 2
        self._a = -(-max(n, 1 << MIN_WIDTH) // (1 << self._k))
        self._keys = round_keys(seed, epoch)
        self._table: np.ndarray | None = None
        self._inverse: np.ndarray | None = None
        # The vectorised path's constants, as numpy scalars once (not per call).
        self._k64, self._low_mask = np.uint64(self._k), np.uint64((1 << self._k) - 1)
        self._a32, self._a64 = np.uint32(self._a), np.uint64(self._a)
        self._shift_k = np.uint32(32 - self._k)
        self._keys32 = tuple(np.uint32(key) for key in self._keys)

    # -- scalar path: the specification, in plain integers ---------------------------------------
    def _encrypt_one(self, x: int) -> int:
        hi, lo = x >> self._k, x & ((1 << self._k) - 1)
        for r, key in enumerate(self._keys):
            if r % 2 == 0:
                lo ^= _mix32(hi ^ key) >> (32 - self._k)
            else:
                hi = (hi + ((_mix32(lo ^ key) * self._a) >> 32)) % self._a
        return (hi << self._k) | lo

    def index(self, position: int) -> int:
        x = self._encrypt_one(position)
        while x >= self.n:
            x = self._encrypt_one(x)
        return x

    # -- vectorised path: the same arithmetic on uint32 sides --------------------------------------
    def _encrypt(self, values: np.ndarray) -> np.ndarray:
        """Encrypt uint64 values of the a x 2**k domain; returns a new uint64 array."""
        lo = (values & self._low_mask).astype(np.uint32)
        hi = (values >> self._k64).astype(np.uint32)
        h, tmp, wide = np.empty_like(lo), np.empty_like(lo), np.empty(lo.shape, dtype=np.uint64)
        for r, key in enumerate(self._keys32):
            np.bitwise_xor(hi if r % 2 == 0 else lo, key, out=h)
            np.multiply(h, _U32_C1, out=h)
            np.right_shift(h, _U32_15, out=tmp)
            np.bitwise_xor(h, tmp, out=h)
            np.multiply(h, _U32_C2, out=h)
            if r % 2 == 0:
                np.right_shift(h, self._shift_k, out=h)
                np.bitwise_xor(lo, h, out=lo)
            else:  # hi + (h * a) >> 32 is < 2a: subtract a unless that wraps below zero
                np.multiply(h, self._a64, out=wide)  # uint32 x uint64: the exact 64-bit product
                np.right_shift(wide, _U64_32, out=wide)
                np.add(hi, wide, out=hi, casting="unsafe")  # < 2a <= 2**32
                np.subtract(hi, self._a32, out=tmp)
                np.minimum(hi, tmp, out=hi)
        out: np.ndarray = hi.astype(np.uint64)
        np.left_shift(out, self._k64, out=out)
        np.bitwise_or(out, lo, out=out)
        return out

    def _small_table(self) -> np.ndarray:
        """The whole order of a small n: cycle walking by table lookups, not re-encryption."""
        if self._table is None:
            step = self._encrypt(np.arange(self._a << self._k, dtype=np.uint64)).view(np.int64)
            self._table = walk_table(step, self.n)
        return self._table

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Sample indices (int64) at the given positions (int64, each in [0, n))."""
        positions = np.asarray(positions, dtype=np.int64)
        if self.n <= _TABLE_N:
            found: np.ndarray = self._small_table()[positions]
            return found
        return walked_take(positions, self.n, self._encrypt, self.index, _copy_into)

    # -- the inverse: index -> position, for exclusion (``_core/exclusion.py``) -----------------------
    def _decrypt(self, values: np.ndarray) -> np.ndarray:
        """The inverse of ``_encrypt``: the rounds undone in reverse order (uint64 in and out)."""
        lo = (values & self._low_mask).astype(np.uint32)
        hi = (values >> self._k64).astype(np.uint32)
        for r in reversed(range(ROUNDS)):
            h = (hi if r % 2 == 0 else lo) ^ self._keys32[r]
            h *= _U32_C1
            h ^= h >> _U32_15
            h *= _U32_C2
            if r % 2 == 0:  # lo ^= f(hi) is its own inverse
                lo ^= h >> self._shift_k
            else:  # hi = (hi + added) mod a, undone: hi - added, plus a when that wraps below zero
                added = ((h.astype(np.uint64) * self._a64) >> _U64_32).astype(np.int64)
                back = hi.astype(np.int64) - added
                back[back < 0] += self._a
                hi = back.astype(np.uint32)
        out: np.ndarray = hi.astype(np.uint64)
        np.left_shift(out, self._k64, out=out)
        np.bitwise_or(out, lo, out=out)
        return out
