"""States of a ``Mixture`` built without a schedule, written before 0.6 in its fixed order (mixture order version 1
under ``strided``, 5 under ``spans``; ``write_fixed.py`` wrote them with that code): today's loader reads on from them
in that order, exactly, on every rank, and refuses ``set_weights`` by name, while a run it begins reads the schedule
of the counts (version 2 or 6, ``mixture/fixed.py``), which can change its weights."""

from __future__ import annotations

import copy
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from write_fixed import NEXT, SAVE_AFTER, WORLD, build, take  # noqa: E402

HERE = os.path.dirname(__file__)
VERSIONS = {"strided": (1, 2), "spans": (5, 7)}  # (the fixed order's, a run begun with 0.6)


def record_of(deal: str) -> dict:
    with open(os.path.join(HERE, f"fixed-{deal}.json")) as f:
        found: dict = json.load(f)
    return found


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_a_fixed_order_state_reads_on_exactly_on_every_rank_and_is_written_in_its_version(deal):
    record = record_of(deal)
    old, new = VERSIONS[deal]
    assert record["state"]["order_version"] == old and record["state"]["grid"] is None
    for rank in range(WORLD):
        loader = build(deal, rank)
        assert loader.state_dict()["order_version"] == new  # a new run: the schedule of its counts
        loader.load_state_dict(copy.deepcopy(record["state"]), verify_ranks=False)
        written = loader.state_dict()
        assert (written["order_version"], written["grid"], written["phases"]) == (old, None, [])
        assert take(iter(loader), loader, NEXT) == record["next"][rank]
        again = build(deal, rank)  # what it writes loads and reads on the same
        again.load_state_dict(written, verify_ranks=False)
        assert take(iter(again), again, NEXT) == record["next"][rank]


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_a_fixed_order_run_refuses_set_weights_by_name_with_nothing_changed(deal):
    record = record_of(deal)
    loader = build(deal, 0)
    loader.load_state_dict(copy.deepcopy(record["state"]), verify_ranks=False)
    before = loader.state_dict()
    with pytest.raises(ValueError, match=rf"set_weights: found a run in mixture order version {VERSIONS[deal][0]}\n"
                                         rf"(?s:.*)this run began with order version {VERSIONS[deal][0]}.*a run "
                                         r"begun with 0\.6 can"):
        loader.set_weights([1, 1, 1])
    assert loader.state_dict() == before
    assert take(iter(loader), loader, NEXT) == record["next"][0]


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_a_run_begun_today_reads_the_schedule_of_the_counts_not_the_fixed_order(deal):
    """The same loaders, begun fresh: another order (so the test above tells them apart), each epoch still
    exactly the counts 18, 6, 12."""
    loaders = [build(deal, rank) for rank in range(WORLD)]
    fresh = [take(iter(loader), loader, SAVE_AFTER + NEXT)[SAVE_AFTER:] for loader in loaders]
    assert fresh != record_of(deal)["next"]
    for epoch in range(3):
        rows = [x for loader in [build(deal, rank) for rank in range(WORLD)]
                for _ in [loader.set_epoch(epoch)] for batch in loader for x in batch]
        assert [sum(x[0] == s for x in rows) for s in "abc"] == [18, 6, 12]
