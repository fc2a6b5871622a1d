"""The record of a Trainer run's steps (``_core/trainer_steps``): whatever the loop does (short steps,
resumes, exclusions that change what is left), every recorded step is answered as it ran, and a run
that keeps to its epochs needs one span."""

import doctest

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shufflepoint._core import trainer_steps
from shufflepoint._core.trainer_steps import Span, Steps, StepsError, recorded
from shufflepoint._errors import StateError


def test_the_docstring_examples_hold():
    assert doctest.testmod(trainer_steps).failed == 0


@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 9), st.integers(1, 9), st.integers(1, 3),
                          st.booleans()), min_size=1, max_size=40))
def test_every_recorded_step_is_answered_as_it_ran(steps):
    spans, at, ran = (), 0, {}
    for update, (size, left, per_epoch, accumulation, new) in enumerate(steps, start=1):
        spans = recorded(spans, update, at, at + size, left=left, per_epoch=per_epoch, accumulation=accumulation,
                         new=new or update == 1)
        ran[update], at = (at, at + size), at + size
    record = Steps.read(Steps(spans).to_json(), "run.json")
    assert {update: record.batches(update, len(steps)) for update in ran} == ran


@pytest.mark.parametrize("per_epoch, accumulation", [(9, 2), (8, 2), (10, 3), (5, 1)])
def test_a_run_that_keeps_to_its_epochs_is_one_span(per_epoch, accumulation):
    spans, at, update = (), 0, 0
    for _ in range(4):  # epochs: GA batches a step, the last one shorter
        for begin in range(0, per_epoch, accumulation):
            update += 1
            stop = min(begin + accumulation, per_epoch)
            spans = recorded(spans, update, at, at + stop - begin, left=per_epoch - stop, per_epoch=per_epoch,
                             accumulation=accumulation, new=update == 1)
            at += stop - begin
    assert len(spans) == 1


def test_refusals_name_the_step_and_the_field():
    record = Steps((Span(3, 10, 2, 0, 4, 2),))
    for update, match in ((0, "expected an optimizer step >= 1"), (5, "saved at optimizer step 4"),
                          (2, "begins at step 3")):
        with pytest.raises(StepsError, match=match):
            record.batches(update, 4)
    with pytest.raises(StateError, match=r"steps\[1\]: found \[4, 99"):
        Steps.read([[3, 10, 2, 0, 4, 2], [4, 99, 1, 0, 4, 2]], "run.json")
    with pytest.raises(StateError, match=r"steps\[0\]: found \[1, -1"):
        Steps.read([[1, -1, 1, 0, 4, 2]], "run.json")
