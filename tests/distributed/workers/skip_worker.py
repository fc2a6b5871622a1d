"""skip_bad_samples on real ranks: bad samples skipped, a stop, a resume in new processes.

argv: mode, output folder, deal. A dataset of 60 samples where a few fail to read (``SampleError``) and a few make
the loader's ``transform`` raise; batch 3 per rank, seed 7, 2 epochs.

- ``whole``: two uninterrupted runs in these processes, with ``num_workers=0`` and with 2; each rank writes both.
- ``save``: ``num_workers=2``, stops after SAVE_AT steps (some samples skipped before), rank 0 saves the state.
- ``resume``: new processes, ``num_workers=0``, load that state and read to the end of epoch 1; then a loader
  with ``max_skips=2`` reads until the limit stops it.
Each rank writes the batches it received, by global step, and the state's ``skipped`` record at the end.
"""

import json
import os
import sys

import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

MODE, OUT, DEAL = sys.argv[1], sys.argv[2], sys.argv[3]
N, BATCH, SEED, SAVE_AT, EPOCHS = 60, 3, 7, 6, 2
UNREADABLE = {4, 23, 41}  # the dataset raises SampleError
UNDECODABLE = {9, 50}  # the transform raises ValueError


class Flaky:
    def __len__(self):
        return N

    def __getitem__(self, index):
        if index in UNREADABLE:
            raise shufflepoint.SampleError(f"record {index} does not decode")
        return index


def transform(sample, rng):
    if sample in UNDECODABLE:
        raise ValueError(f"cannot decode {sample}")
    return sample


def loader(workers):
    return shufflepoint.DataLoader(Flaky(), BATCH, seed=SEED, num_workers=workers, transform=transform, deal=DEAL,
                                   skip_bad_samples={"max_skips": 10, "window": 100})


def read(ld, stop=None):
    received = {}
    while ld.epoch < EPOCHS:
        for batch in ld:
            received[ld.step - 1] = batch.tolist()
            if stop is not None and ld.step == stop:
                return received
    return received


dist.init_process_group("gloo")
RANK = dist.get_rank()
state_path = os.path.join(OUT, "state.json")
out = {}
if MODE == "whole":
    for workers in (0, 2):
        ld = loader(workers)
        out[f"workers{workers}"] = read(ld)
        out[f"skipped{workers}"] = ld.state_dict().get("skipped", [])
        out[f"which{workers}"] = {str(step): ld.which(step) for step in range(ld.step)}  # every step, both deals
elif MODE == "save":
    ld = loader(2)
    out["received"] = read(ld, SAVE_AT)
    if RANK == 0:
        with open(state_path, "w") as f:
            json.dump(ld.state_dict(), f)
else:
    ld = loader(0)
    with open(state_path) as f:
        ld.load_state_dict(json.load(f))
    out["received"] = read(ld)
    out["skipped"] = ld.state_dict().get("skipped", [])
    out["which"] = {str(step): ld.which(step) for step in range(ld.step)}  # from the loaded state's record
    tight = shufflepoint.DataLoader(Flaky(), BATCH, seed=SEED, num_workers=2, transform=transform, deal=DEAL,
                                    skip_bad_samples={"max_skips": 2, "window": 100})
    try:
        read(tight)
    except RuntimeError as error:  # every rank, at the same step, with the same text
        out["stopped"] = [tight.step, str(error)]
with open(os.path.join(OUT, f"{MODE}.r{RANK}.json"), "w") as f:
    json.dump(out, f)
end_worker()
