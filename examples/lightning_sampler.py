"""PyTorch Lightning (DDP): shufflepoint.ResumableSampler inside a plain torch DataLoader.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/lightning_sampler.py

For code that already builds its own ``DataLoader``. Kill it anywhere and run the same command
again: ``trainer.fit(..., ckpt_path=...)`` resumes, and every rank continues with exactly the
batches an uninterrupted run would have used. ``--stop-after-step N`` SIGKILLs every process right
after the checkpoint of step N; ``--record FILE`` appends what each rank trained on.

What Lightning does with it, and what you add:
- ``use_distributed_sampler=True`` (the default) keeps it: Lightning replaces only samplers that
  are not ``DistributedSampler`` instances, and ``ResumableSampler`` is a ``DistributedSampler``
  subclass. Lightning also calls its ``set_epoch`` at every epoch, as for any DistributedSampler.
- Lightning checkpoints the state of a loader that has ``state_dict``; a plain ``DataLoader`` has
  none, so the sampler's state rides in the DataModule's ``state_dict`` / ``load_state_dict``
  (saved from rank 0; the state is the same on every rank).
- ``num_workers=0``: a plain DataLoader's workers prefetch ahead of the loop, and the sampler cannot
  see what the loop received. With workers, use ``shufflepoint.DataLoader`` (examples/lightning_ddp.py).
"""

import argparse
import os

import lightning as L
import torch
from lightning_ddp import Model, Preempt  # the same model, recording and preemption as the other example

import shufflepoint


# --- the README's Lightning-sampler snippet starts here ---
class DataModule(L.LightningDataModule):
    def __init__(self, samples: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        features = torch.randn(samples, 8, generator=generator)
        self.dataset = torch.utils.data.TensorDataset(torch.arange(samples), features, features.sum(1, keepdim=True))

    def setup(self, stage: str) -> None:  # runs in each process, after the process group exists
        self.sampler = shufflepoint.ResumableSampler(self.dataset, seed=1234)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.dataset, batch_size=4, sampler=self.sampler)

    def state_dict(self):  # Lightning stores this in every checkpoint
        return {"sampler": self.sampler.state_dict()}

    def load_state_dict(self, state):  # and hands it back on resume, after setup()
        self.sampler.load_state_dict(state["sampler"])
# --- the README's Lightning-sampler snippet ends here ---


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint-dir", default="checkpoints/lightning_sampler")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--stop-after-step", type=int, default=None, help="SIGKILL after this step's checkpoint")
    parser.add_argument("--record", default=None, help="append the sample ids of every step here")
    args = parser.parse_args()

    checkpoint = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=args.checkpoint_dir, filename="latest", every_n_train_steps=args.checkpoint_every,
        enable_version_counter=False,
    )
    callbacks = [checkpoint] + ([Preempt(args.stop_after_step)] if args.stop_after_step is not None else [])
    trainer = L.Trainer(
        accelerator="cpu", strategy="ddp", devices=int(os.environ.get("WORLD_SIZE", 1)),
        max_epochs=args.epochs, callbacks=callbacks,  # use_distributed_sampler=True: the default, kept
        logger=False, enable_progress_bar=False, enable_model_summary=False,
    )
    latest = os.path.join(args.checkpoint_dir, "latest.ckpt")
    datamodule = DataModule(args.samples)
    trainer.fit(Model(args.record), datamodule=datamodule, ckpt_path=latest if os.path.exists(latest) else None)
    loader = trainer.train_dataloader
    if loader.sampler is not datamodule.sampler:
        raise RuntimeError(f"Lightning replaced the sampler with {type(loader.sampler).__name__}")


if __name__ == "__main__":
    main()
