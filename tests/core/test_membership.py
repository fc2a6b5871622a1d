"""The membership history (``_core/membership.py``): every change of a live run kept, each committed step placed
(first lot, lots, participants, group size) as it was served, stored as compressed columns of differences.

The reference is a per-step simulation of what the live loader serves (``served``): an epoch of ``lots_per_epoch``
lots, each step reading one lot per participant (dynamic) or one lot (a fixed global batch), the epoch's last
step what is left. The history is fed exactly as ``LiveLoader._advance`` feeds it."""

from __future__ import annotations

import base64
import json
import random
import time
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._core.membership import Changes, Entry, decode, encode
from shufflepoint._errors import Refused

Served = tuple[int, int, int, int]  # (first lot, lots, participants, group_world) of a committed step


def served(quorums: list[tuple[int, int, int]], lots_per_epoch: int, fixed: bool = False) -> tuple[Changes,
                                                                                                     list[Served]]:
    """Run ``quorums`` — (steps, participants, group_world) stretches — through the history as the loader does;
    also what each step read, counted step by step."""
    changes, truth, step, lot, left = Changes(), [], 0, 0, lots_per_epoch
    for steps, participants, group_world in quorums:
        for _ in range(steps):
            drawn = 1 if fixed else participants
            changes = changes.committed(step, lot, drawn, participants, group_world)
            took = min(drawn, left)
            truth.append((lot, took, participants, group_world))
            step, lot, left = step + 1, lot + took, left - took
            if left == 0:
                left = lots_per_epoch
    return changes, truth


stretches = st.lists(st.tuples(st.integers(1, 9), st.integers(1, 5), st.integers(1, 3)), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(quorums=stretches, lots_per_epoch=st.integers(1, 40), fixed=st.booleans())
def test_every_committed_step_is_placed_as_it_was_served(quorums, lots_per_epoch, fixed) -> None:
    changes, truth = served(quorums, lots_per_epoch, fixed)
    stored = Changes.from_state(json.loads(json.dumps(changes.to_state())))
    assert stored == changes
    for step, expected in enumerate(truth[:-1]):
        assert changes.lot_step(step) == expected
        assert stored.lot_step(step) == expected
    first, lots, participants, group_world = stored.lot_step(len(truth) - 1)  # the last step: no entry after it
    assert (first, participants, group_world) == (truth[-1][0], *truth[-1][2:])  # says where the epoch
    assert lots >= truth[-1][1]  # ends (LiveLoader.which stops at the epoch's end)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(1, 2**40), st.integers(0, 2**40), st.integers(1, 2**31),
                               st.integers(1, 2**20), st.integers(1, 2**20)), max_size=40))
def test_columns_round_trip_whatever_the_values(rows) -> None:
    step = lot = 0
    table = []
    for dstep, dlot, lots, participants, group_world in rows:  # steps and lots increasing, as the history's are
        step, lot = step + dstep, lot + dlot
        table.append([step, lot, lots, participants, group_world])
    fields = [list(column) for column in zip(*table, strict=True)] if table else [[] for _ in range(5)]
    assert decode(encode(fields)).tolist() == table


def test_a_version_1_history_still_loads_with_the_state_group_size() -> None:
    old = [[0, 0, 3, 3], [4, 12, 2, 2], [9, 21, 3, 3]]  # a list, at most 1,024 entries, no group size
    changes = Changes.from_state(old, group_world=2)
    assert changes.entries == (Entry(0, 0, 3, 3, 2), Entry(4, 12, 2, 2, 2), Entry(9, 21, 3, 3, 2))
    assert changes.lot_step(5) == (14, 2, 2, 2)
    assert changes.lot_step(8) == (20, 1, 2, 2)  # the epoch's last step: what the next entry leaves it


def test_a_changed_group_size_is_an_entry_of_its_own() -> None:
    changes, truth = served([(3, 2, 2), (3, 2, 1)], 100)
    assert [e.group_world for e in changes.entries] == [2, 1]
    assert [changes.lot_step(s) for s in range(6)] == truth


def test_damaged_histories_are_refused_by_name() -> None:
    good, _ = served([(3, 2, 1), (2, 3, 1)], 50)
    text = good.to_state()
    raw = zlib.decompress(base64.b64decode(text))
    packed = lambda raw: base64.b64encode(zlib.compress(raw)).decode()  # noqa: E731
    for bad in ("not base64!", base64.b64encode(b"not zlib").decode(), text[:-8], packed(raw[:-3]),
                packed(raw + b"x"), packed(bytes(10**6)), 7, {"steps": []}):
        with pytest.raises(Refused, match="changes"):
            Changes.from_state(bad)
    backwards = encode([[0, 5, 3], [0, 1, 2], [1, 1, 1], [1, 1, 1], [1, 1, 1]])  # step 5 then 3
    with pytest.raises(Refused, match=r"changes\[2\]"):
        Changes.from_state(backwards)
    with pytest.raises(Refused, match=r"changes\[1\]"):
        Changes.from_state([[0, 0, 1, 1], [1, 1, 0, 1]])  # lots 0
    with pytest.raises(ValueError, match="step"):
        good.lot_step(-1)


def test_a_change_costs_o1_and_earlier_histories_stay_as_they_were() -> None:
    changes, _ = served([(2, 2, 1)], 100)
    later = changes.committed(2, 4, 3, 3, 1)
    branch = changes.committed(2, 4, 1, 1, 1)  # another future of the same past: the shared columns are copied
    assert len(changes) == 1 and len(later) == len(branch) == 2
    assert later.last == Entry(2, 4, 3, 3, 1) and branch.last == Entry(2, 4, 1, 1, 1)
    assert changes.lot_step(5) == (10, 2, 2, 1)


def month_of_changes(changes: int, groups: int = 2048, seed: int = 0) -> list[tuple[int, int, int]]:
    """``changes`` membership changes of a run of ``groups`` replica groups (16,384 GPUs as 2,048 groups of 8):
    a group fails and rejoins in turn, every 1 to 7,200 steps (hourly at ~1 step/s)."""
    rng = random.Random(seed)
    return [(rng.randint(1, 7200), groups - (i % 2), 8) for i in range(changes)]


def stretched(quorums: list[tuple[int, int, int]]) -> tuple[Changes, list[tuple[int, ...]]]:
    """``served`` for an epoch longer than the run, fed only at each stretch's first step (the loader's other calls
    change nothing), and the stretches as (first step, steps, first lot, participants, group_world)."""
    changes, starts, step, lot = Changes(), [], 0, 0
    for steps, participants, group_world in quorums:
        changes = changes.committed(step, lot, participants, participants, group_world)
        starts.append((step, steps, lot, participants, group_world))
        step, lot = step + steps, lot + steps * participants
    return changes, starts


@pytest.mark.parametrize("count", [1_000, 10_000])
def test_the_history_stays_small_and_fast(count) -> None:
    """Every change kept: a few bytes each (the numbers docs/torchft.md quotes; 100,000 in
    benchmarks/live_history.py)."""
    changes, starts = stretched(month_of_changes(count))
    began = time.perf_counter()
    text = changes.to_state()
    saved = time.perf_counter() - began
    began = time.perf_counter()
    loaded = Changes.from_state(text)
    load = time.perf_counter() - began
    assert len(loaded) == count and loaded == changes
    assert len(text) < 6 * count, f"{len(text) / count:.1f} bytes a change"
    assert saved < 1.0 and load < 1.0
    rng = random.Random(1)
    for step, steps, lot, participants, group_world in [*starts[:3], *rng.sample(starts, 200)]:
        later = step + rng.randint(0, steps - 1)  # any step of the stretch: one line of lots
        assert loaded.lot_step(later) == (lot + (later - step) * participants, participants, participants,
                                          group_world)
