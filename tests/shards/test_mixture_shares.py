"""A scheduled ``Mixture`` under ``spans`` keeps each source's share at every global batch through any sequence of
resizes (issue 43, item 0): the global batch changes as torchft's DYNAMIC mode changes it, with every failure, and
after a global batch the epoch's first world does not divide, the epoch is read interleaved
(``global_batch.InterleavedCut``). Ranks are simulated in one process (the arithmetic; the resumes in fresh
processes are in ``tests/distributed/test_mixture_resize.py``)."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_mixture import tagged
from test_mixture_locality import TaggedCorpus

import shufflepoint
from shufflepoint._core.schedule import Schedule
from shufflepoint._shards.corpora.mixture.mixture import Mixture

GLOBAL_BATCH = pytest.mark.filterwarnings("ignore:global batch. found:UserWarning")
pytestmark = pytest.mark.mixture  # ~1 min: make test-mixture
SHARE_SLACK = 3  # rows a source's count may be off its share at a global batch edge (measured at most 2.4)


def global_batches(make, legs, epochs, record=None):
    """Every global batch the ``make(rank, world, batch)`` loaders read, leg after leg ``(world, batch, steps)``, each
    leg loading the state the one before saved: (epoch, the rows of every rank, tail padding left out); ``record``:
    a list to which each step's batches, rank by rank and padding included, are appended."""
    found, state = [], None
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
                rows = []
                for rank, batch_rows in enumerate(batches):
                    rows += batch_rows[:max(real[rank], 0)]
                    real[rank] -= len(batch_rows)
                found.append((epoch, rows))
                if record is not None:
                    record.append([list(batch_rows) for batch_rows in batches])
                taken += 1
                if not last and taken == steps:
                    break
        state = loaders[0].state_dict()
        assert all(loader.state_dict() == state for loader in loaders)
    return found


def loaders_state(make, legs):
    """The state after ``legs`` (each leg's loaders loading the one before's)."""
    state = None
    for world, batch, steps in legs:
        loaders = [make(rank, world, batch) for rank in range(world)]
        iterators = []
        for loader in loaders:
            if state is not None:
                loader.load_state_dict(state)
            iterators.append(iter(loader))
        for _ in range(steps):
            for iterator in iterators:
                next(iterator)
        state = loaders[0].state_dict()
    return state


def exact_shares(schedule: Schedule, g: int) -> list[Fraction]:
    """Each source's exact share of the run's first g positions: its weight integrated over the phases."""
    found = [Fraction(0)] * schedule.sources
    for i, start in enumerate(schedule.starts):
        end = schedule.starts[i + 1] if i + 1 < len(schedule.starts) else None
        overlap = max(0, (g if end is None else min(g, end)) - start)
        found = [f + share * overlap for f, share in zip(found, schedule.shares[i], strict=True)]
    return found


def assert_shares_held(batches, mixture, grid, source_of):
    """At every global batch edge each source's count is within ``SHARE_SLACK`` rows of its share (the schedule
    the loader reads, on its grid), and at every epoch's end exactly the schedule's count."""
    schedule = mixture.schedule.on_grid(grid, mixture.samples_per_epoch)
    counts, g, worst = Counter(), 0, 0
    for number, (epoch, rows) in enumerate(batches):
        counts.update(source_of(row) for row in rows)
        g += len(rows)
        exact = exact_shares(schedule, g)
        worst = max(worst, max(abs(counts[s] - exact[s]) for s in range(schedule.sources)))
        ends = number + 1 == len(batches) or batches[number + 1][0] != epoch
        if ends and g == (epoch + 1) * mixture.samples_per_epoch:
            assert [counts[s] for s in range(schedule.sources)] == schedule.chained().counts(g)
    assert worst <= SHARE_SLACK, worst
    return worst


def test_the_issue_s_resize_2x2_to_1x3_keeps_the_anneal_in_every_global_batch():
    """4 ranks x 4 (2 nodes x 2), then 3 x 4: the global batch goes from 16 rows to 12, then 3 x 2 (6, which the
    first world of 4 does not divide): the code source's share (0.2, then 0.5 from row 960) holds within 2 rows at
    every global batch (order version 7's spread: 1.2-1.6 over seeds; version 6's shuffle: 2.4); re-dealt, it was
    149 rows off."""
    web, code = tagged("w", 4000), tagged("c", 1000)

    def make(rank, world, batch):
        mixture = Mixture([web, code], samples_per_epoch=2400, schedule=[(0, [0.8, 0.2]), (960, [0.5, 0.5])])
        return shufflepoint.DataLoader(mixture, batch, seed=7, rank=rank, world_size=world, collate_fn=list,
                                       shuffle_block=64)

    steps: list = []
    with pytest.warns(UserWarning, match="global batch. found"):
        batches = global_batches(make, [(4, 4, 20), (3, 4, 30), (3, 2, 40), (2, 3, None)], 2, steps)
    mixture = Mixture([web, code], samples_per_epoch=2400, schedule=[(0, [0.8, 0.2]), (960, [0.5, 0.5])])
    assert assert_shares_held(batches, mixture, 16, lambda row: int(row[0] == "c")) <= 2
    with pytest.warns(UserWarning, match="global batch. found"):  # which answers every step, before and after
        last = make(0, 2, 3)
        last.load_state_dict(loaders_state(make, [(4, 4, 20), (3, 4, 30), (3, 2, 40), (2, 3, 10)]))
    for step in (0, 19, 20, 49, 50, 89, 90, 99):
        assert [[mixture[i] for i in indices] for _, indices in sorted(last.which(step).items())] == steps[step]
    per_epoch = [Counter(), Counter()]
    for epoch, rows in batches:
        per_epoch[epoch].update(rows)
    whole = [Counter(), Counter()]
    for epoch, rows in global_batches(make, [(1, 16, None)], 2):
        whole[epoch].update(rows)
    assert per_epoch == whole  # each epoch's rows, as one rank reads them


@st.composite
def resized_schedules(draw):
    """A scheduled Mixture of 2-3 sources (sharded or plain) and 1-5 legs of (world, batch, steps)."""
    count = draw(st.integers(2, 3))
    sources = []
    for s in range(count):
        name = chr(97 + s)
        if draw(st.booleans()):
            sources.append(TaggedCorpus(name, draw(st.lists(st.integers(0, 9), min_size=1, max_size=8).filter(any))))
        else:
            sources.append(tagged(name, draw(st.integers(1, 40))))
    length = draw(st.integers(12, 80))
    gaps = draw(st.lists(st.integers(1, 80), min_size=0, max_size=2))
    starts = [0, *[sum(gaps[:i + 1]) for i in range(len(gaps))]]
    schedule = [(start, draw(st.lists(st.integers(0, 4), min_size=count, max_size=count).filter(any)))
                for start in starts]
    legs = [(draw(st.integers(1, 4)), draw(st.integers(1, 4)), draw(st.integers(1, 10)))
            for _ in range(draw(st.integers(1, 5)))]
    return sources, dict(samples_per_epoch=length, schedule=schedule), legs


@GLOBAL_BATCH
@settings(max_examples=60, deadline=None)
@given(run=resized_schedules(), seed=st.integers(0, 2**32))
def test_any_sequence_of_resizes_keeps_every_source_s_share_at_every_global_batch(run, seed):
    sources, options, legs = run
    try:
        Mixture(sources, **options)
    except ValueError:  # a source whose share rounds to 0
        return

    def make(rank, world, batch):
        return shufflepoint.DataLoader(Mixture(sources, **options), batch, seed=seed, rank=rank, world_size=world,
                                       collate_fn=list, shuffle_block=16)

    try:
        batches = global_batches(make, legs, 3)
    except ValueError as error:  # a shuffle_block too small for the weights
        assert "shuffle_block" in str(error)
        return
    names = {chr(97 + s): s for s in range(len(sources))}
    world, batch, _ = legs[0]
    assert_shares_held(batches, Mixture(sources, **options), world * batch, lambda row: names[row[0]])
    per_epoch, whole = [Counter() for _ in range(3)], [Counter() for _ in range(3)]
    for epoch, rows in batches:
        per_epoch[epoch].update(rows)
    for epoch, rows in global_batches(make, [(1, world * batch, None)], 3):
        whole[epoch].update(rows)
    assert per_epoch == whole
