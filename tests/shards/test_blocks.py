"""The ``blocks`` order: a bijection, local, seekable, pinned, and independent of the world size."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from resume_contract import Component, assert_resume_contract, run_epochs
from shufflepoint._order.blocks import BlockOrder, StretchBlockOrder

ROWS = st.lists(st.integers(0, 40), min_size=0, max_size=30)


def starts_of(rows):
    return np.concatenate(([0], np.cumsum(rows)[:-1])).astype(np.int64)


def shard_of(rows, indices):
    return np.searchsorted(np.cumsum(rows), indices, side="right")


@settings(max_examples=300, deadline=None)
@given(rows=ROWS, seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 2**20), block=st.integers(1, 200))
def test_every_epoch_is_a_permutation(rows, seed, epoch, block):
    order = BlockOrder(rows, seed, epoch, block)
    n = sum(rows)
    taken = order.take(np.arange(n, dtype=np.int64))
    assert order.n == n
    assert sorted(taken.tolist()) == list(range(n))
    if n:
        assert [order.index(p) for p in range(0, n, max(1, n // 7))] == taken[:: max(1, n // 7)].tolist()


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, seed=st.integers(0, 2**64 - 1), block=st.integers(1, 200))
def test_blocks_hold_whole_shards_and_stay_inside_them(rows, seed, block):
    """Each block is a run of whole shards whose first row starts in one window of ``block``
    positions, and every position of a block maps into that block's shards only."""
    order = BlockOrder(rows, seed, 3, block)
    seen_shards: set[int] = set()
    for b in range(order.blocks):
        start, stop = order.block_bounds(b)
        shards = set(shard_of(rows, order.take(np.arange(start, stop, dtype=np.int64))).tolist())
        assert not shards & seen_shards, "a shard split across blocks"
        seen_shards |= shards
        assert sum(rows[s] for s in shards) == stop - start  # whole shards only
        if b + 1 < order.blocks:
            next_start = order.block_bounds(b + 1)[0]
            assert next_start // block > start // block  # the next block starts in a later window
    assert seen_shards == {s for s, r in enumerate(rows) if r}


def test_a_block_is_about_shuffle_block_rows():
    rows = np.full(1000, 10)
    order = BlockOrder(rows, seed=1, epoch=0, shuffle_block=256)
    lengths = [order.block_bounds(b)[1] - order.block_bounds(b)[0] for b in range(order.blocks)]
    assert all(256 - 10 < length <= 256 + 10 for length in lengths[:-1])
    assert order.blocks == pytest.approx(10_000 / 256, abs=2)


def test_shuffle_is_keyed_by_seed_and_epoch_and_mixes_inside_blocks():
    rows = [7] * 50
    base = BlockOrder(rows, 5, 0, 64).take(np.arange(350))
    assert not np.array_equal(base, BlockOrder(rows, 5, 1, 64).take(np.arange(350)))
    assert not np.array_equal(base, BlockOrder(rows, 6, 0, 64).take(np.arange(350)))
    assert np.array_equal(base, BlockOrder(np.array(rows), 5, 0, 64).take(np.arange(350)))
    start, stop = BlockOrder(rows, 5, 0, 64).block_bounds(0)
    block = base[start:stop]
    assert not np.array_equal(np.sort(block), block)  # rows are shuffled inside a block
    assert len(set(shard_of(rows, block[: stop - start]).tolist())) > 1  # and across its shards


def test_pinned_values():
    """The meaning of a saved ``blocks`` state: these values never change under VERSION 1."""
    order = BlockOrder([3, 5, 2, 4], seed=0, epoch=0, shuffle_block=6)
    assert order.take(np.arange(14)).tolist() == PINNED_SMALL
    big = BlockOrder(np.arange(1, 201) % 17, seed=1234, epoch=7, shuffle_block=100)
    assert big.take(np.array([0, 1, 2, 500, 1000, 1586])).tolist() == PINNED_BIG


PINNED_SMALL = [1, 7, 4, 2, 3, 5, 0, 6, 11, 13, 12, 10, 9, 8]
PINNED_BIG = [551, 931, 798, 157, 479, 463]


def test_memory_is_per_shard_not_per_sample():
    """10**12 samples in 10**4 shards: the table is O(S), a lookup O(log S), nothing is O(N)."""
    rows = np.full(10_000, 10**8, dtype=np.int64)  # 10**12 rows over 10**4 shards
    order = BlockOrder(rows, seed=3, epoch=2, shuffle_block=1 << 16)
    positions = np.array([0, 10**11, 10**12 - 1], dtype=np.int64)
    found = order.take(positions)
    assert ((0 <= found) & (found < 10**12)).all()
    assert order.index(10**12 - 1) == found[-1]


def test_positions_out_of_range_are_refused():
    with pytest.raises(IndexError, match="positions"):
        BlockOrder([2, 2], 0, 0, 4).take(np.array([4]))


def test_errors_name_the_field():
    with pytest.raises(ValueError, match="shuffle_block"):
        BlockOrder([1, 2], 0, 0, 0)
    with pytest.raises(ValueError, match="rows"):
        BlockOrder([1, -2], 0, 0, 4)


class FakeCorpus(torch.utils.data.Dataset):
    """What the loader looks for in a sharded corpus: ``shard_rows`` and a ``fingerprint``."""

    def __init__(self, rows, fingerprint="shards:abc"):
        self.shard_rows = np.asarray(rows, dtype=np.int64)
        self.fingerprint = fingerprint
        self.n = int(self.shard_rows.sum())

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        return index


def run_loader(loader, first_epoch, epochs):
    return run_epochs(loader, first_epoch, epochs, lambda batch: batch.tolist())


@pytest.mark.parametrize("world_size,rank", [(1, 0), (3, 2)])
def test_loader_defaults_to_blocks_and_honours_the_resume_contract(world_size, rank):
    rows = [5, 0, 9, 3, 8, 1, 6]
    component = Component(
        name=f"blocks W={world_size}",
        make=lambda: shufflepoint.DataLoader(FakeCorpus(rows), 4, seed=9, rank=rank, world_size=world_size,
                                             shuffle_block=10),
        run=run_loader, resume_epoch=lambda state: state["epoch"])
    assert assert_resume_contract(component, epochs=3) >= 6
    state = component.make().state_dict()
    assert state["order"] == "blocks" and state["dataset_fingerprint"] == "shards:abc" and state["shuffle_block"] == 10


def test_under_the_strided_deal_the_global_stream_does_not_depend_on_world_size_or_batch_size():
    rows = [5, 0, 9, 3, 8, 1, 6, 11, 2]
    n = sum(rows)
    expected = BlockOrder(rows, 21, 0, 12).take(np.arange(n)).tolist()
    for world_size, batch_size in [(1, 1), (2, 3), (3, 4), (4, 2)]:
        per_rank = [[i for batch in shufflepoint.DataLoader(FakeCorpus(rows), batch_size, seed=21, rank=r,
                                                             world_size=world_size, drop_last=True,
                                                             shuffle_block=12, deal="strided")
                     for i in batch.tolist()]
                    for r in range(world_size)]
        interleaved = [per_rank[p % world_size][p // world_size] for p in range(len(per_rank[0]) * world_size)]
        assert interleaved == expected[: len(interleaved)]


def test_a_changed_block_size_or_corpus_is_refused():
    state = shufflepoint.DataLoader(FakeCorpus([4, 4]), 2, seed=1, shuffle_block=4).state_dict()
    with pytest.raises(shufflepoint.StateError, match="'shuffle_block': found 4\n  expected: 8"):
        shufflepoint.DataLoader(FakeCorpus([4, 4]), 2, seed=1, shuffle_block=8).load_state_dict(state)
    with pytest.raises(shufflepoint.StateError, match="dataset_fingerprint"):
        shufflepoint.DataLoader(FakeCorpus([4, 4], "shards:def"), 2, seed=1, shuffle_block=4).load_state_dict(state)


def test_blocks_needs_a_sharded_corpus_and_shuffle_block_needs_blocks():
    with pytest.raises(ValueError, match="order: found 'blocks'"):
        shufflepoint.DataLoader(list(range(10)), 2, order="blocks")
    with pytest.raises(ValueError, match="shuffle_block"):
        shufflepoint.DataLoader(list(range(10)), 2, shuffle_block=4)
    loader = shufflepoint.DataLoader(FakeCorpus([3, 3]), 2, order="feistel")
    assert loader.state_dict()["order"] == "feistel"


# -- the blocks order laid along the stretches of the spans deal ------------------------------------


def test_the_stretch_order_worked_example():
    order = StretchBlockOrder([3, 5, 2, 4], seed=0, epoch=0, shuffle_block=4, stretches=2)
    taken = order.take(np.arange(14)).tolist()
    assert taken == [13, 5, 12, 11, 4, 3, 10, 8, 1, 0, 9, 2, 6, 7]
    assert sorted(taken[:7]) == [3, 4, 5, 10, 11, 12, 13] and sorted(taken[7:]) == [0, 1, 2, 6, 7, 8, 9]
    later = StretchBlockOrder([3, 5, 2, 4], seed=0, epoch=1, shuffle_block=4, stretches=2).take(np.arange(14))
    assert later.tolist() == [11, 12, 3, 13, 10, 4, 5, 9, 2, 1, 0, 8, 6, 7]


@settings(max_examples=300, deadline=None)
@given(rows=ROWS, seed=st.integers(0, 2**64 - 1), block=st.integers(1, 200), stretches=st.integers(1, 70),
       epochs=st.lists(st.integers(0, 2**20), min_size=2, max_size=3, unique=True))
def test_a_stretch_holds_the_same_rows_every_epoch_in_a_new_order(rows, seed, block, stretches, epochs):
    """Each epoch is a permutation; stretch r (the spans deal's [start_r, start_r + length_r)) maps to
    the same rows in every epoch; no block crosses a stretch edge; each block keeps to its window."""
    n = sum(rows)
    base, extra = divmod(n, stretches)
    edges = [r * base + min(r, extra) for r in range(stretches + 1)]
    per_epoch = []
    for epoch in epochs:
        order = StretchBlockOrder(rows, seed, epoch, block, stretches)
        taken = order.take(np.arange(n, dtype=np.int64))
        assert order.n == n and sorted(taken.tolist()) == list(range(n))
        per_epoch.append([sorted(taken[edges[r]:edges[r + 1]].tolist()) for r in range(stretches)])
        for b in range(order.blocks):
            start, stop = order.block_bounds(b)
            stretch = int(np.searchsorted(edges, start, side="right")) - 1
            assert stop <= edges[stretch + 1], "a block crosses a stretch edge"
    assert all(rows_of == per_epoch[0] for rows_of in per_epoch)


def test_a_stretch_reads_about_its_share_of_the_shards():
    """1,000 shards of 100 rows over 8 stretches: each stretch touches its 125 shards plus at most
    the one split at each of its edges."""
    rows = np.full(1000, 100)
    order = StretchBlockOrder(rows, seed=9, epoch=3, shuffle_block=1000, stretches=8)
    for r in range(8):
        shards = np.unique(order.take(np.arange(r * 12500, (r + 1) * 12500)) // 100)
        assert len(shards) <= 125 + 2
