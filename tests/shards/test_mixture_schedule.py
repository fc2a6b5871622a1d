"""``Mixture(..., schedule=...)``: weights that follow the samples consumed, exact on a resume, every
slot once on a resize, a past that cannot be rewritten and a future that may be appended."""

from __future__ import annotations

import warnings
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_mixture import ids, packed, read_whole, tagged

import shufflepoint
from resume_contract import Component, assert_resume_contract, run_epochs, served_across_a_resize
from shufflepoint._core.schedule import Schedule
from shufflepoint._shards.corpora.mixture.mixture import Mixture

# Phases that start inside a global batch split it between two phases (warned about: tested below); the
# order stays exact, and these tests use such starts on purpose.
SPLIT_BATCH = pytest.mark.filterwarnings("ignore:schedule\\[.*inside a global batch:UserWarning")


@st.composite
def schedules(draw, sources):
    """1-5 phases, starts strictly increasing from 0, weights >= 0 with at least one > 0 per phase; a phase
    but the last may ramp to the next one in up to 4 steps."""
    phases = draw(st.integers(1, 5))
    gaps = draw(st.lists(st.integers(1, 60), min_size=phases - 1, max_size=phases - 1))
    starts = [0, *np.cumsum(gaps).tolist()]
    weights = [draw(st.lists(st.integers(0, 5), min_size=sources, max_size=sources).filter(any))
               for _ in range(phases)]
    ramps = [draw(st.integers(1, min(gap, 4))) for gap in gaps] + [1]
    return [(int(start), w) if steps == 1 else (int(start), w, steps)
            for start, w, steps in zip(starts, weights, ramps, strict=True)]


@st.composite
def scheduled_mixtures(draw):
    sources = draw(st.integers(1, 4))
    lengths = draw(st.lists(st.integers(1, 25), min_size=sources, max_size=sources))
    return lengths, draw(schedules(sources)), draw(st.integers(1, 80)), draw(st.integers(1, 30))


def make(lengths, schedule, length):
    return Mixture([tagged(chr(97 + s), n) for s, n in enumerate(lengths)], samples_per_epoch=length,
                   schedule=schedule)


def served(mixture, seed, block, epochs):
    """(run position, source, row) of every position of the first ``epochs`` epochs."""
    found = []
    for epoch in range(epochs):
        taken = mixture.epoch_order(seed, epoch, block).take(np.arange(mixture.samples_per_epoch))
        found += [(epoch * mixture.samples_per_epoch + p, *mixture.source_of(int(i))) for p, i in enumerate(taken)]
    return found


@settings(max_examples=150, deadline=None)
@given(case=scheduled_mixtures(), seed=st.integers(0, 2**64 - 1), epochs=st.integers(1, 3))
def test_each_piece_holds_its_phase_s_share_and_every_pass_of_a_source_is_complete(case, seed, epochs):
    lengths, schedule, length, block = case
    mixture = make(lengths, schedule, length)
    positions = served(mixture, seed, block, epochs)
    sched = mixture.schedule
    run = epochs * length
    # every source's stream, read from its start: whole passes and one partial pass, each row once per pass
    totals = sched.counts(run)
    for s, n in enumerate(lengths):
        rows = Counter(row for _, source, row in positions if source == s)
        assert sum(rows.values()) == totals[s]
        full, extra = divmod(totals[s], n)
        assert sorted((rows[r] for r in range(n)), reverse=True) == [full + 1] * extra + [full] * (n - extra)
    # each window of shuffle_block positions, cut where a phase starts, holds that phase's share
    edges = sorted({e * length + k * block for e in range(epochs) for k in range(max(1, length // block))}
                   | {e * length for e in range(epochs + 1)} | {s for s in sched.starts if s < run})
    for a, b in zip(edges, edges[1:], strict=False):
        phase = sched.phase(a)
        assert sched.phase(b - 1) == phase
        counts = Counter(source for g, source, _ in positions if a <= g < b)
        shares = sched.shares[phase]
        for s, share in enumerate(shares):
            deviation = abs(counts[s] - (b - a) * share)
            assert deviation < max(1, sum(1 for x in shares if x) - 1), (a, b, s, counts, shares)
            if share == 0:
                assert counts[s] == 0  # a paused source reads nothing in its phase


def test_the_worked_example_of_the_schedule_module():
    schedule = Schedule([(0, [3, 1]), (8, [1, 1])], sources=2)
    assert [schedule.counts(g) for g in (0, 8, 12)] == [[0, 0], [6, 2], [8, 4]]
    assert schedule.phase(7) == 0 and schedule.phase(8) == 1
    assert schedule.shares[0] == (Fraction(3, 4), Fraction(1, 4))


def test_two_sources_get_their_share_within_one_sample_over_any_window():
    schedule = Schedule([(0, [0.7, 0.3]), (1000, [0.2, 0.8])], sources=2)
    for a in range(0, 1200, 7):
        for size in (1, 5, 64, 333):
            before, after = schedule.counts(a), schedule.counts(a + size)
            if schedule.phase(a) == schedule.phase(a + size - 1):
                share = schedule.shares[schedule.phase(a)][0]
                assert abs(after[0] - before[0] - size * share) < 1


def scheduled_component(rank, world_size, schedule=((0, [3, 1]), (30, [1, 3]), (55, [0, 1]))):
    def make_loader():
        mixture = Mixture([tagged("a", 17), tagged("b", 5)], samples_per_epoch=24, schedule=list(schedule))
        return shufflepoint.DataLoader(mixture, 2, seed=4, rank=rank, world_size=world_size,
                                       collate_fn=list, shuffle_block=6)

    return Component(name=f"scheduled W={world_size}", make=make_loader, run=run_epochs,
                     resume_epoch=lambda s: s["epoch"])


@SPLIT_BATCH
@pytest.mark.parametrize("world_size,rank", [(1, 0), (2, 1), (3, 2)])
def test_a_loader_over_a_scheduled_mixture_honours_the_resume_contract(world_size, rank):
    assert assert_resume_contract(scheduled_component(rank, world_size), epochs=4) >= 8


@SPLIT_BATCH
@pytest.mark.parametrize("first,then", [((2, 3), (3, 1)), ((3, 1), (2, 2)), ((1, 4), (4, 1))])
def test_a_resize_serves_every_slot_of_the_epoch_once(first, then):
    def make_loader(r, w, b):
        return shufflepoint.DataLoader(Mixture([tagged("a", 17), tagged("b", 5)], samples_per_epoch=24,
                                               schedule=[(0, [3, 1]), (30, [1, 3]), (55, [0, 1])]),
                                       b, seed=4, rank=r, world_size=w, collate_fn=list, shuffle_block=6)

    # the run's first world and global batch place the phases (its grid and its stretches): the reference
    expected = read_whole(make_loader, *first, epoch=1)  # epoch 1: run positions 24..47, phases 0 and 1
    seen = served_across_a_resize(make_loader, first, then, steps=2)
    assert seen == expected


def test_global_batches_follow_the_phase_of_their_first_sample():
    """strided: global batch k of a world of 2 x 3 is positions 6k..6k+5; a phase starting at 36 (a
    multiple of the global batch) holds from global batch 6 on, on every rank."""
    mixture = Mixture([tagged("a", 50), tagged("b", 50)], samples_per_epoch=60,
                      schedule=[(0, [1, 0]), (36, [0, 1])])
    loaders = [shufflepoint.DataLoader(mixture, 3, seed=2, rank=r, world_size=2, collate_fn=list, shuffle_block=6)
               for r in range(2)]
    per_rank = [list(loader) for loader in loaders]
    for step, batches in enumerate(zip(*per_rank, strict=True)):
        letters = {x[0] for batch in batches for x in batch}
        assert letters == ({"a"} if step < 6 else {"b"})


def appended_loader(schedule, deal="strided"):
    mixture = Mixture([tagged("a", 40), tagged("b", 40)], samples_per_epoch=40, schedule=schedule)
    return shufflepoint.DataLoader(mixture, 4, seed=9, collate_fn=list, shuffle_block=8, deal=deal)


@SPLIT_BATCH
def test_a_resume_may_append_phases_after_the_position_reached():
    first = appended_loader([(0, [1, 1])])
    iterator = iter(first)
    before = [next(iterator) for _ in range(3)]  # 12 positions: window 1 (8..15) reached
    state = first.state_dict()
    longer = [(0, [1, 1]), (16, [1, 0])]
    resumed = appended_loader(longer)
    resumed.load_state_dict(state)
    uninterrupted = list(appended_loader(longer))
    assert before + list(resumed) == uninterrupted
    assert resumed.state_dict()["dataset_fingerprint"] == appended_loader(longer).state_dict()["dataset_fingerprint"]


@SPLIT_BATCH
def test_under_spans_a_resume_may_append_phases_after_the_epoch_it_began():
    """Under ``spans`` an epoch's rows of each source are laid out when it begins (each source's passes whole on any
    world, ``mixture_stretches.py``): a phase appended inside the epoch the run had begun would change rows it
    read, so it is refused by name, nothing changed; one from the next epoch on resumes exactly."""
    first = appended_loader([(0, [1, 1])], deal="spans")
    iterator = iter(first)
    before = [next(iterator) for _ in range(3)]
    state = first.state_dict()
    inside = appended_loader([(0, [1, 1]), (16, [1, 0])], deal="spans")
    untouched = inside.state_dict()
    with pytest.raises(shufflepoint.StateError, match=r"why: schedule\[1\] changed.*under 'spans' a Mixture's epoch"):
        inside.load_state_dict(state)
    assert inside.state_dict() == untouched
    longer = [(0, [1, 1]), (40, [1, 0])]  # from epoch 1 on
    resumed = appended_loader(longer, deal="spans")
    resumed.load_state_dict(state)
    rest = list(resumed)
    resumed.set_epoch(1)
    uninterrupted = appended_loader(longer, deal="spans")
    whole = list(uninterrupted)
    uninterrupted.set_epoch(1)
    assert before + rest + list(resumed) == whole + list(uninterrupted)


@SPLIT_BATCH
@pytest.mark.parametrize("changed, phase", [
    ([(0, [1, 2])], 0),  # the weights of the phase the run is in
    ([(0, [1, 1]), (4, [1, 0])], 1),  # a phase inserted in the past
])
def test_a_resume_that_changes_a_started_phase_is_refused_naming_it(changed, phase):
    first = appended_loader([(0, [1, 1])])
    iterator = iter(first)
    for _ in range(3):
        next(iterator)
    state = first.state_dict()
    resumed = appended_loader(changed)
    before = resumed.state_dict()
    with pytest.raises(shufflepoint.StateError, match=rf"'phases': found \[\[0, '\w+'\]\]\n.*\n"
                                                      rf"  why: schedule\[{phase}\] changed"):
        resumed.load_state_dict(state)
    assert resumed.state_dict() == before
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed.load_state_dict(state, strict=False)  # accepted, loudly
    assert any(issubclass(w.category, shufflepoint.ResumeWarning) for w in caught)


def test_a_scheduled_mixture_is_not_an_unscheduled_one():
    plain = shufflepoint.DataLoader(Mixture([(tagged("a", 40), 1), (tagged("b", 40), 1)], samples_per_epoch=40),
                                    4, seed=9, collate_fn=list, shuffle_block=8, deal="strided")
    with pytest.raises(shufflepoint.StateError,
                       match="(?s)dataset_fingerprint.*written by a Mixture without a schedule"):
        appended_loader([(0, [1, 1])]).load_state_dict(plain.state_dict())


def test_packed_sources_count_phases_in_tokens():
    """seq_len 5: a phase starting at token 23 begins at row 5 (the first row wholly after it)."""
    mixture = Mixture([packed([30, 30, 30], 5, 0), packed([30, 30, 30], 5, 1)], samples_per_epoch=12,
                      schedule=[(0, [1, 0]), (23, [0, 1])])
    assert mixture.schedule.starts == [0, 5]
    loader = shufflepoint.DataLoader(mixture, 1, seed=1, collate_fn=lambda b: [ids(row) for row in b],
                                     shuffle_block=4)
    tags = [batch[0][0] // 10**6 for batch in loader]
    assert tags == [0] * 5 + [1] * 7


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(schedule=[(0, [1, 1, 1])]), ValueError, r"schedule\[0\] weights: found 3 weight\(s\)\n  expected: 2"),
    (dict(schedule=[(0, [1, 1]), (10, [1])]), ValueError, r"schedule\[1\] weights: found 1"),
    (dict(schedule=[(0, [1, 1]), (10, [1, 0]), (5, [0, 1])]), ValueError, r"schedule\[2\] start: found 5 after"),
    (dict(schedule=[(0, [1, 1]), (10, [1, 0]), (10, [0, 1])]), ValueError, r"schedule\[2\] start: found 10 after"),
    (dict(schedule=[(-1, [1, 1])]), ValueError, r"schedule\[0\] start: found -1"),
    (dict(schedule=[(4, [1, 1])]), ValueError, r"schedule\[0\] start: found 4\n  expected: 0"),
    (dict(schedule=[(0, [1, -1])]), ValueError, r"schedule\[0\] weights\[1\]: found -1"),
    (dict(schedule=[(0, [0, 0])]), ValueError, r"schedule\[0\] weights: found \[0, 0\], all 0"),
    (dict(schedule=[]), TypeError, r"schedule: found \[\]"),
    (dict(schedule=[(0, 1)]), TypeError, r"schedule\[0\] weights: found 1"),
    (dict(schedule=[5]), TypeError, r"schedule\[0\]: found 5\n  expected: a \(start, weights\) pair"),
])
def test_bad_schedules_are_refused_naming_the_argument(kwargs, error, words):
    with pytest.raises(error, match=words):
        Mixture([tagged("a", 5), tagged("b", 5)], **kwargs)


def test_weighted_pairs_with_a_schedule_are_refused_and_either_deal_reads_it():
    with pytest.raises(TypeError, match=r"sources\[0\]: found a \(dataset, weight\) pair"):
        Mixture([(tagged("a", 5), 1), (tagged("b", 5), 1)], schedule=[(0, [1, 1])])
    mixture = Mixture([tagged("a", 5), tagged("b", 5)], schedule=[(0, [1, 1])])
    spans = shufflepoint.DataLoader(mixture, 2)
    assert spans.deal == "spans" and spans.state_dict()["order_version"] == 7  # laid along the stretches
    strided = shufflepoint.DataLoader(mixture, 2, deal="strided")
    assert strided.state_dict()["order_version"] == 2


def test_a_global_batch_that_does_not_fit_the_run_s_grid_is_warned_about():
    """The schedule follows the run's first global batch (2 x 3 = 6): a resume or set_batch_size on a global
    batch that is a multiple of it keeps every guarantee, another one is warned about, naming both."""
    def loader(world, batch):
        mixture = Mixture([tagged("a", 50), tagged("b", 50)], samples_per_epoch=60,
                          schedule=[(0, [1, 1]), (35, [0, 1])])
        return shufflepoint.DataLoader(mixture, batch, world_size=world, rank=0, collate_fn=list)

    state = loader(2, 3).state_dict()
    assert state["grid"] == 6 and ":grid=" not in state["dataset_fingerprint"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for world, batch in ((3, 2), (1, 6), (4, 3)):  # 6, 6, 12
            resumed = loader(world, batch)
            resumed.load_state_dict(state)
            assert resumed.state_dict()["dataset_fingerprint"] == state["dataset_fingerprint"]
            assert resumed.state_dict()["grid"] == 6
        resumed.set_batch_size(6)  # 4 x 6 = 24
    resumed = loader(2, 2)
    with pytest.warns(UserWarning, match=r"global batch: found 4 rows .* its global batch of 6") as caught:
        resumed.load_state_dict(state)
    assert caught[0].filename == __file__  # said at the user's line
    with pytest.warns(UserWarning, match=r"global batch: found 10 rows .* its global batch of 6"):
        resumed.set_batch_size(5)


def test_a_phase_appended_inside_the_global_batch_reached_is_refused():
    """A resume on another global batch can stop inside one of the grid's (4 rows): a phase may then be
    appended from the end of that global batch on, not inside it."""
    first = appended_loader([(0, [1, 1])])  # 1 x 4: the grid is 4
    iterator = iter(first)
    for _ in range(3):
        next(iterator)
    narrower = appended_loader([(0, [1, 1])])
    narrower.load_state_dict(first.state_dict())
    with pytest.warns(UserWarning, match=r"global batch: found 3 rows .* its global batch of 4"):
        narrower.set_batch_size(3)
    next(iter(narrower))  # positions 12..14: the state stops at 15, inside the grid's global batch 12..15
    state = narrower.state_dict()
    with pytest.raises(shufflepoint.StateError, match=r"schedule\[1\]"):
        appended_loader([(0, [1, 1]), (14, [1, 0])]).load_state_dict(state)
    resumed = appended_loader([(0, [1, 1]), (16, [1, 0])])
    resumed.load_state_dict(state)
    with pytest.warns(shufflepoint.ResumeWarning, match=r"batch_size: the saved run changed its batch size"):
        rest = [x for batch in resumed for x in batch]  # at the constructor's 4, not the run's 3: said (issue 35)
    assert len(rest) == 25 and {x[0] for x in rest[1:]} == {"a"}  # position 15 in phase 0, then phase 1


@SPLIT_BATCH
@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 20), min_size=2, max_size=3), data=st.data(),
       seed=st.integers(0, 2**32), epoch=st.integers(0, 2), steps=st.integers(0, 4),
       first=st.tuples(st.integers(1, 3), st.integers(1, 4)), then=st.tuples(st.integers(1, 3), st.integers(1, 4)))
def test_any_schedule_resumed_on_any_world_serves_each_slot_once_and_the_same_world_exactly(
        lengths, data, seed, epoch, steps, first, then):
    schedule = data.draw(schedules(len(lengths)))
    length, block = data.draw(st.integers(4, 40)), data.draw(st.integers(1, 12))

    def make_loader(rank, world_size, batch_size):
        return shufflepoint.DataLoader(make(lengths, schedule, length), batch_size, seed=seed, rank=rank,
                                       world_size=world_size, collate_fn=list, shuffle_block=block)

    expected = read_whole(make_loader, *first, epoch=epoch)  # the first run's world and global batch (its grid)
    steps = min(steps, length // (first[0] * first[1]))
    seen = served_across_a_resize(make_loader, first, then, steps=steps, epoch=epoch)
    if steps:  # an epoch not begun is laid by the world that reads it (spans)
        assert seen == expected
    # the same world: the rest of every rank's stream, batch for batch
    for rank in range(first[0]):
        reference = make_loader(rank, *first)
        reference.set_epoch(epoch)
        batches = list(reference)
        stopped = make_loader(rank, *first)
        stopped.set_epoch(epoch)
        iterator = iter(stopped)
        for _ in range(min(steps, len(batches))):
            next(iterator)
        resumed = make_loader(rank, *first)
        resumed.load_state_dict(stopped.state_dict())
        assert list(resumed) == batches[min(steps, len(batches)):]


def test_the_sampler_reads_a_scheduled_mixture_under_either_deal():
    mixture = Mixture([tagged("a", 5), tagged("b", 5)], schedule=[(0, [1, 1])])
    assert shufflepoint.ResumableSampler(mixture, 2, 0).deal == "spans"
    assert shufflepoint.ResumableSampler(mixture, 2, 0, deal="strided").deal == "strided"
    with pytest.raises(ValueError, match=r"deal: found 'diagonal'\n  expected: one of"):
        shufflepoint.ResumableSampler(mixture, 2, 0, deal="diagonal")


def test_the_sampler_accepts_appended_phases_too():
    def sampler(schedule):
        return shufflepoint.ResumableSampler(Mixture([tagged("a", 40), tagged("b", 40)], samples_per_epoch=40,
                                                     schedule=schedule), 1, 0, seed=9, shuffle_block=8,
                                             deal="strided")

    first = sampler([(0, [1, 1])])
    iterator = iter(first)
    before = [next(iterator) for _ in range(12)]
    longer = [(0, [1, 1]), (16, [1, 0])]
    resumed = sampler(longer)
    resumed.load_state_dict(first.state_dict())
    assert before + list(resumed) == list(sampler(longer))
    with pytest.raises(shufflepoint.StateError, match=r"schedule\[1\]"):
        sampler([(0, [1, 1]), (12, [1, 0])]).load_state_dict(first.state_dict())


def test_numpy_numbers_and_tiny_weights_are_read_exactly():
    schedule = Schedule([(np.int64(0), [np.int64(3), 1e-15]), (np.int64(10), [np.float64(0.7), 0.3])], sources=2)
    assert schedule.starts == [0, 10] and schedule.shares[1] == (Fraction(7, 10), Fraction(3, 10))
    assert 0 < schedule.shares[0][1] < Fraction(1, 10**14)  # small, never rounded to a pause


def test_a_ramp_goes_linearly_to_the_next_phase_in_equal_steps():
    schedule = Schedule([(0, [1, 0], 4), (100, [0, 1])], sources=2)
    assert schedule.starts == [0, 25, 50, 75, 100]
    assert [share[1] for share in schedule.shares] == [0, Fraction(1, 4), Fraction(1, 2), Fraction(3, 4), 1]
    assert schedule.counts(100) == [63, 37]  # 25 * (1 + 3/4 + 1/2 + 1/4) and 25 * (1/4 + 1/2 + 3/4), rounded
    assert len(schedule.identities()) == 2  # a phase as written, however many steps
    assert schedule.name(2) == "schedule[0] (ramp step 2)" and schedule.name(4) == "schedule[1]"


@SPLIT_BATCH
def test_a_resume_that_changes_a_started_ramp_or_where_it_goes_is_refused_naming_it():
    first = appended_loader([(0, [1, 1], 4), (32, [1, 0])])
    iterator = iter(first)
    for _ in range(5):  # 20 positions: ramp steps 0-2 (starts 0, 8, 16) started
        next(iterator)
    for changed in ([(0, [1, 1], 2), (32, [1, 0])], [(0, [1, 1], 4), (32, [1, 2])], [(0, [1, 1], 4), (36, [1, 0])]):
        with pytest.raises(shufflepoint.StateError, match=r"schedule\[0\]"):  # its steps, its target, its end
            appended_loader(changed).load_state_dict(first.state_dict())
    longer = appended_loader([(0, [1, 1], 4), (32, [1, 0]), (40, [0, 1])])  # appended after the ramp's end
    longer.load_state_dict(first.state_dict())


@pytest.mark.parametrize("schedule, words", [
    ([(0, [1, 1], 0), (10, [1, 0])], r"schedule\[0\] ramp steps: found 0"),
    ([(0, [1, 1]), (10, [1, 0], 3)], r"schedule\[1\] ramp steps: found 3\n  expected: 1 on the last phase"),
    ([(0, [1, 1], 20), (10, [1, 0])], r"schedule\[0\] ramp steps: found 20\n  expected: at most 10, the positions"),
])
def test_bad_ramps_are_refused_naming_the_phase(schedule, words):
    with pytest.raises(ValueError, match=words):
        Schedule(schedule, sources=2)


@settings(max_examples=60, deadline=None)
@given(world=st.integers(1, 5), batch=st.integers(1, 6), sources=st.integers(2, 4), data=st.data(),
       seed=st.integers(0, 2**32), epochs=st.integers(1, 2), block=st.integers(1, 50))
def test_every_global_batch_follows_the_phase_of_its_first_sample_and_holds_its_share(
        world, batch, sources, data, seed, epochs, block):
    """Phases start anywhere (ramps too), any shuffle_block, an epoch that is no multiple of the global batch:
    each global batch of all ranks together follows the phase of its first sample and holds that phase's
    share, within one sample for two sources (S - 1 for S), and so does any run of global batches of one phase
    in one epoch (drop_last leaves the epoch's tail out of every global batch)."""
    global_batch = world * batch
    length = data.draw(st.integers(global_batch, 10 * global_batch))
    schedule = data.draw(schedules(sources))
    mixture = Mixture([tagged(chr(97 + s), 30) for s in range(sources)], samples_per_epoch=length, schedule=schedule)
    loaders = [shufflepoint.DataLoader(mixture, batch, seed=seed, rank=r, world_size=world, collate_fn=list,
                                       drop_last=True, shuffle_block=block) for r in range(world)]
    bound = 1 if sources == 2 else sources - 1
    steps = []  # (phase of the first sample, counts per source) of every global batch
    for epoch in range(epochs):
        for loader in loaders:
            loader.set_epoch(epoch)
        for k, together in enumerate(zip(*[list(loader) for loader in loaders], strict=True)):
            counts = Counter(x[0] for batch_of_rank in together for x in batch_of_rank)
            steps.append(((epoch, mixture.schedule.phase(epoch * length + k * global_batch)),
                          [counts[chr(97 + s)] for s in range(sources)]))
    assert len(steps) == epochs * (length // global_batch)
    for first in range(len(steps)):
        for last in range(first, min(len(steps), first + 6)):
            if steps[last][0] != steps[first][0]:
                break
            shares = mixture.schedule.shares[steps[first][0][1]]
            for s, share in enumerate(shares):
                held = sum(counts[s] for _, counts in steps[first:last + 1])
                assert abs(held - (last + 1 - first) * global_batch * share) < bound, (first, last, s, steps)
                if share == 0:
                    assert held == 0  # a paused source reads nothing in its phase


def test_a_fixed_global_batch_gives_the_same_global_batches_of_a_schedule_on_any_world():
    """2 x 6, 3 x 4, 4 x 3 and 12 x 1: the same samples in every global batch, phases starting at 40 and
    100 (inside global batches 3 and 8) placed on the same edges, stopped and resumed on another world."""
    def loaders(world, batch, epoch=0):
        mixture = Mixture([tagged("a", 70), tagged("b", 40), tagged("c", 25)], samples_per_epoch=96,
                          schedule=[(0, [6, 3, 1]), (40, [1, 1, 1], 3), (100, [0, 1, 3])])
        group = [shufflepoint.DataLoader(mixture, batch, seed=7, rank=r, world_size=world, collate_fn=list)
                 for r in range(world)]
        for loader in group:
            loader.set_epoch(epoch)
        return group

    def global_batches(group, steps=None):
        iterators = [iter(loader) for loader in group]
        found = []
        while steps is None or len(found) < steps:
            batches = [next(iterator, None) for iterator in iterators]
            if batches[0] is None:
                return found
            found.append(sorted(x for b in batches for x in b))
        return found

    for (w1, b1), (w2, b2) in [((2, 6), (3, 4)), ((4, 3), (12, 1)), ((12, 1), (2, 6))]:
        # under spans the first world lays the order (its stretches), then kept at this global batch
        reference = global_batches(loaders(w1, b1)) + global_batches(loaders(w1, b1, epoch=1))
        assert len(reference) == 16
        first = loaders(w1, b1)
        head = global_batches(first, steps=5)
        second = loaders(w2, b2)
        for loader in second:
            loader.load_state_dict(first[0].state_dict())
        rest = global_batches(second)
        for loader in second:
            loader.set_epoch(1)
        assert head + rest + global_batches(second) == reference, (w1, b1, w2, b2)


@settings(max_examples=150, deadline=None)
@given(weights=st.lists(st.integers(1, 9), min_size=3, max_size=5), grid=st.integers(1, 64), data=st.data())
def test_three_or_more_sources_stay_within_one_row_of_their_share_since_the_phase_began(weights, grid, data):
    """On a loader's grid, a phase whose every source holds a row of each global batch counts by largest
    remainders: at every edge, each source is within one row of share x rows since the phase began (the
    chain of floors leaves up to S - 1 to the last source), so any run of global batches is within two."""
    length = data.draw(st.integers(grid, 10 * grid))
    second = data.draw(st.integers(0, 3 * length))
    schedule = Schedule([(0, weights)] + ([(second, weights[::-1])] if second else []), sources=len(weights))
    on_grid = schedule.on_grid(grid, length)
    edges = sorted({e * length + k * grid for e in range(3) for k in range(-(-length // grid))} | {3 * length})
    for i, start in enumerate(on_grid.starts):
        steady = all(share * size >= 1 for share in on_grid.shares[i]
                     for size in {grid, length % grid or grid})
        stop = on_grid.starts[i + 1] if i + 1 < len(on_grid.starts) else edges[-1]
        before = on_grid.counts(start)
        previous = before
        for edge in (e for e in edges if start < e <= stop):
            counts = on_grid.counts(edge)
            assert all(b >= a for a, b in zip(previous, counts, strict=True))  # each source's stream only grows
            assert sum(counts) == edge
            error = max(abs(c - b - share * (edge - start))
                        for c, b, share in zip(counts, before, on_grid.shares[i], strict=True))
            assert error < (1 if steady else len(weights) - 1), (i, edge, counts)
            previous = counts


def _piece_by_piece(order, mixture, flat):
    """The order's definition, one piece (window, phase) at a time: its slots shuffled by a keyed Feistel
    order of the piece, source s owning counts(b) - counts(a) of them (``take`` computes all pieces at once)."""
    from shufflepoint._order.blocks import _sub_seed
    from shufflepoint._order.feistel import FeistelOrder
    from shufflepoint._shards.corpora.mixture.scheduled import _PHASE_TAG, _PIECE_TAG

    schedule, n, window = order._schedule, order.n, order._window
    found = []
    for p in flat.tolist():
        k = min(p // window, order._windows - 1)
        g = order._origin + p
        i = schedule.phase(g)
        start, stop = k * window, n if k == order._windows - 1 else (k + 1) * window
        a = max(order._origin + start, schedule.starts[i])
        b = min(order._origin + stop, schedule.starts[i + 1] if i + 1 < len(schedule.starts) else 2**62)
        before, after = schedule.counts(a), schedule.counts(b)
        slot = FeistelOrder(b - a, _sub_seed(_sub_seed(order.seed, _PIECE_TAG, k), _PHASE_TAG, i),
                            order.epoch).index(g - a)
        s, first = 0, 0
        while slot >= first + after[s] - before[s]:
            first += after[s] - before[s]
            s += 1
        stream = before[s] + slot - first
        found.append(int(order._from_source(s, np.array([stream], dtype=np.int64))[0]))
    return found


@settings(max_examples=60, deadline=None)
@given(case=scheduled_mixtures(), seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 3),
       grid=st.one_of(st.none(), st.integers(1, 40)), data=st.data())
def test_the_order_computed_in_arrays_is_its_piece_by_piece_definition(case, seed, epoch, grid, data):
    lengths, schedule, length, block = case
    mixture = make(lengths, schedule, length)
    order = mixture.epoch_order(seed, epoch, block, grid=grid)
    flat = np.asarray(data.draw(st.lists(st.integers(0, length - 1), min_size=1, max_size=40)), dtype=np.int64)
    assert order.take(flat).tolist() == _piece_by_piece(order, mixture, flat)


def test_a_schedule_added_or_removed_on_resume_is_refused_naming_it():
    a, b = list(range(20)), list(range(100, 110))
    plain = shufflepoint.DataLoader(shufflepoint.Mixture([(a, 1.0), (b, 1.0)]), 2, seed=1, collate_fn=list)
    scheduled = shufflepoint.DataLoader(shufflepoint.Mixture([a, b], schedule=[(0, [1, 1]), (10, [0, 1])]), 2,
                                        seed=1, collate_fn=list)
    with pytest.raises(shufflepoint.StateError, match=r"written by a Mixture without a schedule, and this one is "
                                                      r"built with"):
        scheduled.load_state_dict(plain.state_dict())
    with pytest.raises(shufflepoint.StateError, match=r"written by a Mixture with a schedule, and this one is built "
                                                      r"without"):
        plain.load_state_dict(scheduled.state_dict())
