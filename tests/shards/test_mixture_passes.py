"""A ``Mixture`` under ``spans`` keeps each source's passes whole through any resizes (issue 43, item 0): loaders
resized inside epochs and between them (another world size, another global batch) read, epoch by epoch, the rows
an uninterrupted run on one rank reads, and at every global batch's edge each source's rows were read k or k + 1
times (order version 7: ``mixture/pass_edges.py``).
Ranks are simulated in one process (the arithmetic; ``tests/distributed`` starts real ones)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_mixture import ids, tagged
from test_mixture_locality import TaggedCorpus

import shufflepoint
from shufflepoint._shards.corpora.mixture.mixture import Mixture
from shufflepoint._shards.corpora.packed.packed import Packed

GLOBAL_BATCH = pytest.mark.filterwarnings("ignore:global batch. found:UserWarning")  # another G: warned about


def read_with_resizes(make, legs, epochs, key=lambda row: row, sources=None, units=lambda row: (row,)):
    """Per epoch, the rows ``make(rank, world, batch)`` loaders read: leg after leg ``(world, batch, steps)``, each
    leg's loaders loading the state the one before saved (the same on every rank), the last leg reading to the end
    of ``epochs`` epochs; tail padding left out. With ``sources`` (name -> its rows), each source's passes are
    checked whole after every global batch (``assert_passes_whole``), counted in ``units(row)`` (a packed row's
    tokens)."""
    per_epoch = [Counter() for _ in range(epochs)]
    totals = Counter()
    state = None
    for number, (world, batch, steps) in enumerate(legs):
        loaders = [make(rank, world, batch) for rank in range(world)]
        for loader in loaders:
            if state is not None:
                loader.load_state_dict(state)
        taken, last = 0, number == len(legs) - 1
        while loaders[0].epoch < epochs and (last or taken < steps):
            epoch = loaders[0].epoch
            real = [loader.real_samples_left(rank) for rank, loader in enumerate(loaders)]
            for batches in zip(*[iter(loader) for loader in loaders], strict=True):
                for rank, rows in enumerate(batches):
                    per_epoch[epoch].update(key(row) for row in rows[:max(real[rank], 0)])
                    totals.update(unit for row in rows[:max(real[rank], 0)] for unit in units(row))
                    real[rank] -= len(rows)
                if sources is not None:
                    assert_passes_whole([totals], sources)
                taken += 1
                if not last and taken == steps:
                    break
        state = loaders[0].state_dict()
        assert all(loader.state_dict() == state for loader in loaders)
    return per_epoch


def assert_passes_whole(per_epoch, sources):
    """At every epoch's end each source's rows (``sources``: row -> (source, row of it) and each source's rows)
    were read k or k + 1 times."""
    totals = Counter()
    for rows in per_epoch:
        totals.update(rows)
        for name, every in sources.items():
            times = [totals[row] for row in every]
            assert max(times) - min(times) <= 1, (name, sorted(Counter(times).items()))


def test_the_measurement_of_issue_43_a_resize_to_three_ranks_keeps_a_weighted_source_s_passes():
    """A has 3,000 rows read 1,800 an epoch, B 500 rows and repeats; saved on 2 ranks a third into epoch 1,
    resumed on 3. Over epochs 0-2 every row of A is read once or twice (the uninterrupted run: 600 once, 2,400
    twice); order version 3 read 369 rows of A a third time while 967 had been read once."""
    a, b = tagged("a", 3000), tagged("b", 500)

    def make(rank, world, batch):
        mixture = Mixture([(a, 3), (b, 2)], samples_per_epoch=3000)
        return shufflepoint.DataLoader(mixture, batch, seed=5, rank=rank, world_size=world, collate_fn=list,
                                       shuffle_block=64)

    resized = read_with_resizes(make, [(2, 25, 30 + 20), (3, 25, None)], 3, sources={"a": a, "b": b})  # a third in
    whole = read_with_resizes(make, [(2, 25, None)], 3)
    assert resized == whole
    times = Counter(sum(resized, Counter())[row] for row in a)
    assert times == {1: 600, 2: 2400}
    assert_passes_whole(resized, {"a": a, "b": b})
    read_with_resizes(make, [(2, 25, 50), (3, 20, 30), (1, 7, None)], 3, sources={"a": a, "b": b})  # 50 -> 60 -> 7


@st.composite
def resized_runs(draw):
    """A weighted or scheduled Mixture of 2-3 sources (sharded or plain), and 1-4 legs of (world, batch, steps)."""
    count = draw(st.integers(2, 3))
    sources = []
    for s in range(count):
        name = chr(97 + s)
        if draw(st.booleans()):
            rows = draw(st.lists(st.integers(0, 9), min_size=1, max_size=8).filter(any))
            sources.append(TaggedCorpus(name, rows))
        else:
            sources.append(tagged(name, draw(st.integers(1, 30))))
    length = draw(st.integers(6, 40))
    if draw(st.booleans()):
        gaps = draw(st.lists(st.integers(1, 50), min_size=0, max_size=2))
        starts = [0, *[sum(gaps[:i + 1]) for i in range(len(gaps))]]
        schedule = [(start, draw(st.lists(st.integers(0, 4), min_size=count, max_size=count).filter(any)))
                    for start in starts]
        mixture = (sources, dict(samples_per_epoch=length, schedule=schedule))
    else:
        weights = draw(st.lists(st.integers(1, 4), min_size=count, max_size=count))
        mixture = (list(zip(sources, weights, strict=True)), dict(samples_per_epoch=length))
    legs = [(draw(st.integers(1, 4)), draw(st.integers(1, 3)), draw(st.integers(1, 12)))
            for _ in range(draw(st.integers(1, 4)))]
    return mixture, legs


@GLOBAL_BATCH
@settings(max_examples=40, deadline=None)
@given(run=resized_runs(), seed=st.integers(0, 2**32), block=st.integers(1, 12))
def test_any_resizes_read_each_epoch_s_rows_once_and_keep_every_source_s_passes_whole(run, seed, block):
    (sources, options), legs = run
    try:
        Mixture(sources, **options)
    except ValueError:  # a source whose share rounds to 0
        return

    def make(rank, world, batch):
        return shufflepoint.DataLoader(Mixture(sources, **options), batch, seed=seed, rank=rank, world_size=world,
                                       collate_fn=list, shuffle_block=max(block, len(sources)))

    epochs = 3
    datasets = [source[0] if isinstance(source, tuple) else source for source in sources]
    rows = {s: [dataset[i] for i in range(len(dataset))] for s, dataset in enumerate(datasets)}
    try:
        resized = read_with_resizes(make, legs, epochs, sources=rows)  # whole passes at every global batch edge
    except ValueError as error:  # a shuffle_block too small for the weights
        assert "shuffle_block" in str(error)
        return
    world, batch, _ = legs[0]  # one rank at the run's first global batch (a schedule follows it): the same rows
    assert resized == read_with_resizes(make, [(1, world * batch, None)], epochs)


@GLOBAL_BATCH
@pytest.mark.parametrize("legs", [[(2, 2, 4), (4, 2, None)], [(2, 3, 5), (3, 1, 7), (1, 4, None)],
                                  [(3, 2, 9), (2, 2, None)]])
def test_a_scheduled_mixture_of_packed_sources_keeps_its_passes_and_rows_through_resizes(legs):
    """Two Packed sources annealed (3:1, then 0:1 from row 30): resized inside and between epochs, each epoch's
    rows are those one rank reads, and each source's packed rows are read pass after pass (a row of pass p + 1
    only once every row of pass p was read, at every epoch's end)."""
    documents = [{"input_ids": [1000 * d + i for i in range(2 + d % 5)]} for d in range(30)]
    curated = [{"input_ids": [t + 500 for t in d["input_ids"]]} for d in documents]

    def make(rank, world, batch):
        sources = [Packed(corpus, 5, progress=False) for corpus in (documents, curated)]
        mixture = Mixture(sources, samples_per_epoch=48, schedule=[(0, [3, 1]), (30 * 5, [0, 1])])
        return shufflepoint.DataLoader(mixture, batch, seed=3, rank=rank, world_size=world, shuffle_block=4,
                                       collate_fn=lambda rows: [ids(row) for row in rows])

    tokens = {"documents": [t for d in documents for t in d["input_ids"]],
              "curated": [t for d in curated for t in d["input_ids"]]}
    resized = read_with_resizes(make, legs, 3, sources=tokens, units=lambda row: row)  # each pass's tokens, whole
    assert resized == read_with_resizes(make, [(1, legs[0][0] * legs[0][1], None)], 3)
    assert all(sum(epoch.values()) == 48 for epoch in resized)
