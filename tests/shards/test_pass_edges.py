"""Order version 7 (``mixture/pass_edges.py``, ``mixture/spread.py``): a window where a source's pass ends numbers
its slots of the source in the interleave order, so that every prefix of the epoch's interleave order (where every
global batch edge of a loader falls, on any world and at any global batch) reads whole passes; each part's piece of a
window holds version 6's rows (but a pass edge's source's), spread among its positions."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint._shards.corpora.mixture.order import decode, offsets
from shufflepoint._shards.corpora.mixture.pass_edges import interleave_ranks, pass_edges
from shufflepoint._shards.corpora.mixture.spread import radical_inverse, spread
from shufflepoint._shards.corpora.mixture.stretches import StretchedMixtureOrder


def test_a_window_holds_a_pass_edge_only_where_a_pass_ends_strictly_inside_it():
    edges = np.array([[0, 0], [3, 5], [6, 5], [10, 9]])  # two sources of 5 and 4 rows
    assert pass_edges(np.array([0, 0]), edges, [5, 4]).tolist() == [[False, True], [True, False], [False, True]]
    assert pass_edges(np.array([2, 0]), edges, [5, 4])[:, 0].tolist() == [False, False, True]  # 2 read before
    assert interleave_ranks(np.array([[False, True], [True, True], [False, False]])).tolist() == \
        [[-1, 0], [1, 2], [-1, -1]]


def interleave_positions(order: StretchedMixtureOrder) -> np.ndarray:
    """The epoch's positions in the interleave order: position j of every part (the parts in turn), j = 0, 1, ..."""
    starts, lengths = order._starts, order._lengths
    return np.array([int(starts[r]) + j for j in range(int(lengths.max())) for r in range(len(starts))
                     if j < lengths[r]], dtype=np.int64)


@st.composite
def mixtures(draw):
    """2-3 list sources of 1-25 rows with a schedule of 1-2 phases, an epoch of 6-60 rows, 1-5 parts, a grid."""
    count = draw(st.integers(2, 3))
    sources = [list(range(100 * s, 100 * s + draw(st.integers(1, 25)))) for s in range(count)]
    phases = [(0, draw(st.lists(st.integers(1, 4), min_size=count, max_size=count)))]
    if draw(st.booleans()):
        phases.append((draw(st.integers(1, 90)), draw(st.lists(st.integers(0, 4), min_size=count,
                                                               max_size=count).filter(any))))
    n, parts = draw(st.integers(6, 60)), draw(st.integers(1, 5))
    return sources, phases, n, parts, parts * draw(st.integers(1, 4))


@settings(max_examples=50, deadline=None)
@given(mixture=mixtures(), seed=st.integers(0, 2**32))
def test_every_interleave_prefix_reads_whole_passes_and_each_part_reads_version_6_s_rows(mixture, seed):
    sources, phases, n, parts, grid = mixture
    try:
        built = shufflepoint.Mixture(sources, samples_per_epoch=n, schedule=phases)
    except ValueError:  # a source whose share rounds to 0
        return
    times = Counter()
    owner = {row: s for s, rows in enumerate(sources) for row in rows}
    for epoch in range(3):
        seven = StretchedMixtureOrder(built, seed, epoch, 8, parts, grid)
        six = StretchedMixtureOrder(built, seed, epoch, 8, parts, grid, version=6)
        positions = interleave_positions(seven)
        rows = [built[int(i)] for i in seven.take(positions)]
        old = [built[int(i)] for i in six.take(positions)]
        window = np.minimum((positions - seven._starts[np.searchsorted(seven._starts, positions, "right") - 1])
                            // seven._window, seven._pass_edges.shape[0] - 1)
        part = np.searchsorted(seven._starts, positions, "right") - 1
        for k in np.unique(window).tolist():  # the same rows in every window; in each part's piece but at a pass edge
            inside = np.flatnonzero(window == k)
            assert Counter(rows[i] for i in inside) == Counter(old[i] for i in inside)
            edged = {s for s in range(len(sources)) if seven._pass_edges[k, s]}
            for r in np.unique(part[inside]).tolist():
                piece = inside[part[inside] == r]
                assert Counter(rows[i] for i in piece if owner[rows[i]] not in edged) == \
                    Counter(old[i] for i in piece if owner[old[i]] not in edged)
        for row in rows:  # every prefix: no row of a source read k + 1 times before each of its rows k times
            times[row] += 1
            source = sources[owner[row]]
            assert times[row] - min(times[r] for r in source) <= 1


def test_version_6_breaks_a_pass_at_an_interleave_prefix_that_7_keeps():
    """The case this order exists for, pinned: 2 parts, windows of 3, a source of 3 rows read 4 times an epoch:
    version 6 reads a row a third time at some prefix while another was read once; version 7 never."""
    built = shufflepoint.Mixture([list(range(40)), list(range(100, 103))], samples_per_epoch=36,
                                 schedule=[(0, [2, 1])])
    worst = {}
    for version in (6, 7):
        order = StretchedMixtureOrder(built, 0, 0, 8, 2, 6, version=version)
        times = Counter()
        worst[version] = 0
        for i in order.take(interleave_positions(order)):
            row = built[int(i)]
            times[row] += 1
            if row >= 100:
                worst[version] = max(worst[version], times[row] - min(times[r] for r in range(100, 103)))
    assert worst == {6: 2, 7: 1}


def test_a_version_other_than_6_or_7_is_refused_by_name():
    built = shufflepoint.Mixture([list(range(10)), list(range(5))], samples_per_epoch=12, schedule=[(0, [1, 1])])
    with pytest.raises(ValueError, match="version: found 5"):
        StretchedMixtureOrder(built, 1, 0, 8, 2, 4, version=5)


@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(0, 40), min_size=1, max_size=6).filter(any))
def test_every_prefix_of_a_spread_holds_each_source_within_two_rows_of_its_share(counts):
    """A divisor method's order (Sainte-Lague, due times floored: integers) keeps each source within 2 rows of its
    share at every prefix (within 1 for two sources; ties among many small sources push one past 1)."""
    source, element = spread(np.array(counts))
    length = sum(counts)
    assert sorted(zip(source.tolist(), element.tolist(), strict=True)) == \
        [(s, e) for s, c in enumerate(counts) for e in range(c)]  # each slot once, each source's in order
    for s, c in enumerate(counts):
        held = np.cumsum(source == s)
        assert np.all(np.abs(held - np.arange(1, length + 1) * c / length) <= (1 if len(counts) <= 2 else 2))


def test_the_first_parts_places_lie_evenly_for_any_number_of_them():
    places = radical_inverse(np.arange(64))
    assert sorted(places.tolist()) == [i / 64 for i in range(64)]
    for m in range(1, 65):
        assert np.histogram(places[:m], bins=8, range=(0, 1))[0].max() <= -(-m // 8) + 1


@pytest.mark.parametrize("parts, batch, weights", [(4, 4, [4, 1]), (4, 8, [3, 1]), (8, 4, [2, 1, 1]),
                                                   (64, 4, [8, 1, 1])])
def test_every_interleave_prefix_holds_each_source_within_a_few_rows_of_its_count(parts, batch, weights):
    """Version 7's spread (spread.py): any global batch edge (a prefix of the interleave order) holds each source
    within 2 rows of the schedule's count on 4 ranks and 4 on 64 (version 6's shuffle: 3 and 19 there)."""
    sources = [list(range(5000)), list(range(700)), list(range(300))][:len(weights)]
    built = shufflepoint.Mixture(sources, samples_per_epoch=parts * batch * 10, schedule=[(0, weights)])
    grid, worst = parts * batch, 0.0
    for seed in range(3):
        order = StretchedMixtureOrder(built, seed, 0, 64, parts, grid)
        source, _ = decode(offsets(built.lengths), built.lengths, order.take(interleave_positions(order)))
        edges = np.arange(1, source.size + 1)
        expected = built.schedule_on_grid(grid).chained().counts_many(edges)
        held = np.stack([np.cumsum(source == s) for s in range(len(weights))], axis=1)
        worst = max(worst, float(np.abs(held - expected).max()))
    assert worst <= (2 if parts <= 8 else 4), worst
