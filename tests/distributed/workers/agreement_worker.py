"""Ranks that load different states: every rank must refuse, naming the disagreement."""

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


def make(**kwargs):
    return shufflepoint.DataLoader(list(range(40)), 4, seed=3, **kwargs)


def attempt(name, state, **kwargs):
    loader = make(**kwargs.pop("init", {}))
    before = loader.state_dict()
    try:
        loader.load_state_dict(state, **kwargs)
        results[name] = {"ok": True, "cursor": loader.cursor}
    except shufflepoint.StateError as error:
        results[name] = {"ok": False, "error": str(error), "unchanged": loader.state_dict() == before}


def counted(name, state):
    """The collectives one load makes: an agreeing load must cost one all_reduce and nothing else."""
    calls = []
    originals = {op: getattr(dist, op) for op in ("all_reduce", "all_gather_object", "all_gather", "broadcast")}
    for op, original in originals.items():
        setattr(dist, op, lambda *args, _op=op, _original=original, **kwargs: calls.append(_op)
                or _original(*args, **kwargs))
    try:
        attempt(name, state)
    finally:
        for op, original in originals.items():
            setattr(dist, op, original)
    results[name]["collectives"] = calls


def at(epoch=0, cursor=0):
    """The state a loader writes at (epoch, cursor), its steps and history consistent: 2 ranks x 4."""
    loader = make()
    loader.seek(epoch, cursor // 8)
    return loader.state_dict()


attempt("same", at(cursor=16))
counted("same_counted", at(cursor=16))
counted("differs_counted", at(cursor=16 + 8 * RANK))
attempt("cursor_differs", at(cursor=16 + 8 * RANK))
attempt("epoch_differs", at(epoch=RANK))
attempt("one_rank_garbage", at(cursor=16) if RANK == 0 else {"yielded": 3})
attempt("opt_out", at(cursor=16 + 8 * RANK), verify_ranks=False)
attempt("opt_out_in_constructor", at(cursor=16 + 8 * RANK), init={"verify_ranks": False})
sampler = shufflepoint.ResumableSampler(list(range(40)), seed=3)
read = iter(sampler)
for _ in range(RANK):  # rank 1's state is one sample further: cursor 2
    next(read)
try:
    sampler.load_state_dict(sampler.state_dict())
    results["sampler_cursor_differs"] = {"ok": True}
except shufflepoint.StateError as error:
    results["sampler_cursor_differs"] = {"ok": False, "error": str(error)}
with open(os.path.join(OUT, f"agreement.r{RANK}.json"), "w") as f:
    json.dump(results, f)
end_worker()
