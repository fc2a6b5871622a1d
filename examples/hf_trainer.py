"""The Hugging Face Trainer with an exact, O(1), elastic resume: swap one import.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/hf_trainer.py

Kill it anywhere and run the same command again, on the same or another number of processes: it
resumes from the newest checkpoint with ``trainer.train(resume_from_checkpoint=...)``. On the same
number, every rank trains exactly the batches an uninterrupted run would have; on another, every
sample of the interrupted epoch is trained once. ``--stop-after-step N`` SIGKILLs every process
right after the checkpoint of step N (a preemption); ``--record FILE`` appends what each rank trained.

What changes against the stock Trainer (``pip install 'shufflepoint[transformers]'``):
- The import. ``shufflepoint.integrations.transformers.Trainer`` takes every argument the stock one
  takes; its train loader is a ``shufflepoint.DataLoader`` built from the same settings.
- Each checkpoint folder gets ``shufflepoint_loader.json`` (the loader's position, a few integers).
  On resume it places the data: nothing is skipped by replaying batches, at any step.
- ``seed_per_sample=True`` (a constructor argument: TrainingArguments cannot carry it) keys the
  random draws of ``__getitem__`` by (seed, epoch, sample), so the augmentation survives a resume.
"""

import argparse
import json
import os
import signal

import torch
import transformers
from transformers.trainer_utils import get_last_checkpoint

from shufflepoint.integrations.transformers import Trainer


class Sentences(torch.utils.data.Dataset):
    """Sample i: 8 tokens, i first, with one token masked at random (an augmentation)."""

    def __init__(self, samples: int) -> None:
        self.samples = samples

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = (torch.arange(8) * 7 + index) % 256
        ids[0] = index % 256
        ids[int(torch.randint(1, 8, ()))] = 0  # torch's RNG: seeded per sample by seed_per_sample=True
        return {"input_ids": ids, "labels": ids}


class Preempt(transformers.TrainerCallback):
    """SIGKILL this process right after the checkpoint of step ``step`` (no cleanup, as a preemption)."""

    def __init__(self, step: int | None) -> None:
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            if torch.distributed.is_initialized():
                torch.distributed.barrier()  # rank 0 has written the checkpoint
            os.kill(os.getpid(), signal.SIGKILL)


class Recorded(Trainer):
    """Appends the first token (the sample id) of every batch trained to FILE.rank<r>."""

    def __init__(self, *args, record: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.record = record

    def training_step(self, model, inputs, *args, **kwargs):
        if self.record:
            with open(f"{self.record}.rank{self.args.process_index}", "a") as f:
                f.write(json.dumps({"step": self.state.global_step, "ids": inputs["input_ids"][:, 0].tolist()}) + "\n")
        return super().training_step(model, inputs, *args, **kwargs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", default="out/hf_trainer")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--save-steps", type=int, default=4)
    parser.add_argument("--stop-after-step", type=int, default=None, help="SIGKILL after this step's checkpoint")
    parser.add_argument("--record", default=None, help="append the sample ids of every batch here")
    args = parser.parse_args()

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=8)
    model = transformers.LlamaForCausalLM(config)  # from a config: nothing is downloaded
    training_args = transformers.TrainingArguments(
        output_dir=args.output_dir, per_device_train_batch_size=4, num_train_epochs=args.epochs, seed=1234,
        save_strategy="steps", save_steps=args.save_steps, logging_strategy="no", report_to=[], use_cpu=True,
        disable_tqdm=True, ddp_find_unused_parameters=False,
    )
    trainer = Recorded(model=model, args=training_args, train_dataset=Sentences(args.samples),
                       seed_per_sample=True,  # the augmentation is the same after a resume
                       callbacks=[Preempt(args.stop_after_step)], record=args.record)
    last = get_last_checkpoint(args.output_dir) if os.path.isdir(args.output_dir) else None
    trainer.train(resume_from_checkpoint=last)  # None: from the start; else exactly where it was killed


if __name__ == "__main__":
    main()
