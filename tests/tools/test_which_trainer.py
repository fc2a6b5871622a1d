"""An HF Trainer's optimizer step -> loader steps: the closed form equals a batch-by-batch replay of the
Trainer's numbering (``_placement.place`` at each leg, a short first step after a resume between two
optimizer steps, a short last step at an epoch's end), over random runs with resizes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shufflepoint._core.trainer_placement import place
from shufflepoint._tools.which_trainer import Leg, Ran, loader_steps, trainer_step_at


def replay(legs_plan, accumulation):
    """Run the Trainer's loop batch by batch: (legs, {update: [runs as (first, stop)], latest last})."""
    legs, runs = [], {}
    step, epoch, done = 0, 0, None  # done: batches of the epoch taken in the previous leg's layout
    for batches_per_epoch, left_hint, updates in legs_plan:
        if done is None:
            left = batches_per_epoch
        elif done == "end":
            left = 0  # the previous leg finished its epoch exactly: nothing left here
        else:
            left = min(left_hint, batches_per_epoch)
        legs.append(Leg(step, epoch, batches_per_epoch, left))
        placed = place(epoch, batches_per_epoch, left, accumulation)
        global_step, epoch, k = placed.global_step, placed.epoch, placed.batches_done
        for _ in range(updates):
            take = accumulation - k % accumulation if k % accumulation else accumulation
            take = min(take, batches_per_epoch - k)
            global_step += 1
            runs.setdefault(global_step, []).append((step, step + take))
            step, k = step + take, k + take
            if k == batches_per_epoch:
                epoch, k = epoch + 1, 0
        done = "end" if k == 0 and step > legs[-1].step else k
        if done == "end":
            epoch -= 1  # the place is the finished epoch, with nothing left
    return legs, runs


def test_the_worked_example():
    legs = [Leg(0, 0, 8, 8), Leg(11, 1, 16, 10)]
    assert loader_steps(11, legs, 1) == [Ran(0, 10, 11, 1)]
    assert loader_steps(23, legs, 1) == [Ran(1, 11, 12, 1)]
    assert all(loader_steps(u, legs, 1) == [] for u in range(12, 23))


def test_a_step_is_refused_by_name():
    with pytest.raises(ValueError, match="--step: found 0, expected an optimizer step >= 1"):
        loader_steps(0, [Leg(0, 0, 4, 4)], 1)


@settings(max_examples=300, deadline=None)
@given(accumulation=st.integers(1, 5),
       plan=st.lists(st.tuples(st.integers(1, 12), st.integers(0, 12), st.integers(1, 30)), min_size=1, max_size=5))
def test_the_closed_form_equals_the_replayed_trainer(accumulation, plan):
    short_legs, short_runs = replay(plan, accumulation)
    checkpoint = max(short_runs)  # the highest step number the run reached
    last = max((u for u, r in short_runs.items() if r[-1][0] >= short_legs[-1].step), default=None)
    if last is not None:  # a checkpoint after the last step of the last leg: trainer_state.json's global_step
        assert trainer_step_at(short_runs[last][-1][1], short_legs, accumulation) == last
    assert trainer_step_at(short_legs[-1].step, short_legs, accumulation) == place(
        short_legs[-1].epoch, short_legs[-1].batches_per_epoch, short_legs[-1].batches_left, accumulation).global_step
    *earlier, (length, left, updates) = plan
    legs, runs = replay([*earlier, (length, left, updates + checkpoint + 1)], accumulation)  # its future too
    for update in range(1, checkpoint + 1):
        found = [(ran.first, ran.stop) for ran in loader_steps(update, legs, accumulation)]
        assert found == list(reversed(runs.get(update, []))), update
