"""A sharded corpus on disk: shufflepoint.DataLoader(shufflepoint.Shards(...)) under torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/shards.py --data corpus/

--data is a folder of Parquet shards (made here, 200 shards of small rows, when it does not exist
yet); a glob of JSONL, WebDataset, token or Parquet files works the same. Kill it anywhere, run it
again with the same or another --nproc_per_node: it continues from the last checkpoint, each sample
of the interrupted epoch once. --record FILE appends what each rank trained on.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

import shufflepoint

parser = argparse.ArgumentParser()
parser.add_argument("--data", default="checkpoints/corpus")
parser.add_argument("--checkpoint", default="checkpoints/shards.pt")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption")
parser.add_argument("--record", default=None)
args = parser.parse_args()


def make_corpus(folder, shards=200, rows=25):
    """Parquet shards of rows {"id", "x" (8 floats), "y"}, written once, published by a rename."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = f"{folder}.tmp-{os.getpid()}"
    os.makedirs(tmp)
    generator = torch.Generator().manual_seed(0)
    for shard in range(shards):
        x = torch.randn(rows, 8, generator=generator)
        ids = list(range(shard * rows, (shard + 1) * rows))
        pq.write_table(pa.table({"id": ids, "x": x.tolist(), "y": x.sum(1).tolist()}),
                       os.path.join(tmp, f"part-{shard:05d}.parquet"), row_group_size=10)
    os.rename(tmp, folder)


dist.init_process_group("gloo")
if dist.get_rank() == 0 and not os.path.exists(args.data):
    make_corpus(args.data)
dist.barrier()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

# --- the README's sharded example starts here ---
corpus = shufflepoint.Shards(os.path.join(args.data, "*.parquet"), columns=["id", "x", "y"])
loader = shufflepoint.DataLoader(corpus, batch_size=16, seed=1234, num_workers=2, shuffle_block=1000)
step = 0
if os.path.exists(args.checkpoint):  # resume: the corpus must be the one the state was saved on
    checkpoint = torch.load(args.checkpoint)
    model.load_state_dict(checkpoint["model"]), optimizer.load_state_dict(checkpoint["optim"])
    loader.load_state_dict(checkpoint["loader"])
    step = checkpoint["step"]
while loader.epoch < args.epochs:
    for batch in loader:  # rows of a few shards at a time, in an order that is a pure function
        x, y = torch.stack(batch["x"], 1).float(), batch["y"].float()[:, None]
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(), loss.backward(), optimizer.step()
        step += 1
        if dist.get_rank() == 0 and step % 10 == 0:
            state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "loader": loader.state_dict(),
                     "step": step}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)
# --- the README's sharded example ends here ---
        if args.record:
            with open(f"{args.record}.rank{dist.get_rank()}", "a") as f:
                f.write(json.dumps({"step": step, "epoch": loader.epoch, "ids": batch["id"].tolist()}) + "\n")
        if args.stop_after_step is not None and step == args.stop_after_step:
            dist.barrier()
            dist.destroy_process_group()
            raise SystemExit(0)
dist.barrier()  # no rank closes Gloo while another still talks to it
dist.destroy_process_group()
