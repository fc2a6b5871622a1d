"""One rank of a trainer under torchrun (a Gloo group from RANK/WORLD_SIZE/MASTER_*), beside a Ray cluster whose
actors decode its batches: the tests/ray/test_decode_pool.py kill-and-resume run.

    python decode_trainer.py ADDRESS CORPUS CACHE RECORD STATE KILL_AT_STEP

Loads STATE when it exists; for every batch appends {step, epoch, digest, keys} to RECORD/rank{r}.jsonl; rank 0
writes the loader's state after every step (renamed into place). At step KILL_AT_STEP (>= 0) each rank, once it
recorded the step and rank 0 wrote its state, SIGKILLs itself; otherwise it reads to the end of the next epoch.
"""

import json
import os
import signal
import sys

import ray
import torch
import torch.distributed as dist

import shufflepoint
from shufflepoint.integrations.ray import RayDataLoader

sys.path.insert(0, os.path.dirname(__file__))
from decode_corpora import digest  # noqa: E402

SEED, BATCH, SIZE = 11, 4, 32


def loader_for(corpus, cache, **kwargs):
    dataset = shufflepoint.Shards(corpus, cache_dir=cache, progress=False)
    return dataset, dict(batch_size=BATCH, seed=SEED, transform=shufflepoint.DecodeImage(SIZE), **kwargs)


def main(address, corpus, cache, record, state_path, kill_at):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ray.init(address=address, log_to_driver=False)
    dataset, kwargs = loader_for(corpus, cache)
    loader = RayDataLoader(dataset, decode_actors=2, decode_cpus=0.5, **kwargs)
    if os.path.exists(state_path):
        loader.load_state_dict(torch.load(state_path))
    last_epoch = loader.epoch + 1
    with open(os.path.join(record, f"rank{rank}.jsonl"), "a") as out:
        while loader.epoch <= last_epoch:
            epoch = loader.epoch
            for batch in loader:
                step = loader.step
                out.write(json.dumps({"pid": os.getpid(), "step": step, "epoch": epoch, "digest": digest(batch),
                                      "keys": list(batch["__key__"])}) + "\n")
                out.flush()
                if rank == 0:
                    torch.save(loader.state_dict(), state_path + ".new")
                    os.replace(state_path + ".new", state_path)
                if step == kill_at:
                    dist.barrier()  # rank 0's state of this step is written
                    os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:6], int(sys.argv[6]))
