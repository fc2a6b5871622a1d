"""Repetition caps of a ``Mixture`` (issue 44, item 2): a source read more often than its cap allows, over an epoch
or over the run's budget, is refused when the mixture is built, with the numbers; with ``spill=True`` the excess
goes to the other sources, and the mixture is read exactly and elastically as any (ranks simulated in one process,
resized between and inside epochs)."""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_mixture import ids, tagged
from test_mixture_passes import GLOBAL_BATCH, read_with_resizes

import shufflepoint
from shufflepoint._shards.corpora.mixture.mixture import Mixture
from shufflepoint._shards.corpora.packed.packed import Packed

A, B = tagged("a", 3000), tagged("b", 500)


def test_a_source_over_its_cap_is_refused_with_the_numbers():
    with pytest.raises(ValueError) as refused:
        Mixture([(A, 3), (B, 2)], samples_per_epoch=3000, max_repeats=[None, 2])
    message = str(refused.value)
    assert message.startswith("max_repeats[1]: found 2")
    for numbers in ("500 rows", "share of 0.4", "1,200 samples over an epoch", "2.4 reads of each row",
                    "at most 2 times (1,000 samples)", "spill=True"):
        assert numbers in message, (numbers, message)


def test_over_a_budget_the_caps_count_to_the_end_of_the_epoch_it_ends_in():
    with pytest.raises(ValueError, match=r"(?s)max_repeats\[1\].*3,600 samples over the budget of 8,000 \(to the "
                                         r"end of epoch 2\), 7.2 reads"):
        Mixture([(A, 3), (B, 2)], samples_per_epoch=3000, max_repeats=[None, 5], budget=8000)
    assert Mixture([(A, 3), (B, 2)], samples_per_epoch=3000, max_repeats=[None, 8], budget=8000).counts == [1800, 1200]


def test_caps_as_a_dict_cap_the_sources_named_and_no_other():
    assert Mixture([(A, 3), (B, 2)], samples_per_epoch=3000, max_repeats={1: 2}, spill=True).counts == [2000, 1000]
    with pytest.raises(ValueError, match=r"^max_repeats\[1\]: found 2"):
        Mixture([(A, 3), (B, 2)], samples_per_epoch=3000, max_repeats={1: 2})


def test_spill_gives_the_excess_to_the_other_sources():
    mixture = Mixture([(A, 3), (B, 2)], samples_per_epoch=3000, max_repeats=[None, 2], spill=True)
    assert mixture.counts == [2000, 1000]
    three = Mixture([(A, 1), (B, 2), (tagged("c", 100), 1)], samples_per_epoch=1000, max_repeats=[None, 1, 2],
                    spill=True)
    assert three.counts == [300, 500, 200]  # c capped at 200, then b at 500 (its share of the rest), a the rest
    assert Mixture([(A, 3), (B, 2)], samples_per_epoch=3000, max_repeats=[None, 5], budget=9000,
                   spill=True).counts == [2167, 833]  # 833 x 3 epochs <= 2,500


def test_a_scheduled_mixture_spills_phase_by_phase_and_keeps_every_epoch_within_the_cap():
    schedule = [(0, [3, 2]), (6000, [1, 1])]
    with pytest.raises(ValueError, match=r"(?s)max_repeats\[1\].*share of 0.5: 1,500 samples over an epoch"):
        Mixture([A, B], samples_per_epoch=3000, schedule=schedule, max_repeats=[None, 2])
    mixture = Mixture([A, B], samples_per_epoch=3000, schedule=schedule, max_repeats=[None, 2], spill=True)
    assert [mixture.schedule.counts((e + 1) * 3000)[1] - mixture.schedule.counts(e * 3000)[1]
            for e in range(4)] == [1000] * 4
    budget = Mixture([A, B], samples_per_epoch=3000, schedule=schedule, max_repeats=[None, 7], budget=10000,
                     spill=True)
    assert budget.schedule.counts(12000)[1] <= 3500
    assert [s for _, s in budget.phases] != [s for _, s in Mixture([A, B], samples_per_epoch=3000,
                                                                     schedule=schedule).phases]


@pytest.mark.parametrize(("options", "field"), [
    (dict(max_repeats=[None]), "max_repeats"),
    (dict(max_repeats=[None, -1]), r"max_repeats\[1\]"),
    (dict(max_repeats=[None, float("nan")]), r"max_repeats\[1\]"),
    (dict(max_repeats=[True, None]), r"max_repeats\[0\]"),
    (dict(max_repeats="2"), "max_repeats"),
    (dict(max_repeats={2: 1.0}), "max_repeats"),  # no source 2
    (dict(max_repeats={1: -1}), r"max_repeats\[1\]"),
    (dict(budget=100), "budget"),
    (dict(max_repeats=[None, 9], budget=0), "budget"),
    (dict(max_repeats=[None, 9], spill="yes"), "spill"),
    (dict(max_repeats=[0.5, 1], spill=True), "max_repeats"),  # no source can take the rest
])
def test_bad_caps_are_refused_by_name(options, field):
    with pytest.raises((TypeError, ValueError), match=rf"^{field}: found"):
        Mixture([(A, 3), (B, 2)], samples_per_epoch=3000, **options)


@st.composite
def capped_mixtures(draw):
    count = draw(st.integers(2, 3))
    sources = [tagged(chr(97 + s), draw(st.integers(1, 20))) for s in range(count)]
    length = draw(st.integers(6, 40))
    caps = [draw(st.one_of(st.none(), st.integers(1, 4).map(float), st.fractions(Fraction(1, 2), 4).map(float)))
            for _ in range(count)]
    budget = draw(st.one_of(st.none(), st.integers(1, 3 * length)))
    if draw(st.booleans()):
        schedule = [(0, draw(st.lists(st.integers(0, 4), min_size=count, max_size=count).filter(any)))]
        if draw(st.booleans()):
            schedule.append((draw(st.integers(1, 60)), draw(st.lists(st.integers(0, 4), min_size=count,
                                                                     max_size=count).filter(any))))
        options = dict(samples_per_epoch=length, schedule=schedule)
        mixed = sources
    else:
        options = dict(samples_per_epoch=length)
        mixed = list(zip(sources, draw(st.lists(st.integers(1, 4), min_size=count, max_size=count)), strict=True))
    legs = [(draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 8)))
            for _ in range(draw(st.integers(1, 3)))]
    return mixed, sources, dict(options, max_repeats=caps, budget=budget, spill=draw(st.booleans())), legs


@pytest.mark.mixture  # ~10 s: make test-mixture
@GLOBAL_BATCH
@settings(max_examples=40, deadline=None)
@given(run=capped_mixtures(), seed=st.integers(0, 2**32))
def test_a_capped_mixture_reads_no_row_past_its_cap_through_resizes(run, seed):
    """Built (or refused naming max_repeats): over its epochs (or its budget's), no row of a capped source is read
    more than ceil(cap) times, and a run resized inside and between epochs reads each epoch's rows as one rank."""
    mixed, sources, options, legs = run
    try:
        Mixture(mixed, **options)
    except ValueError as error:
        assert str(error).split(":")[0].startswith(("max_repeats", "weights", "schedule")), error
        return

    def make(rank, world, batch):
        return shufflepoint.DataLoader(Mixture(mixed, **options), batch, seed=seed, rank=rank, world_size=world,
                                       collate_fn=list, shuffle_block=16)

    length, budget = options["samples_per_epoch"], options["budget"]
    epochs = 3 if budget is None else -(-budget // length)
    try:
        resized = read_with_resizes(make, legs, epochs)
    except ValueError as error:  # a shuffle_block too small for the weights
        assert "shuffle_block" in str(error)
        return
    world, batch, _ = legs[0]
    assert resized == read_with_resizes(make, [(1, world * batch, None)], epochs)
    for s, cap in enumerate(options["max_repeats"]):
        if cap is None:
            continue
        if budget is None:
            for rows in resized:
                assert sum(rows[row] for row in sources[s]) <= math.floor(Fraction(cap) * len(sources[s]))
        else:
            total = sum(resized, Counter())
            times = [total[row] for row in sources[s]]
            assert sum(times) <= math.floor(Fraction(cap) * len(sources[s]))
            assert max(times) <= math.ceil(cap)


def test_packed_sources_are_capped_in_rows_over_a_budget_in_tokens():
    documents = [{"input_ids": [1000 * d + i for i in range(2 + d % 5)]} for d in range(30)]
    small = [{"input_ids": [t + 500 for t in d["input_ids"]]} for d in documents[:6]]

    def sources():
        return [Packed(corpus, 5, progress=False) for corpus in (documents, small)]

    rows = len(sources()[1])
    with pytest.raises(ValueError, match=r"^max_repeats\[1\]: found 2"):
        Mixture(sources(), samples_per_epoch=40, schedule=[(0, [1, 1])], max_repeats=[None, 2], budget=80 * 5)
    mixture = Mixture(sources(), samples_per_epoch=40, schedule=[(0, [1, 1])], max_repeats=[None, 2],
                      budget=80 * 5, spill=True)
    assert mixture.schedule.counts(80)[1] <= 2 * rows
    loader = shufflepoint.DataLoader(mixture, 4, seed=1, collate_fn=lambda batch: [ids(row) for row in batch],
                                     shuffle_block=4)
    read = Counter(row for _ in range(2) for batch in loader for row in batch)
    assert sum(count for row, count in read.items() if row[0] % 1000 >= 500) <= 2 * rows
