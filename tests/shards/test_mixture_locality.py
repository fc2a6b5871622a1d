"""A ``Mixture`` under ``spans`` keeps each node's share of every source (``mixture_stretches.py``): a part draws
a source only from its own stretch of it, in every epoch, scheduled or not, while the counts and a schedule's
phases stay those of the whole epoch (any world, resizes, ramps)."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_blocks import FakeCorpus
from test_mixture import read_whole, tagged
from test_mixture_schedule import schedules

import shufflepoint
from resume_contract import served_across_a_resize
from shufflepoint._shards.mixture import Mixture
from shufflepoint._shards.mixture_order import MixtureOrder
from shufflepoint._shards.mixture_stretches import stretches


@st.composite
def mixtures(draw, scheduled):
    """2-3 sources, each a sharded corpus (1-12 shards of 0-9 rows, at least one row) or a plain list."""
    count = draw(st.integers(2, 3))
    sources = []
    for s in range(count):
        if draw(st.booleans()):
            rows = draw(st.lists(st.integers(0, 9), min_size=1, max_size=12).filter(any))
            sources.append(FakeCorpus(rows, fingerprint=f"shards:{s}"))
        else:
            sources.append(list(range(draw(st.integers(1, 40)))))
    length = draw(st.integers(4, 60))
    if scheduled:
        return Mixture(sources, samples_per_epoch=length, schedule=draw(schedules(count)))
    weights = draw(st.lists(st.integers(1, 5), min_size=count, max_size=count))
    if draw(st.booleans()):  # weights = rows: each source read once an epoch
        weights, length = [len(source) for source in sources], sum(len(source) for source in sources)
    try:
        return Mixture(list(zip(sources, weights, strict=True)), samples_per_epoch=length)
    except ValueError:  # a source whose share rounds to 0
        assume(False)


class TaggedCorpus(FakeCorpus):
    def __init__(self, name, rows):
        super().__init__(rows, fingerprint=f"shards:{name}")
        self.name = name

    def __getitem__(self, index):
        return f"{self.name}{index}"


def shard_of(dataset, row):
    return int(np.searchsorted(np.cumsum(dataset.shard_rows), row, side="right"))


def per_part(mixture, seed, block, parts, epochs, grid=None):
    """{(part, source): Counter of source rows} read by each part over ``epochs`` epochs, and per epoch and part
    the sources of its positions in order."""
    found: dict[tuple[int, int], Counter[int]] = {}
    sources = []
    starts, lengths = stretches(mixture.samples_per_epoch, parts)
    for epoch in range(epochs):
        order = mixture.epoch_order(seed, epoch, block, grid=grid, stretches=parts)
        taken = order.take(np.arange(mixture.samples_per_epoch))
        located = [mixture.source_of(int(i)) for i in taken]
        sources.append([[located[p][0] for p in range(int(a), int(a + n))] for a, n in zip(starts, lengths,
                                                                                            strict=True)])
        for part, (a, n) in enumerate(zip(starts, lengths, strict=True)):
            for s, row in located[int(a):int(a + n)]:
                found.setdefault((part, s), Counter())[row % mixture.lengths[s]] += 1
    return found, sources


@settings(max_examples=60, deadline=None)
@given(data=st.data(), scheduled=st.booleans(), parts=st.integers(1, 6), seed=st.integers(0, 2**64 - 1),
       block=st.integers(1, 30), epochs=st.integers(1, 3))
def test_each_part_reads_only_its_own_stretch_of_every_source_in_every_epoch(data, scheduled, parts, seed, block,
                                                                              epochs):
    """No two parts ever read the same row of a source (one with at least a row per part), and over a sharded
    source the parts together touch at most its shards plus one per stretch edge: the shards a node fetches are
    its share, the same in every epoch."""
    mixture = data.draw(mixtures(scheduled))
    found, _ = per_part(mixture, seed, block, parts, epochs)
    order = mixture.epoch_order(seed, 0, block, stretches=parts)
    for s, dataset in enumerate(mixture.sources):
        if any(order._stretch(s, part)[1] == 0 for part in range(parts)):
            continue  # a part without rows of a source (fewer than its share of slots) reads the whole source
        rows = [set(found.get((part, s), ())) for part in range(parts)]
        assert sum(len(r) for r in rows) == len(set().union(*rows)), (s, rows)
        if isinstance(dataset, FakeCorpus):
            touched = sum(len({shard_of(dataset, row) for row in r}) for r in rows)
            assert touched <= int((dataset.shard_rows > 0).sum()) + parts - 1


@settings(max_examples=50, deadline=None)
@given(mixture=mixtures(False), parts=st.integers(1, 6), seed=st.integers(0, 2**64 - 1), block=st.integers(1, 30),
       epochs=st.integers(1, 3))
def test_without_a_schedule_every_epoch_holds_exactly_the_counts_and_a_part_covers_its_stretch_in_turn(
        mixture, parts, seed, block, epochs):
    """The parts together: ``counts[s]`` of source s every epoch. A part reads its stretch of a source pass by
    pass: every row of its stretch as often as any other, to within one; a source read once an epoch
    (``counts[s] == len``) is read once, every row, by the parts together."""
    starts, lengths = stretches(mixture.samples_per_epoch, parts)
    streams: dict[tuple[int, int], list[int]] = {}
    for epoch in range(epochs):
        taken = mixture.epoch_order(seed, epoch, block, stretches=parts).take(np.arange(mixture.samples_per_epoch))
        located = [mixture.source_of(int(i)) for i in taken]
        assert Counter(s for s, _ in located) == Counter({s: c for s, c in enumerate(mixture.counts)})
        for part, (a, n) in enumerate(zip(starts, lengths, strict=True)):
            for s, row in located[int(a):int(a + n)]:
                streams.setdefault((part, s), []).append(row)
    order = mixture.epoch_order(seed, 0, block, stretches=parts)
    for (part, s), rows in streams.items():
        stretch = order._stretch(s, part)[1] or mixture.lengths[s]
        times = Counter(rows)
        assert len(times) == min(stretch, len(rows)), (part, s, rows)  # its stretch, pass after pass
        assert max(times.values()) - min(times.values()) <= 1, (part, s, rows)
    for s, (count, length) in enumerate(zip(mixture.counts, mixture.lengths, strict=True)):
        if count == length:
            read = Counter(row for (part, source), rows in streams.items() if source == s for row in rows)
            assert read == Counter({row: epochs for row in range(length)})


@settings(max_examples=50, deadline=None)
@given(data=st.data(), parts=st.integers(1, 5), batch=st.integers(1, 4), seed=st.integers(0, 2**64 - 1),
       epochs=st.integers(1, 3))
def test_a_schedule_on_a_grid_gives_every_global_batch_exactly_its_counts(data, parts, batch, seed, epochs):
    """Global batch k of the parts (window k of each) holds exactly what the schedule, on the grid and counted
    by its chains, gives run positions ``e * n + kG .. e * n + (k + 1)G``: its phase starts at the global batch
    it names (any ramp), and no global batch mixes two phases."""
    mixture = data.draw(mixtures(True))
    grid = parts * batch
    n = mixture.samples_per_epoch
    counts = mixture._schedule_on_grid(grid).chained()
    _, sources = per_part(mixture, seed, 8, parts, epochs, grid=grid)
    for epoch in range(epochs):
        for k in range(n // grid):
            held = Counter(s for part in sources[epoch] for s in part[k * batch:(k + 1) * batch])
            want = np.subtract(counts.counts(epoch * n + (k + 1) * grid), counts.counts(epoch * n + k * grid))
            assert [held[s] for s in range(len(mixture.sources))] == want.tolist()


@pytest.mark.filterwarnings("ignore:global batch. found:UserWarning")  # 2 x 5 -> 3 x 1: the grid is warned about
@pytest.mark.parametrize("scheduled", [False, True])
@pytest.mark.parametrize("first,then", [((4, 3), (3, 4)), ((4, 3), (6, 2)), ((2, 5), (3, 1))])
def test_a_resize_of_a_sharded_mixture_serves_each_slot_once(scheduled, first, then):
    def make(rank, world, batch):
        web, code = TaggedCorpus("web", [7, 3, 9, 5, 6, 2]), TaggedCorpus("code", [4, 8, 1, 6])
        mixture = (Mixture([web, code], samples_per_epoch=40, schedule=[(0, [3, 1]), (12, [1, 1], 2), (60, [1, 3])])
                   if scheduled else Mixture([(web, 3), (code, 1)], samples_per_epoch=40))
        return shufflepoint.DataLoader(mixture, batch, seed=3, rank=rank, world_size=world, shuffle_block=6,
                                       collate_fn=list)

    expected = read_whole(make, *first, epoch=1)
    assert sum(expected.values()) == 40
    assert served_across_a_resize(make, first, then, steps=1, epoch=1) == expected


def test_a_state_of_the_order_before_it_was_laid_on_stretches_resumes_in_that_order():
    """A run saved under spans in version 1 (before this order) resumes in version 1, exactly."""
    def make(rank):
        mixture = Mixture([(tagged("a", 23), 3), (tagged("b", 7), 1)], samples_per_epoch=24)
        return shufflepoint.DataLoader(mixture, 2, seed=8, rank=rank, world_size=2, collate_fn=list, shuffle_block=8)

    loaders = [make(r) for r in range(2)]
    state = loaders[0].state_dict()
    assert state["order_version"] == 3 and state["deal"] == "spans"
    old = dict(state, order_version=1)
    for rank in range(2):
        resumed = make(rank)
        resumed.load_state_dict(old)
        assert resumed.state_dict()["order_version"] == 1
        unlaid = [x for batch in resumed for x in batch]
        mixture = resumed.dataset
        version_1 = MixtureOrder(mixture, 8, 0, 8).take(np.arange(12 * rank, 12 * rank + 12))  # rank's stretch
        assert unlaid == [mixture[int(i)] for i in version_1]
        assert unlaid != [x for batch in make(rank) for x in batch]


@pytest.mark.parametrize("seed", range(4))
def test_a_sampler_resumed_with_a_phase_appended_inside_its_window_reads_on_as_the_run_did(seed):
    """3 replicas, shuffle_block 8: a part's window is 2 positions, 6 of the run (window 2: run positions
    12-17). Stopped after 5 samples per replica (run position 15), a phase appended at 16 (where the state's
    check of the phases reached, the end of its shuffle_block window) starts on the next window edge, 18, in
    the resumed run as in the uninterrupted one (starting it at 16 changed the window part 2 had begun)."""
    def sampler(rank, schedule):
        mixture = Mixture([tagged("a", 40), tagged("b", 40)], samples_per_epoch=40, schedule=schedule)
        return shufflepoint.ResumableSampler(mixture, 3, rank, seed=seed, shuffle_block=8)

    longer = [(0, [1, 1]), (16, [0, 1])]
    for rank in range(3):
        first = sampler(rank, [(0, [1, 1])])
        before = list(itertools.islice(iter(first), 5))
        state = first.state_dict()
        resumed = sampler(rank, longer)
        resumed.load_state_dict(state)
        assert before + list(resumed) == list(sampler(rank, longer))


@pytest.mark.filterwarnings("ignore:global batch. found:UserWarning")  # another global batch: warned about
@settings(max_examples=60, deadline=None)
@given(data=st.data(), world=st.integers(1, 4), batch=st.integers(1, 4), seed=st.integers(0, 2**32),
       block=st.integers(1, 30))
def test_after_a_change_of_global_batch_a_phase_starts_at_the_global_batch_it_names(data, world, batch, seed,
                                                                                   block):
    """A run on W x B stopped mid-epoch and resumed on W' x B' (a global batch the epoch's first world W divides,
    so the epoch is still read as its parts' global batches): every global batch whose first row is at or past
    the phase's start (on the run's grid) holds only the phase's source, on either world, and no row is served
    twice. (Re-dealt, a rank's stretch held another part's earlier windows: rows of the phase before late.)"""
    grid = world * batch
    new_world = data.draw(st.integers(1, 6))
    new_batch = world // math.gcd(world, new_world) * data.draw(st.integers(1, 3))
    length = data.draw(st.integers(3 * grid, 10 * grid))
    start = data.draw(st.integers(1, length))
    steps = data.draw(st.integers(1, length // grid - 1))
    mixture = Mixture([tagged("a", 30), tagged("b", 30)], samples_per_epoch=length, schedule=[(0, [1, 1]),
                                                                                            (start, [0, 1])])

    def loaders(w, b):
        return [shufflepoint.DataLoader(mixture, b, seed=seed, rank=r, world_size=w, collate_fn=list, drop_last=True,
                                        shuffle_block=block) for r in range(w)]

    edge = -(-start // grid) * grid  # the phase on the run's grid
    first = loaders(world, batch)
    iterators = [iter(loader) for loader in first]
    batches = [[row for it in iterators for row in next(it)] for _ in range(steps)]
    starts = [k * grid for k in range(steps)]
    state = first[0].state_dict()
    resumed = loaders(new_world, new_batch)
    for loader in resumed:
        loader.load_state_dict(state)
    rest = [[row for rows in together for row in rows] for together in zip(*resumed, strict=True)]
    if len(rest) > 1:  # a state saved after the change loads (its history replayed) and reads on exactly
        again = loaders(new_world, new_batch)
        for loader in again:
            loader.load_state_dict(state)
        iterators = [iter(loader) for loader in again]
        assert [row for it in iterators for row in next(it)] == rest[0]
        later = loaders(new_world, new_batch)
        for loader in later:
            loader.load_state_dict(again[0].state_dict())
        assert [[row for rows in together for row in rows] for together in zip(*later, strict=True)] == rest[1:]
    for j, rows in enumerate(rest):  # which() places the steps read after the change (the history's own cuts)
        found = resumed[0].which(steps + j)
        assert [mixture[i] for r in range(new_world) for i in found[r]] == rows
    batches += rest
    starts += [steps * grid + k * new_world * new_batch for k in range(len(rest))]
    for first_row, rows in zip(starts, batches, strict=True):
        if first_row >= edge:
            assert not [row for row in rows if row.startswith("a")], (first_row, edge, rows)
    # the epoch's rows as its first world reads them (no padding, no drop_last): none served more often
    assert not Counter(row for rows in batches for row in rows) - read_whole(
        lambda rank, w, b: shufflepoint.DataLoader(mixture, b, seed=seed, rank=rank, world_size=w, collate_fn=list,
                                                   shuffle_block=block), world, batch, epoch=0)
