"""The Trainer integration's arithmetic (``_placement``): from a restored loader position to the Trainer's
(epochs_trained, batches done, global_step), checked by replaying the Trainer's own epoch loop.

``run_resumed_epoch`` is transformers 5.25's ``Trainer._run_epoch`` reduced to its counters (the
update-step range, ``get_batch_samples`` pulls with the mixin's short first pull, ``do_sync_step``,
DDP's sync at the last batch of a pull). For any saved run (world, batch) and any resumed run
(world, batch, accumulation), hypothesis checks: every batch left in the epoch is trained, every
optimizer step is on a gradient sync and vice versa, and the epoch ends at global_step (e + 1) * nupe.
"""

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from shufflepoint._core.plan import Layout  # noqa: E402
from shufflepoint.integrations.transformers import Placement, place  # noqa: E402


def run_resumed_epoch(placement: Placement, batches_per_epoch: int, batches_left: int) -> tuple[int, int]:
    """(global_step at the epoch's end, batches trained), asserting each sync is an optimizer step."""
    accumulation, nupe, done = placement.accumulation, placement.updates_per_epoch, placement.batches_done
    remainder = batches_per_epoch % accumulation or accumulation
    step, global_step, left, trained = done - 1, placement.global_step, batches_left, 0
    short = None if placement.aligned else accumulation - done % accumulation
    for update_step in range(done // accumulation, nupe):
        pull = accumulation if update_step != nupe - 1 else remainder
        if short is not None:
            pull, short = min(pull, short), None
        chunk = min(pull, left)
        left -= chunk
        for i in range(chunk):
            step += 1
            optimizer_step = (step + 1) % accumulation == 0 or step + 1 == batches_per_epoch
            assert optimizer_step == (i == chunk - 1), f"step {step}: gradient sync and optimizer step disagree"
            global_step += optimizer_step
            trained += 1
    return global_step, trained


def test_the_worked_example():
    assert place(1, 16, 10, 1) == Placement(1, 6, 22, 16, 1)
    assert place(2, 5, 0, 2) == Placement(3, 0, 9, 3, 2)  # a finished epoch is the next one


@settings(max_examples=400, deadline=None)
@given(n=st.integers(1, 300), old_world=st.integers(1, 4), old_batch=st.integers(1, 9), world=st.integers(1, 4),
       batch=st.integers(1, 9), accumulation=st.integers(1, 5), drop_last=st.booleans(), epoch=st.integers(0, 3),
       data=st.data())
def test_the_resumed_epoch_trains_what_is_left_and_ends_on_the_epoch(n, old_world, old_batch, world, batch,
                                                                    accumulation, drop_last, epoch, data):
    saved = Layout(n, old_world, old_batch, drop_last)
    steps_done = data.draw(st.integers(0, saved.batches_per_rank(0)))
    cursor = min(steps_done * saved.step_size, n)
    layout = Layout(n, world, batch, drop_last)
    length, left = layout.batches_per_rank(0), layout.batches_per_rank(cursor)
    placement = place(epoch, length, left, accumulation)
    nupe = placement.updates_per_epoch
    assert placement.global_step // nupe == placement.epoch  # the Trainer's epochs_trained
    if left == 0:
        assert placement == Placement(epoch + 1, 0, (epoch + 1) * nupe, nupe, accumulation)
        return
    assert placement.epoch == epoch
    if placement.aligned:  # the Trainer's own arithmetic gives the same batch count
        assert (placement.global_step % nupe) * accumulation == placement.batches_done
    end, trained = run_resumed_epoch(placement, length, left)
    assert trained == left
    assert end == (epoch + 1) * nupe


@pytest.mark.parametrize("bad, match", [
    (dict(epoch=-1), "epoch"), (dict(accumulation=0), "accumulation"), (dict(batches_left=9), "batches_left"),
    (dict(batches_per_epoch=True), "batches_per_epoch")])
def test_bad_numbers_are_refused_by_name(bad, match):
    args = dict(epoch=0, batches_per_epoch=8, batches_left=3, accumulation=2) | bad
    with pytest.raises(ValueError, match=match):
        place(**args)
