"""skip_bad_samples on 2 real processes: the stream with 0 and with 2 workers is the same, a resume in new
processes after skips continues every rank exactly, every skip is in the state's record on every rank, and past
the limit every rank stops at the same step with the same error."""

import json
import os

import pytest

from shufflepoint._tools.launch import launch

pytestmark = pytest.mark.skips  # make test-skips (~55 s: 3 launches of 2 ranks per deal)

WORKER = os.path.join(os.path.dirname(__file__), "workers", "skip_worker.py")
UNREADABLE, UNDECODABLE = {4, 23, 41}, {9, 50}


@pytest.mark.parametrize("deal", ["strided", "spans"])
def test_skips_are_the_same_with_any_workers_and_a_resume_continues_exactly(tmp_path, deal):
    for mode in ("whole", "save", "resume"):
        launch([WORKER, mode, str(tmp_path), deal], 2).check()
    out = [json.loads((tmp_path / f"{mode}.r{rank}.json").read_text()) for mode in ("whole", "save", "resume")
           for rank in range(2)]
    whole, saved, resumed = out[0:2], out[2:4], out[4:6]
    for rank in range(2):
        stream = whole[rank]["workers0"]
        assert whole[rank]["workers2"] == stream  # num_workers changes nothing, skips included
        joined = {**saved[rank]["received"], **resumed[rank]["received"]}
        assert joined == stream  # a resume after skips continues batch for batch
        served = [i for batch in stream.values() for i in batch]
        assert not (UNREADABLE | UNDECODABLE) & set(served)  # never served: replaced in their slot
        assert all(len(stream[str(step)]) == 3 for step in range(10))  # epoch 0, where they failed: every batch full
    record = whole[0]["skipped0"]
    assert record == whole[1]["skipped0"] == whole[0]["skipped2"] == resumed[0]["skipped"] == resumed[1]["skipped"]
    assert {entry[1] for entry in record} == UNREADABLE | UNDECODABLE  # each bad sample skipped once, in epoch 0
    for rank in range(2):  # which(step) names every step's batch, a failed slot's replacement included, both deals
        stream = whole[rank]["workers0"]
        for which in (whole[0]["which0"], whole[1]["which2"], resumed[0]["which"], resumed[1]["which"]):
            assert set(which) == set(stream) and all(which[step][str(rank)] == stream[step] for step in stream)
    for step, index, replacement, _shard, _row, error in record:
        owner = [r for r in range(2) if replacement in whole[r]["workers0"][str(step)]]
        assert owner, (step, replacement)
        assert ("does not decode" in error) == (index in UNREADABLE)
        assert ("transform raised ValueError" in error) == (index in UNDECODABLE)
    # past the limit (3 skips where 2 are allowed) every rank stops at the same step with the same error
    assert resumed[0]["stopped"] == resumed[1]["stopped"]
    step, text = resumed[0]["stopped"]
    named = [entry for entry in record if entry[0] < step]  # the skips up to the step the limit stopped at
    assert f"found {len(named)} samples skipped in the last 100 steps" in text and "max_skips=2" in text
    assert len(named) > 2 and all(f"dataset index {entry[1]}: SampleError" in text for entry in named), text
