"""``passes.py``: a source's pass reads every row once; an epoch's portion of a pass is the pass's rows from
x0 to x1 whatever the world; the parts' shares of a portion are disjoint, cover it, and lie in the arrangement's
order, part after part."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._shards.corpora.mixture.passes import SourcePasses, stride


def test_the_worked_example_of_the_module_docstring():
    passes = SourcePasses(10, 3, seed=1)
    assert passes.blocks == 4 and stride(3) == 2 and passes._rotation(4) == 1
    assert passes.block_of_rank(4, np.arange(4)).tolist() == [1, 0, 2, 3]
    portion = passes.portion(4, 2, 7)
    assert portion.blocks.tolist() == [0, 1, 2] and portion.rows.tolist() == [3, 1, 1]
    assert portion.first.tolist() == [0, 2, 0] and portion.starts.tolist() == [0, 3, 4]
    first, second = passes.share(4, 2, 7, 0, 3, 0), passes.share(4, 2, 7, 3, 2, 1)
    assert first.blocks.tolist() == [0] and sorted(second.blocks.tolist()) == [1, 2]
    rows = [passes.positions(4, first, np.arange(3), 0), passes.positions(4, second, np.arange(2), 1)]
    assert sorted(rows[0].tolist()) == [0, 1, 2]  # block 0 whole, in the arrangement
    assert {r // 3 for r in rows[1].tolist()} == {1, 2}


def test_the_stride_is_prime_to_the_blocks_and_near_their_golden_section():
    for count in range(1, 300):
        g = stride(count)
        assert 1 <= g <= max(count - 1, 1) and np.gcd(g, count) == 1
        if count > 2:
            assert abs(g - count * 0.618) <= count * 0.1 + 2


@settings(max_examples=150, deadline=None)
@given(length=st.integers(1, 200), block=st.integers(1, 40), seed=st.integers(0, 2**64 - 1), p=st.integers(0, 9),
       data=st.data())
def test_a_pass_reads_every_row_once_and_the_parts_share_each_portion_in_the_arrangement_s_order(length, block, seed,
                                                                                             p, data):
    """Cut a pass into portions (epochs) and each portion into parts' shares: every arrangement position of the
    pass once; a part's share, laid in the arrangement's order, lies after the shares of the parts before it
    (they meet in at most one block)."""
    passes = SourcePasses(length, block, seed)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, length - 1), max_size=4)) if length > 1 else []))
    edges = [0, *cuts, length]
    read = []
    for x0, x1 in zip(edges, edges[1:], strict=False):
        size = x1 - x0
        parts = data.draw(st.lists(st.integers(0, size), min_size=1, max_size=5))
        parts[-1] = size - sum(parts[:-1]) if sum(parts[:-1]) <= size else 0
        if sum(parts) != size:
            parts = [size]
        start, last = 0, -1
        for part, count in enumerate(parts):
            if not count:
                continue
            share = passes.share(p, x0, x1, start, count, part)
            positions = passes.positions(p, share, np.arange(count), part)
            assert int(positions.min()) // block >= last  # after the parts before it, but the block they meet in
            last = int(positions.max()) // block
            read += positions.tolist()
            start += count
    assert sorted(read) == list(range(length))
