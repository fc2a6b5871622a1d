"""One rank of one replica group on torchft's own data path (benchmarks/torchft.py): ``torchft.DistributedSampler``
into torchdata's ``StatefulDataLoader``, its state in the Manager's state transfer, as torchft's train_ddp.py
recommends; the same manual loop and records as tests/fault_tolerance/worker.py (draw, commit). A group stops when
its loader is exhausted."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
from torch.distributed import TCPStore
from torchdata.stateful_dataloader import StatefulDataLoader
from torchft import DistributedSampler, Manager, ProcessGroupGloo
from torchft.checkpointing.pg_transport import PGTransport

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "fault_tolerance"))
from worker import arguments, write  # noqa: E402


def main() -> None:
    args = arguments()
    if args.group_rank == 0:
        store = TCPStore("127.0.0.1", args.store_port, is_master=True, wait_for_workers=False)  # noqa: F841
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    sampler = DistributedSampler(list(range(args.n)), replica_rank=args.group, num_replica_groups=args.groups,
                                 group_rank=args.group_rank, num_replicas=args.group_world, shuffle=True, seed=0)
    loader = StatefulDataLoader(list(range(args.n)), batch_size=args.batch, sampler=sampler)
    pg = ProcessGroupGloo(timeout=timedelta(seconds=5))
    manager = Manager(
        pg=pg, min_replica_size=1,
        load_state_dict=lambda s: (model.load_state_dict(s["model"]), loader.load_state_dict(s["loader"])),
        state_dict=lambda: {"model": model.state_dict(), "loader": loader.state_dict()},
        replica_id=f"group_{args.group}", timeout=timedelta(seconds=10), quorum_timeout=timedelta(seconds=60),
        rank=args.group_rank, world_size=args.group_world, store_addr="127.0.0.1", store_port=args.store_port,
        hostname="127.0.0.1", init_sync=False,
        checkpoint_transport=PGTransport(pg, timeout=timedelta(seconds=10), device=torch.device("cpu")),
    )
    ready = os.path.join(args.out, "ready")
    os.makedirs(ready, exist_ok=True)
    open(os.path.join(ready, f"{args.group}-{args.group_rank}"), "w").close()
    while len(os.listdir(ready)) < args.wait_for:
        time.sleep(0.05)
    records = open(os.path.join(args.out, f"records-{args.group}-{args.group_rank}.jsonl"), "a")
    go = os.path.join(args.out, "go")
    for batch in loader:
        manager.start_quorum()
        step = manager.current_step()
        write(records, {"kind": "draw", "step": step, "participants": manager.num_participants(),
                        "rank": manager.participating_rank(), "quorum": manager._quorum_id,  # private: its id
                        "ids": batch.tolist(), "time": time.time()})
        optimizer.zero_grad()
        model(batch.float().unsqueeze(1)).pow(2).sum().backward()
        time.sleep(args.compute)
        for parameter in model.parameters():
            manager.allreduce(parameter.grad).wait()
        participating = manager.is_participating()
        committed = manager.should_commit()
        if committed:
            optimizer.step()
        write(records, {"kind": "commit", "step": step, "committed": committed, "participating": participating})
        while args.hold_at is not None and manager.current_step() >= args.hold_at and not os.path.exists(go):
            time.sleep(0.05)
    os._exit(0)


if __name__ == "__main__":
    main()
