"""examples/torchft_train_ddp.py as one replica group of a test (test_torchft.py, ``test_the_example``), run as it is
written, with three stand-ins so that it runs here in seconds:

- ``torchvision`` (not in the venv): ``datasets.CIFAR10`` is ``--n`` in-memory 3x32x32 images (no download), each
  image's first pixel its index; ``transforms`` pass the images through;
- the example's 1 GB ``useless`` embedding has 1 row (its healing copies the model between groups);
- after ``--steps`` committed steps ``Manager.current_step()`` reads 10,000 more to the example's own stop check, so
  the example ends by its own ``prof.stop()``, ``trainloader.close()``, ``exit()``.

What the loader dealt is written to ``<out>/records-<group>-0.jsonl`` as worker.py writes it (a draw, then its
commit), with the ids of the images the model was given; the example's ``close()`` to ``<out>/closed-<group>``.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
import types
from typing import Any

import torch

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "torchft_train_ddp.py")


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("--group", "--groups", "--group-rank", "--group-world", "--store-port", "--n", "--steps"):
        parser.add_argument(name, type=int, required=name not in ("--group-rank", "--group-world", "--wait-for"))
    parser.add_argument("--out", required=True)
    parser.add_argument("--wait-for", type=int, default=0)
    return parser.parse_args()


class Images(torch.utils.data.Dataset):
    """CIFAR10's shape, in memory: image i's first pixel is i, its label i % 10."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = torch.zeros(3, 32, 32)
        image[0, 0, 0] = index
        return image, index % 10


def fake_torchvision(n: int) -> None:
    vision = types.ModuleType("torchvision")
    datasets = types.ModuleType("torchvision.datasets")
    transforms = types.ModuleType("torchvision.transforms")
    datasets.CIFAR10 = lambda root, train, download, transform: Images(n)  # type: ignore[attr-defined]
    transforms.Compose = lambda steps: (lambda image: image)  # type: ignore[attr-defined]
    transforms.ToTensor = lambda: None  # type: ignore[attr-defined]
    transforms.Normalize = lambda mean, std: None  # type: ignore[attr-defined]
    vision.datasets, vision.transforms = datasets, transforms  # type: ignore[attr-defined]
    sys.modules.update({"torchvision": vision, "torchvision.datasets": datasets, "torchvision.transforms": transforms})


def small_embedding() -> None:
    embedding = torch.nn.Embedding

    class OneRow(embedding):  # type: ignore[misc, valid-type]
        def __init__(self, rows: int, dim: int, *args: Any, **kwargs: Any) -> None:
            super().__init__(1, dim, *args, **kwargs)

    torch.nn.Embedding = OneRow  # type: ignore[misc]


def main() -> None:
    args = arguments()
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", args.store_port, is_master=True, wait_for_workers=False)  # noqa: F841  torchrun's
    os.environ.update({"REPLICA_GROUP_ID": str(args.group), "NUM_REPLICA_GROUPS": str(args.groups), "RANK": "0",
                       "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(args.store_port)})
    fake_torchvision(args.n)
    small_embedding()

    import torchft

    from shufflepoint.integrations.torchft import DataLoader

    records = open(os.path.join(args.out, f"records-{args.group}-0.jsonl"), "a")
    seen: dict[str, Any] = {"committed": 0}
    follow, close, step = DataLoader.follow, DataLoader.close, torchft.Optimizer.step
    forward = torchft.DistributedDataParallel.forward

    def forwarded(model: Any, inputs: torch.Tensor) -> Any:
        seen["images"] = inputs[:, 0, 0, 0].long().tolist()  # the ids of the images the model was given
        return forward(model, inputs)

    def followed(loader: Any, manager: Any, register: Any = None) -> None:
        seen.update(loader=loader, manager=manager)
        follow(loader, manager, register)
        ready = os.path.join(args.out, "ready")
        os.makedirs(ready, exist_ok=True)
        open(os.path.join(ready, f"{args.group}-0"), "w").close()
        while len(os.listdir(ready)) < args.wait_for:  # every group in the first quorum
            time.sleep(0.05)

    def stepped(optimizer: Any, closure: Any = None) -> None:
        loader, manager = seen["loader"], seen["manager"]
        before = manager.current_step()
        participants, rank = loader.last_quorum
        records.write(json.dumps({"kind": "draw", "step": before, "participants": participants, "rank": rank,
                                  "quorum": manager._quorum_id, "ids": seen.pop("images"),
                                  "dealt": loader.last_indices}) + "\n")  # private: id
        step(optimizer, closure)
        committed = manager.current_step() == before + 1
        records.write(json.dumps({"kind": "commit", "step": before, "committed": committed,
                                  "participating": rank is not None}) + "\n")
        records.flush()
        seen["committed"] += committed
        if seen["committed"] >= args.steps:  # the example's own stop: `if manager.current_step() >= 10000`
            real = type(manager).current_step
            manager.current_step = lambda: real(manager) + 10_000

    def closed(loader: Any) -> None:
        close(loader)
        with open(os.path.join(args.out, f"closed-{args.group}"), "w") as file:
            json.dump({"time": time.time(), "workers": loader._workers is None}, file)  # private: shut down

    DataLoader.follow, DataLoader.close, torchft.Optimizer.step = followed, closed, stepped  # type: ignore[method-assign]
    torchft.DistributedDataParallel.forward = forwarded  # type: ignore[method-assign]
    sys.argv = [EXAMPLE]
    runpy.run_path(EXAMPLE, run_name="__main__")


if __name__ == "__main__":
    main()
