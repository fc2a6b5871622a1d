"""examples/accelerate_registered.py: a shufflepoint.DataLoader registered with
accelerator.register_for_checkpointing (not prepared), stopped, resumed in fresh processes."""

import os

import pytest

pytest.importorskip("accelerate", reason="the accelerate extra is missing: pip install 'shufflepoint[accelerate]'")

from integration_checks import batches, read_records, reference  # noqa: E402

from shufflepoint._tools.launch import launch  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "accelerate_registered.py")
N, SEED, BATCH, EPOCHS = 64, 1234, 4, 3


def test_registered_loader_resumes_exactly(tmp_path):
    checkpoints, record = str(tmp_path / "checkpoints"), str(tmp_path / "record")
    common = [EXAMPLE, "--checkpoint-dir", checkpoints, "--samples", str(N), "--epochs", str(EPOCHS),
              "--checkpoint-every", "4", "--record", record]
    launch([*common, "--stop-after-step", "12"], 2).check()  # epoch 1, 4 batches in
    # Accelerate wrote the loader's state once, from rank 0; every rank loads that one file
    saved = sorted(f for f in os.listdir(os.path.join(checkpoints, "latest")) if f.startswith("custom_checkpoint"))
    assert saved == ["custom_checkpoint_0.pkl", "custom_checkpoint_1.pkl"]  # the loader, the step counter
    launch(common, 2).check()
    whole = reference(N, SEED, 2, BATCH, EPOCHS)
    for rank, records in enumerate(read_records(record, 2)):
        assert [r["step"] for r in records] == list(range(1, 25))
        assert batches(records) == whole[rank], f"rank {rank} is not exact"
