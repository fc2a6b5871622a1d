"""The Trainer integration's max_steps arithmetic (``_budget``), against a batch-by-batch replay.

``replay`` walks this run's batches from its placement, one by one, through the real cuts of the
loader (``_core``'s strided and spans deals), and counts optimizer steps as the Trainer does (a step
ends on a multiple of GA or at the epoch's last batch). Hypothesis checks, for any run that set
max_steps, any stop before it, and any resumed layout (world, batch, GA, either deal): the resumed
run's ``max_steps`` trains up to the budget's end and not one step more, the stated overshoot is
what its last step trains past the end, and on an unchanged layout nothing changes.
"""

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed")

from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from shufflepoint import StateError  # noqa: E402
from shufflepoint._core.deals import cut  # noqa: E402
from shufflepoint._core.plan import Layout  # noqa: E402
from shufflepoint.integrations.transformers import place  # noqa: E402
from shufflepoint.integrations.transformers._budget import Budget, End, Reach, end_of, steps_to  # noqa: E402


class Run:
    """One layout's cuts, as the loader makes them: ``fresh`` from an epoch's start, ``resumed`` from a
    saved (cursor, segments) of another layout."""

    def __init__(self, n, world, batch, accumulation, drop_last, deal):
        self.layout, self.deal, self.accumulation = Layout(n, world, batch, drop_last), deal, accumulation
        self.length = self.layout.batches_per_rank(0)

    def cursor_fn(self, position=(0, [])):
        start = cut(self.layout, self.deal, *position)
        return lambda batches: start.after(batches * self.layout.batch_size)[0]

    def batches_left(self, position):
        return -(-cut(self.layout, self.deal, *position).samples_per_rank() // self.layout.batch_size)

    def position_after(self, batches, position=(0, [])):
        return cut(self.layout, self.deal, *position).after(batches * self.layout.batch_size)


def replay(run, placement, now, max_steps, epoch_cap=50):
    """The data position when the Trainer's global_step reaches max_steps: (normalised, as trained),
    where an epoch's end is normalised to the next epoch's start."""
    epoch, done, step = placement.epoch, placement.batches_done, placement.global_step
    cursor_of = now
    if step >= max_steps:
        return End(epoch, now(0)), End(epoch, now(0))
    while epoch < epoch_cap:
        for index in range(done + 1, run.length + 1):
            if index % run.accumulation == 0 or index == run.length:
                step += 1
                if step == max_steps:  # an epoch's end is the next epoch's start, as the loader says
                    trained = End(epoch, cursor_of(index - done))
                    return (End(epoch + 1, 0) if index == run.length else trained), trained
        epoch, done, cursor_of = epoch + 1, 0, run.cursor_fn()
    raise AssertionError("max_steps not reached")


def test_the_worked_example():
    """max_steps=12 on 2 x 4 (40 samples), stopped at step 5, resumed on 1 x 4: 24, not 12."""
    old = Run(40, 2, 4, 1, False, "strided")
    start = place(0, old.length, old.length, 1)
    end = end_of(12, start, old.cursor_fn(), old.cursor_fn())
    assert end == End(2, 16)
    new = Run(40, 1, 4, 1, False, "strided")
    saved = old.position_after(5 % 5, (0, []))  # step 5 = the end of epoch 0: epoch 1 from its start
    resumed = place(1, new.length, new.batches_left(saved), 1)
    assert resumed.global_step == 10
    assert steps_to(end, resumed, new.length, new.cursor_fn(saved), new.cursor_fn()) == Reach(24, 0)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 80), old=st.tuples(st.integers(1, 4), st.integers(1, 6), st.integers(1, 3)),
       new=st.tuples(st.integers(1, 4), st.integers(1, 6), st.integers(1, 3)), drop_last=st.booleans(),
       deal=st.sampled_from(["strided", "spans"]), data=st.data())
def test_a_resumed_run_trains_to_the_budgets_end_and_no_step_more(n, old, new, drop_last, deal, data):
    setter, resumed_run = Run(n, *old, drop_last, deal), Run(n, *new, drop_last, deal)
    assume(setter.length > 0 and resumed_run.length > 0)
    start = place(0, setter.length, setter.length, setter.accumulation)
    max_steps = data.draw(st.integers(1, 3 * start.updates_per_epoch))
    end = end_of(max_steps, start, setter.cursor_fn(), setter.cursor_fn())
    assert replay(setter, start, setter.cursor_fn(), max_steps)[0] == end  # end_of is where the setter stops

    stop = data.draw(st.integers(0, max_steps - 1))  # the setter's checkpoint: its data position
    epoch, steps = divmod(stop, start.updates_per_epoch)
    saved = setter.position_after(steps * setter.accumulation)
    left = resumed_run.batches_left(saved)
    placement = place(epoch, resumed_run.length, left, resumed_run.accumulation)
    now = resumed_run.cursor_fn(saved) if placement.epoch == epoch else resumed_run.cursor_fn()
    reach = steps_to(end, placement, resumed_run.length, now, resumed_run.cursor_fn())

    finish, trained = replay(resumed_run, placement, now, reach.max_steps)
    assert finish >= end, "the resumed run stops before the budget's end"
    if reach.max_steps > placement.global_step:
        one_less = replay(resumed_run, placement, now, reach.max_steps - 1)[0]
        assert one_less < end, "the resumed run trains a step past the budget's end"
    # what the last step trains past the end, stated (nothing when the end is beyond this cut's epoch)
    assert reach.overshoot == (max(trained.cursor - end.cursor, 0) if trained.epoch == end.epoch else 0)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 80), layout=st.tuples(st.integers(1, 4), st.integers(1, 6), st.integers(1, 3)),
       drop_last=st.booleans(), deal=st.sampled_from(["strided", "spans"]), data=st.data())
def test_on_an_unchanged_layout_max_steps_is_unchanged(n, layout, drop_last, deal, data):
    run = Run(n, *layout, drop_last, deal)
    assume(run.length > 0)
    start = place(0, run.length, run.length, run.accumulation)
    max_steps = data.draw(st.integers(1, 3 * start.updates_per_epoch))
    stop = data.draw(st.integers(0, max_steps - 1))
    end = end_of(max_steps, start, run.cursor_fn(), run.cursor_fn())
    epoch, steps = divmod(stop, start.updates_per_epoch)
    saved = run.position_after(steps * run.accumulation)
    placement = place(epoch, run.length, run.batches_left(saved), run.accumulation)
    assert placement.global_step == stop
    now = run.cursor_fn(saved) if placement.epoch == epoch else run.cursor_fn()
    assert steps_to(end, placement, run.length, now, run.cursor_fn()) == Reach(max_steps, 0)
    # and a budget this run sets from its placement ends where the one set at its start does
    assert end_of(max_steps, placement, now, run.cursor_fn()) == end


def test_a_budget_round_trips_and_a_damaged_one_is_refused_by_field():
    budget = Budget(12, End(2, 16), 2, 4, 1)
    assert Budget.from_json(budget.to_json(), "b.json") == budget
    assert budget.describe() == "max_steps=12 set by a run of 2 ranks x batch 4 x accumulation 1 (8 samples a step)"
    assert Budget(3, End(0, 0), 1, 4, 2).describe().endswith("1 rank x batch 4 x accumulation 2 (8 samples a step)")
    damaged = budget.to_json()
    del damaged["end"]["cursor"]
    with pytest.raises(StateError, match=r"b\.json: end\.cursor: found nothing \(missing\)\n"):
        Budget.from_json(damaged, "b.json")
    with pytest.raises(StateError, match=r"b\.json: set_by\.world_size: found 0\n  expected: an integer >= 1"):
        Budget.from_json(budget.to_json() | {"set_by": {"world_size": 0, "batch_size": 4, "accumulation": 1}},
                         "b.json")


def test_the_docstring_examples_hold():
    import doctest

    from shufflepoint.integrations.transformers import _budget

    assert doctest.testmod(_budget).attempted >= 4 and doctest.testmod(_budget).failed == 0
