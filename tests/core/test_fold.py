"""Any number of resizes in one epoch (issue 33): past 64 world sizes the ``spans`` deal folds the epoch
(``_core/spans.py``), the state stays small and every sample is still read once, in this process and in a
fresh one."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shufflepoint
from shufflepoint import StateError
from shufflepoint._core.spans import MAX_SEGMENTS, SpanCut, remaining


def _read(cut: SpanCut, taken: int) -> list[int]:
    """Every rank's first ``taken`` epoch positions from ``cut``, padding cut off."""
    world = cut.world_positions(0, taken)  # checked row by row against rank_positions in test_world_positions
    return [p for r in range(cut.world_size) for p in world[r, :min(taken, cut.real_samples(r))].tolist()]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(300, 3000), drop_last=st.booleans(), changes=st.integers(66, 110), data=st.data())
def test_many_resizes_read_each_position_once(n, drop_last, changes, data):
    """66-110 world sizes in one epoch (a fold past the 64th): no position twice, none lost but the
    documented tail; the state's segments never pass 65 pairs and always replay to its cursor."""
    segments: list[list[int]] = []
    read: list[int] = []
    for change in range(changes + 1):
        world_size, batch_size = data.draw(st.integers(1, 6), label="world"), data.draw(st.integers(1, 4))
        cut = SpanCut(n, segments, world_size, batch_size, drop_last)
        total = cut.samples_per_rank()
        last = change == changes
        taken = total if last else min(data.draw(st.integers(0, 2), label="batches") * batch_size, total)
        read += _read(cut, taken)
        cursor, segments = cut.after(taken)
        assert len(segments) <= MAX_SEGMENTS + 1
        assert cursor == n - remaining(n, segments)
    assert len(read) == len(set(read)), "a position was read twice"
    missing = n - len(read)
    if drop_last:
        assert 0 <= missing < world_size * batch_size
    else:
        assert sorted(read) == list(range(n))


def _world(state, world_size: int, n: int) -> list[shufflepoint.DataLoader]:
    loaders = []
    for rank in range(world_size):
        loader = shufflepoint.DataLoader(list(range(n)), 2, seed=7, rank=rank, world_size=world_size, deal="spans")
        if state is not None:
            loader.load_state_dict(state)
        loaders.append(loader)
    return loaders


_REST = """
import json, sys
import shufflepoint
state, n = json.load(open(sys.argv[1])), int(sys.argv[2])
read = []
for rank in range(3):
    loader = shufflepoint.DataLoader(list(range(n)), 2, seed=7, rank=rank, world_size=3, deal="spans")
    loader.load_state_dict(state)
    read += [i for batch in loader for i in batch.tolist()]
print(json.dumps(read))
"""


def test_many_resizes_keep_the_state_small_and_resume_in_a_fresh_process(tmp_path):
    """100 resizes among 2, 3 and 4 ranks, one batch each (the epoch folds at the 65th): what every rank read
    at each step is ``which`` of that step (rank 0's checked against its batch); the state stays under 4 KiB
    (it stops growing at the fold: ``make bench-scale`` measures 1,000 resizes); a fresh process reads the rest
    of the epoch on 3 ranks: every sample of the epoch once (the last step's padding aside)."""
    n, state, read = 4000, None, []
    for number in range(100):
        loader = _world(state, 2 + number % 3, n)[0]
        batch = next(iter(loader)).tolist()
        state = loader.state_dict()
        world = loader.which(state["steps"] - 1)
        assert world[0] == batch
        read += [i for indices in world.values() for i in indices]
    encoded = json.dumps(state)
    assert len(encoded) <= 4096, len(encoded)
    assert state["version"] == 5 and state["segments"][-1][0] == 0 and len(state["segments"]) == MAX_SEGMENTS + 1
    path = tmp_path / "state.json"
    path.write_text(encoded)
    rest = subprocess.run([sys.executable, "-c", _REST, str(path), str(n)], capture_output=True, text=True,
                          check=True)
    read += json.loads(rest.stdout)
    counts = Counter(read)
    assert set(counts) == set(range(n))
    assert sum(counts.values()) - n < 3  # only the last step pads, at most one sample per rank


def test_a_fold_in_a_version_4_state_is_refused():
    loaders = _world(None, 2, 1000)
    state = loaders[0].state_dict()
    segments = [[2 + i % 2, 1] for i in range(MAX_SEGMENTS)]
    left = remaining(1000, segments)
    folded = dict(state, segments=[*segments, [0, 3]], cursor=1000 - left + 3, version=4)
    with pytest.raises(StateError, match="segments"):
        _world(folded, 3, 1000)
