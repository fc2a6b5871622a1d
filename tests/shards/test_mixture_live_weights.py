"""``set_weights`` on a running loader or a ``Mixture``: a phase appended at the next global batch, under either deal,
kept in the state with its exact shares. Proven against a Mixture whose schedule holds the phase from the start: the
same batches under ``strided`` (the same sources at every place under ``spans``, whose rows are laid anew at the
change, ``mixture/lays.py``), the same ``which``, a resume from the state exact on the same world and every row once
on another; and each refusal changes nothing."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_mixture_lays import read as read_ranks

import shufflepoint
from shufflepoint import ResumeWarning, StateError

SOURCES = [list(range(0, 50)), list(range(100, 120)), list(range(200, 230))]
SPE = 48


def mixture(*later):
    return shufflepoint.Mixture(SOURCES, samples_per_epoch=SPE, schedule=[(0, [1, 1, 1]), *later])


def loader_of(dataset, deal="strided", world=1, rank=0, batch=3):
    return shufflepoint.DataLoader(dataset, batch, seed=3, deal=deal, shuffle_block=8, collate_fn=list,
                                   world_size=world, rank=rank, verify_ranks=False)


def read(loader, steps, changes=None):
    """``steps`` batches, across epochs, calling ``set_weights`` before the steps ``changes`` names."""
    found, batches = [], iter(loader)
    while len(found) < steps:
        if changes and loader.step in changes:
            loader.set_weights(changes[loader.step])
        batch = next(batches, None)
        if batch is None:
            batches = iter(loader)
            continue
        found.append(batch)
    return found


def phases_from(state):
    return [(start, [Fraction(x) for x in shares]) for start, _, *rest in state["phases"][1:] for shares in rest]


weights = st.lists(st.integers(0, 9), min_size=3, max_size=3).filter(any)


@pytest.mark.mixture
@settings(max_examples=25, deadline=None)
@given(first=st.integers(1, 20), second=st.integers(0, 20), a=weights, b=weights,
       deal=st.sampled_from(["strided", "spans"]), batch=st.sampled_from([2, 3, 4]))
def test_a_live_change_is_the_schedule_with_that_phase(first, second, a, b, deal, batch):
    changes = {first: a, first + second: b}  # second 0: two calls before one batch, the later one wins
    live = loader_of(mixture(), deal, batch=batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResumeWarning)
        got = read(live, 60, changes)
    state = live.state_dict()
    starts = [start for start, _ in phases_from(state)]
    assert starts == sorted({step * batch for step in changes})  # from the next global batch on
    assert [[Fraction(x) for x in p[2]] for p in state["phases"][1:]][-1] == [Fraction(x, sum(b)) for x in b]
    built = mixture(*phases_from(state))
    if deal == "strided":  # the past never rewritten
        assert read(loader_of(built, deal, batch=batch), 60) == got
    else:  # the same source at every place; each source's rows laid anew from the change (lays)
        assert [[x // 100 for x in step] for step in read(loader_of(built, deal, batch=batch), 60)] == \
            [[x // 100 for x in step] for step in got]
    assert all([live.dataset[i] for i in live.which(step)[0]] == got[step] for step in range(60))
    resumed = loader_of(mixture(), deal, batch=batch)  # the state alone brings the live phases back
    resumed.load_state_dict(state)
    assert resumed.dataset.phases == live.dataset.phases
    assert all([resumed.dataset[i] for i in resumed.which(step)[0]] == got[step] for step in range(0, 60, 7))
    assert read(resumed, 20) == read(live, 20)


@pytest.mark.mixture
@settings(max_examples=15, deadline=None)
@given(change=st.integers(1, 15), stop=st.integers(1, 15), a=weights, new_world=st.sampled_from([1, 3]))
def test_a_resume_on_another_world_serves_every_position_once(change, stop, a, new_world):
    """strided, world 2 -> another world: per epoch, the samples served are those of a run that never stopped."""
    stop = change + stop
    ranks = [loader_of(mixture(), world=2, rank=r) for r in range(2)]
    before = [read(loader, stop, {change: a}) for loader in ranks]
    state = ranks[0].state_dict()
    assert state == ranks[1].state_dict()
    after = []
    for r in range(new_world):
        resumed = loader_of(mixture(), world=new_world, rank=r)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a global batch that is not a multiple of the run's grid
            resumed.load_state_dict(state)
            after.append(list(resumed))  # the rest of the epoch
    epoch_end = state["epoch"]  # the epoch the stop is in (at its end: the next iter() is empty)
    served = Counter(x for rank in before for batch in rank[epoch_end * SPE // 6:] for x in batch)
    served += Counter(x for rank in after for batch in rank for x in batch)
    whole = [loader_of(mixture(*phases_from(state)), world=2, rank=r) for r in range(2)]
    unstopped = [read(loader, (epoch_end + 1) * SPE // 6) for loader in whole]
    assert served == Counter(x for rank in unstopped for batch in rank[epoch_end * SPE // 6:] for x in batch)


@pytest.mark.parametrize("bad, field", [
    ([1, -1, 1], "weights[1]"), ([1, math.nan, 1], "weights[1]"), ([0, 0, 0], "weights"),
    ({0: 1, 1: 1, 5: 1}, "weights"), ({0: 1, 1: 1}, "weights"), ([1, 1], "weights"), ([1, math.inf, 1], "weights[1]"),
])
def test_bad_weights_are_refused_by_name_with_nothing_changed(bad, field):
    loader = loader_of(mixture())
    first = read(loader, 3)
    before = (loader.dataset.phases, loader.state_dict())
    with pytest.raises(ValueError, match=field.replace("[", r"\[")):
        loader.set_weights(bad)
    assert (loader.dataset.phases, loader.state_dict()) == before
    assert first + read(loader, 5) == read(loader_of(mixture()), 8)


def test_a_change_dated_in_the_past_is_refused():
    dataset = mixture((30, [1, 0, 1]))
    loader = loader_of(dataset)
    read(loader, 2)  # position 6: a scheduled phase at 30 lies ahead
    with pytest.raises(ValueError, match="weights start"):
        loader.set_weights([1, 1, 0])
    with pytest.raises(ValueError, match="weights start"):
        dataset.set_weights([1, 1, 0], at=30)
    assert dataset.phases == mixture((30, [1, 0, 1])).phases
    dataset.set_weights([1, 1, 0], at=31)
    assert [p[0] for p in dataset.phases] == [0, 30, 31]


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_a_capped_mixture_takes_weights_within_its_caps_and_refuses_the_rest_with_the_numbers(deal):
    """Source 1 (20 rows) capped at 2 reads an epoch (40 of its 48 samples): weights that give it 48 an epoch are
    refused naming the source, its rows and share, nothing changed; weights that give it 24 are taken from the next
    global batch."""
    capped = shufflepoint.Mixture(SOURCES, samples_per_epoch=SPE, schedule=[(0, [1, 1, 1])],
                                  max_repeats=[None, 2, None])
    loader = loader_of(capped, deal)
    read(loader, 2)
    phases = capped.phases
    with pytest.raises(ValueError, match=r"(?s)^max_repeats\[1\]: found 2\n.*source 1 has 20 rows and a share"):
        loader.set_weights([0, 1, 0])  # 48 a epoch: 2.4 reads of each row
    assert capped.phases == phases
    loader.set_weights([1, 2, 1])  # 24 of 48: 1.2 reads
    assert len(capped.phases) == 2
    rest = SPE // 3 - 2  # the batches left of epoch 0 (3 a batch), then epoch 1 whole
    read(loader, rest)
    epoch_1 = [x for batch in read(loader, SPE // 3) for x in batch]
    assert sum(100 <= x < 120 for x in epoch_1) == 24  # half of 48: within the cap of 40


def test_a_past_start_or_a_sampler_is_refused():
    plain = shufflepoint.Mixture([(SOURCES[0], 1), (SOURCES[1], 1)])
    with pytest.raises(ValueError, match="a phase that began is never rewritten"):  # its counts: the phase at 0
        plain.set_weights([1, 2], at=0)
    sampler = shufflepoint.ResumableSampler(plain, num_replicas=1, rank=0)
    with pytest.raises(AttributeError):  # a sampler has no set_weights: it reads the fixed order (fixed.py)
        sampler.set_weights([1, 2])
    plain.set_weights([1, 2], at=4)
    with pytest.raises(ValueError, match="set_weights: found weights changed on a Mixture read in its fixed order"):
        list(shufflepoint.ResumableSampler(plain, num_replicas=1, rank=0))
    with pytest.raises(ValueError, match="set_weights"):
        shufflepoint.DataLoader(list(range(10)), 2, world_size=1, rank=0).set_weights([1])


def test_under_spans_a_change_inside_an_epoch_applies_from_the_next_global_batch_without_a_warning():
    loader = loader_of(mixture(), "spans")
    read(loader, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader.set_weights([1, 0, 0])
    assert [p[0] for p in loader.dataset.phases] == [0, 6]
    assert all(x < 50 for batch in read(loader, SPE // 3) for x in batch)
    at_start = loader_of(mixture(), "spans")
    read(at_start, SPE // 3)  # the whole first epoch: the next global batch is the next epoch's first
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        at_start.set_weights([1, 0, 0])
    assert [p[0] for p in at_start.dataset.phases] == [0, SPE]
    assert all(x < 50 for batch in read(at_start, SPE // 3) for x in batch)


def test_the_first_phase_is_not_rewritten_and_a_repeated_call_replaces_its_own():
    loader = loader_of(mixture())
    with pytest.raises(ValueError, match="weights start"):
        loader.set_weights([1, 0, 0])  # the schedule's own phase starts here: build the Mixture with them
    read(loader, 1)
    loader.set_weights([1, 0, 0])
    loader.set_weights([0, 1, 0])
    assert [p[0] for p in loader.dataset.phases] == [0, 3] and loader.dataset.phases[1][2] == ["0", "1", "0"]
    assert all(100 <= x < 120 for x in read(loader, 1)[0])


def test_a_damaged_live_phase_is_refused_with_nothing_changed():
    loader = loader_of(mixture())
    read(loader, 2, {1: [3, 1, 0]})
    state = loader.state_dict()
    state["phases"][1][2] = ["1/2", "1/2", "0"]  # not the shares its hash holds
    fresh = loader_of(mixture())
    with pytest.raises(StateError, match=r"phases\[1\]"):
        fresh.load_state_dict(state)
    assert fresh.dataset.phases == mixture().phases
    state["phases"][1][2] = ["3/4", "1/4"]
    with pytest.raises(StateError, match=r"phases\[1\]"):
        fresh.load_state_dict(state)
    assert fresh.dataset.phases == mixture().phases


def test_packed_sources_change_at_the_next_global_batch_in_rows_and_resume_in_tokens():
    """seq_len 5: the loader's positions are rows; the live phase starts at the next row, recorded in positions as
    every phase is (``Mixture.set_weights`` itself takes tokens, as a schedule's starts), and a resume reads on."""
    from test_mixture import ids, packed

    def build():
        return shufflepoint.Mixture([packed([30, 30, 30], 5, 0), packed([30, 30, 30], 5, 1)], samples_per_epoch=12,
                                    schedule=[(0, [1, 0])])

    def loader(dataset):
        return shufflepoint.DataLoader(dataset, 1, seed=1, collate_fn=lambda b: [ids(row) for row in b],
                                       shuffle_block=4, deal="strided", world_size=1, rank=0)

    live = loader(build())
    tags = [batch[0][0] // 10**6 for batch in read(live, 3)]
    live.set_weights([0, 1])
    state = live.state_dict()
    assert [p[0] for p in state["phases"]] == [0, 3] and live.dataset.schedule.starts == [0, 3]
    resumed = loader(build())
    resumed.load_state_dict(state)
    rest = [batch[0][0] // 10**6 for batch in read(resumed, 9)]
    assert tags + rest == [0] * 3 + [1] * 9
    assert rest == [batch[0][0] // 10**6 for batch in read(live, 9)]


def test_batches_prefetched_by_workers_under_the_old_weights_are_dropped():
    live = shufflepoint.DataLoader(mixture(), 3, seed=3, deal="strided", shuffle_block=8, collate_fn=list,
                                   world_size=1, rank=0, num_workers=2, prefetch_factor=4)
    got = read(live, 12, {4: [0, 0, 1]})  # 8 batches were in flight when the weights changed
    assert all(200 <= x < 230 for batch in got[4:] for x in batch)
    assert got == read(loader_of(mixture(*phases_from(live.state_dict()))), 12)


def test_a_state_from_before_a_change_loaded_into_the_same_loader_reads_as_that_state_says():
    """A rollback: the live phases the Mixture gained after the state was saved are not the run's."""
    loader = loader_of(mixture())
    read(loader, 3)
    earlier = loader.state_dict()
    later = read(loader, 6, {5: [0, 1, 0]})[2:]
    assert len(loader.dataset.phases) == 2
    loader.load_state_dict(earlier)
    assert loader.dataset.phases == mixture().phases
    assert read(loader, 6)[2:] != later and read(loader_of(mixture()), 9)[3:9] == read_again(earlier)
    loader.load_state_dict(loader_state_at(6, {5: [0, 1, 0]}))  # and a state with one: read by it again
    assert len(loader.dataset.phases) == 2


def read_again(state):
    fresh = loader_of(mixture())
    fresh.load_state_dict(state)
    return read(fresh, 6)


def loader_state_at(steps, changes):
    fresh = loader_of(mixture())
    read(fresh, steps, changes)
    return fresh.state_dict()


def test_packed_sources_under_spans_change_inside_an_epoch_keep_each_source_s_passes_whole():
    """Two Packed sources on 2 ranks under spans, weights changed inside epoch 0 and inside epoch 1: each source's
    rows (index ``pass * rows + row``) whole per pass at every global batch, and a resume from a state between the
    changes reads on exactly."""
    from test_mixture import ids, packed

    def build():
        return shufflepoint.Mixture([packed([30, 30, 30], 5, 0), packed([30, 30, 30], 5, 1)], samples_per_epoch=16,
                                    schedule=[(0, [1, 1])])

    def ranks():
        return [shufflepoint.DataLoader(build(), 2, seed=1, collate_fn=lambda b: [ids(row) for row in b],
                                        shuffle_block=4, world_size=2, rank=r, verify_ranks=False) for r in range(2)]


    changes = {1: [3, 1], 6: [1, 4]}
    whole = ranks()
    got = read_ranks(whole, 16, changes)
    mixture, seen = whole[0].dataset, Counter()
    for step in range(16):
        for r in range(2):
            indices = whole[0].which(step)[r]
            assert [ids(mixture[i]) for i in indices] == got[step][r]
            seen.update(mixture.source_of(i)[0] * 1000 + mixture.source_of(i)[1] % mixture.lengths[0]
                        for i in indices)
        for s in range(2):
            counts = [seen[s * 1000 + row] for row in range(mixture.lengths[s])]
            assert max(counts) - min(counts) <= 1, (step, s, counts)
    first = ranks()
    read_ranks(first, 4, changes)
    state = first[0].state_dict()
    resumed = ranks()
    for loader in resumed:
        loader.load_state_dict(state)
    assert read_ranks(resumed, 12, changes) == got[4:]
