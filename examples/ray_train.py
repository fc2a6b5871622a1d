"""Ray Train: a TorchTrainer worker dies, Ray restarts the group from the last checkpoint, the data continues exactly.

    pip install 'shufflepoint[ray]'
    python examples/ray_train.py --workers 2 --storage /tmp/ray_results --record /tmp/ray_record --kill-at-step 14

Ray builds the Gloo process group; ``shufflepoint.DataLoader`` shards over it by itself. Every 4 steps
all workers call ``ray.train.report``; rank 0 attaches the loader, model and optimizer state (the
loader's state is the same on every rank: one copy restores any rank, at any world size).
``--kill-at-step N`` SIGKILLs rank 1 at step N, once. ``--resume-from DIR`` starts a new run, with
any ``--workers``, from a checkpoint directory. ``--record DIR`` appends what each rank trained on.
"""

import argparse
import json
import os
import signal
import tempfile

import ray.train
import torch
from ray.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchConfig, TorchTrainer

import shufflepoint


def train_func(config):
    rank = ray.train.get_context().get_world_rank()
    features = torch.randn(config["samples"], 8, generator=torch.Generator().manual_seed(0))
    dataset = torch.utils.data.TensorDataset(torch.arange(config["samples"]), features, features.sum(1, keepdim=True))
    torch.manual_seed(1234)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))  # Ray made the Gloo group
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = shufflepoint.DataLoader(dataset, batch_size=4, seed=1234)  # shards over Ray's workers
    step = 0
    checkpoint = ray.train.get_checkpoint()  # the last registered report, after a restart
    if checkpoint is None and config.get("resume_from"):  # a new run from an earlier run's checkpoint
        checkpoint = Checkpoint(config["resume_from"])  # a path or a URI (Ray 2.60 refuses resume_from_checkpoint=)
    if checkpoint:
        with checkpoint.as_directory() as directory:
            state = torch.load(os.path.join(directory, "state.pt"))
        model.load_state_dict(state["model"]), optimizer.load_state_dict(state["optim"])
        loader.load_state_dict(state["loader"])  # rank 0 wrote it; it fits every rank, any world size
        step = state["step"]
    start = step
    while loader.epoch < config["epochs"]:
        epoch = loader.epoch
        for ids, x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad(), loss.backward(), optimizer.step()
            step += 1
            if config.get("record"):
                with open(os.path.join(config["record"], f"rank{rank}.jsonl"), "a") as f:
                    f.write(json.dumps({"pid": os.getpid(), "start": start, "step": step, "epoch": epoch,
                                        "ids": ids.tolist()}) + "\n")
            if step % config["checkpoint_every"] == 0:  # every worker reports; rank 0 attaches the state
                with tempfile.TemporaryDirectory() as directory:
                    if rank == 0:
                        state = {"model": model.state_dict(), "optim": optimizer.state_dict(),
                                 "loader": loader.state_dict(), "step": step}
                        torch.save(state, os.path.join(directory, "state.pt"))
                    ray.train.report({"step": step, "loss": loss.item()},
                                     checkpoint=Checkpoint.from_directory(directory) if rank == 0 else None)
            if step == config.get("stop_at_step"):  # a planned stop: the run ends with this checkpoint
                return
            if step == config.get("kill_at_step") and rank == 1:  # the injected failure
                marker = os.path.join(config["record"], "killed")
                if not os.path.exists(marker):  # once: the restarted rank 1 must not die again
                    open(marker, "w").close()
                    ray.train.get_all_reported_checkpoints()  # wait until Ray registered the last report
                    os.kill(os.getpid(), signal.SIGKILL)


def fit(config, workers, storage, name, max_failures=1):
    trainer = TorchTrainer(
        train_func, train_loop_config=config, torch_config=TorchConfig(backend="gloo"),
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False,
                                     resources_per_worker={"CPU": 0.5}),  # 3 workers fit in 2 cores
        run_config=RunConfig(name=name, storage_path=storage, failure_config=FailureConfig(max_failures=max_failures)))
    return trainer.fit()  # its .checkpoint: the last one Ray registered


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--storage", default=os.path.abspath("checkpoints/ray"))
    parser.add_argument("--name", default="shufflepoint")
    parser.add_argument("--resume-from", default=None, help="a checkpoint directory of an earlier run")
    parser.add_argument("--record", type=os.path.abspath, default=None)  # absolute: workers run elsewhere
    parser.add_argument("--kill-at-step", type=int, default=None)
    args = parser.parse_args()
    if args.kill_at_step and not args.record:
        parser.error("--kill-at-step needs --record (its marker file lives there)")
    if args.record:
        os.makedirs(args.record, exist_ok=True)
    ray.init()  # or ray.init(address="auto") to join a running cluster
    config = {"samples": 64, "epochs": 3, "checkpoint_every": 4, "record": args.record,
              "kill_at_step": args.kill_at_step, "resume_from": args.resume_from}
    print(fit(config, args.workers, args.storage, args.name).checkpoint)
