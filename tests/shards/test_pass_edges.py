"""Order version 7 (``mixture/pass_edges.py``): a window where a source's pass ends numbers its slots of the source
in the interleave order, so that every prefix of the epoch's interleave order (where every global batch edge of a
loader falls, on any world and at any global batch) reads whole passes; elsewhere it is version 6 exactly."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint._shards.corpora.mixture.pass_edges import interleave_ranks, pass_edges
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
def test_every_interleave_prefix_reads_whole_passes_and_version_6_is_kept_outside_pass_edge_windows(mixture, seed):
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
        for k in np.unique(window).tolist():  # the same rows in every window, moved only in a pass-edge window
            inside = np.flatnonzero(window == k)
            assert Counter(rows[i] for i in inside) == Counter(old[i] for i in inside)
            edged = {s for s in range(len(sources)) if seven._pass_edges[k, s]}
            assert all(rows[i] == old[i] for i in inside if owner[old[i]] not in edged)
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
