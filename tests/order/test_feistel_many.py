"""``feistel_many.take_many``: many small ``feistel`` orders at once, value for value the same as
``FeistelOrder`` (the scheduled mixture order relies on it to shuffle every global batch)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._order.blocks import _sub_seed
from shufflepoint._order.feistel import FeistelOrder
from shufflepoint._order.feistel_many import sub_seeds, take_many


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.sampled_from([1, 2, 3, 8, 33, 50, 63, 64, 65, 100, 127, 1000, 70_000]), min_size=1,
                      max_size=6),
       keys=st.lists(st.integers(0, 2**64 - 1), min_size=6, max_size=6), epoch=st.integers(0, 2**40),
       data=st.data())
def test_each_element_is_its_piece_s_feistel_order(sizes, keys, epoch, data):
    pieces = np.asarray(data.draw(st.lists(st.integers(0, len(sizes) - 1), min_size=1, max_size=50)), dtype=np.int64)
    offsets = np.asarray([data.draw(st.integers(0, sizes[p] - 1)) for p in pieces.tolist()], dtype=np.int64)
    found = take_many(offsets, pieces, np.asarray(sizes), np.asarray(keys[:len(sizes)], dtype=np.uint64), epoch)
    expected = [FeistelOrder(sizes[p], keys[p], epoch).index(int(o)) for p, o in zip(pieces.tolist(), offsets.tolist(),
                                                                                       strict=True)]
    assert found.tolist() == expected


@given(seed=st.integers(0, 2**64 - 1), tag=st.integers(0, 2**32), index=st.lists(st.integers(0, 2**62), max_size=8))
def test_sub_seeds_are_the_blocks_order_s(seed, tag, index):
    found = sub_seeds(seed, tag, np.asarray(index, dtype=np.uint64))
    assert found.tolist() == [_sub_seed(seed, tag, i) for i in index]
