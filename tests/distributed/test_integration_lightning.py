"""The Lightning examples under strategy="ddp", 2 processes on Gloo, SIGKILLed right after a
checkpoint and resumed in fresh processes with trainer.fit(..., ckpt_path=...).

- examples/lightning_ddp.py: a LightningDataModule returning shufflepoint.DataLoader; killed
  mid-epoch.
- examples/lightning_sampler.py: ResumableSampler in a plain DataLoader under
  use_distributed_sampler=True (kept, not replaced: the example raises if it was); its state rides
  in the DataModule's state_dict; killed right after the checkpoint at the end of an epoch.
"""

import importlib.util
import os

import pytest
from integration_checks import batches, read_records, reference

from shufflepoint._tools.launch import launch

# Looked up, not imported: only the launched processes use Lightning, and its import costs ~3 s of CPU
# in the pytest process at every collection.
pytestmark = pytest.mark.skipif(importlib.util.find_spec("lightning") is None,
                                reason="the lightning extra is not installed: pip install 'shufflepoint[lightning]'")

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
N, SEED, BATCH, EPOCHS = 64, 1234, 4, 3  # 8 steps per epoch


@pytest.mark.parametrize("example, every, kill_after", [
    ("lightning_ddp.py", 4, 12),  # epoch 1, 4 batches in
    ("lightning_sampler.py", 8, 16),  # the last batch of epoch 1
])
def test_lightning_resumes_exactly_after_sigkill(tmp_path, example, every, kill_after):
    checkpoints, record = str(tmp_path / "checkpoints"), str(tmp_path / "record")
    common = [os.path.join(EXAMPLES, example), "--checkpoint-dir", checkpoints, "--samples", str(N),
              "--epochs", str(EPOCHS), "--checkpoint-every", str(every), "--record", record]
    killed = launch([*common, "--stop-after-step", str(kill_after)], 2)
    assert killed.returncode != 0 and "SIGKILL" in killed.stderr, killed.stderr[-2000:]
    assert os.path.exists(os.path.join(checkpoints, "latest.ckpt"))
    launch(common, 2).check()
    whole = reference(N, SEED, 2, BATCH, EPOCHS)
    for rank, records in enumerate(read_records(record, 2)):
        assert [r["step"] for r in records] == list(range(1, 25)), f"rank {rank}: steps lost or repeated"
        assert batches(records) == whole[rank], f"rank {rank} is not exact"
