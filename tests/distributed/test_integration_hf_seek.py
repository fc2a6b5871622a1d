"""examples/hf_trainer_seek.py: the Trainer's "epoch e, k batches done" as an O(1) seek.

In one process with simulated ranks (the seek is arithmetic; the multi-process examples cover the
process boundary): from every global step, at several world sizes and both tail policies, the
seeked loader continues exactly like the uninterrupted one, and it reads no sample it skips.
"""

import importlib.util
import os

import pytest
import torch

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "hf_trainer_seek.py")
spec = importlib.util.spec_from_file_location("hf_trainer_seek", EXAMPLE)
hf_trainer_seek = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hf_trainer_seek)


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_seek_from_every_global_step_equals_the_uninterrupted_run(world_size, drop_last):
    n, epochs = 50, 3
    for rank in range(world_size):
        whole = hf_trainer_seek.uninterrupted(n, rank, world_size, epochs, drop_last=drop_last)
        steps = len(whole)
        assert steps == epochs * len(hf_trainer_seek.make_loader(n, rank, world_size, drop_last=drop_last))
        for global_step in range(steps + 1):
            after = hf_trainer_seek.resumed(n, rank, world_size, epochs, global_step, drop_last=drop_last)
            assert after == whole[global_step:], f"rank {rank}/{world_size}, step {global_step}"


class CountingSamples(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n, self.reads = n, 0

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        self.reads += 1
        return index


def test_seek_reads_nothing_it_skips():
    """skip_first_batches would fetch and drop k batches; the seek fetches only the next one."""
    dataset = CountingSamples(2**40)
    for global_step in (10, 10_000_000):
        loader = hf_trainer_seek.shufflepoint.DataLoader(dataset, batch_size=4, seed=1234, rank=1, world_size=2)
        loader.seek(0, global_step)
        dataset.reads = 0
        next(iter(loader))
        assert dataset.reads == 4
        assert loader.cursor == (global_step + 1) * 2 * 4


def test_script_reports_exact(capsys):
    import sys
    argv, sys.argv = sys.argv, ["hf_trainer_seek.py", "--world-size", "3", "--resume-at-step", "20"]
    try:
        hf_trainer_seek.main()
    finally:
        sys.argv = argv
    out = capsys.readouterr().out
    assert out.count(": EXACT") == 3 and "DIVERGED" not in out
