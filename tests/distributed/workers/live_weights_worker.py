"""Runs inside each launched process: a scheduled Mixture of three small lists (with ``fixed``, one built with plain
weights), read by ``shufflepoint.DataLoader``
under the deal the spec names, loading the state a previous launch saved (if any), reading ``steps`` batches and
calling ``loader.set_weights`` before the steps the spec lists (each rank passes the same weights, but with ``differ``),
recording every batch's samples and any refusal, and saving the state (rank 0).

    python -m torch.distributed.run ... live_weights_worker.py SPEC
"""

import json
import sys

import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

with open(sys.argv[1]) as f:
    SPEC = json.load(f)
dist.init_process_group("gloo")
RANK = dist.get_rank()

SOURCES = [list(range(0, 50)), list(range(100, 120)), list(range(200, 230))]
if SPEC.get("fixed"):  # built with plain weights, no schedule= (mixture/fixed.py): the same order on a loader
    mixture = shufflepoint.Mixture([(source, 1) for source in SOURCES], samples_per_epoch=SPEC["samples_per_epoch"])
else:
    mixture = shufflepoint.Mixture(SOURCES, samples_per_epoch=SPEC["samples_per_epoch"], schedule=[(0, [1, 1, 1])])
loader = shufflepoint.DataLoader(mixture, SPEC["batch_size"], seed=5, deal=SPEC["deal"], shuffle_block=8,
                                 collate_fn=list)
if SPEC.get("state_in"):
    with open(SPEC["state_in"]) as f:
        loader.load_state_dict(json.load(f))
changes = {int(step): weights for step, weights in SPEC["changes"].items()}
records, errors, batches = [], [], iter(loader)
while len(records) < SPEC["steps"]:
    if loader.step in changes:
        weights = changes[loader.step]
        if SPEC.get("differ") and RANK == 1:  # a rank that computed other weights: refused on every rank
            weights = [w + 1 for w in weights]
        try:
            loader.set_weights(weights)
        except ValueError as error:
            errors.append(str(error))
    batch = next(batches, None)
    if batch is None:
        batches = iter(loader)
        continue
    records.append(batch)
with open(f"{SPEC['record']}.rank{RANK}", "w") as f:
    json.dump(records, f)
with open(f"{SPEC['record']}.errors{RANK}", "w") as f:
    json.dump(errors, f)
if RANK == 0:
    with open(SPEC["state_out"] + ".tmp", "w") as f:
        json.dump(loader.state_dict(), f)
    import os

    os.replace(SPEC["state_out"] + ".tmp", SPEC["state_out"])
end_worker()
