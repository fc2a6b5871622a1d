"""Runs inside each launched process: augmented batches recorded before and after resumes.

    python -m torch.distributed.run ... augment_worker.py OUT SPEC_JSON

SPEC: {"name", "num_workers", "epochs", "load": name of a saved state or null, "save_at": [epoch,
step] or null, "reference": bool}. With "reference", an uninterrupted run from epoch 0 is recorded
first. Then a fresh loader (loading "load" if given) runs to "save_at", writes its state there and
stops, or runs to the end. Every batch is recorded as its ids, a digest of each sample's augmented
image, and a digest of the whole collated batch (which includes collate-time MLM masking).

The augmentations draw from torch's and numpy's *global* RNGs (a RandomResizedCrop-like crop and a
flip, as torchvision v2 transforms do), plus an explicit ``transform(sample, rng)``.
"""

import hashlib
import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

OUT, SPEC = sys.argv[1], json.loads(sys.argv[2])
dist.init_process_group("gloo")
RANK = dist.get_rank()
SEED, BATCH, N = 21, 4, 66


class Images(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, index):
        image = torch.arange(3 * 24 * 24, dtype=torch.float32).reshape(3, 24, 24) / 1000 + index
        top, left = torch.randint(0, 12, (2,)).tolist()  # the crop box: torch's global RNG
        size = int(torch.randint(8, 13, ()).item())
        crop = image[:, top:top + size, left:left + size].unsqueeze(0)
        image = torch.nn.functional.interpolate(crop, size=(8, 8), mode="bilinear", align_corners=False)[0]
        if torch.rand(()) < 0.5:
            image = image.flip(-1)
        image = image + float(np.random.normal(scale=0.1))  # numpy's global RNG
        return {"id": index, "image": image, "tokens": torch.arange(12) + 100 * index}


def noise(sample, rng):
    return dict(sample, image=sample["image"] + torch.from_numpy(rng.normal(size=(8, 8)).astype(np.float32)))


def masking(samples):
    batch = torch.utils.data.default_collate(samples)
    batch["tokens"] = batch["tokens"].masked_fill(torch.rand(batch["tokens"].shape) < 0.25, -1)
    return batch


def digest(tensor):
    return hashlib.sha1(tensor.contiguous().numpy().tobytes()).hexdigest()[:16]


def record(batch):
    ids = batch["id"].tolist()
    return {"ids": ids, "samples": [digest(batch["image"][k]) for k in range(len(ids))],
            "batch": digest(torch.cat([batch["image"].flatten(), batch["tokens"].flatten().float()]))}


def make():
    return shufflepoint.DataLoader(Images(), BATCH, seed=SEED, num_workers=SPEC["num_workers"],
                                   seed_per_sample=True, transform=noise, collate_fn=masking)


def run(loader, save_at=None):
    """{epoch: [record, ...]} from the loader's position to the end, or to ``save_at``."""
    out = {}
    while loader.epoch < SPEC["epochs"]:
        epoch = loader.epoch
        batches = out.setdefault(str(epoch), [])
        if save_at == [epoch, len(batches)]:
            return out
        for batch in loader:
            batches.append(record(batch))
            if save_at == [epoch, len(batches)]:
                return out
    return out


def write_json(name, value):
    path = os.path.join(OUT, name)
    with open(path + ".tmp", "w") as f:
        json.dump(value, f)
    os.replace(path + ".tmp", path)


if SPEC.get("reference"):
    torch.manual_seed(RANK), np.random.seed(RANK)
    write_json(f"{SPEC['name']}.ref.r{RANK}.json", run(make()))
torch.manual_seed(1000 + RANK), np.random.seed(1000 + RANK)  # a new process: other global RNG states
loader = make()
if SPEC.get("load"):
    loader.load_state_dict(torch.load(os.path.join(OUT, f"{SPEC['load']}.state.pt")))
write_json(f"{SPEC['name']}.run.r{RANK}.json", run(loader, SPEC.get("save_at")))
if SPEC.get("save_at") and RANK == 0:  # any rank's state restores every rank
    torch.save(loader.state_dict(), os.path.join(OUT, f"{SPEC['name']}.state.pt"))
end_worker()
