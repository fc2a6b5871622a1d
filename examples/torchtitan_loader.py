"""shufflepoint as torchtitan's data loader: built, iterated and checkpointed the way torchtitan 0.3 does it.

    pip install torchtitan==0.3.0
    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/torchtitan_loader.py

In a torchtitan job, the only change is the job config's ``dataloader`` (a config_registry function)::

    from shufflepoint.integrations.torchtitan import ShufflepointDataLoader

    def llama3_shufflepoint() -> Trainer.Config:
        config = llama3_debugmodel()
        config.dataloader = ShufflepointDataLoader.Config(build_dataset=build_dataset, seed=1234)
        return config

torchtitan's trainer needs a GPU, so this script drives the loader as ``torchtitan/trainer.py`` does
(``config.dataloader.build(dp_world_size=, dp_rank=, tokenizer=, seq_len=, local_batch_size=)``,
one ``iter()`` then ``next()`` per step, the checkpointer's ``{"dataloader": loader}`` through
torch.distributed.checkpoint). Stop it with --stop-after-step N and run it again, with the same or
another --nproc_per_node (torchtitan's own loaders refuse another data-parallel degree): the rows
continue, exactly on the same degree, each row of the epoch once on another.
"""

import argparse
import json
import os

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import shufflepoint
from shufflepoint.integrations.torchtitan import ShufflepointDataLoader


def documents(count: int = 48) -> list[dict[str, list[int]]]:
    """Tokenized documents of 2-6 tokens whose ids say where they come from: 1000 * document + i."""
    return [{"input_ids": [1000 * d + i for i in range(2 + d % 5)]} for d in range(count)]


def build_dataset(tokenizer, row_tokens):
    """Packed rows of seq_len + 1 tokens from two corpora, annealed: after 48 rows, the second only."""
    web, curated = documents(), [{"input_ids": [t + 500 for t in d["input_ids"]]} for d in documents()]
    sources = [shufflepoint.Packed(corpus, row_tokens, progress=False) for corpus in (web, curated)]
    return shufflepoint.Mixture(sources, samples_per_epoch=96,
                                schedule=[(0, [3, 1]), (48 * row_tokens, [0, 1])])  # starts in tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint-dir", default="checkpoints/torchtitan")
    parser.add_argument("--seq-len", type=int, default=7)
    parser.add_argument("--local-batch-size", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption after a checkpoint")
    parser.add_argument("--record", default=None, help="append each step's input rows here")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    dp_rank, dp_world_size = dist.get_rank(), dist.get_world_size()  # torchtitan: the batch ranks of its mesh

    # --- what torchtitan's trainer does with its config.dataloader ---
    config = ShufflepointDataLoader.Config(build_dataset=build_dataset, seed=1234, epochs=args.epochs)
    dataloader = config.build(dp_world_size=dp_world_size, dp_rank=dp_rank, tokenizer=None, seq_len=args.seq_len,
                              local_batch_size=args.local_batch_size, snapshot_every_n_steps=None)
    progress = {"step": 0}
    latest = os.path.join(args.checkpoint_dir, "latest")
    if os.path.exists(latest):  # the checkpointer's load: the same key, whatever the saved degree was
        dcp.load({"dataloader": dataloader, "train_state": progress}, checkpoint_id=open(latest).read())
    data_iterator = iter(dataloader)
    for inputs, labels in data_iterator:
        progress["step"] += 1
        if args.record:
            with open(f"{args.record}.rank{dp_rank}", "a") as f:
                f.write(json.dumps({"step": progress["step"], "rows": inputs["input"].tolist(),
                                    "labels": labels.tolist()}) + "\n")
        if progress["step"] == args.stop_after_step:
            path = os.path.join(args.checkpoint_dir, f"step-{progress['step']}")
            dcp.save({"dataloader": dataloader, "train_state": progress}, checkpoint_id=path)
            if dp_rank == 0:
                with open(latest + ".tmp", "w") as f:
                    f.write(path)
                os.replace(latest + ".tmp", latest)
            break
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
