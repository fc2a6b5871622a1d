"""examples/online_mixing.py run as a user would: weights set from the sources' losses every 10 steps, killed after
step 25 (after the change at step 20, before the one at 30), run again: every step's samples and weights are those
of the run that never stopped. Under the default deal (``spans``) each change applies from the next global batch,
and each source's passes stay whole at every global batch edge."""

import json
import os
from collections import Counter

import pytest

from shufflepoint._tools.launch import launch

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "online_mixing.py")


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


@pytest.mark.examples
def test_online_mixing_stops_and_resumes_exactly(tmp_path):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    launch([EXAMPLE, "--checkpoint", str(tmp_path / "a.pt"), "--record", str(whole)], 2).check()
    checkpoint = str(tmp_path / "b.pt")
    launch([EXAMPLE, "--checkpoint", checkpoint, "--record", str(parts), "--stop-after-step", "25"], 2).check()
    launch([EXAMPLE, "--checkpoint", checkpoint, "--record", str(parts)], 2).check()
    for rank in range(2):
        uninterrupted, resumed = records(f"{whole}.rank{rank}"), records(f"{parts}.rank{rank}")
        assert len(uninterrupted) == 80 and resumed == uninterrupted
    both = [records(f"{whole}.rank{rank}") for rank in range(2)]
    assert len({tuple(r["weights"]) for r in both[0]}) >= 6  # the weights did change, again and again
    for start in range(0, 80, 10):  # and each run of 10 global batches (160 rows) holds its weights' shares
        weights = both[0][start]["weights"]
        assert all(r["weights"] == weights for rank in both for r in rank[start:start + 10])
        ids = [i // 1000 for rank in both for r in rank[start:start + 10] for i in r["ids"]]
        for s, weight in enumerate(weights):
            assert abs(ids.count(s) - len(ids) * weight / sum(weights)) <= 2, (start, weights)
    seen = Counter()
    for step in range(80):  # no row of a source read k + 1 times before every row of it was read k times
        seen.update(i for rank in both for i in rank[step]["ids"])
        for s in range(3):
            counts = [seen[1000 * s + row] for row in range(300)]
            assert max(counts) - min(counts) <= 1, (step, s)
