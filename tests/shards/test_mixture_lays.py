"""``set_weights`` inside an epoch under ``spans``: each source's stream laid in lays (``mixture/lays.py``).

Proven over random schedules, 1-3 live changes at random steps (inside epochs and at their edges), world sizes and
a resize (a fresh loader loading the state): the sources at every place are those of the schedule with the live
phases (each global batch holds its phase's counts), each source's passes are whole at every edge of the grid (no row
read k + 1 times before every row of its source was read k times), every rank holds the same state, and ``which``
answers every step as served. Without a live phase inside an epoch the orders are those of version 6 (and 5)
exactly, pinned to the values the build before lays gave (and version 7's, pass_edges.py, to its first build's)."""

from __future__ import annotations

import hashlib
import warnings
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint._shards.corpora.mixture.lays import plan
from shufflepoint._shards.corpora.mixture.stretches import StretchedMixtureOrder

SOURCES = [list(range(0, 50)), list(range(100, 120)), list(range(200, 230))]
SPE, BATCH = 48, 4  # every global batch (1-4 ranks x 4) divides the epoch: no tail padding to count


def order_digest(mixture, parts, grid, epochs=4, block=8, version=6):
    """The orders of the first epochs, as a digest; a scheduled one (a plain Mixture on a grid too) in ``version``
    (6: every window numbered part after part; 7: pass-edge windows in the interleave order, pass_edges.py)."""
    digest = hashlib.sha256()
    for epoch in range(epochs):
        order = mixture.epoch_order(3, epoch, block, grid, stretches=parts)
        if isinstance(order, StretchedMixtureOrder) and order.version != 5:
            order = StretchedMixtureOrder(mixture, 3, epoch, block, parts, grid, version=version)
        digest.update(order.take(np.arange(len(mixture), dtype=np.int64)).tobytes())
    return digest.hexdigest()[:16]


PINNED = {  # computed by the build before lays (commit 6937c4f): versions 5 and 6 did not change
    ("plain", 1, 6): "ae90a7464324f69b", ("plain", 2, 6): "0d25ceae2a0aa361", ("plain", 3, 12): "64c5b564d0dcfc93",
    ("plain", 4, 8): "f20049515f3a20c1", ("plain", 2, None): "614f7ca3a4621a0a",
    ("scheduled", 1, 6): "b0f17b296baf928b", ("scheduled", 2, 6): "cfa03197c8e5999f",
    ("scheduled", 3, 12): "34d7c5ee7f8b8d98", ("scheduled", 4, 8): "e824c695295052dd",
    ("scheduled", 2, None): "d3174f7a54d8bb87",
}
PINNED_7 = {  # version 7 (pass_edges.py, spread.py), as first built; ("plain", 2, None): version 5, unchanged
    ("plain", 1, 6): "a04e3e0ae4856fd4", ("plain", 2, 6): "06556f40e50ee1a8", ("plain", 3, 12): "59785eb223c3deda",
    ("plain", 4, 8): "c5e2142338fcc524", ("plain", 2, None): "614f7ca3a4621a0a",
    ("scheduled", 1, 6): "8139e982fd3fdbbd", ("scheduled", 2, 6): "0eec131d029562dc",
    ("scheduled", 3, 12): "f2b2f92766b1d239", ("scheduled", 4, 8): "fe5353c08134ba3c",
    ("scheduled", 2, None): "1a79f8cea406b407",
}


@pytest.mark.parametrize("name, parts, grid", list(PINNED))
def test_without_a_live_phase_inside_an_epoch_the_orders_are_unchanged(name, parts, grid):
    if name == "plain":
        mixture = shufflepoint.Mixture([(SOURCES[0], 3), (SOURCES[1], 1), (SOURCES[2], 2)], samples_per_epoch=SPE)
    else:
        mixture = shufflepoint.Mixture(SOURCES, samples_per_epoch=SPE, schedule=[
            (0, [1, 1, 1]), (30, [1, 0, 2]), (100, [2, 1, 1], 12), (160, [1, 1, 1])])
    assert order_digest(mixture, parts, grid) == PINNED[(name, parts, grid)]
    assert order_digest(mixture, parts, grid, version=7) == PINNED_7[(name, parts, grid)]
    if name == "scheduled":  # a live phase at an epoch's start: that epoch's own lay, the same order
        built = shufflepoint.Mixture(SOURCES, samples_per_epoch=SPE, schedule=[
            (0, [1, 1, 1]), (30, [1, 0, 2]), (100, [2, 1, 1], 12), (160, [1, 1, 1]), (192, [3, 1, 1])])
        live = shufflepoint.Mixture(SOURCES, samples_per_epoch=SPE, schedule=[
            (0, [1, 1, 1]), (30, [1, 0, 2]), (100, [2, 1, 1], 12), (160, [1, 1, 1])])
        live.set_weights([3, 1, 1], at=192)
        assert order_digest(live, parts, grid, epochs=6) == order_digest(built, parts, grid, epochs=6)
        assert order_digest(live, parts, grid, epochs=6, version=7) == order_digest(built, parts, grid, epochs=6,
                                                                                   version=7)


def test_the_worked_example_of_lays_py():
    mixture = shufflepoint.Mixture([list(range(20)), list(range(100, 130))], samples_per_epoch=10,
                                   schedule=[(0, [1, 1])])
    mixture.set_weights([0, 1], at=4)

    def counts(phases, g):
        return mixture.known_schedule(phases, None).counts_many(np.array([g]))[0]

    lays = plan(mixture.live_starts(None), 1, 10, 0, counts)
    assert [(lay.epoch, lay.phases, lay.lo.tolist(), lay.hi.tolist()) for lay in lays] == [
        (0, 1, [0, 0], [5, 5]), (0, 2, [5, 5], [2, 8])]
    later = plan(mixture.live_starts(None), 1, 10, 1, counts)
    assert [(lay.epoch, lay.lo.tolist(), lay.hi.tolist()) for lay in later] == [(1, [5, 8], [2, 18])]


def loaders(world, state=None, schedule=((0, [1, 1, 1]),)):
    found = []
    for rank in range(world):
        loader = shufflepoint.DataLoader(shufflepoint.Mixture(SOURCES, samples_per_epoch=SPE, schedule=list(schedule)),
                                         BATCH, seed=3, shuffle_block=8, collate_fn=list, world_size=world, rank=rank,
                                         verify_ranks=False)
        if state is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a global batch that is not a multiple of the run's grid
                loader.load_state_dict(state)
        found.append(loader)
    return found


def read(ranks, steps, changes):
    """``steps`` global batches (each rank's batch), calling ``set_weights`` on every rank before the steps named."""
    found, batches = [], [iter(loader) for loader in ranks]
    while len(found) < steps:
        if ranks[0].step in changes:
            for loader in ranks:
                loader.set_weights(changes[ranks[0].step])
        got = [next(batch, None) for batch in batches]
        if got[0] is None:
            batches = [iter(loader) for loader in ranks]
            continue
        found.append(got)
    return found


def check_passes(steps, seen, served, grid, mixture=None):
    """Each source's passes whole at every edge of the grid the run reaches in ``steps``; with ``mixture``, each
    source's rows served so far its schedule's count there (live phases included)."""
    for batches in steps:
        for batch in batches:
            seen.update(batch)
            served[0] += len(batch)
        if served[0] % grid == 0:
            if mixture is not None:
                expected = mixture.known_schedule(len(mixture.phases), grid).counts(served[0])
                assert [sum(seen[x] for x in rows) for rows in SOURCES] == expected, served[0]
            for rows in SOURCES:
                counts = [seen[x] for x in rows]
                assert max(counts) - min(counts) <= 1, (served[0], rows[0], sorted(Counter(counts).items()))


weights = st.lists(st.integers(0, 6), min_size=3, max_size=3).filter(any)


@pytest.mark.mixture
@settings(max_examples=20, deadline=None)
@given(world=st.integers(1, 3), later=st.sampled_from([None, 1, 2, 3, 4]), first=st.integers(0, 2),
       data=st.data())
def test_live_changes_inside_epochs_keep_passes_whole_and_which_as_served(world, later, first, data):
    built = [(0, [1, 1, 1])] + ([(first * 36 + 12, data.draw(weights, "built"))] if first else [])
    steps_per_epoch = SPE // (world * BATCH)
    count = data.draw(st.integers(1, 3), "changes")
    earliest = built[-1][0] // BATCH + 1  # after the last built phase's start, on any world
    at = sorted(set(data.draw(st.lists(st.integers(earliest, earliest + 3 * steps_per_epoch), min_size=count,
                                       max_size=count), "steps")))
    changes = {step: data.draw(weights, f"weights {step}") for step in at}
    stop = data.draw(st.integers(1, 3 * steps_per_epoch), "stop") if later else 5 * steps_per_epoch
    ranks = loaders(world, schedule=built)
    before = read(ranks, stop, changes)
    seen, served = Counter(), [0]
    check_passes(before, seen, served, world * BATCH, ranks[0].dataset)
    states = [loader.state_dict() for loader in ranks]
    assert all(state == states[0] for state in states)
    assert all([ranks[r].dataset[i] for i in ranks[r].which(step)[r]] == before[step][r]
               for step in range(stop) for r in range(world))
    live = [(p[0], [Fraction(x) for x in p[2]]) for p in states[0]["phases"] if len(p) == 3]
    if later is None:  # the sources at every place: the schedule's with the live phases from the start
        scheduled = read(loaders(world, schedule=built + live), stop, {})
        assert [[[x // 100 for x in b] for b in step] for step in scheduled] == \
            [[[x // 100 for x in b] for b in step] for step in before]
        return
    resumed = loaders(later, state=states[0], schedule=built)  # another world, from the state alone
    after = read(resumed, 3 * SPE // (later * BATCH), {step: w for step, w in changes.items() if step > stop})
    check_passes(after, seen, served, world * BATCH, resumed[0].dataset)
    assert all(loader.state_dict() == resumed[0].state_dict() for loader in resumed)
    assert all([resumed[r].dataset[i] for i in resumed[r].which(stop + step)[r]] == after[step][r]
               for step in range(len(after)) for r in range(later))
    assert all([resumed[0].dataset[i] for i in resumed[0].which(step)[r]] == before[step][r]
               for step in range(stop) for r in range(world))


def test_a_live_change_inside_an_epoch_follows_its_weights_from_the_next_global_batch():
    """Epoch 0 on 2 ranks: source 0 alone from global batch 2 on, every row of its pass once before any twice."""
    ranks = loaders(2)
    got = read(ranks, 6, {2: [1, 0, 0]})
    assert all(x < 50 for batches in got[2:] for batch in batches for x in batch)
    assert any(x >= 100 for batches in got[:2] for batch in batches for x in batch)
    check_passes(got, Counter(), [0], 8)


def test_what_an_epoch_laid_and_left_is_read_in_the_next_on_another_world_as_it_was_laid():
    """Source 2 paused inside epoch 0 (2 ranks): most of its rows laid out for epoch 0 are left; epoch 1 begins on 3
    ranks with source 2 back, and reads those rows first, as epoch 0's lay placed them (on epoch 0's 2 parts, from
    the history), then its own: each pass whole at every edge of the grid, and ``which`` as served."""
    ranks = loaders(2)
    before = read(ranks, 6, {2: [6, 1, 0]})  # epoch 0 (6 global batches of 8)
    state = ranks[0].state_dict()
    resumed = loaders(3, state=state)
    after = read(resumed, 12, {6: [1, 1, 1]})  # epochs 1 and 2, global batches of 12
    seen, served = Counter(), [0]
    check_passes(before, seen, served, 8)
    check_passes(after, seen, served, 8)
    assert sum(1 for batches in after[:4] for batch in batches for x in batch if x >= 200) >= 10
    assert all([resumed[r].dataset[i] for i in resumed[r].which(6 + step)[r]] == after[step][r]
               for step in range(12) for r in range(3))


def test_a_lay_whose_epoch_the_history_no_longer_reaches_is_read_with_a_warning(monkeypatch):
    """The run's history keeps its 32 latest layout changes: an epoch laid earlier than that is read on the reading
    epoch's world, which may read rows twice or never, so it is said (``ResumeWarning``), never silent."""
    from shufflepoint._core.history import History

    ranks = loaders(2)
    read(ranks, 6, {2: [6, 1, 0]})
    state = ranks[0].state_dict()
    real = History.epoch_parts
    monkeypatch.setattr(History, "epoch_parts", lambda self, epoch: None if epoch == 0 else real(self, epoch))
    resumed = loaders(3, state=state)
    with pytest.warns(shufflepoint.ResumeWarning, match="no longer reaches back to epoch 0's world"):
        read(resumed, 2, {6: [1, 1, 1]})
