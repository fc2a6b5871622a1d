"""One leg of a Trainer run that is resized again and again: resumes from ``get_last_checkpoint`` (as
examples/hf_trainer.py does), trains, and is SIGKILLed right after the checkpoint of ``--kill-at``.

    python -m torch.distributed.run --nproc_per_node=W trainer_chain_worker.py OUT LEG [--kill-at K]
        [--accumulation GA] [--save-steps S] [--exclude-from STEP]

Every rank appends to OUT/LEG.rank<r>.jsonl, after each optimizer step, the global_step and the ids of the
micro-batches it trained since the step before; OUT/LEG.saved.rank<r>.json lists the checkpoints this leg
saved. ``dataset`` is the factory ``shufflepoint which --dataset`` takes.
"""

import argparse
import json
import os
import sys
import time

import torch
import transformers
from transformers.trainer_utils import get_last_checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from shufflepoint.integrations.transformers import ExcludeSamples, Trainer  # noqa: E402
from trainer_parts import Tokens, tiny_llama  # noqa: E402

N, BATCH, EPOCHS, EXCLUDED = 48, 4, 3, [0, 1, 2, 3, 4]


def dataset():
    return Tokens(N)


class Log(transformers.TrainerCallback):
    def __init__(self, out, leg, rank, kill_at, trained):
        self.path = os.path.join(out, f"{leg}.rank{rank}.jsonl")
        self.saved_path = os.path.join(out, f"{leg}.saved.rank{rank}.json")
        self.marker = os.path.join(out, f"{leg}.killed")
        self.rank, self.kill_at, self.trained, self.saved = rank, kill_at, trained, []

    def on_train_begin(self, args, state, control, **kwargs):
        with open(self.path, "a") as f:
            f.write(json.dumps({"begin": state.global_step, "max_steps": state.max_steps}) + "\n")

    def on_step_end(self, args, state, control, **kwargs):
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": state.global_step, "ids": list(self.trained)}) + "\n")
        self.trained.clear()
        if state.global_step >= state.max_steps:
            control.should_save = True  # the run's last step: a checkpoint to ask

    def on_save(self, args, state, control, **kwargs):
        self.saved.append(state.global_step)
        with open(self.saved_path, "w") as f:
            json.dump(self.saved, f)
        if state.global_step == self.kill_at:
            torch.distributed.barrier()
            if self.rank == 0:
                open(self.marker, "w").close()
            time.sleep(300)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("leg")
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--save-steps", type=int, default=3)
    parser.add_argument("--exclude-from", type=int)
    options = parser.parse_args()
    rank = int(os.environ["RANK"])
    trained = []

    def collate(samples):
        trained.append([int(s["input_ids"][0]) for s in samples])
        return {key: torch.stack([s[key] for s in samples]) for key in ("input_ids", "labels")}

    output_dir = os.path.join(options.out, "run")
    args = transformers.TrainingArguments(
        output_dir=output_dir, per_device_train_batch_size=BATCH, gradient_accumulation_steps=options.accumulation,
        num_train_epochs=EPOCHS, learning_rate=1e-2, lr_scheduler_type="linear", save_strategy="steps",
        save_steps=options.save_steps, logging_strategy="no", report_to=[], use_cpu=True, seed=1234,
        disable_tqdm=True, ddp_find_unused_parameters=False)
    callbacks = [Log(options.out, options.leg, rank, options.kill_at, trained)]
    if options.exclude_from is not None:
        callbacks.insert(0, ExcludeSamples(EXCLUDED, from_step=options.exclude_from))
    trainer = Trainer(model=tiny_llama(), args=args, train_dataset=dataset(), data_collator=collate,
                      callbacks=callbacks)
    last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
    trainer.train(resume_from_checkpoint=last)


if __name__ == "__main__":
    main()
