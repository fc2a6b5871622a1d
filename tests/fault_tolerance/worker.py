"""One rank of one replica group: torchft's manual loop (start_quorum in the loader, allreduce, should_commit) on
shufflepoint's torchft DataLoader. Every attempted step is written to ``<out>/records-<group>-<rank>.jsonl`` (the
step, the quorum, the ids dealt, whether it committed), every committed step's state to
``<out>/ckpt-<group>-<rank>-<step>.json``. Run by tests/fault_tolerance/test_torchft.py.

Environment: TORCHFT_LIGHTHOUSE; arguments: see ``main``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from typing import Any

import torch
from torch.distributed import TCPStore
from torchft import Manager, ProcessGroupGloo
from torchft.checkpointing.pg_transport import PGTransport
from torchft.manager import WorldSizeMode

import shufflepoint
from shufflepoint.integrations.torchft import DataLoader


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--group", type=int, required=True)
    parser.add_argument("--groups", type=int, required=True)
    parser.add_argument("--group-rank", type=int, default=0)
    parser.add_argument("--group-world", type=int, default=1)
    parser.add_argument("--store-port", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--n", type=int, default=240)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--global-batch", type=int, default=None)
    parser.add_argument("--compute", type=float, default=0.1)
    parser.add_argument("--workers", type=int, default=0, help="the loader's num_workers")
    parser.add_argument("--deal", default=None, help="the loader's deal (spans: each group its own stretch)")
    parser.add_argument("--mixture", action="store_true",
                        help="read MIXTURE (ids 0-199 at 3, 1000-1006 at 1: a small source read many times), not ids")
    parser.add_argument("--fail-commit-at", type=int, default=None)
    parser.add_argument("--resume", default=None, help="a checkpoint file to load before the first step")
    parser.add_argument("--wait-for", type=int, default=0,
                        help="before the first step, wait until this many ranks are ready (the run's first start)")
    parser.add_argument("--spares", type=int, default=None,
                        help="torchft's FIXED_WITH_SPARES with this min_replica_size (default DYNAMIC, min 1)")
    parser.add_argument("--hold-at", type=int, default=None,
                        help="from this committed step on, wait for <out>/go before the next step")
    parser.add_argument("--stop-at", type=int, default=None, help="exit (as if killed) once this step committed")
    return parser.parse_args()


def write(records: Any, record: dict[str, Any]) -> None:
    records.write(json.dumps(record) + "\n")
    records.flush()


def main() -> None:
    args = arguments()
    if args.group_rank == 0:  # torchrun's agent hosts the group's store; here the group's rank 0 does
        store = TCPStore("127.0.0.1", args.store_port, is_master=True, wait_for_workers=False)  # noqa: F841
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
    pg = ProcessGroupGloo(timeout=timedelta(seconds=5))
    manager = Manager(
        pg=pg, min_replica_size=args.spares or 1, load_state_dict=lambda s: model.load_state_dict(s["model"]),
        world_size_mode=WorldSizeMode.FIXED_WITH_SPARES if args.spares else WorldSizeMode.DYNAMIC,
        state_dict=lambda: {"model": model.state_dict()}, replica_id=f"group_{args.group}",
        timeout=timedelta(seconds=10), quorum_timeout=timedelta(seconds=60), rank=args.group_rank,
        world_size=args.group_world, store_addr="127.0.0.1", store_port=args.store_port, hostname="127.0.0.1",
        checkpoint_transport=PGTransport(pg, timeout=timedelta(seconds=10), device=torch.device("cpu")),
    )
    sizes = {"global_batch": args.global_batch} if args.global_batch else {"batch_size": args.batch}
    dataset = shufflepoint.Mixture([(list(range(200)), 3), (list(range(1000, 1007)), 1)], samples_per_epoch=args.n) \
        if args.mixture else list(range(args.n))
    loader = DataLoader(dataset, replica_groups=args.groups, manager=manager, seed=0,
                        min_groups=args.spares or 1, num_workers=args.workers, deal=args.deal, **sizes)
    if args.resume:
        with open(args.resume) as file:
            saved = json.load(file)
        loader.load_state_dict(saved["loader"])
        manager.load_state_dict(saved["manager"])
        model.load_state_dict({"weight": torch.tensor(saved["weight"])})
    ready = os.path.join(args.out, "ready")
    os.makedirs(ready, exist_ok=True)
    open(os.path.join(ready, f"{args.group}-{args.group_rank}"), "w").close()
    while len(os.listdir(ready)) < args.wait_for:  # every group in the first quorum, however slowly they start
        time.sleep(0.05)
    records = open(os.path.join(args.out, f"records-{args.group}-{args.group_rank}.jsonl"), "a")
    failed_once = False
    epoch = loader.epoch
    go = os.path.join(args.out, "go")
    for batch in loader:
        step = manager.current_step()
        participants, rank = loader.last_quorum  # the quorum as the loader dealt it (torchft's, but at init sync)
        write(records, {"kind": "draw", "step": step, "participants": participants, "rank": rank,
                        "quorum": manager._quorum_id, "ids": batch.tolist(), "time": time.time()})  # private: its id
        optimizer.zero_grad()
        loss = model(batch.float().unsqueeze(1)).pow(2).sum()
        loss.backward()
        time.sleep(args.compute)
        if args.fail_commit_at == step and not failed_once:
            failed_once = True
            manager.report_error(RuntimeError("injected: this step must not commit"))
        for parameter in model.parameters():
            manager.allreduce(parameter.grad).wait()
        participating = manager.is_participating()
        committed = manager.should_commit()
        if committed:
            optimizer.step()
        write(records, {"kind": "commit", "step": step, "committed": committed, "participating": participating})
        if committed:
            state = {"loader": loader.state_dict(), "manager": manager.state_dict(),
                     "weight": model.weight.detach().tolist()}
            path = os.path.join(args.out, f"ckpt-{args.group}-{args.group_rank}-{manager.current_step()}.json")
            with open(path + ".tmp", "w") as file:
                json.dump(state, file)
            os.replace(path + ".tmp", path)
            if args.stop_at is not None and manager.current_step() >= args.stop_at:
                os._exit(0)
        while args.hold_at is not None and manager.current_step() >= args.hold_at and not os.path.exists(go):
            time.sleep(0.05)  # the harness says go once a restarted group is up: it rejoins mid-epoch
    assert loader.epoch == epoch + 1, (loader.epoch, epoch)
    with open(os.path.join(args.out, f"done-{args.group}-{args.group_rank}.json"), "w") as file:
        json.dump({"step": manager.current_step(), "state": loader.state_dict(),
                   "dropped": loader.prefetch_dropped}, file)
    sys.stdout.flush()
    os._exit(0)  # torchft's threads and servers: no orderly shutdown is needed to end the test


if __name__ == "__main__":
    main()
