"""examples/dcp.py run as a user would: torch.distributed.checkpoint saves the loader with the model.

One chain of fresh-process runs, 2 -> 3 -> 2 processes, each resuming from the DCP checkpoint the
previous one wrote. The interrupted epochs are read exactly once in the global order (the 3-process
run ends its epoch with the documented tail padding), and the last 2-process run, resumed at a
position a 2-process run also reaches, continues batch for batch like an uninterrupted run.
"""

import os

from integration_checks import assert_epoch_exactly_once, batches, read_records, reference

from shufflepoint._tools.launch import launch

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "dcp.py")
N, SEED, BATCH, EPOCHS = 64, 1234, 4, 3  # 8 steps per epoch at 2 processes, 6 (last one short) at 3


def test_dcp_resumes_exactly_and_across_world_sizes(tmp_path):
    checkpoints = str(tmp_path / "checkpoints")

    def run(name, nproc, *flags):
        args = [EXAMPLE, "--checkpoint-dir", checkpoints, "--samples", str(N), "--epochs", str(EPOCHS),
                "--record", str(tmp_path / name), *flags]
        launch(args, nproc).check()
        return read_records(str(tmp_path / name), nproc)

    # 2 processes stop at step 11: epoch 1, 3 steps in, cursor 24.
    first = run("first", 2, "--checkpoint-every", "11", "--stop-after-step", "11")
    # 3 processes: the 40 left of epoch 1 in 4 steps (the last one 2 per rank: 2 padding repeats),
    # then 2 steps of epoch 2, stop at step 17 (cursor 24).
    second = run("second", 3, "--checkpoint-every", "17", "--stop-after-step", "17")
    # 2 processes again, to the end.
    third = run("third", 2, "--checkpoint-every", "1000")

    whole = reference(N, SEED, 2, BATCH, EPOCHS)
    for rank in range(2):
        assert batches(first[rank]) == whole[rank][:11], f"rank {rank}: first run"
        # cursor 24 of epoch 2 is also a 2-process position (3 steps of 8): from there the
        # resumed run is the uninterrupted one, batch for batch
        assert batches(third[rank]) == whole[rank][8 * 2 + 3:], f"rank {rank}: 3 -> 2 resume"
    assert [r["step"] for r in second[0]] == list(range(12, 18)), "the 3-process run resumed at step 12"
    assert_epoch_exactly_once(N, SEED, 1, [first, second])  # 2 -> 3, padding at the tail
    assert_epoch_exactly_once(N, SEED, 2, [second, third])  # 3 -> 2
