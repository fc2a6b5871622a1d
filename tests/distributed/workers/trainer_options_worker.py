"""The stock Trainer options that change who reads what, on 2 processes (torchrun, Gloo), with the stock
Trainer beside the shufflepoint one.

    python -m torch.distributed.run --nproc_per_node=2 trainer_options_worker.py OUT RUN [RUN ...]

RUN is one of ``split:stock``, ``split:ours`` (split_batches=True, per_device_train_batch_size 8),
``even:ours`` (even_batches=False, dataloader_drop_last=True, 42 samples), ``even:refused`` (the same without
drop_last), ``ignore:whole``, ``ignore:stop`` (saves at global_step 3, 2 steps into epoch 1) and
``ignore:resume`` (ignore_data_skip=True; in new processes). Each writes OUT/NAME.PHASE.rank<r>.json: every
trained batch's sample ids with the epoch it was trained in, the final global_step, the ResumeWarnings, the
error if refused.
"""

import json
import os
import sys
import warnings

import torch
import transformers

from shufflepoint import ResumeWarning
from shufflepoint.integrations.transformers import Trainer

if int(transformers.__version__.split(".")[0]) < 5:  # see trainer_worker.py: "cpu:N" read as the CPU on 4.57
    torch.serialization.register_package(
        11, lambda obj: None, lambda obj, location: obj if location.startswith("cpu:") else None)

VOCAB = 128


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, index):
        ids = torch.tensor([index, index + 1, index + 2, index + 3]) % VOCAB
        return {"input_ids": ids, "labels": ids}


def recording(base):
    class Recording(base):
        def __init__(self, *args, record=None, **kwargs):
            super().__init__(*args, **kwargs)
            self.record = record

        def training_step(self, model, inputs, *args, **kwargs):
            ids = inputs["input_ids"][:, 0].tolist()
            self.record["batches"].append({"epoch": int(self.state.epoch or 0), "ids": ids})
            return super().training_step(model, inputs, *args, **kwargs)

    return Recording


class StopAt(transformers.TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_save = control.should_training_stop = True


SETTINGS = {  # name: (samples, TrainingArguments overrides)
    "split": (32, dict(per_device_train_batch_size=8, num_train_epochs=1, accelerator_config={"split_batches": True})),
    "even": (42, dict(per_device_train_batch_size=4, num_train_epochs=1, dataloader_drop_last=True,
                      accelerator_config={"even_batches": False})),
    "ignore": (40, dict(per_device_train_batch_size=4, num_train_epochs=2)),
}


def run(out, name, phase, rank):
    samples, overrides = SETTINGS[name]
    if phase == "refused":
        overrides = overrides | {"dataloader_drop_last": False}
    if phase == "resume":
        overrides = overrides | {"ignore_data_skip": True}
    args = transformers.TrainingArguments(
        output_dir=os.path.join(out, name), save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True,
        seed=1234, disable_tqdm=True, ddp_find_unused_parameters=False, learning_rate=1e-2, **overrides)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4)
    record = {"batches": []}
    base = transformers.Trainer if phase == "stock" else Trainer
    callbacks = [StopAt(7)] if phase == "stop" else []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResumeWarning)
        try:
            trainer = recording(base)(model=transformers.LlamaForCausalLM(config), args=args,
                                      train_dataset=Tokens(samples), record=record, callbacks=callbacks)
            trainer.train(resume_from_checkpoint=phase == "resume" or None)
            record["final_step"] = trainer.state.global_step
        except ValueError as error:
            if phase != "refused":
                raise
            record["error"] = str(error)
    record["resume_warnings"] = [str(w.message) for w in caught if issubclass(w.category, ResumeWarning)]
    with open(os.path.join(out, f"{name}.{phase}.rank{rank}.json"), "w") as f:
        json.dump(record, f)


def main():
    out, runs = sys.argv[1], sys.argv[2:]
    for name_and_phase in runs:
        name, phase = name_and_phase.split(":")
        run(out, name, phase, int(os.environ["RANK"]))


if __name__ == "__main__":
    main()
