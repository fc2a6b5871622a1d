"""A state written in mixture order version 6 (every window's slots numbered part after part; ``write_v6.py`` wrote
it with that code) reads on in version 6, exactly, on every rank, and is written again as 6; a run begun today
reads version 7 (``mixture/pass_edges.py``), which differs from 6 only inside windows where a source's pass ends."""

from __future__ import annotations

import copy
import json
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(__file__))

from write_v6 import NEXT, SAVE_AFTER, WORLD, build, take  # noqa: E402  (take: write_fixed's)

HERE = os.path.dirname(__file__)


def record() -> dict:
    with open(os.path.join(HERE, "v6-spans.json")) as f:
        found: dict = json.load(f)
    return found


def test_a_version_6_state_reads_on_exactly_on_every_rank_and_is_written_in_6():
    saved = record()
    assert saved["state"]["order_version"] == 6
    for rank in range(WORLD):
        loader = build(rank)
        loader.load_state_dict(copy.deepcopy(saved["state"]), verify_ranks=False)
        written = loader.state_dict()
        assert written["order_version"] == 6
        assert take(iter(loader), loader, NEXT) == saved["next"][rank]
        again = build(rank)  # what it writes loads and reads on the same
        again.load_state_dict(written, verify_ranks=False)
        assert take(iter(again), again, NEXT) == saved["next"][rank]


def test_a_run_begun_today_reads_version_7_the_same_rows_per_global_batch_of_the_grid():
    """Version 7 moves rows only inside pass-edge windows (here the global batches of the grid): the same rows per
    global batch as version 6, not at the same places everywhere."""
    saved = record()
    loaders = [build(rank) for rank in range(WORLD)]
    assert loaders[0].state_dict()["order_version"] == 7
    iterators = [iter(loader) for loader in loaders]
    for _ in range(SAVE_AFTER):
        for iterator in iterators:
            next(iterator)
    today = [take(iterator, loader, NEXT) for iterator, loader in zip(iterators, loaders, strict=True)]
    for step in range(NEXT):
        assert Counter(row for rank in range(WORLD) for row in today[rank][step]) == \
            Counter(row for rank in range(WORLD) for row in saved["next"][rank][step])
    assert today != saved["next"]
