"""Resizes at a fixed global batch under ``spans``: the same global batches as the uninterrupted run,
at any new world size the global batch divides by, through chains of resizes; every sample once
when the global batch changes in between; exact on a same-world resume."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint._core.deals import cut
from shufflepoint._core.global_batch import GlobalBatchCut, keeps_global_batch
from shufflepoint._core.history import History, Place
from shufflepoint._core.plan import Layout, StridedCut
from shufflepoint._core.spans import SpanCut, check_segments
from simulated import ShardRows


def divisors(number: int) -> list[int]:
    return [d for d in range(1, number + 1) if number % d == 0]


def global_batches(deal: StridedCut | SpanCut, batches: int | None = None) -> list[frozenset[int]]:
    """The real (unpadded) epoch positions of each of ``deal``'s next global batches, over all ranks."""
    batch_size = deal.batch_size
    total = deal.samples_per_rank()
    steps = -(-total // batch_size) if batches is None else min(batches, -(-total // batch_size))
    found = []
    for step in range(steps):
        positions: set[int] = set()
        for rank in range(deal.world_size):
            stop = min((step + 1) * batch_size, deal.real_samples(rank))
            positions.update(deal.rank_positions(rank, step * batch_size, max(stop, step * batch_size)).tolist())
        found.append(frozenset(positions))
    return found


def read_in_layouts(n: int, layouts: list[tuple[int, int, int]], drop_last: bool) -> list[frozenset[int]]:
    """One epoch read by a chain of (world, batch, batches) layouts, each resumed from the last one's
    position, the last read to the end: the global batches served, in order. The parts are the first
    world's of the latest run of layouts at one global batch (as ``History.parts`` says)."""
    served: list[frozenset[int]] = []
    cursor, segments, parts, global_batch = 0, [], 0, 0
    for number, (world_size, batch_size, batches) in enumerate(layouts):
        if world_size * batch_size != global_batch:
            parts, global_batch = world_size, world_size * batch_size
        deal = cut(Layout(n, world_size, batch_size, drop_last), "spans", cursor, segments, parts)
        last = number == len(layouts) - 1
        taken = global_batches(deal, None if last else batches)
        served += taken
        cursor, segments = deal.after(min(len(taken) * batch_size, deal.samples_per_rank()))
        check_segments(n, segments)
    return served


@st.composite
def fixed_global_batch_chains(draw):
    """A first layout W0 x B0 and up to 4 resizes to W x (G / W), stopped after random numbers of batches
    (the first after one at least: the parts are the stretches of the first world that *read* at G, as
    the run's layout history keeps no layout that read nothing)."""
    first_world, part_batch = draw(st.integers(1, 8), label="W0"), draw(st.integers(1, 6), label="B0")
    global_batch = first_world * part_batch
    worlds = st.sampled_from(divisors(global_batch))
    chain = [(first_world, part_batch, draw(st.integers(1, 12), label="batches"))]
    for _ in range(draw(st.integers(1, 4), label="resizes")):
        world_size = draw(worlds, label="W")
        chain.append((world_size, global_batch // world_size, draw(st.integers(0, 12), label="batches")))
    return chain


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 600), chain=fixed_global_batch_chains(), drop_last=st.booleans())
def test_at_a_fixed_global_batch_the_global_batches_are_the_uninterrupted_runs(n, chain, drop_last):
    first_world, part_batch, _ = chain[0]
    whole = read_in_layouts(n, [(first_world, part_batch, 0)], drop_last)
    resized = read_in_layouts(n, chain, drop_last)
    assert resized == whole
    everything = sorted(itertools.chain.from_iterable(whole))
    assert len(everything) == len(set(everything))
    if drop_last:
        assert n - len(everything) < first_world * part_batch
    else:
        assert everything == list(range(n))


@settings(max_examples=250, deadline=None)
@given(n=st.integers(0, 600), drop_last=st.booleans(),
       layouts=st.lists(st.tuples(st.sampled_from([1, 2, 3, 4, 6, 8]), st.integers(1, 6), st.integers(0, 10)),
                        min_size=1, max_size=6))
def test_with_the_global_batch_changing_in_between_every_sample_is_read_once(n, drop_last, layouts):
    """Any chain, global batches fixed for a while then changed, changed back: never a sample twice."""
    served = read_in_layouts(n, layouts, drop_last)
    everything = sorted(itertools.chain.from_iterable(served))
    assert len(everything) == len(set(everything))
    world_size, batch_size, _ = layouts[-1]
    if drop_last:
        assert n - len(everything) < world_size * batch_size
    else:
        assert everything == list(range(n))


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 600), first_world=st.integers(1, 8), part_batch=st.integers(1, 6),
       drop_last=st.booleans(), data=st.data())
def test_a_same_world_resume_after_a_fixed_global_batch_resize_is_exact(n, first_world, part_batch, drop_last,
                                                                          data):
    """Saved after whole batches on the new world and resumed on it again: each rank's rest, batch for batch."""
    global_batch = first_world * part_batch
    world_size = data.draw(st.sampled_from(divisors(global_batch)), label="W")
    batch_size = global_batch // world_size
    first = cut(Layout(n, first_world, part_batch, drop_last), "spans", 0, [])
    cursor, segments = first.after(min(data.draw(st.integers(0, 12)) * part_batch, first.samples_per_rank()))
    layout = Layout(n, world_size, batch_size, drop_last)
    resized = cut(layout, "spans", cursor, segments, first_world)
    total = resized.samples_per_rank()
    taken = min(data.draw(st.integers(0, -(-total // batch_size)), label="batches") * batch_size, total)
    cursor, segments = resized.after(taken)
    again = cut(layout, "spans", cursor, segments, first_world)
    assert again.samples_per_rank() == total - taken
    for rank in range(world_size):
        assert again.real_samples(rank) == max(resized.real_samples(rank) - taken, 0)
        assert again.rank_positions(rank, 0, total - taken).tolist() == \
            resized.rank_positions(rank, taken, total).tolist()


def test_the_worked_example_of_the_module_docstring():
    first = SpanCut(40, [], world_size=4, batch_size=3, drop_last=False)
    cursor, segments = first.after(6)
    assert (cursor, segments) == (24, [[4, 6]])
    assert sorted(global_batches(first)[2]) == [6, 7, 8, 16, 17, 18, 26, 27, 28, 36, 37, 38]
    two = cut(Layout(40, 2, 6, False), "spans", cursor, segments, 4)
    assert isinstance(two, GlobalBatchCut)
    assert [two.rank_positions(r, 0, 6).tolist() for r in range(2)] == [[6, 7, 8, 16, 17, 18],
                                                                        [26, 27, 28, 36, 37, 38]]
    three = cut(Layout(40, 3, 4, False), "spans", cursor, segments, 4)
    assert [three.rank_positions(r, 0, 4).tolist() for r in range(3)] == [[6, 7, 8, 16], [17, 18, 26, 27],
                                                                          [28, 36, 37, 38]]
    assert two.after(6) == (36, [[4, 9]]) and three.after(4) == (36, [[4, 9]])


def test_a_later_epoch_keeps_the_first_worlds_parts():
    """n = 10 on 2 x 2 from the epoch's start, the parts of a 4 x 1 run: its global batches."""
    fresh = cut(Layout(10, 2, 2, False), "spans", 0, [], 4)
    assert fresh.first_world_size == 4 and fresh.samples_per_rank() == 5  # 2 full steps, then 2 samples
    assert global_batches(fresh) == global_batches(SpanCut(10, [], 4, 1, False))
    assert fresh.after(2) == (4, [[4, 1]]) and fresh.after(0) == (0, [])


def test_the_tail_pads_only_the_last_step_with_a_ranks_own_sample():
    """n = 10 on 4 x 2 (parts 3 3 2 2), one step, then 8 x 1: the last step holds 2 samples for 8 ranks."""
    first = SpanCut(10, [], world_size=4, batch_size=2, drop_last=False)
    cursor, segments = first.after(2)
    rest = cut(Layout(10, 8, 1, False), "spans", cursor, segments, 4)
    assert rest.samples_per_rank() == 1
    assert [rest.real_samples(r) for r in range(8)] == [1, 1, 0, 0, 0, 0, 0, 0]
    assert [rest.rank_positions(r, 0, 1).tolist() for r in range(8)] == [[2], [5]] + [[2]] * 6  # the step's first
    assert rest.after(1) == (10, [[4, 3]])


@pytest.mark.parametrize("segments, parts, layout, keeps", [
    ([[4, 6]], 4, (2, 6), True),
    ([], 4, (2, 6), True),  # a later epoch
    ([[4, 6]], 4, (4, 3), False),  # the parts' own world continues its segment
    ([[4, 6]], 3, (3, 3), False),  # G changed: the 3 x 3 run's own stretches
    ([[4, 6]], None, (2, 6), False),
    ([[4, 6], [2, 3]], 4, (3, 4), False),  # re-dealt once already at another global batch: today's rule
    ([[2, 6]], 4, (3, 4), False),  # the epoch began on other parts
    ([[4, 6]], 4, (5, 2), False),  # G = 10 does not divide among 4 parts
])
def test_when_a_resize_keeps_the_global_batches(segments, parts, layout, keeps):
    assert keeps_global_batch(segments, parts, *layout) is keeps


def test_a_position_between_global_batches_or_an_uneven_global_batch_is_refused():
    rest = GlobalBatchCut(40, 4, 6, world_size=2, batch_size=6, drop_last=False)
    with pytest.raises(ValueError, match="received: found 3 samples per rank\n  expected: whole global batches of 6"):
        rest.after(3)
    with pytest.raises(ValueError, match=r"global batch: found 5 x 2 = 10\n"
                                         r"  expected: a multiple of the first world size 4"):
        GlobalBatchCut(40, 4, 6, world_size=5, batch_size=2, drop_last=False)


# -- through the loader: simulated ranks, fresh loaders for each layout --------------------------


def loaders(rows, world_size, batch_size, state=None, drop_last=False):
    made = [shufflepoint.DataLoader(ShardRows(rows), batch_size, seed=3, rank=r, world_size=world_size,
                                    drop_last=drop_last, shuffle_block=8) for r in range(world_size)]
    for loader in made:
        if state is not None:
            loader.load_state_dict(state)
    return made


ROWS = [37, 41, 29, 53, 47, 31, 43, 59, 61, 23, 67, 40]  # 531 rows: 44 global batches of 12, 3 left


def epochs_of_global_batches(rows, layouts, epochs=1, drop_last=False):
    """(global batches as sets of dataset indices, per epoch; the last state): fresh loaders per (world,
    batch, batches) layout, each restoring the previous one's state from rank 0; the last layout reads
    to the end of epoch ``epochs - 1``. Tail padding is left out."""
    found: list[list[frozenset[int]]] = [[] for _ in range(epochs)]
    state = None
    for number, (world_size, batch_size, batches) in enumerate(layouts):
        made = loaders(rows, world_size, batch_size, state, drop_last)
        streams = [real_batches(loader, rank) for rank, loader in enumerate(made)]
        to_the_end = made[0].batches_left() + (epochs - 1 - made[0].epoch) * len(made[0])
        batches = to_the_end if number == len(layouts) - 1 else min(batches, to_the_end)
        for _ in range(batches):
            taken = [next(batch for batch in stream if batch is not None) for stream in streams]
            found[taken[0][0]].append(frozenset(s for _, batch in taken for s in batch))
        if number == len(layouts) - 1:
            assert all(next(stream) is None for stream in streams)  # the epoch's end, seen by each loader
        states = [loader.state_dict() for loader in made]
        assert all(s == states[0] for s in states), "ranks disagree on the state"
        state = states[0]
    return found, state


def real_batches(loader, rank):
    """(epoch, the batch without its tail padding), across epochs; None at the end of each pass."""
    while True:
        epoch, live = loader.epoch, iter(loader)
        real = loader.real_samples_left(rank)
        for batch in live:
            yield epoch, batch.tolist()[:max(real, 0)]
            real -= len(batch)
        yield None


@pytest.mark.parametrize("new_world", [2, 3, 6])
def test_the_issues_measurement_a_corpus_on_4x3_stopped_at_step_20_keeps_its_next_40_global_batches(new_world):
    """Issue 27: 0 of the next 40 global batches were the uninterrupted run's on 2 x 6, 3 x 4, 6 x 2."""
    (whole,), _ = epochs_of_global_batches(ROWS, [(4, 3, 0)])
    (resized,), state = epochs_of_global_batches(ROWS, [(4, 3, 20), (new_world, 12 // new_world, 0)])
    assert len(whole) == len(resized) == 45 and resized[20:60] == whole[20:60]
    assert resized == whole and state["segments"] == [] and state["epoch"] == 1


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(0, 30), min_size=1, max_size=10), chain=fixed_global_batch_chains(),
       drop_last=st.booleans())
def test_through_the_loader_a_chain_of_fixed_global_batch_resizes_keeps_the_global_batches(rows, chain, drop_last):
    whole, _ = epochs_of_global_batches(rows, [chain[0][:2] + (0,)], drop_last=drop_last)
    resized, state = epochs_of_global_batches(rows, chain, drop_last=drop_last)
    assert resized == whole
    assert state["segments"] == [] and state["epoch"] == 1


def test_which_places_the_steps_after_a_fixed_global_batch_resize_where_the_loader_read_them():
    """``which(step)`` cuts through the run's layout history with the same rule as the loader."""
    first = loaders(ROWS, 4, 3)
    streams = [list(itertools.islice(loader, 20)) for loader in first]
    second = loaders(ROWS, 3, 4, first[0].state_dict())
    read = [list(itertools.islice(loader, 5)) for loader in second]
    third = loaders(ROWS, 6, 2, second[0].state_dict())
    later = [list(itertools.islice(loader, 3)) for loader in third]
    assert third[0].which(7) == {r: streams[r][7].tolist() for r in range(4)}
    assert third[0].which(22) == {r: read[r][2].tolist() for r in range(3)}
    assert third[0].which(26) == {r: later[r][1].tolist() for r in range(6)}


def test_a_state_saved_before_the_first_batch_after_a_change_of_global_batch_resumes_exactly():
    """4 x 2 -> 2 x 6 re-deals (G 8 -> 12); saved at once and resumed on 2 x 6, it re-deals again,
    batch for batch what the 2 x 6 run would have read (the history says who wrote the position)."""
    first = loaders(ROWS, 4, 2)
    for loader in first:
        list(itertools.islice(loader, 10))
    moved = loaders(ROWS, 2, 6, first[0].state_dict())
    again = loaders(ROWS, 2, 6, moved[0].state_dict())
    assert [[b.tolist() for b in loader] for loader in again] == [[b.tolist() for b in loader] for loader in moved]


def test_later_epochs_keep_the_first_worlds_global_batches_and_a_change_of_global_batch_ends_it():
    """4 x 3 for 20 batches, 3 x 4 into the next epoch, 6 x 2 to the end of epoch 2: every global batch of
    the three epochs is the uninterrupted 4 x 3 run's; then batch 5 on 4 ranks (G = 20) and back to
    12 on 3 ranks: the 3 x 4 run's own stretches from there (every sample once)."""
    whole, _ = epochs_of_global_batches(ROWS, [(4, 3, 0)], 3)
    resized, _ = epochs_of_global_batches(ROWS, [(4, 3, 20), (3, 4, 60), (6, 2, 0)], 3)
    assert [len(e) for e in whole] == [45, 45, 45] and resized == whole
    changed, _ = epochs_of_global_batches(ROWS, [(4, 3, 20), (4, 5, 10), (3, 4, 0)], 3)
    assert changed[0][:20] == whole[0][:20] and changed[1] != whole[1]
    for epoch in changed:
        served = sorted(s for batch in epoch for s in batch)
        assert served == list(range(sum(ROWS)))


# -- through the run's layout history: every step of several epochs, as ``which`` places it ---------------


def placed_global_batch(history: History, step: int) -> tuple[int, frozenset[int]]:
    """(epoch, real epoch positions over all ranks) of ``step`` as the history places it."""
    placed = history.place(step)
    size, deal = placed.layout.batch_size, placed.cut
    positions: set[int] = set()
    for rank in range(placed.layout.world_size):
        first = placed.batch * size
        stop = min(first + size, deal.real_samples(rank))
        positions.update(deal.rank_positions(rank, first, max(stop, first)).tolist())
    return placed.epoch, frozenset(positions)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 300), chain=fixed_global_batch_chains(), drop_last=st.booleans(), data=st.data())
def test_every_step_of_three_epochs_after_resizes_at_a_fixed_global_batch_is_the_uninterrupted_ones(
        n, chain, drop_last, data):
    """Resizes at random steps across epoch boundaries (two at one step: a layout that read nothing),
    recorded as a loader records them: the history places each step's global batch where the one-layout
    run has it (epoch and samples)."""
    first_world, part_batch, _ = chain[0]
    first = Layout(n, first_world, part_batch, drop_last)
    whole = History.begin(n, "spans", first, Place(0, 0))
    global_batch = first_world * part_batch
    per_epoch = n // global_batch if drop_last else -(-n // global_batch)
    assume(per_epoch > 0)
    steps = 3 * per_epoch
    resized, step = whole, 0
    for world_size, batch_size, _ in chain[1:]:
        step = data.draw(st.integers(max(step, 1), steps), label="resize at step")  # the same: read nothing
        arrived = resized.position(step)
        assert arrived is not None
        resized = resized.record(step, Layout(n, world_size, batch_size, drop_last), arrived)
    for step in range(steps):
        assert placed_global_batch(resized, step) == placed_global_batch(whole, step), step
