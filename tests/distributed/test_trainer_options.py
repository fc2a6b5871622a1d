"""The stock Trainer options that change who reads what, on 2 real processes (torchrun, Gloo), each honoured as
the stock Trainer honours it or refused by name when the Trainer is built (``integrations/transformers/_options``).

Two launches (make test-trainer-options, ~1 min): the split_batches runs (stock and ours), even_batches, and a
run stopped 2 steps into epoch 1; then, in new processes, its resume with ignore_data_skip=True.
"""

import json
import os

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed")

from shufflepoint._tools.launch import launch  # noqa: E402

pytestmark = pytest.mark.trainer_options
WORKER = os.path.join(os.path.dirname(__file__), "workers", "trainer_options_worker.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("options"))
    launch([WORKER, out, "split:stock", "split:ours", "even:ours", "even:refused", "ignore:whole", "ignore:stop"], 2,
           timeout=400).check()
    launch([WORKER, out, "ignore:resume"], 2, timeout=300).check()
    return out


def _read(out, name, phase):
    found = []
    for rank in range(2):
        with open(os.path.join(out, f"{name}.{phase}.rank{rank}.json")) as f:
            found.append(json.load(f))
    return found


def _ids(run):
    return [i for batch in run["batches"] for i in batch["ids"]]


def test_split_batches_trains_the_stock_samples_per_rank_and_step(runs):
    """per_device_train_batch_size=8 with split_batches on 2 processes: stock trains 4 samples per rank a step
    (the global batch is 8); so does ours, and the epoch's 32 samples each once, in 4 steps."""
    stock, ours = _read(runs, "split", "stock"), _read(runs, "split", "ours")
    for found in (stock, ours):
        assert [[len(b["ids"]) for b in run["batches"]] for run in found] == [[4] * 4, [4] * 4]
        assert sorted(_ids(found[0]) + _ids(found[1])) == list(range(32))
        assert [run["final_step"] for run in found] == [4, 4]


def test_even_batches_off_with_drop_last_repeats_nothing_and_without_it_is_refused_by_name(runs):
    ours = _read(runs, "even", "ours")
    trained = _ids(ours[0]) + _ids(ours[1])
    assert len(trained) == len(set(trained)) == 40  # 42 samples, 5 global batches of 8; nothing repeated
    assert [len(run["batches"]) for run in ours] == [5, 5]
    for run in _read(runs, "even", "refused"):
        assert run["batches"] == [] and run["error"].startswith("accelerator_config.even_batches: found False")


def test_ignore_data_skip_restarts_the_checkpoints_epoch_as_stock(runs):
    """Stopped at global_step 7 (2 steps into epoch 1 of 5 steps), resumed with ignore_data_skip=True: epoch 1 from
    its first batch, global_step on from 7 to max_steps 10 (stock's numbers), with a ResumeWarning."""
    whole, before, after = (_read(runs, "ignore", phase) for phase in ("whole", "stop", "resume"))
    for rank in range(2):
        epoch_one = [b["ids"] for b in whole[rank]["batches"][5:]]
        assert [b["ids"] for b in after[rank]["batches"]] == epoch_one[:3], f"rank {rank}"
        assert [b["ids"] for b in before[rank]["batches"]][5:] == epoch_one[:2]
        assert after[rank]["final_step"] == 10 and before[rank]["final_step"] == 7
        (warning,) = after[rank]["resume_warnings"]
        assert warning.startswith("ignore_data_skip=True: the data restarts at the first batch of epoch 1, while "
                                  "global_step goes on from 7. Up to 16 samples of epoch 1")
