"""The ``buckets`` deal for a loader: ``DataLoader(..., buckets=keys)`` (the arithmetic: ``_core/buckets.py``).

A loader with buckets reads its epoch through the bucket deal (``_core/deals/buckets.py``: its cuts are
``BucketCut``s of the keys, every per-rank batch one bucket) and a ``BucketOrder`` (each bucket's stream a
seekable permutation of its own). The position model (``position.py``) drives them like any deal: a state
records the keys' fingerprint (``buckets``) and a load with other keys, or without, is refused by name.
Exclusion is refused (a bucket's batches are whole units of its stream; skipping samples inside would re-cut
every bucket), and ``buckets`` takes no ``deal``. Here: the loader's arguments checked, and the orders.
"""

from __future__ import annotations

from typing import Any

from shufflepoint._core.buckets import BucketOrder, BucketTable
from shufflepoint._core.capabilities import OwnOrder
from shufflepoint._core.cut import Deal
from shufflepoint._core.deals.buckets import BucketDeal, check_deal_argument
from shufflepoint._errors import Plain, refusal
from shufflepoint._loading.orders import OrderCache
from shufflepoint._order import DEFAULT_ORDER, Order
from shufflepoint._shards.counting.bucket_keys import keys_of_field


def check_bucketed(dataset: Any, order: str | None, deal: str | None, shuffle_block: int | None) -> str:
    """The order each bucket's stream is read in (``order``, or the default), the loader's other
    arguments checked against ``buckets``; ValueError naming the argument."""
    if isinstance(dataset, OwnOrder):
        # LIMIT(buckets-own-order): docs/buckets.md#limits
        raise ValueError(refusal("buckets", Plain(f"keys for a {type(dataset).__name__}"), "a map-style dataset or a "
                                 "shufflepoint.Shards corpus", "bucket the datasets a Mixture or Packed reads, or "
                                 "drop buckets=", why=f"a {type(dataset).__name__} reads in its own order"))
    check_deal_argument(deal)
    if shuffle_block is not None or order == "blocks":
        found = "shuffle_block" if shuffle_block is not None else "order"
        raise ValueError(refusal(found, shuffle_block if shuffle_block is not None else order,
                                 "None with buckets= (each bucket is read in a seekable permutation of its own)",
                                 f"leave {found} unset",
                                 why="the 'blocks' order's locality is not kept inside buckets"))
    return order or DEFAULT_ORDER


class BucketOrders(OrderCache):
    """The epoch's ``BucketOrder`` (built once per epoch); a state's order is never adopted over it."""

    def __init__(self, name: str, seed: int, dataset: Any, table: BucketTable) -> None:
        super().__init__(name, table.n, seed)
        self._dataset, self.table = dataset, table

    def for_state(self, state: object, deal: Deal) -> OrderCache:
        return self

    def on_grid(self, grid: int | None) -> OrderCache:
        return self

    def laid(self, epoch: int, stretches: int | None) -> Order:
        if self._order is None or self._epoch != (epoch, None):
            self._order, self._epoch = BucketOrder(self.table, self.name, self.seed, epoch), (epoch, None)
        return self._order


def bucketed(dataset: Any, keys: object, n: int, seed: int, shuffle: bool, order: str | None, deal: str | None,
             shuffle_block: int | None, drop_last: bool) -> tuple[BucketOrders, BucketDeal]:
    """A loader's orders and deal for ``buckets=keys`` (the other arguments checked against it); ``drop_last``
    the loader's, which a resume inside an epoch must share with the state (``BucketDeal.check_state``)."""
    name = check_bucketed(dataset, order, deal, shuffle_block)
    table = bucket_table(dataset, keys, n)
    return BucketOrders(name if shuffle else "identity", seed, dataset, table), BucketDeal(table, seed, drop_last)


def bucket_table(dataset: Any, keys: object, n: int) -> BucketTable:
    """The loader's ``buckets=`` as a table (the checks name ``buckets``): keys, or a field's name."""
    if isinstance(keys, str):
        keys = keys_of_field(dataset, keys)
    if isinstance(keys, BucketTable):
        if keys.n != n:
            raise ValueError(refusal("buckets", Plain(f"keys of {keys.n} samples"), f"keys of n={n} samples",
                                     "build the keys for this dataset"))
        return keys
    return BucketTable(keys, n)
