"""A data-parallel mesh (dp x tp) on Gloo: save on one shape, resume in fresh processes on another.

argv: mode ("save" or "resume"), output folder, dp size. The world is dp x 2 (tp). Each process
writes what it received and the states it held; the test compares them across processes.
"""

import json
import os
import sys

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import shufflepoint
from shufflepoint._tools.launch import end_worker

MODE, OUT, DP = sys.argv[1], sys.argv[2], int(sys.argv[3])
N, BATCH, SEED, SAVE_AFTER = 61, 3, 17, 4
dist.init_process_group("gloo")
RANK = dist.get_rank()
mesh = init_device_mesh("cpu", (DP, 2), mesh_dim_names=("dp", "tp"))
record = {"dp_rank": mesh.get_local_rank("dp"), "tp_rank": mesh.get_local_rank("tp")}


def attempt(name, build):
    try:
        build()
        record[name] = "accepted"
    except (ValueError, TypeError) as error:
        record[name] = f"{type(error).__name__}: {error}"


def batches(loader, limit=None):
    taken = []
    for batch in loader:
        taken.append(batch.tolist())
        if limit is not None and len(taken) == limit:
            break
    return taken


dataset = list(range(N))
loader = shufflepoint.DataLoader(dataset, BATCH, seed=SEED, mesh=mesh["dp"])
record["loader"] = {"rank": loader.rank, "world_size": loader.world_size}
if MODE == "save":
    record["before"] = batches(loader, SAVE_AFTER)
    record["state"] = loader.state_dict()
    record["after"] = batches(loader)  # the uninterrupted run, to the end of the epoch
    # the same through mesh_dims= on the whole mesh, and through the dp process group
    by_name = shufflepoint.DataLoader(dataset, BATCH, seed=SEED, mesh=mesh, mesh_dims="dp")
    by_group = shufflepoint.DataLoader(dataset, BATCH, seed=SEED, process_group=mesh["dp"].get_group())
    record["by_name"] = batches(by_name, SAVE_AFTER)
    record["by_group"] = batches(by_group, SAVE_AFTER)
    sampler = shufflepoint.ResumableSampler(dataset, seed=SEED, mesh=mesh["dp"])
    record["sampler"] = {"rank": sampler.rank, "num_replicas": sampler.num_replicas, "first": list(sampler)[:5]}
    # bad input
    attempt("no_such_dim", lambda: shufflepoint.DataLoader(dataset, BATCH, mesh=mesh, mesh_dims="cp"))
    attempt("whole_mesh", lambda: shufflepoint.DataLoader(dataset, BATCH, mesh=mesh))
    groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]  # every process builds every group
    other = groups[1 - RANK % 2]
    attempt("not_a_member", lambda: shufflepoint.DataLoader(dataset, BATCH, process_group=other))
    attempt("mesh_and_world_size", lambda: shufflepoint.DataLoader(dataset, BATCH, mesh=mesh["dp"], world_size=2))
    # a state that differs on one dp rank is refused along the dp group, naming the field
    # (one batch further: a state a run really writes, since v3 checks that its history arrives at its cursor)
    ahead = shufflepoint.DataLoader(dataset, BATCH, seed=SEED, world_size=DP, rank=0, verify_ranks=False)
    batches(ahead, SAVE_AFTER + 1)
    ahead_state = ahead.state_dict()

    def disagree(name, differs_on, **kwargs):
        checked = shufflepoint.DataLoader(dataset, BATCH, seed=SEED, **kwargs)
        state = ahead_state if RANK == differs_on else record["state"]
        try:
            checked.load_state_dict(state)
            record[name] = "accepted"
        except shufflepoint.StateError as error:
            record[name] = str(error)

    disagree("disagreement", 2, mesh=mesh["dp"])
    # a tensor-parallel peer (process 1 of dp rank 0) that differs: its dp group refuses, process 0's does not
    disagree("tp_peer_dp_only", 1, mesh=mesh["dp"])
    # given the whole mesh, the agreement runs along tp too: every process refuses
    disagree("tp_peer_whole_mesh", 1, mesh=mesh, mesh_dims="dp")

    def exclude(name, differs_on):  # exclude() checks its indices along the same groups
        checked = shufflepoint.DataLoader(dataset, BATCH, seed=SEED, mesh=mesh["dp"])
        attempt(name, lambda: checked.exclude([5, 6] if RANK == differs_on else [5]))
        record[name + "_excluded"] = checked.excluded.count

    exclude("exclude_same", None)
    exclude("exclude_disagreement", 2)
else:
    with open(os.path.join(OUT, "save.r0.json")) as f:  # dp rank 0, tp rank 0: any rank's state restores all
        saved = json.load(f)["state"]
    loader.load_state_dict(saved)
    record["state_loaded"] = loader.state_dict()
    record["after"] = batches(loader)
    record["state_end"] = loader.state_dict()
if MODE == "save":  # two data-parallel dimensions (torchtitan's dp_replicate x dp_shard), flattened
    dp2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", "dp_shard"))
    flattened = shufflepoint.DataLoader(dataset, BATCH, seed=SEED, mesh=dp2)
    record["flattened"] = {"rank": flattened.rank, "world_size": flattened.world_size,
                           "coordinate": dp2.get_coordinate()}
    good = flattened.state_dict()
    later = shufflepoint.DataLoader(dataset, BATCH, seed=SEED, world_size=4, rank=0, verify_ranks=False)
    later.set_epoch(1)
    try:
        flattened.load_state_dict(later.state_dict() if RANK == 3 else good)
        record["flattened_disagreement"] = "accepted"
    except shufflepoint.StateError as error:
        record["flattened_disagreement"] = str(error)
with open(os.path.join(OUT, f"{MODE}.r{RANK}.json"), "w") as f:
    json.dump(record, f)
end_worker()
