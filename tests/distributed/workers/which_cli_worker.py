"""Runs inside each launched process of ``test_which_cli.py``: a training loop over a JSONL corpus that
checkpoints after every step and logs what each rank received, so that ``shufflepoint which`` can be
checked against it afterwards.

    python -m torch.distributed.run ... which_cli_worker.py OUT --steps N [--stop-at K]

The corpus is ``$WHICH_CORPUS/*.jsonl`` (rows ``{"id": int}``). ``dataset()`` is also the factory the
CLI is pointed at (``which_cli_worker.py:dataset``), so the CLI builds the very dataset the run trained on.
Each rank appends ``{"step", "ids"}`` to ``OUT/log-rank<R>.jsonl`` per batch; rank 0 writes
``OUT/checkpoint.pt`` (``{"loader": state, "step": ...}``) atomically after every step. With
``--stop-at K`` the ranks write ``OUT/stopped`` after the checkpoint of step K and wait there for the
launcher's SIGKILL (no step past the checkpoint is logged). A run resumes from ``OUT/checkpoint.pt``
when it exists, on whatever world size it is launched with.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import shufflepoint


def dataset():
    return shufflepoint.Shards(os.path.join(os.environ["WHICH_CORPUS"], "*.jsonl"), progress=False,
                               cache_dir=os.path.join(os.environ["WHICH_CORPUS"], "cache"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, required=True, help="run until this many steps in all")
    parser.add_argument("--stop-at", type=int, default=None)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    loader = shufflepoint.DataLoader(dataset(), batch_size=2, seed=77, shuffle_block=4)
    checkpoint = os.path.join(args.out, "checkpoint.pt")
    step = 0
    if os.path.exists(checkpoint):
        saved = torch.load(checkpoint)
        loader.load_state_dict(saved["loader"])
        step = saved["step"]
    log = open(os.path.join(args.out, f"log-rank{rank}.jsonl"), "a")
    while step < args.steps:
        for batch in loader:
            log.write(json.dumps({"step": step, "ids": batch["id"].tolist(), "world": dist.get_world_size()}) + "\n")
            log.flush()
            step += 1
            dist.barrier()  # every rank has logged the step before it is checkpointed
            if rank == 0:
                torch.save({"loader": loader.state_dict(), "step": step}, checkpoint + ".tmp")
                os.replace(checkpoint + ".tmp", checkpoint)
            dist.barrier()
            if step == args.stop_at:
                if rank == 0:
                    open(os.path.join(args.out, "stopped"), "w").close()
                time.sleep(600)  # until SIGKILL
            if step == args.steps:
                break
    log.close()
    from shufflepoint._tools.launch import end_worker

    end_worker()


if __name__ == "__main__":
    main()
