"""The run's layout history: the worked example of ``_core/history.py``, its bound, and its validation."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._core.history import MAX_ENTRIES, MAX_EPOCH, History, Place
from shufflepoint._core.plan import STRIDED, Layout
from shufflepoint._core.spans import NAME as SPANS


def positions(history: History, step: int) -> tuple[int, dict[int, list[int]]]:
    placed = history.place(step)
    return placed.epoch, {r: placed.rank_positions(r).tolist() for r in range(placed.layout.world_size)}


def test_the_worked_example_of_the_module_docstring():
    history = History.from_entries(10, STRIDED, [[0, 2, 2, 0, 0, 0], [2, 1, 3, 0]])
    assert history.entries() == [[0, 2, 2, 0, 0, 0], [2, 1, 3, 0]]
    assert positions(history, 0) == (0, {0: [0, 2], 1: [1, 3]})
    assert positions(history, 1) == (0, {0: [4, 6], 1: [5, 7]})
    assert history.position(2) == Place(0, 8)
    assert positions(history, 2) == (0, {0: [8, 9]})
    assert history.position(3) == Place(1, 0)
    assert [positions(history, s) for s in range(3, 7)] == [
        (1, {0: [0, 1, 2]}), (1, {0: [3, 4, 5]}), (1, {0: [6, 7, 8]}), (1, {0: [9]})]
    assert positions(history, 7) == (2, {0: [0, 1, 2]})
    assert positions(history, 10) == (2, {0: [9]})
    assert history.place(3 + 4 * 1000).epoch == 1001


def test_record_adds_only_what_arithmetic_cannot_follow():
    n, layout = 10, Layout(10, 2, 2, False)
    history = History.begin(n, STRIDED, layout, Place(0, 0))
    assert history.record(3, layout, Place(1, 0)) is history  # the epoch roll-over is arithmetic
    assert history.record(2, layout, Place(0, 8)) is history
    resized = history.record(2, Layout(n, 1, 3, False), Place(0, 8))
    assert resized.entries() == [[0, 2, 2, 0, 0, 0], [2, 1, 3, 0]]
    jumped = resized.record(4, Layout(n, 1, 3, False), Place(5, 0))  # set_epoch(5) after step 4
    assert jumped.entries() == [[0, 2, 2, 0, 0, 0], [2, 1, 3, 0], [4, 1, 3, 0, 5, 0]]
    # a leg that read nothing is replaced, and a change back to where arithmetic arrives is no jump
    again = jumped.record(4, Layout(n, 1, 2, False), Place(1, 3))
    assert again.entries() == [[0, 2, 2, 0, 0, 0], [2, 1, 3, 0], [4, 1, 2, 0]]


def test_spans_entries_carry_the_epochs_segments():
    n = 10
    history = History.begin(n, SPANS, Layout(n, 2, 2, False), Place(0, 0))
    history = history.record(1, Layout(n, 3, 2, False), Place(0, 4, ((2, 2),)))
    history = history.record(3, Layout(n, 3, 2, False), Place(4, 0))
    assert history.entries() == [[0, 2, 2, 0, 0, []], [1, 3, 2, 0], [3, 3, 2, 0, 4, []]]
    # the spans module's worked example: after rank 0 read 0 1 and rank 1 read 5 6, W = 3 reads
    assert positions(history, 1) == (0, {0: [2, 3], 1: [4, 7], 2: [8, 9]})
    assert History.from_entries(n, SPANS, history.entries()).entries() == history.entries()


def test_past_the_bound_the_latest_changes_are_kept_and_earlier_steps_are_not_placed():
    n = 1000
    history = History.begin(n, STRIDED, Layout(n, 1, 1, False), Place(0, 0))
    for change in range(1, 41):
        history = history.record(change, Layout(n, 1, 1 + change % 7 + 1, False), history.position(change))
    assert len(history.entries()) == MAX_ENTRIES
    first = history.first_step
    assert first == 41 - MAX_ENTRIES  # legs began at steps 0..40; the latest 33 are kept
    assert len(history.entries()[0]) == 6  # the first kept leg carries its start
    with pytest.raises(ValueError, match=f"step: found {first - 1}\n"
                                         f"  expected: a step from {first} on, where this history starts"):
        history.place(first - 1)
    assert History.from_entries(n, STRIDED, history.entries()).entries() == history.entries()


@given(steps=st.lists(st.integers(1, 10**9), min_size=32, max_size=32, unique=True),
       worlds=st.lists(st.integers(1, 9999), min_size=32, max_size=32),
       batches=st.lists(st.integers(1, 9999), min_size=32, max_size=32))
@settings(max_examples=50, deadline=None)
def test_32_changes_take_at_most_1_kib(steps, worlds, batches):
    """The documented bound: 32 changes of world and batch size, steps < 1e9, W and B < 1e4."""
    entries: list[list[object]] = [[0, 4096, 4096, 0, 0, 0]]
    entries += [[s, w, b, 1] for s, w, b in zip(sorted(steps), worlds, batches, strict=True)]
    assert len(json.dumps(entries, separators=(",", ":"))) <= 1024


GOOD = [[0, 2, 2, 0, 0, 0], [2, 1, 3, 0]]


@pytest.mark.parametrize("entries, match", [
    ([], r"history: found 0 entries\n  expected: a list of 1 to 33"),
    ({"0": 1}, r"history: found dict"),
    ([[0, 2, 2, 0]], r"history\[0\]: found \[0, 2, 2, 0\]\n  expected: .*the first entry must carry its start"),
    ([[0, 2, 2, 0, 0, 0], [0, 1, 3, 0]], r"history\[1\]: found step 0\n  expected: a step after 0"),
    ([[0, 2, 2, 0, 0, 0], [2, 0, 3, 0]], r"history\[1\]: found \[2, 0, 3, 0\]"),
    ([[0, 2, 2, 2, 0, 0]], r"history\[0\]: found"),
    ([[0, 2, 2, False, 0, 0]], r"history\[0\]: found"),
    ([[0, 2, 2, 0, 0, 11]], r"history\[0\] start: found 11\n  expected: a cursor in \[0, n=10\]"),
    ([[0, 2, 2, 0, MAX_EPOCH + 1, 0]], r"history\[0\] epoch: found 4611686018427387905\n"
                                       r"  expected: an int in \[0, 4611686018427387904\]"),
    ([[0, 2, 2, 0, 0]], r"history\[0\]: found"),
    ([[0, 2, 2, 0, 0, 0], "x"], r"history\[1\]: found 'x'"),
    ([[-1, 2, 2, 0, 0, 0]], r"history\[0\]: found"),
    ([[0, 2, 2, 0, 0, 0]] * 34, r"found 34 entries"),
])
def test_each_malformed_history_is_named(entries, match):
    with pytest.raises(ValueError, match=match):
        History.from_entries(10, STRIDED, entries)


@pytest.mark.parametrize("start, match", [
    (5, r"history\[0\] start: found 5\n  expected: the epoch's segments"),
    ([[2, 0]], r"history\[0\] start segments\[0\]: found \[2, 0\]"),
    ([[2, 6]], r"history\[0\] start segments\[0\]: found \[2, 6\]\n  expected: at most 5 samples taken per rank"),
    ([[2, 1], [2, 1]], r"segments\[1\]: found \[2, 1\]\n  expected: a world size other than 2"),
    ([[1, 1]] * 65, r"at most 64"),
])
def test_each_malformed_spans_start_is_named(start, match):
    with pytest.raises(ValueError, match=match):
        History.from_entries(10, SPANS, [[0, 2, 2, 0, 0, start]])
