"""A real Hugging Face Trainer (tiny LlamaForCausalLM from a config, no hub) under torchrun on Gloo.

    python -m torch.distributed.run --nproc_per_node=W trainer_worker.py OUT PHASE:SCENARIO [PHASE:SCENARIO ...]

One launch runs several trainings in turn (a launch costs ~15 s of imports). PHASE ``whole`` trains
uninterrupted; ``stop`` trains until global_step == the scenario's stop step,
saves a checkpoint there and ends; ``kill`` does the same, then writes OUT/SCENARIO.saved and waits
for the launcher's SIGKILL; ``resume`` continues from that checkpoint in these new processes.
Each run writes OUT/SCENARIO.PHASE.rank<r>.json: the sample ids (and augmented tokens) of every
batch trained, with the epoch the Trainer counts it in, and global_step and learning rate after every optimizer step.
"""

import json
import os
import sys
import time
import warnings

import torch
import transformers

from shufflepoint import ResumeWarning
from shufflepoint.integrations.transformers import Trainer

if int(transformers.__version__.split(".")[0]) < 5:
    # transformers 4.57 resumes a multi-process CPU run with torch.load(map_location=args.device), that
    # is "cpu:0", which torch 2.13 refuses (the stock Trainer too; fixed in 5.x): read "cpu:N" as the CPU.
    torch.serialization.register_package(
        11, lambda obj: None, lambda obj, location: obj if location.startswith("cpu:") else None)

N, SEQ, VOCAB = 40, 4, 128
# name: (per-device batch, gradient accumulation, workers, augment, stop at global_step)
SCENARIOS = {
    "plain": (4, 1, 0, False, 7),  # 2 ranks: 5 batches an epoch; stop 2 batches into epoch 1
    "ga2": (2, 2, 0, False, 7),  # 2 ranks: 10 batches, 5 steps an epoch; stop 4 batches into epoch 1
    "workers2": (4, 1, 2, False, 7),
    "augment": (4, 1, 2, True, 7),
    "edge": (4, 1, 0, False, 5),  # saved after the last batch of epoch 0: resumes at epoch 1's start
    "kill": (4, 1, 0, False, 8),  # stopped by SIGKILL 3 batches into epoch 1
    "shrink": (4, 1, 0, False, 7),  # saved on 2 ranks (cursor 16 of epoch 1), resumed on 1
    "grow": (4, 2, 0, False, 6),  # saved on 1 rank, GA 2: 2 batches into epoch 1 (cursor 8); resumed on 2
    "shards": (4, 1, 0, False, 7),  # a JSONL corpus of 20 shards as shufflepoint.Shards
    "mixture": (4, 1, 0, False, 7),  # that corpus mixed 2:1 with 10 in-memory samples, 40 an epoch
    "budget": (4, 1, 0, False, 5),  # max_steps 12 on 2 ranks (96 samples), stopped at 5, resumed on 1
    "budgetsame": (4, 1, 0, False, 5),  # the same, resumed on 2
    "budgetgrow": (4, 2, 0, False, 2),  # max_steps 3 on 1 rank x 4 x GA 2 (24 samples), stopped at 2, resumed on 2
    "budgetpacked": (4, 1, 0, False, 2),  # Packed rows of SEQ tokens: max_steps 4 on 2 ranks (128 tokens), 2 -> 1
}
# max_steps of the budget scenarios; the others count epochs (num_train_epochs=3)
MAX_STEPS = {"budget": 12, "budgetsame": 12, "budgetgrow": 3, "budgetpacked": 4}
REFUSED_MAX_STEPS = 10  # phase "refuse": a resume of "budget" on 1 rank with max_steps changed to its placed step


class Tokens(torch.utils.data.Dataset):
    """Sample i: tokens [i, i+1, r, i+3] where r is random when augmenting (drawn from torch's global
    RNG, as a user's augmentation would be): seed_per_sample keys it by (seed, epoch, index)."""

    def __init__(self, augment):
        self.augment = augment

    def __len__(self):
        return N

    def __getitem__(self, index):
        noise = int(torch.randint(0, VOCAB, ())) if self.augment else index + 2
        ids = torch.tensor([index, index + 1, noise, index + 3]) % VOCAB
        return {"input_ids": ids, "labels": ids}


def tokens(index):
    ids = torch.tensor([index, index + 1, index + 2, index + 3]) % VOCAB
    return {"input_ids": ids, "labels": ids}


def corpus_dataset(out, name, rank):
    """shufflepoint.Shards over JSONL shards of {"id": i} rows (made by rank 0), alone or in a Mixture."""
    import shufflepoint

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    from corpus_files import jsonl_corpus

    folder = os.path.join(out, "corpus")
    if rank == 0 and not os.path.isdir(folder):
        jsonl_corpus(folder, 20, rows=(1, 3), seed=3)
    torch.distributed.barrier()
    corpus = shufflepoint.Shards(os.path.join(folder, "*.jsonl"), transform=lambda row: tokens(row["id"]),
                                 cache_dir=os.path.join(out, f"index-{rank}"), progress=False)
    if name == "shards":
        return corpus
    return shufflepoint.Mixture([(corpus, 2), ([tokens(100 + i) for i in range(10)], 1)], samples_per_epoch=40)


def packed_dataset():
    """shufflepoint.Packed over 30 documents of 1 to 6 tokens (+ EOS): 33 rows of SEQ tokens an epoch."""
    import shufflepoint

    documents = [{"input_ids": [(3 * d + j) % (VOCAB - 1) for j in range(1 + d % 6)]} for d in range(30)]
    return shufflepoint.Packed(documents, SEQ, eos=VOCAB - 1, progress=False)


class Recording(Trainer):
    def __init__(self, *args, record=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.record = record

    def training_step(self, model, inputs, *args, **kwargs):
        ids = inputs["input_ids"]
        self.record["batches"].append({"epoch": self.record["epoch"], "ids": ids[:, 0].tolist(),
                                       "noise": ids[:, 2].tolist(), "rows": ids.tolist()})
        return super().training_step(model, inputs, *args, **kwargs)


class Steps(transformers.TrainerCallback):
    def __init__(self, record, stop_at, saved_marker):
        self.record, self.stop_at, self.saved_marker = record, stop_at, saved_marker

    def on_train_begin(self, args, state, control, train_dataloader=None, **kwargs):
        self.record["start_step"] = state.global_step
        self.record["epoch"] = train_dataloader.epoch - 1  # the epoch the data is placed in, minus one

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.record["epoch"] += 1

    def on_step_end(self, args, state, control, lr_scheduler=None, **kwargs):
        self.record["steps"].append([state.global_step, lr_scheduler.get_last_lr()[0]])
        if self.stop_at is not None and state.global_step == self.stop_at:
            control.should_save = True
            control.should_training_stop = True

    def on_save(self, args, state, control, **kwargs):
        if self.saved_marker is not None:
            self.record["saved_at"] = state.global_step


def run(out, phase, name, rank):
    batch, accumulation, workers, augment, stop = SCENARIOS[name]
    record = {"batches": [], "steps": [], "world_size": int(os.environ["WORLD_SIZE"])}
    output_dir = os.path.join(out, name)
    args = transformers.TrainingArguments(
        output_dir=output_dir, per_device_train_batch_size=batch, gradient_accumulation_steps=accumulation,
        num_train_epochs=3, max_steps=REFUSED_MAX_STEPS if phase == "refuse" else MAX_STEPS.get(name, -1),
        learning_rate=1e-2, lr_scheduler_type="linear", save_strategy="no",
        logging_strategy="no", report_to=[], use_cpu=True, seed=1234, dataloader_num_workers=workers,
        disable_tqdm=True, ddp_find_unused_parameters=False,
    )
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=SEQ)
    model = transformers.LlamaForCausalLM(config)
    stopping = phase in ("stop", "kill")
    if name in ("shards", "mixture"):
        dataset = corpus_dataset(out, name, rank)
    elif name == "budgetpacked":
        dataset = packed_dataset()
    else:
        dataset = Tokens(augment)
    trainer = Recording(model=model, args=args, train_dataset=dataset, seed_per_sample=augment,
                        record=record, callbacks=[Steps(record, stop if stopping else None, phase == "kill")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResumeWarning)
        try:
            trainer.train(resume_from_checkpoint=phase in ("resume", "refuse"))
        except ValueError as error:
            if phase != "refuse":
                raise
            record["error"] = str(error)
    record["resume_warnings"] = [str(w.message) for w in caught if issubclass(w.category, ResumeWarning)]
    record["final_step"] = trainer.state.global_step
    record["weights"] = float(sum(p.detach().double().sum() for p in model.parameters()))
    with open(os.path.join(out, f"{name}.{phase}.rank{rank}.json"), "w") as f:
        json.dump(record, f)
    if phase == "kill":
        torch.distributed.barrier()
        if rank == 0:
            open(os.path.join(out, f"{name}.saved"), "w").close()
        time.sleep(300)


def main():
    out, runs = sys.argv[1], sys.argv[2:]
    rank = int(os.environ["RANK"])
    for phase_and_name in runs:
        phase, name = phase_and_name.split(":")
        run(out, phase, name, rank)


if __name__ == "__main__":
    main()
