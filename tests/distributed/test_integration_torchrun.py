"""examples/torchrun_restarts.py under torchrun --max-restarts=1: a worker fails once, torchrun
restarts the job, every process comes back with another rank and loads a checkpoint file that a
process of another rank wrote, and the data continues exactly."""

import os

from integration_checks import batches, read_records, reference

from shufflepoint._tools.launch import launch

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torchrun_restarts.py")
N, SEED, BATCH, EPOCHS = 64, 1234, 4, 3


def test_restart_with_rotated_ranks_resumes_exactly(tmp_path):
    record = str(tmp_path / "record")
    result = launch([EXAMPLE, "--checkpoint-dir", str(tmp_path / "checkpoints"), "--samples", str(N),
                     "--epochs", str(EPOCHS), "--checkpoint-every", "4", "--crash-at-step", "12",
                     "--record", record], 2, extra_launcher_args=["--max-restarts=1"])
    result.check()  # exit 0: the restart finished the job
    assert "simulated failure at step 12" in result.stderr
    whole = reference(N, SEED, 2, BATCH, EPOCHS)
    for rank, records in enumerate(read_records(record, 2)):
        assert batches(records) == whole[rank], f"rank {rank} is not exact"
        attempts = [(r["attempt"], r["slot"]) for r in records]
        assert attempts == [(0, rank)] * 12 + [(1, 1 - rank)] * 12, "the restart did not move the ranks"
