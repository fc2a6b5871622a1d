"""Orders: seekable permutations of range(n), one algorithm per module, one shared signature.

Every order is built as ``Order(n, seed, epoch)`` and answers ``index(position) -> int`` and
``take(positions: int64 array) -> int64 array``; it has a ``name`` and a ``version`` that the state
records. ``ORDERS`` is the registry, ``make_order`` the one way in.

Words: docs/glossary.md (order, epoch, position, index, seed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, overload, runtime_checkable

import numpy as np

from shufflepoint._order import feistel, identity, radix_feistel, torch_randperm

_MODULES = {m.NAME: m for m in (feistel, radix_feistel, torch_randperm, identity)}
_CLASSES: dict[str, Callable[[int, int, int], Order]] = {
    feistel.NAME: feistel.FeistelOrder,
    radix_feistel.NAME: radix_feistel.RadixFeistelOrder,
    torch_randperm.NAME: torch_randperm.TorchRandpermOrder,
    identity.NAME: identity.IdentityOrder,
}
ORDERS: tuple[str, ...] = tuple(_CLASSES)
"""The names ``order=`` takes (a loader's, a sampler's, ``permutation``'s); a state records the order's
name and version, and a resume under another is refused."""
# The order of a loader or permutation built without one. It was ``feistel`` in 0.1; a loader left
# to the default resumes a state in either (DEFAULT_ORDERS), so an upgrade never changes a run's order.
DEFAULT_ORDER = radix_feistel.NAME
DEFAULT_ORDERS: tuple[str, ...] = (radix_feistel.NAME, feistel.NAME)
MAX_SEED = 2**64 - 1
MAX_EPOCH = 2**62


class Order(Protocol):
    name: str
    version: int
    n: int

    def index(self, position: int) -> int: ...

    def take(self, positions: np.ndarray) -> np.ndarray: ...


@runtime_checkable
class InvertibleOrder(Order, Protocol):
    """An order that also answers index -> position, which exclusion needs (``_core/exclusion.py``).
    Every order of the registry and ``blocks`` are; a dataset's own order (``Mixture``, ``Packed``)
    is not (yet), and ``loader.exclude`` refuses it by name."""

    def positions_of(self, indices: np.ndarray) -> np.ndarray: ...


def order_version(name: str) -> int:
    check_order_name(name)
    return int(_MODULES[name].VERSION)


def check_order_name(name: object) -> str:
    if not isinstance(name, str) or name not in _CLASSES:
        raise ValueError(f"order: found {name!r}\n  expected: one of {', '.join(map(repr, ORDERS))}\n"
                         "  fix: pass one of these names, or leave order unset for the default")
    return name


def check_int(field: str, value: object, low: int, high: int) -> int:
    """An integer argument, not a bool, in [low, high]: ValueError/TypeError naming the field."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."  # as errors.refusal shows it
        raise TypeError(f"{field}: found {shown} of type {type(value).__name__}\n  expected: an int\n"
                        f"  fix: pass {field} as an int in [{low}, {high}]")
    if not low <= int(value) <= high:
        raise ValueError(f"{field}: found {int(value)}\n  expected: an int in [{low}, {high}]\n"
                         f"  fix: pass {field} in that range")
    return int(value)


def make_order(name: str, n: int, seed: int, epoch: int) -> Order:
    check_order_name(name)
    check_int("n", n, 0, _MODULES[name].MAX_N)
    check_int("seed", seed, 0, MAX_SEED)
    check_int("epoch", epoch, 0, MAX_EPOCH)
    return _CLASSES[name](int(n), int(seed), int(epoch))


class Permutation:
    """A seekable permutation of ``range(n)`` for one (seed, epoch): the public face of an order.

    >>> p = Permutation(10, seed=1234, epoch=0)
    >>> sorted(p) == list(range(10))
    True
    >>> p[3] == p[0:10][3]
    True

    ``p[i]`` is O(1) in time and memory for the default order, for any i and any n up to 2**62;
    ``p[a:b]`` returns a numpy int64 array and costs O(b - a).
    """

    _ITER_CHUNK = 1 << 16

    def __init__(self, n: int, seed: int, epoch: int = 0, order: str = DEFAULT_ORDER) -> None:
        self._order = make_order(order, n, seed, epoch)
        self.n, self.seed, self.epoch, self.order = int(n), int(seed), int(epoch), order

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, key: int) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> np.ndarray: ...
    def __getitem__(self, key: int | slice) -> int | np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.n)
            return self._order.take(np.arange(start, stop, step, dtype=np.int64))
        if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
            raise TypeError(f"permutation index: found {type(key).__name__}, expected an int or a slice")
        position = int(key) + self.n if key < 0 else int(key)
        if not 0 <= position < self.n:
            raise IndexError(f"permutation index {key} out of range for n={self.n}")
        return self._order.index(position)

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Sample indices at the given positions (any int64 array of values in [0, n))."""
        return self._order.take(positions)

    def __iter__(self) -> Iterator[int]:
        for start in range(0, self.n, self._ITER_CHUNK):
            yield from self[start : start + self._ITER_CHUNK].tolist()

    def __repr__(self) -> str:
        return f"Permutation(n={self.n}, seed={self.seed}, epoch={self.epoch}, order={self.order!r})"


def permutation(n: int, seed: int, epoch: int = 0, order: str = DEFAULT_ORDER) -> Permutation:
    """The data order of one epoch: a seekable permutation of ``range(n)``.

    The same (n, seed, epoch, order) gives the same permutation on every machine, process and
    rank, forever (``radix-feistel`` and ``feistel`` are pinned by golden tests; ``torch`` follows
    torch). The default is ``radix-feistel``; shufflepoint 0.1's default was ``feistel``.
    """
    return Permutation(n, seed, epoch, order)
