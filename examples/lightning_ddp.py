"""PyTorch Lightning (DDP): a LightningDataModule that returns a shufflepoint.DataLoader.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/lightning_ddp.py

Kill it anywhere and run the same command again: it resumes from the last checkpoint with
``trainer.fit(..., ckpt_path=...)``, and every rank continues with exactly the batches an
uninterrupted run would have used. ``--stop-after-step N`` SIGKILLs every process right after the
checkpoint of step N (a preemption); ``--record FILE`` appends what each rank trained on.

Three things to know (each is in the code below):
- Lightning saves the loader's ``state_dict()`` in the checkpoint (from rank 0; the state is the
  same on every rank) and loads it on every rank when it resumes mid-epoch. Nothing to write.
- ``use_distributed_sampler=False``: the loader shards over the ranks itself. (With the default
  ``True``, Lightning would rebuild it with a ``DistributedSampler`` and shufflepoint refuses.)
- Lightning ends an epoch by counting batches, without asking the loader for one more; it tells
  the loader about the next epoch through ``loader.sampler.set_epoch(epoch)``, which shufflepoint
  forwards to ``loader.set_epoch`` (a no-op for the epoch the loader is in, so a restored mid-epoch
  position is kept). Nothing to write.
"""

import argparse
import json
import os
import signal

import lightning as L
import torch

import shufflepoint


class DataModule(L.LightningDataModule):
    def __init__(self, samples: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        features = torch.randn(samples, 8, generator=generator)
        self.dataset = torch.utils.data.TensorDataset(torch.arange(samples), features, features.sum(1, keepdim=True))
        self.loader = None

    def train_dataloader(self):
        if self.loader is None:  # built here: the process group exists now, and it shards over it
            self.loader = shufflepoint.DataLoader(self.dataset, batch_size=4, seed=1234)
        return self.loader


class Model(L.LightningModule):
    def __init__(self, record: str | None = None) -> None:
        super().__init__()
        self.net = torch.nn.Linear(8, 1)
        self.record = record

    def training_step(self, batch, batch_idx):
        ids, x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        if self.record:
            with open(f"{self.record}.rank{self.global_rank}", "a") as f:
                f.write(json.dumps({"step": self.global_step + 1, "epoch": self.current_epoch,
                                    "ids": ids.tolist(), "loss": loss.item()}) + "\n")
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Preempt(L.Callback):
    """SIGKILL this process when step ``step + 1`` starts, i.e. right after the checkpoint of ``step``."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint-dir", default="checkpoints/lightning_ddp")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--stop-after-step", type=int, default=None, help="SIGKILL after this step's checkpoint")
    parser.add_argument("--record", default=None, help="append the sample ids of every step here")
    args = parser.parse_args()

    checkpoint = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=args.checkpoint_dir, filename="latest", every_n_train_steps=args.checkpoint_every,
        enable_version_counter=False,  # one file, overwritten: latest.ckpt
    )
    callbacks = [checkpoint] + ([Preempt(args.stop_after_step)] if args.stop_after_step is not None else [])
    # --- the README's Lightning snippet starts here ---
    trainer = L.Trainer(
        accelerator="cpu", strategy="ddp", devices=int(os.environ.get("WORLD_SIZE", 1)),
        max_epochs=args.epochs, callbacks=callbacks,
        use_distributed_sampler=False,  # shufflepoint.DataLoader shards over the ranks itself
        logger=False, enable_progress_bar=False, enable_model_summary=False,
    )
    latest = os.path.join(args.checkpoint_dir, "latest.ckpt")
    trainer.fit(Model(args.record), datamodule=DataModule(args.samples),
                ckpt_path=latest if os.path.exists(latest) else None)  # resumes mid-epoch, exactly
    # --- the README's Lightning snippet ends here ---


if __name__ == "__main__":
    main()
