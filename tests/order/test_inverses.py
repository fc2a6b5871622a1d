"""Inverse orders (index -> position), which exclusion needs: each the exact inverse of ``take``."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._order import ORDERS, make_order
from shufflepoint._order.blocks import BlockOrder, StretchBlockOrder

KEYED = ("feistel", "radix-feistel")


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("n", [1, 2, 3, 64, 65, 1000, 2**16, 2**16 + 1, 70_001])
def test_every_order_inverts_take_exhaustively(order, n):
    o = make_order(order, n, 1234, 5)
    positions = np.arange(n, dtype=np.int64)
    indices = o.take(positions)
    assert o.positions_of(indices).tolist() == positions.tolist()


@pytest.mark.parametrize("order", KEYED)
def test_the_table_and_the_arithmetic_inverses_agree(order):
    """Small domains invert by their table once the order was read whole, else by decrypting."""
    by_arithmetic = make_order(order, 5000, 7, 1)
    probe = np.arange(5000, dtype=np.int64)[::-1].copy()
    first = by_arithmetic.positions_of(probe)
    by_table = make_order(order, 5000, 7, 1)
    by_table.take(probe)  # builds the table
    assert by_table.positions_of(probe).tolist() == first.tolist()


@settings(max_examples=60, deadline=None)
@given(order=st.sampled_from(KEYED), n=st.integers(1, 2**62), seed=st.integers(0, 2**64 - 1),
       epoch=st.integers(0, 2**40), data=st.data())
def test_keyed_inverse_at_any_size(order, n, seed, epoch, data):
    o = make_order(order, n, seed, epoch)
    positions = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20)), dtype=np.int64)
    indices = o.take(positions)
    assert o.positions_of(indices).tolist() == positions.tolist()
    assert o.take(o.positions_of(positions)).tolist() == positions.tolist()  # and the other way round


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.integers(0, 40), min_size=1, max_size=12), seed=st.integers(0, 2**32),
       epoch=st.integers(0, 50), block=st.integers(1, 60), stretches=st.integers(1, 5))
def test_blocks_orders_invert_take(rows, seed, epoch, block, stretches):
    n = sum(rows)
    for o in (BlockOrder(rows, seed, epoch, block), StretchBlockOrder(rows, seed, epoch, block, stretches)):
        positions = np.arange(n, dtype=np.int64)
        assert o.positions_of(o.take(positions)).tolist() == positions.tolist()


def test_blocks_inverse_refuses_an_index_outside_the_corpus():
    with pytest.raises(IndexError, match=r"indices: found 0..14\n  expected: each in \[0, 14\)"):
        BlockOrder([3, 5, 2, 4], 0, 0, 6).positions_of(np.array([0, 14]))
