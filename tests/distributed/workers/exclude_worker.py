"""exclude() on real ranks: the same indices everywhere cost one all_reduce; different ones are refused
on every rank, naming each rank's count, with nothing excluded anywhere."""

import json
import os
import sys

import torch.distributed as dist

import shufflepoint
from shufflepoint._tools.launch import end_worker

OUT = sys.argv[1]
dist.init_process_group("gloo")
RANK = dist.get_rank()
results = {}


def attempt(name, indices, **kwargs):
    loader = shufflepoint.DataLoader(list(range(40)), 4, seed=3, **kwargs)
    it = iter(loader)
    next(it)
    before = loader.state_dict()
    calls = []
    originals = {op: getattr(dist, op) for op in ("all_reduce", "all_gather_object", "all_gather", "broadcast")}
    for op, original in originals.items():
        setattr(dist, op, lambda *args, _op=op, _original=original, **kw: calls.append(_op) or _original(*args, **kw))
    try:
        loader.exclude(indices)
        served = [i for batch in it for i in batch.tolist()]
        results[name] = {"ok": True, "excluded": loader.excluded.count, "served": served}
    except ValueError as error:
        results[name] = {"ok": False, "error": str(error), "unchanged": loader.state_dict() == before}
    finally:
        for op, original in originals.items():
            setattr(dist, op, original)
    results[name]["collectives"] = calls


attempt("same", [5, 6, 7, 30])
attempt("differs", [5, 6, 7] if RANK == 0 else [5, 6, 8, 9])
attempt("opt_out", [RANK], verify_ranks=False)
with open(os.path.join(OUT, f"exclude.r{RANK}.json"), "w") as f:
    json.dump(results, f)
end_worker()
