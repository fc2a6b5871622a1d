"""Runs inside each launched process: shufflepoint.DataLoader over a sharded corpus, for the resume tests.

    python -m torch.distributed.run ... shards_worker.py MODE OUT SCENARIOS_JSON

Each scenario names a corpus: ``{"kind": "shards", "sources": ..., "format": ..., ...}`` (the
keyword arguments of ``shufflepoint.Shards``) or ``{"kind": "mixture", "parts": [[corpus, weight],
...], "samples_per_epoch": n}`` or ``{"kind": "packed", "source": corpus, "seq_len": n, ...}`` (the
keyword arguments of ``shufflepoint.Packed``) or ``{"kind": "hub", "name": "ORG/NAME", "config": ...}`` (those
of ``shufflepoint.Shards.from_hub``; ``{rank}`` in a string is the rank: a simulated node's own token or cache
folder) or ``{"kind": "video", "sources": ..., ...}`` (those of
``shufflepoint.VideoClips``; a clip is recorded as the (video, frame) numbers its frames show). Every
row of the corpora is ``{"id": int}``, unique per corpus; a packed row is recorded as its tokens joined
by "-" (unique: every token of the corpus is).

MODE "save": an uninterrupted reference run (recorded, unless "reference": false), then a fresh run
to the save point, whose state is written atomically; with "kill": true it keeps training until the
launcher SIGKILLs it.
MODE "resume": a fresh loader loads the state and records the rest.
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

MODE, OUT, SCENARIOS = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
dist.init_process_group("gloo")
RANK, WORLD = dist.get_rank(), dist.get_world_size()


def per_rank(value):
    """A spec's strings with ``{rank}`` filled in: a simulated node's own token or cache folder."""
    if isinstance(value, dict):
        return {k: per_rank(v) for k, v in value.items()}
    return value.replace("{rank}", str(RANK)) if isinstance(value, str) else value


def corpus(spec):
    spec = per_rank(dict(spec))
    kind = spec.pop("kind")
    if kind == "hub":
        return shufflepoint.Shards.from_hub(spec.pop("name"), spec.pop("config", None), progress=False, **spec)
    if kind == "mixture":
        parts = [(corpus(part), weight) for part, weight in spec["parts"]]
        return shufflepoint.Mixture(parts, samples_per_epoch=spec.get("samples_per_epoch"))
    if kind == "video":
        return shufflepoint.VideoClips(spec.pop("sources"), progress=False, **spec)
    if kind == "packed":
        return shufflepoint.Packed(corpus(spec.pop("source")), spec.pop("seq_len"), progress=False, **spec)
    return shufflepoint.Shards(spec.pop("sources"), progress=False, **spec)


def make(s):
    return shufflepoint.DataLoader(corpus(s["corpus"]), s["batch_size"], seed=s["seed"],
                                   num_workers=s.get("num_workers", 0), shuffle_block=s.get("shuffle_block"))


def ids(batch):
    if isinstance(batch, torch.Tensor):  # video clips: what each clip's frames show, "video:frame,frame,..."
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        from video_files import read_numbers

        return [f"{shown[0][0]}:" + ",".join(str(frame) for _, frame in shown) for shown in map(read_numbers, batch)]
    if "input_ids" in batch:  # a packed row: its tokens
        return ["-".join(map(str, row)) for row in batch["input_ids"].tolist()]
    return batch["id"].tolist()


def write_json(name, value):
    tmp = os.path.join(OUT, name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.replace(tmp, os.path.join(OUT, name))


def run_from(loader, epochs):
    """{epoch: [batch ids, ...]} from the loader's current epoch to `epochs`."""
    out = {}
    while loader.epoch < epochs:
        epoch = loader.epoch
        out.setdefault(str(epoch), []).extend(ids(batch) for batch in loader)
    return out


def run_to(loader, save_epoch, save_step):
    """Train to ``save_step`` batches into ``save_epoch``; returns what was received."""
    received = {}
    while True:
        epoch = loader.epoch
        batches = received.setdefault(str(epoch), [])
        if epoch == save_epoch and save_step == 0:
            return received
        for batch in loader:
            batches.append(ids(batch))
            if epoch == save_epoch and len(batches) == save_step:
                return received


def save(s):
    name = s["name"]
    if s.get("reference", True):  # False: the test computes the reference itself
        write_json(f"{name}.ref.r{RANK}.json", run_from(make(s), s["epochs"]))
    loader = make(s)
    received = run_to(loader, *s["save_at"])
    checkpoint = os.path.join(OUT, f"{name}.state.r{RANK}.pt")
    torch.save({"loader": loader.state_dict()}, checkpoint + ".tmp")
    os.replace(checkpoint + ".tmp", checkpoint)
    write_json(f"{name}.before.r{RANK}.json", received)
    dist.barrier()
    if s.get("kill"):
        if RANK == 0:
            open(os.path.join(OUT, f"{name}.saved"), "w").close()
        for _batch in loader:  # keep training, reading shards: the launcher kills us mid-epoch
            time.sleep(0.02)
        time.sleep(60)


def resume(s):
    loader = make(s)
    state = torch.load(os.path.join(OUT, f"{s['source']}.state.r{RANK % s['saved_world']}.pt"))["loader"]
    loader.load_state_dict(state)
    write_json(f"{s['name']}.resumed.r{RANK}.json", run_from(loader, s["epochs"]))


for scenario in SCENARIOS:
    (save if MODE == "save" else resume)(scenario)
end_worker()
