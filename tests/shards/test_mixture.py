"""``Mixture``: exact shares per epoch, each source's passes complete, seekable across epochs, elastic; and
of ``Packed`` sources, each pass of a source its own packed epoch."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_blocks import FakeCorpus

import shufflepoint
from resume_contract import Component, assert_resume_contract, run_epochs, served_across_a_resize
from shufflepoint._order.blocks import _sub_seed
from shufflepoint._shards.corpora.mixture.mixture import Mixture
from shufflepoint._shards.corpora.mixture.order import _SOURCE_TAG
from shufflepoint._shards.corpora.packed.packed import Packed


def tagged(name, n):
    return [f"{name}{i}" for i in range(n)]


MIXES = st.lists(st.tuples(st.integers(1, 30), st.integers(1, 5)), min_size=1, max_size=4)


def make_mixture(mix, length):
    return Mixture([(tagged(chr(97 + s), n), w) for s, (n, w) in enumerate(mix)], samples_per_epoch=length)


@settings(max_examples=200, deadline=None)
@given(mix=MIXES, length=st.integers(1, 120), seed=st.integers(0, 2**64 - 1), epochs=st.integers(1, 4))
def test_shares_are_exact_and_every_pass_of_a_source_is_complete(mix, length, seed, epochs):
    try:
        mixture = make_mixture(mix, length)
        orders = [mixture.epoch_order(seed, e, 16) for e in range(epochs)]
    except ValueError as error:  # a source that gets 0 samples, or windows too small for the weights
        assert "weights" in str(error) or "shuffle_block" in str(error)
        return
    per_source: dict[int, list[int]] = {s: [] for s in range(len(mix))}
    for order in orders:
        taken = order.take(np.arange(length))
        sources = [mixture.source_of(int(i)) for i in taken]
        assert Counter(s for s, _ in sources) == {s: c for s, c in enumerate(mixture.counts) if c}
        for s, row in sources:
            per_source[s].append(row)
    for s, rows in per_source.items():
        n = mix[s][0]
        full = len(rows) // n
        # The source's stream, read in order, is whole passes of its rows: every full pass a permutation.
        counted = Counter(rows)
        assert all(full <= counted[r] <= full + 1 for r in range(n))


def test_a_source_stream_continues_across_epochs_in_order():
    """The big source is read sequentially across windows and epochs: its rows come in stream order,
    shuffled only inside a window."""
    mixture = Mixture([(tagged("a", 1000), 1), (tagged("b", 50), 1)], samples_per_epoch=400)
    assert mixture.counts == [200, 200]
    seen_a: list[int] = []
    for epoch in range(3):
        taken = mixture.epoch_order(7, epoch, 40).take(np.arange(400))
        seen_a += [row for s, row in map(mixture.source_of, taken.tolist()) if s == 0]
    assert len(seen_a) == len(set(seen_a)) == 600  # 600 of the 1000 rows of a, none repeated yet
    b_rows = []
    for epoch in range(3):
        taken = mixture.epoch_order(7, epoch, 40).take(np.arange(400))
        b_rows += [row for s, row in map(mixture.source_of, taken.tolist()) if s == 1]
    assert Counter(Counter(b_rows).values()) == {12: 50}  # b: 12 complete passes over 3 epochs


def test_each_window_holds_its_share():
    mixture = Mixture([(tagged("a", 500), 3), (tagged("b", 500), 1)], samples_per_epoch=1000)
    taken = mixture.epoch_order(3, 0, 100).take(np.arange(1000))
    for k in range(10):
        window = [mixture.source_of(int(i))[0] for i in taken[k * 100:(k + 1) * 100]]
        assert window.count(1) == 25


def test_sharded_sources_keep_their_locality():
    shards = FakeCorpus([100] * 50)
    mixture = Mixture([(shards, 1), (tagged("b", 10), 1)], samples_per_epoch=2000)
    taken = mixture.epoch_order(1, 0, 200).take(np.arange(2000))
    first_window = [row for s, row in map(mixture.source_of, taken[:200].tolist()) if s == 0]
    assert len({row // 100 for row in first_window}) <= 3  # ~100 rows of a 200-row block: 2-3 shards


def mixture_component(rank, world_size, **kwargs):
    def make():
        mixture = Mixture([(tagged("a", 17), 2), (tagged("b", 5), 1)], samples_per_epoch=12)
        return shufflepoint.DataLoader(mixture, 2, seed=4, rank=rank, world_size=world_size,
                                       collate_fn=list, shuffle_block=5, **kwargs)

    return Component(name=f"mixture W={world_size}", make=make, run=run_epochs, resume_epoch=lambda s: s["epoch"])


@pytest.mark.parametrize("world_size,rank", [(1, 0), (2, 1), (3, 0)])
def test_loader_over_a_mixture_honours_the_resume_contract(world_size, rank):
    assert assert_resume_contract(mixture_component(rank, world_size), epochs=4) >= 8


def test_mixture_state_names_its_order_and_refuses_a_changed_mixture():
    loader = mixture_component(0, 1).make()
    state = loader.state_dict()
    assert state["order"] == "mixture" and state["dataset_fingerprint"].startswith("mixture:")
    other = shufflepoint.DataLoader(Mixture([(tagged("a", 17), 1), (tagged("b", 5), 1)], samples_per_epoch=12),
                                    2, seed=4, collate_fn=list, shuffle_block=5)
    with pytest.raises(shufflepoint.StateError, match="dataset_fingerprint"):
        other.load_state_dict(state)


def test_elastic_resume_across_an_epoch_boundary_sees_each_slot_once():
    """2 ranks stop in epoch 1; 3 ranks finish it: epoch 1's slots are each served once."""
    def loader(rank, world_size):
        mixture = Mixture([(tagged("a", 23), 3), (tagged("b", 7), 1)], samples_per_epoch=24)
        return shufflepoint.DataLoader(mixture, 2, seed=8, rank=rank, world_size=world_size,
                                       collate_fn=list, shuffle_block=8)

    expected: Counter[str] = Counter()  # epoch 1 read whole on 2 ranks (under spans the epoch's first world lays it)
    for reference in [loader(r, 2) for r in range(2)]:
        reference.set_epoch(1)
        expected.update(x for batch in reference for x in batch)
    first = [loader(r, 2) for r in range(2)]
    seen: Counter[str] = Counter()
    for ld in first:
        ld.set_epoch(1)
        iterator = iter(ld)
        for _ in range(3):
            seen.update(next(iterator))
    state = first[0].state_dict()
    assert state == first[1].state_dict()
    for r in range(3):
        resumed = loader(r, 3)
        resumed.load_state_dict(state)
        assert resumed.epoch == 1
        for batch in resumed:
            seen.update(batch)
    assert seen == expected


def test_bad_input_names_the_field():
    with pytest.raises(TypeError, match="sources"):
        Mixture([])
    with pytest.raises(ValueError, match=r"sources\[1\] weight"):
        Mixture([(tagged("a", 3), 1), (tagged("b", 3), 0)])
    with pytest.raises(ValueError, match=r"sources\[0\]: found an empty dataset\n  expected: at least one sample"):
        Mixture([([], 1)])
    with pytest.raises(ValueError, match="weights: found source 1 gets 0 of the .* samples per epoch\n  expected: "):
        Mixture([(tagged("a", 3), 1000), (tagged("b", 3), 1)], samples_per_epoch=10)
    with pytest.raises(ValueError, match="samples_per_epoch"):
        Mixture([(tagged("a", 3), 1)], samples_per_epoch=0)
    mixture = Mixture([(tagged("a", 100), 1), (tagged("b", 100), 1), (tagged("c", 100), 1)])
    with pytest.raises(ValueError, match="shuffle_block: found 2"):  # the fixed order: each window holds every source
        shufflepoint.ResumableSampler(mixture, num_replicas=1, rank=0, shuffle_block=2)
    shufflepoint.DataLoader(mixture, 2, shuffle_block=2)  # a loader's windows are its global batches (fixed.py)
    with pytest.raises(ValueError, match="shuffle: found False"):
        shufflepoint.DataLoader(mixture, 2, shuffle=False)
    with pytest.raises(ValueError, match="order: found 'feistel'"):
        shufflepoint.DataLoader(mixture, 2, order="feistel")
    with pytest.raises(IndexError, match="Mixture index"):
        mixture[300]


# -- Packed sources: weights in rows are weights in tokens ----------------------------------------

def packed(lengths, seq_len=4, tag=0, **kwargs):
    """A Packed corpus whose documents hold unique tokens: tag*10**6 + d*1000 + i."""
    docs = [{"input_ids": list(range(tag * 10**6 + d * 1000, tag * 10**6 + d * 1000 + n))}
            for d, n in enumerate(lengths)]
    return Packed(docs, seq_len, progress=False, **kwargs)


def read_whole(make, world, batch_size, epoch):
    """Every real sample ``world`` loaders of ``batch_size`` (``make(rank, world, batch)``) serve in ``epoch``:
    under ``spans`` the epoch's first world lays a Mixture's order, so the reference of a resize is that world's."""
    found: Counter = Counter()
    for rank in range(world):
        loader = make(rank, world, batch_size)
        loader.set_epoch(epoch)
        real = loader.real_samples_left(rank)
        found.update([row for batch in loader for row in batch][:real])
    return found


def ids(row):
    return tuple(row["input_ids"].tolist())


SOURCES = st.lists(st.tuples(st.lists(st.integers(0, 30), min_size=1, max_size=8), st.integers(1, 4)),
                   min_size=1, max_size=3)


@settings(max_examples=40, deadline=None)
@given(sources=SOURCES, seq_len=st.integers(1, 8), length=st.integers(1, 40), seed=st.integers(0, 2**64 - 1),
       epochs=st.integers(1, 3), block=st.integers(1, 12))
def test_packed_sources_serve_their_own_packed_epochs_in_stream_order(sources, seq_len, length, seed, epochs,
                                                                       block):
    if any(sum(lengths) < seq_len for lengths, _ in sources):
        return  # a source without one full row: Packed refuses it (tested in test_packed.py)
    try:
        mixture = Mixture([(packed(lengths, seq_len, s), w) for s, (lengths, w) in enumerate(sources)],
                          samples_per_epoch=length)
        orders = [mixture.epoch_order(seed, e, block) for e in range(epochs)]
    except ValueError as error:  # a source that gets 0 rows, or windows too small for the weights
        assert "weights" in str(error) or "shuffle_block" in str(error)
        return
    served = [int(i) for order in orders for i in order.take(np.arange(length))]
    by_source: dict[int, list[int]] = {s: [] for s in range(len(sources))}
    for index in served:
        source, within = mixture.source_of(index)
        by_source[source].append(within)
    rows = mixture.__getitems__(served)
    for s, within in by_source.items():
        # source s's stream positions 0 .. epochs*count-1, each once: pass p, row r is its index p*len + r
        assert sorted(within) == list(range(epochs * mixture.counts[s]))
        reference = packed(sources[s][0], seq_len, s)  # the same corpus, bound as the mixture binds it
        reference.epoch_order(_sub_seed(seed, _SOURCE_TAG, s), 0, block)
        expected = reference.__getitems__(within)
        got = [row for index, row in zip(served, rows, strict=True) if mixture.source_of(index)[0] == s]
        assert [ids(row) for row in got] == [ids(row) for row in expected]
        n = len(reference)
        for p in range(len(within) // n):  # a complete pass: every token of that packed epoch once
            tokens = [t for index in range(p * n, (p + 1) * n) for t in ids(reference[index])]
            assert len(tokens) == len(set(tokens)) == n * seq_len


def packed_mixture():
    return Mixture([(packed([0, 7, 3, 25, 1, 12, 9], 5, 0, eos=7), 2), (packed([4, 30, 2, 6, 11], 5, 1), 1)],
                   samples_per_epoch=11)


def packed_mixture_component(rank, world_size, batch_size=2):
    def make():
        return shufflepoint.DataLoader(packed_mixture(), batch_size, seed=4, rank=rank, world_size=world_size,
                                       collate_fn=lambda batch: [ids(row) for row in batch], shuffle_block=3)

    return Component(name=f"packed mixture W={world_size}", make=make, run=run_epochs,
                     resume_epoch=lambda s: s["epoch"])


@pytest.mark.parametrize("world_size,rank", [(1, 0), (2, 1), (3, 2)])
def test_a_mixture_of_packed_sources_honours_the_resume_contract(world_size, rank):
    assert assert_resume_contract(packed_mixture_component(rank, world_size), epochs=3) >= 6


@pytest.mark.parametrize("first,then", [((2, 2), (3, 1)), ((3, 1), (2, 2))])
def test_a_mixture_of_packed_sources_resumed_elastically_serves_each_row_once(first, then):
    make = lambda r, w, b: packed_mixture_component(r, w, b).make()  # noqa: E731
    expected = read_whole(make, *first, epoch=1)
    assert sum(expected.values()) == 11
    seen = served_across_a_resize(make, first, then, steps=1)
    assert seen == expected


def test_workers_serve_the_same_packed_mixture_rows():
    def rows(workers):
        loader = shufflepoint.DataLoader(packed_mixture(), 3, seed=2, shuffle_block=3, num_workers=workers,
                                         collate_fn=lambda batch: [ids(row) for row in batch])
        return [row for batch in loader for row in batch]

    assert rows(2) == rows(0) and len(rows(0)) == 11


def test_a_changed_packed_source_is_refused_naming_the_mixture():
    state = packed_mixture_component(0, 1).make().state_dict()
    changed = Mixture([(packed([0, 7, 3, 25, 1, 12, 9], 5, 0, eos=8), 2), (packed([4, 30, 2, 6, 11], 5, 1), 1)],
                      samples_per_epoch=11)
    with pytest.raises(shufflepoint.StateError, match=r"'dataset_fingerprint': found 'mixture:\w+'\n  expected: "
                                                 r"'mixture:\w+'\n  why: the mixture changed"):
        shufflepoint.DataLoader(changed, 2, seed=4, shuffle_block=3).load_state_dict(state)


def test_bad_packed_sources_name_the_field():
    with pytest.raises(ValueError, match=r"seq_len: found sources\[0\] 4, sources\[1\] 8\n"
                                         r"  expected: the same seq_len for every "
                                         r"Packed source"):
        Mixture([(packed([9]), 1), (packed([9], 8), 1)])
    with pytest.raises(TypeError, match=r"sources: found \[1\] Packed, \[0\] not\n  expected: every source Packed"):
        Mixture([(tagged("a", 3), 1), (packed([9]), 1)])
    same = packed([9])
    with pytest.raises(ValueError, match=r"sources\[1\]: found the same Packed as sources\[0\]\n"):
        Mixture([(same, 1), (same, 2)])
    with pytest.raises(TypeError, match=r"sources\[0\]: found a Mixture with its own 'mixture' order\n.*\n"
                                        r"  why: mixing a dataset with its own order is not built"):
        Mixture([(Mixture([(tagged("a", 3), 1)]), 1)])
    bound = packed([9])
    shufflepoint.DataLoader(bound, 1, seed=1, shuffle_block=2)
    # already bound by another loader
    with pytest.raises(ValueError, match=r"found \(\d+, \d+\)\n  expected: \(\d+, \d+\), what this Packed serves"):
        shufflepoint.DataLoader(Mixture([(bound, 1)]), 1, seed=1, shuffle_block=2)


def test_a_packed_mixture_announces_each_source_s_documents_before_reading_them():
    from test_packed import ReadAhead

    corpora = [ReadAhead([0, 7, 3, 25, 1, 12, 9]), ReadAhead([4, 30, 2, 6, 11])]
    mixture = Mixture([(Packed(corpus, 5, progress=False), w) for corpus, w in zip(corpora, (2, 1), strict=True)])
    for corpus in corpora:
        corpus.read.clear()  # counting the tokens read every document once
    loader = shufflepoint.DataLoader(mixture, 2, seed=3, shuffle_block=3)
    for _ in loader:
        assert all(set(corpus.read) <= set(corpus.announced) for corpus in corpora)
    assert all(corpus.read and set(corpus.read) == set(corpus.announced) for corpus in corpora)


@settings(max_examples=25, deadline=None)
@given(sources=st.lists(st.tuples(st.lists(st.integers(0, 25), min_size=1, max_size=6), st.integers(1, 3)),
                        min_size=1, max_size=3),
       length=st.integers(4, 24), seed=st.integers(0, 2**64 - 1),
       worlds=st.tuples(st.integers(1, 3), st.integers(1, 3)), batches=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       taken=st.integers(1, 3))  # stopped inside the epoch: one that has not begun is laid by the world reading it
def test_a_packed_mixture_resumes_exactly_or_each_row_once(sources, length, seed, worlds, batches, taken):
    """Epoch 1 stopped after `taken` batches per rank at worlds[0] x batches[0]; resumed at the same
    shape, every rank's rest is the uninterrupted rest; at worlds[1] x batches[1], each row once."""
    if any(sum(lengths) < 3 for lengths, _ in sources):
        return

    def loader(rank, world, batch_size):
        mixture = Mixture([(packed(lengths, 3, s), w) for s, (lengths, w) in enumerate(sources)],
                          samples_per_epoch=length)
        return shufflepoint.DataLoader(mixture, batch_size, seed=seed, rank=rank, world_size=world, shuffle_block=8,
                                       collate_fn=lambda batch: [ids(row) for row in batch])

    try:
        loader(0, 1, 1)
    except ValueError as error:
        assert "weights" in str(error) or "shuffle_block" in str(error)
        return
    (world, batch_size), (new_world, new_batch) = zip(worlds, batches, strict=True)
    expected = read_whole(loader, world, batch_size, epoch=1)
    first = [loader(r, world, batch_size) for r in range(world)]
    seen: Counter[tuple[int, ...]] = Counter()
    rests, states = [], []
    for r, ld in enumerate(first):
        ld.set_epoch(1)
        real, iterator = ld.real_samples_left(r), iter(ld)
        before = [row for _ in range(min(taken, len(ld))) for row in next(iterator)]
        seen.update(before[:real])  # not the tail padding
        states.append(ld.state_dict())
        rests.append([row for batch in iterator for row in batch])
    state = states[0]
    assert all(found == state for found in states)
    for r in range(world):  # the same shape: exact
        again = loader(r, world, batch_size)
        again.load_state_dict(state)
        assert [row for batch in again for row in batch] == rests[r]
    for r in range(new_world):  # another shape: each row of the epoch once
        resumed = loader(r, new_world, new_batch)
        resumed.load_state_dict(state)
        real = resumed.real_samples_left(r)
        seen.update([row for batch in resumed for row in batch][:real])
    assert seen == expected
