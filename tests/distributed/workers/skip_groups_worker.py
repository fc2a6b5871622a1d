"""skip_bad_samples on real ranks for loaders that cannot exclude (they only replace): a Mixture of Packed sources
whose corpus transform fails on one record, and a bucketed image corpus with one image that does not decode.

argv: mode, output folder, kind (``mixture`` or ``buckets``). The data and its bad record: ``spec.json`` in the
folder (written by tests/distributed/test_skip_groups.py). Batch 2 per rank, 2 epochs.

- ``whole``: two uninterrupted runs, ``num_workers=0`` and ``2``; each rank writes both, step by step.
- ``save``: ``num_workers=2``, reads SAVE_AT steps, saves the state, then reads on until the launcher SIGKILLs it.
- ``resume`` (2 ranks) and ``three`` (3 ranks): new processes load that state and read to the end of epoch 1;
  ``resume`` then reads with ``max_skips=0`` until the limit stops every rank.
Each step: ``[epoch, step, nominal, served, content]``: the indices the order put in this rank's slots
(``_position.which``), those ``which`` says were served (a skipped slot holds its replacement), and the content as
read (tokens, or the ids the images carry), to check that ``which`` tells what was served.
"""

import base64
import io
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from PIL import Image

import shufflepoint
from shufflepoint._tools.launch import end_worker

MODE, OUT, KIND = sys.argv[1], sys.argv[2], sys.argv[3]
BATCH, SEED, SAVE_AT, EPOCHS = 2, 5, 5, 2
with open(os.path.join(OUT, "spec.json")) as f:
    SPEC = json.load(f)


class Decode:
    """The documents' corpus transform: record ``bad`` does not decode once armed (its tokens were counted before,
    as from a published index)."""

    def __init__(self, bad):
        self.bad, self.armed = bad, False

    def __call__(self, row):
        if self.armed and row["id"] == self.bad:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, f"record {row['id']} is corrupt")
        return row


def decode_image(row):
    """The image corpus's transform: PIL raises UnidentifiedImageError (an OSError) on the corrupt record."""
    with Image.open(io.BytesIO(base64.b64decode(row["png"]))) as image:
        return torch.from_numpy(np.asarray(image.convert("L"), dtype=np.uint8).copy())


def dataset():
    if KIND == "buckets":
        return shufflepoint.Shards(os.path.join(OUT, "images", "*.jsonl"), transform=decode_image, progress=False,
                                   cache_dir=os.path.join(OUT, "cache-images"))
    sources, decoders = [], []
    for name, weight in (("a", 2), ("b", 1)):
        decode = Decode(SPEC["bad"] if name == "a" else -1)
        corpus = shufflepoint.Shards(os.path.join(OUT, name, "*.jsonl"), transform=decode, progress=False,
                                     cache_dir=os.path.join(OUT, f"cache-{name}"))
        sources.append((shufflepoint.Packed(corpus, 16, progress=False), weight))
        decoders.append(decode)
    for decode in decoders:
        decode.armed = True
    return shufflepoint.Mixture(sources)


def loader(workers, **policy):
    keys = {"buckets": SPEC["keys"]} if KIND == "buckets" else {}
    return shufflepoint.DataLoader(dataset(), BATCH, seed=SEED, num_workers=workers,
                                   skip_bad_samples=policy or True, **keys)


def content(batch):
    if KIND == "buckets":  # each image carries its id in its first two pixels
        return [int(image[0, 0]) + 256 * int(image[0, 1]) for image in batch]
    return batch["input_ids"].tolist()


def read(ld, stop=None):
    out = []
    while ld.epoch < EPOCHS:
        epoch = ld.epoch
        for batch in ld:
            step = ld.step - 1
            out.append([epoch, step, ld._position.which(step)[RANK], ld.which(step)[RANK], content(batch)])
            if stop is not None and ld.step == stop:
                return out
    return out


def write(name, value):
    with open(os.path.join(OUT, f"{KIND}.{name}.r{RANK}.json"), "w") as f:
        json.dump(value, f)


dist.init_process_group("gloo")
RANK = dist.get_rank()
state_path = os.path.join(OUT, f"{KIND}.state.json")
if MODE == "whole":
    for workers in (0, 2):
        ld = loader(workers)
        write(f"whole{workers}", {"steps": read(ld), "skipped": ld.state_dict().get("skipped", [])})
elif MODE == "save":
    ld = loader(2)
    write("save", {"steps": read(ld, SAVE_AT)})
    if RANK == 0:
        with open(state_path + ".tmp", "w") as f:
            json.dump(ld.state_dict(), f)
        os.replace(state_path + ".tmp", state_path)
    dist.barrier()
    if RANK == 0:
        open(os.path.join(OUT, f"{KIND}.saved"), "w").close()
    for _batch in ld:  # keep reading: the launcher kills us mid-epoch
        time.sleep(0.05)
    time.sleep(60)
else:
    ld = loader(0)
    with open(state_path) as f:
        ld.load_state_dict(json.load(f))
    out = {"steps": read(ld), "skipped": ld.state_dict().get("skipped", [])}
    if MODE == "resume":
        tight = loader(2, max_skips=0, window=100)
        try:
            read(tight)
        except RuntimeError as error:  # every rank, at the same step, with the same text
            out["stopped"] = [tight.step, str(error)]
    write(MODE, out)
end_worker()
