"""examples/hf_trainer.py: the Hugging Face Trainer with one import swapped, 2 processes on Gloo,
SIGKILLed right after the checkpoint of step 12 (epoch 1, 4 batches in) and run again with the same
command: every rank trains exactly the batches of an uninterrupted run, and the run ends at step 24."""

import os

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed: pip install "
                                           "'shufflepoint[transformers]'")

from integration_checks import read_records, reference  # noqa: E402

from shufflepoint._tools.launch import launch  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hf_trainer.py")
N, SEED, BATCH, EPOCHS = 64, 1234, 4, 3  # 8 steps per epoch on 2 ranks


# make test-examples: test_integration_transformers.py's "kill" scenario covers the same path in make test (the
# shufflepoint Trainer on 2 ranks SIGKILLed right after a checkpoint, resume_from_checkpoint in fresh processes,
# every rank's batches those of the uninterrupted run).
@pytest.mark.examples
def test_the_example_resumes_exactly_after_sigkill(tmp_path):
    output_dir, record = str(tmp_path / "out"), str(tmp_path / "record")
    common = [EXAMPLE, "--output-dir", output_dir, "--samples", str(N), "--epochs", str(EPOCHS), "--record", record]
    killed = launch([*common, "--stop-after-step", "12"], 2)
    assert killed.returncode != 0 and "SIGKILL" in killed.stderr, killed.stderr[-2000:]
    assert os.path.exists(os.path.join(output_dir, "checkpoint-12", "shufflepoint_loader.json"))
    launch(common, 2).check()
    whole = reference(N, SEED, 2, BATCH, EPOCHS)
    for rank, records in enumerate(read_records(record, 2)):
        assert [r["step"] for r in records] == list(range(24)), f"rank {rank}: steps lost or repeated"
        assert [r["ids"] for r in records] == [ids for _, ids in whole[rank]], f"rank {rank} is not exact"
