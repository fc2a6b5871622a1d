"""A ``Mixture`` built without a schedule, read by a loader as the schedule of its counts (``mixture/fixed.py``).

Proven over random weights, epoch lengths, world sizes, batch sizes and both deals: every epoch still holds exactly
``counts`` of each source (the chained floors and the largest remainders of ``counts / samples_per_epoch`` reach
``e * counts`` at every epoch's end; ``max_repeats`` and ``Packed`` sources included), and ``set_weights`` works on
it: from the next global batch on the run follows the new weights, exactly as a Mixture built with
``schedule=[(0, counts), (at, weights)]`` (under ``strided`` the very rows; under ``spans`` the same source at every
place), and a fresh loader resumed from the state reads on exactly."""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_mixture_lays import read

import shufflepoint
from shufflepoint import Packed
from shufflepoint._core.schedule import of_counts

SOURCES = [list(range(0, 50)), list(range(100, 120)), list(range(200, 230))]


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(1, 10**15), min_size=1, max_size=5), epochs=st.integers(0, 7),
       grid=st.integers(1, 10**6))
def test_the_schedule_of_the_counts_reaches_e_times_counts_at_every_epoch_end(counts, epochs, grid):
    length = sum(counts)
    schedule = of_counts(counts)
    expected = [epochs * c for c in counts]
    assert schedule.counts(epochs * length) == expected
    assert schedule.on_grid(grid, length).counts(epochs * length) == expected  # largest remainders on a grid
    assert schedule.chained().counts(epochs * length) == expected
    assert schedule.counts_many([epochs * length]).tolist() == [expected]


def loaders(mixture, world, batch, deal, state=None, schedule=None):
    found = []
    for rank in range(world):
        dataset = mixture if schedule is None else shufflepoint.Mixture(SOURCES, samples_per_epoch=len(mixture),
                                                                        schedule=schedule)
        loader = shufflepoint.DataLoader(dataset, batch, seed=3, shuffle_block=8, collate_fn=list, world_size=world,
                                         rank=rank, deal=deal, verify_ranks=False)
        if state is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                loader.load_state_dict(state)
        found.append(loader)
    return found


def sources_per_epoch(ranks, epochs):
    """Each epoch's rows of each source, over every rank (from ``which``: a Packed row's source too)."""
    mixture, found = ranks[0].dataset, []
    for epoch in range(epochs):
        for loader in ranks:
            loader.set_epoch(epoch)
        steps = [list(loader) for loader in ranks]
        first = ranks[0].step - len(steps[0])
        seen = Counter(mixture.source_of(index)[0] for step in range(len(steps[0]))
                       for indices in ranks[0].which(first + step).values() for index in indices)
        found.append([seen[s] for s in range(len(mixture.sources))])
    return found


@pytest.mark.mixture
@settings(max_examples=15, deadline=None)
@given(weights=st.lists(st.integers(1, 6), min_size=2, max_size=3), world=st.integers(1, 3), batch=st.integers(1, 4),
       steps=st.integers(2, 6), deal=st.sampled_from(["strided", "spans"]), cap=st.sampled_from([None, 3.0]))
def test_every_epoch_holds_exactly_the_counts(weights, world, batch, steps, deal, cap):
    length = world * batch * steps  # whole global batches: no tail padding to count
    try:
        mixture = shufflepoint.Mixture(list(zip(SOURCES, weights, strict=False)), samples_per_epoch=length,
                                       max_repeats=None if cap is None else [cap] * len(weights), spill=True)
    except ValueError:
        assume(False)
    ranks = loaders(mixture, world, batch, deal)
    assert ranks[0].state_dict()["order_version"] == (7 if deal == "spans" else 2)
    assert sources_per_epoch(ranks, 3) == [mixture.counts] * 3


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_packed_sources_hold_their_counts_every_epoch(deal):
    docs = [[{"input_ids": list(range(t * 10**6 + d * 1000, t * 10**6 + d * 1000 + 5 + d % 7))} for d in range(30)]
            for t in range(2)]
    mixture = shufflepoint.Mixture([(Packed(docs[0], 4, progress=False), 3), (Packed(docs[1], 4, progress=False), 1)],
                                   samples_per_epoch=48)
    ranks = [shufflepoint.DataLoader(mixture, 4, seed=2, collate_fn=list, world_size=2, rank=rank, deal=deal,
                                     verify_ranks=False) for rank in range(2)]
    assert sources_per_epoch(ranks, 3) == [mixture.counts] * 3 and mixture.counts == [36, 12]


def by_source(steps):
    return [[[x // 100 for x in batch] for batch in step] for step in steps]


@pytest.mark.mixture
@settings(max_examples=15, deadline=None)
@given(weights=st.lists(st.integers(1, 6), min_size=3, max_size=3),
       new=st.lists(st.integers(0, 6), min_size=3, max_size=3).filter(any), world=st.integers(1, 3),
       at=st.integers(1, 15), stop=st.integers(1, 20), deal=st.sampled_from(["strided", "spans"]))
def test_set_weights_follows_the_new_weights_from_the_next_global_batch_and_resumes_exactly(weights, new, world, at,
                                                                                           stop, deal):
    batch, length = 4, 48
    mixture = shufflepoint.Mixture(list(zip(SOURCES, weights, strict=True)), samples_per_epoch=length)
    counts = mixture.counts
    ranks = loaders(mixture, world, batch, deal)
    whole = read(ranks, 30, {at: new})
    phases = ranks[0].state_dict()["phases"]
    assert [p[0] for p in phases] == [0, at * world * batch] and len(phases[1]) == 3
    assert all([mixture[i] for i in ranks[r].which(step)[r]] == whole[step][r]
               for step in range(30) for r in range(world))  # which answers steps before and after the change
    built = read(loaders(mixture, world, batch, deal, schedule=[(0, counts), (at * world * batch, new)]), 30, {})
    assert (built if deal == "strided" else by_source(built)) == (whole if deal == "strided" else by_source(whole))
    killed = loaders(shufflepoint.Mixture(list(zip(SOURCES, weights, strict=True)), samples_per_epoch=length), world,
                     batch, deal)
    head = read(killed, stop, {at: new})
    resumed = loaders(shufflepoint.Mixture(list(zip(SOURCES, weights, strict=True)), samples_per_epoch=length),
                      world, batch, deal, state=killed[0].state_dict())
    tail = read(resumed, 30 - stop, {at: new} if at >= stop else {})  # killed before the change, or after it
    assert head + tail == whole


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_a_source_weighted_alone_is_all_the_next_global_batches_hold(deal):
    mixture = shufflepoint.Mixture([(SOURCES[0], 1), (SOURCES[1], 1), (SOURCES[2], 1)], samples_per_epoch=48)
    got = read(loaders(mixture, 2, 4, deal), 6, {2: [0, 1, 0]})
    assert all(100 <= x < 200 for step in got[2:] for batch in step for x in batch)
    assert any(x < 100 or x >= 200 for step in got[:2] for batch in step for x in batch)


def test_a_sampler_reads_the_fixed_order_and_a_change_it_cannot_follow_is_refused():
    mixture = shufflepoint.Mixture([(SOURCES[0], 3), (SOURCES[1], 1)], samples_per_epoch=40)
    sampler = shufflepoint.ResumableSampler(mixture, num_replicas=1, rank=0, shuffle_block=8)
    assert sampler.state_dict()["order_version"] == 5 and sampler.state_dict()["grid"] is None  # spans: laid, no grid
    assert Counter(mixture.source_of(i)[0] for i in sampler) == Counter({0: 30, 1: 10})
    mixture.set_weights([1, 1], at=8)
    with pytest.raises(ValueError, match="set_weights: found weights changed on a Mixture read in its fixed order"):
        shufflepoint.ResumableSampler(mixture, num_replicas=1, rank=0, shuffle_block=8)


def test_a_resize_to_a_global_batch_the_first_world_does_not_divide_interleaves_and_keeps_the_shares():
    """Issue 43: 4 x 3 (G 12) resumed on 3 x 2 (G 6; 4 does not divide it) goes on interleaved (``[[4, taken], [0,
    handed]]``), not re-dealt: every row once in the epoch, each source within 3 rows of its share at every global
    batch (counts 24, 8, 16 of 48). Before 0.6 a Mixture without a schedule was re-dealt here (``[[4, 12], [3,
    ...]]``), its shares off by up to a window."""
    mixture = shufflepoint.Mixture([(SOURCES[0], 3), (SOURCES[1], 1), (SOURCES[2], 2)], samples_per_epoch=48)
    first = loaders(mixture, 4, 3, "spans")
    seen = [x for loader in first for x in next(iter(loader))]
    resumed = loaders(mixture, 3, 2, "spans", state=first[0].state_dict())
    for step in read(resumed, 6, {}):
        seen += [x for batch in step for x in batch]
        counts = Counter(x // 100 for x in seen)
        assert all(abs(counts[s] - len(seen) * share) <= 3 for s, share in enumerate([1 / 2, 1 / 6, 1 / 3])), counts
    assert resumed[0].state_dict()["segments"] == [[4, 3], [0, 36]]
    assert len(seen) == len(set(seen)) == 48 and Counter(x // 100 for x in seen) == Counter({0: 24, 1: 8, 2: 16})
