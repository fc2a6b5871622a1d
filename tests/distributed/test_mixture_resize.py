"""A scheduled ``Mixture`` of two ``Packed`` corpora on disk, resized in real, fresh processes as issue 43 tried
it (2 nodes x 2 ranks x 4 = 16 rows a global batch, killed, resumed on 1 node x 3 ranks x 4 = 12, then on 3 x 2 =
6, which the first world of 4 does not divide): at every global batch the code corpus's count stays within a few
rows of its share (0.2, then 0.5), each epoch's rows are those one process reads, and each source's packed rows
are read pass after pass."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

import pytest

import shufflepoint
from shufflepoint._tools.launch import launch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "shards"))
from test_mixture_shares import exact_shares  # noqa: E402

pytestmark = [pytest.mark.timeout(900), pytest.mark.mixture]
WORKER = os.path.join(os.path.dirname(__file__), "workers", "mixture_resize_worker.py")
SEQ_LEN, SPE, EPOCHS = 8, 384, 2
SCHEDULE = [[0, [0.8, 0.2]], [240 * SEQ_LEN, [0.5, 0.5]]]  # row 240 of the run on: half code


def corpus(folder, offset, documents, shards=8):
    """JSONL shards of documents whose token ids are ``1000 * d + offset + i`` (the code corpus: 500-999)."""
    os.makedirs(folder)
    for shard in range(shards):
        with open(os.path.join(folder, f"part-{shard:03d}.jsonl"), "w") as f:
            for d in range(shard, documents, shards):
                f.write(json.dumps({"id": d, "input_ids": [1000 * d + offset + i for i in range(3 + d % 29)]}) + "\n")


def run(tmp_path, legs):
    """Launch after launch (world, batch, steps): each its fresh processes, loading the state the one before saved;
    the global batches, as (epoch, rows without padding)."""
    batches, state = [], None
    for number, (world, batch, steps) in enumerate(legs):
        spec = {"folders": [str(tmp_path / "web"), str(tmp_path / "code")], "seq_len": SEQ_LEN,
                "samples_per_epoch": SPE, "schedule": SCHEDULE, "batch_size": batch, "seed": 11, "shuffle_block": 16,
                "epochs": EPOCHS, "steps": steps, "state_in": state, "state_out": str(tmp_path / f"state{number}"),
                "record": str(tmp_path / f"record{number}")}
        path = tmp_path / f"spec{number}.json"
        path.write_text(json.dumps(spec))
        launch([WORKER, str(path)], world, timeout=600).check()
        per_rank = [json.loads((tmp_path / f"record{number}.rank{rank}").read_text()) for rank in range(world)]
        for records in zip(*per_rank, strict=True):
            batches.append((records[0]["epoch"], [tuple(row) for r in records for row in r["rows"][:r["real"]]]))
        state = spec["state_out"]
    return batches


def is_code(row):
    return row[0] % 1000 >= 500


def test_a_scheduled_mixture_of_packed_corpora_keeps_its_shares_through_16_12_and_6_rows(tmp_path):
    corpus(str(tmp_path / "web"), 0, 120)
    corpus(str(tmp_path / "code"), 500, 40)
    mixture = shufflepoint.Mixture(
        [shufflepoint.Packed(shufflepoint.Shards(str(tmp_path / name / "part-*.jsonl"), progress=False), SEQ_LEN,
                             progress=False) for name in ("web", "code")],
        samples_per_epoch=SPE, schedule=[tuple(phase) for phase in SCHEDULE])
    schedule = mixture.schedule.on_grid(16, SPE)  # the schedule the loader reads, on the run's grid of 16 rows
    resized = run(tmp_path, [(4, 4, 10), (3, 4, 12), (3, 2, None)])  # 160 rows, 144 more, the rest at 6
    code, rows, worst = 0, 0, 0
    for _, batch in resized:
        code += sum(is_code(row) for row in batch)
        rows += len(batch)
        worst = max(worst, abs(code - exact_shares(schedule, rows)[1]))
    assert rows == EPOCHS * SPE
    assert worst <= 3, worst
    whole = run(tmp_path, [(1, 16, None)])
    for epoch in range(EPOCHS):
        assert Counter(r for e, b in resized if e == epoch for r in b) == Counter(r for e, b in whole if e == epoch
                                                                                   for r in b)
