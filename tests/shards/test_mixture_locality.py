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
from shufflepoint._shards.corpora.mixture.mixture import Mixture
from shufflepoint._shards.corpora.mixture.order import MixtureOrder
from shufflepoint._shards.corpora.mixture.stretches import stretches


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


def rows_read(mixture, seed, block, parts, epochs, grid=None):
    """Per epoch, per source: each part's rows of it, in the order read."""
    starts, lengths = stretches(mixture.samples_per_epoch, parts)
    found = []
    for epoch in range(epochs):
        taken = mixture.epoch_order(seed, epoch, block, grid=grid, stretches=parts).take(
            np.arange(mixture.samples_per_epoch))
        read: dict[int, list[list[int]]] = {s: [[] for _ in range(parts)] for s in range(len(mixture.sources))}
        for part, (a, n) in enumerate(zip(starts, lengths, strict=True)):
            for i in taken[int(a):int(a + n)].tolist():
                s, row = mixture.source_of(int(i))
                read[s][part].append(row)
        found.append(read)
    return found


@settings(max_examples=60, deadline=None)
@given(data=st.data(), parts=st.integers(1, 6), seed=st.integers(0, 2**64 - 1), block=st.integers(1, 30),
       epochs=st.integers(1, 3))
def test_read_once_an_epoch_a_source_is_read_by_each_part_in_its_own_run_of_shards_the_same_every_epoch(
        data, parts, seed, block, epochs):
    """Weights = rows (each source read once an epoch, one whole pass): each part reads the same rows every epoch,
    no two parts ever the same row, and over a sharded source the parts together touch at most its shards plus
    one per part edge: the shards a node fetches are its share, the same every epoch."""
    count = data.draw(st.integers(2, 3))
    sources = []
    for s in range(count):
        if data.draw(st.booleans()):
            rows = data.draw(st.lists(st.integers(0, 9), min_size=1, max_size=12).filter(any))
            sources.append(FakeCorpus(rows, fingerprint=f"shards:{s}"))
        else:
            sources.append(list(range(data.draw(st.integers(1, 40)))))
    mixture = Mixture([(source, len(source)) for source in sources])
    read = rows_read(mixture, seed, block, parts, epochs)
    for s, dataset in enumerate(mixture.sources):
        rows = [set(part) for part in read[0][s]]
        assert sum(len(r) for r in rows) == len(set().union(*rows)) == len(dataset)  # once, by one part each
        assert all([set(part) for part in epoch[s]] == rows for epoch in read)  # the same every epoch
        if isinstance(dataset, FakeCorpus):
            touched = sum(len({shard_of(dataset, row) for row in r}) for r in rows)
            assert touched <= int((dataset.shard_rows > 0).sum()) + parts - 1


@settings(max_examples=60, deadline=None)
@given(data=st.data(), scheduled=st.booleans(), seed=st.integers(0, 2**64 - 1), block=st.integers(1, 30),
       epochs=st.integers(1, 4))
def test_every_epoch_reads_the_same_rows_of_each_source_on_any_world_each_pass_whole(data, scheduled, seed, block,
                                                                                      epochs):
    """On 1 to 6 parts, grid or none: an epoch's rows of each source are the same (which part reads which is
    the world's), without a schedule ``counts[s]`` of source s, and at every epoch's end each source's rows were
    read k or k + 1 times (its passes whole; the order of versions 3 and 4 let them drift apart, part by part)."""
    mixture = data.draw(mixtures(scheduled))
    grid = data.draw(st.sampled_from([None, 6, 12])) if scheduled else None
    totals = [Counter() for _ in mixture.sources]
    reference = None
    for parts in range(1, 7):
        per_world = [{s: Counter(row for part in epoch[s] for row in part) for s in epoch}
                     for epoch in rows_read(mixture, seed, block, parts, epochs, grid=grid)]
        if reference is None:
            reference = per_world
            for epoch in per_world:
                for s, rows in epoch.items():
                    totals[s].update(rows)
                    times = [totals[s][row] for row in range(mixture.lengths[s])]
                    assert max(times) - min(times) <= 1, (s, times)
                    if not scheduled:
                        assert sum(rows.values()) == mixture.counts[s]
        assert per_world == reference, parts


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
    counts = mixture.schedule_on_grid(grid).chained()
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
    assert state["order_version"] == 7 and state["deal"] == "spans"  # 0.6: the schedule of its counts (fixed.py)
    old = dict(state, order_version=1, grid=None, phases=[])  # as a run begun before laid its state
    for rank in range(2):
        resumed = make(rank)
        resumed.load_state_dict(old)
        assert resumed.state_dict()["order_version"] == 1
        unlaid = [x for batch in resumed for x in batch]
        mixture = resumed.dataset
        version_1 = MixtureOrder(mixture, 8, 0, 8).take(np.arange(12 * rank, 12 * rank + 12))  # rank's stretch
        assert unlaid == [mixture[int(i)] for i in version_1]
        assert unlaid != [x for batch in make(rank) for x in batch]


def test_a_state_of_the_versions_that_let_passes_drift_is_refused_by_name():
    """Versions 3 and 4 (0.5's development: each part its own stream of a source) are not read: refused by name,
    nothing changed."""
    def make(schedule):
        mixture = (Mixture([tagged("a", 23), tagged("b", 7)], samples_per_epoch=24, schedule=schedule) if schedule
                   else Mixture([(tagged("a", 23), 3), (tagged("b", 7), 1)], samples_per_epoch=24))
        return shufflepoint.DataLoader(mixture, 2, seed=8, rank=0, world_size=2, collate_fn=list, shuffle_block=8)

    for schedule, old in ((None, 3), ([(0, [3, 1])], 4)):
        loader = make(schedule)
        state = dict(loader.state_dict(), order_version=old)
        before = loader.state_dict()
        with pytest.raises(shufflepoint.StateError, match=rf"'order_version': found {old}\n.*\n.*development build"):
            loader.load_state_dict(state)
        assert loader.state_dict() == before


@pytest.mark.parametrize("seed", range(4))
def test_a_sampler_resumed_with_a_phase_appended_in_a_later_epoch_reads_on_as_the_run_did(seed):
    """3 replicas, shuffle_block 8, stopped after 5 samples per replica (run position 15 of epoch 0): a phase
    appended at 16 is refused by name (the epoch's rows of each source were laid out when it began); one
    appended at 40, the next epoch, resumes as the run with it read."""
    def sampler(rank, schedule):
        mixture = Mixture([tagged("a", 40), tagged("b", 40)], samples_per_epoch=40, schedule=schedule)
        return shufflepoint.ResumableSampler(mixture, 3, rank, seed=seed, shuffle_block=8)

    def two_epochs(it, rest=None):
        first = list(it) if rest is None else rest
        it.set_epoch(1)
        return first + list(it)

    longer = [(0, [1, 1]), (40, [0, 1])]
    for rank in range(3):
        first = sampler(rank, [(0, [1, 1])])
        before = list(itertools.islice(iter(first), 5))
        state = first.state_dict()
        with pytest.raises(shufflepoint.StateError, match=r"schedule\[1\] changed"):
            sampler(rank, [(0, [1, 1]), (16, [0, 1])]).load_state_dict(state)
        resumed = sampler(rank, longer)
        resumed.load_state_dict(state)
        assert before + two_epochs(resumed, list(resumed)) == two_epochs(sampler(rank, longer))


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
