"""A sharded corpus in S3 (or any fsspec URL): the same loop as examples/shards.py, read through s3fs.

    pip install 'shufflepoint[s3,parquet]'
    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/shards_s3.py \\
        --data 's3://my-bucket/corpus/*.parquet' [--endpoint-url http://127.0.0.1:9000]

Indexing reads only the Parquet footers (a JSONL or WebDataset bucket: publish its index once with
`shufflepoint index 's3://my-bucket/corpus/*.jsonl'`, or every node downloads it all to count rows).
Each node downloads a shard once into its cache (--cache, shared by the node's ranks and workers,
bounded by --cache-bytes); shards of the upcoming batches are prefetched in the background; 500s
and dropped connections are retried. Credentials come from the usual AWS variables or
--storage-options (JSON, passed to s3fs). Kill it anywhere and start it again, with the same or
another --nproc_per_node: it resumes exactly.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

import shufflepoint

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True, help="a glob, a list file (.txt) or a URL of shards")
parser.add_argument("--endpoint-url", default=None, help="an S3-compatible server (MinIO, moto, ...)")
parser.add_argument("--storage-options", default="{}", help="JSON for s3fs, e.g. credentials")
parser.add_argument("--cache", default=None, help="the node's shard cache (default: ~/.cache/shufflepoint)")
parser.add_argument("--cache-bytes", type=int, default=None)
parser.add_argument("--checkpoint", default="checkpoints/shards_s3.pt")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption")
parser.add_argument("--record", default=None)
args = parser.parse_args()
options = json.loads(args.storage_options)
if args.endpoint_url:
    options.setdefault("client_kwargs", {})["endpoint_url"] = args.endpoint_url

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

corpus = shufflepoint.Shards(args.data, columns=["id", "x", "y"], storage_options=options, cache_dir=args.cache,
                             cache_limit=args.cache_bytes)
loader = shufflepoint.DataLoader(corpus, batch_size=16, seed=1234, num_workers=2, shuffle_block=1000)
step = 0
if os.path.exists(args.checkpoint):
    checkpoint = torch.load(args.checkpoint)
    model.load_state_dict(checkpoint["model"]), optimizer.load_state_dict(checkpoint["optim"])
    loader.load_state_dict(checkpoint["loader"])
    step = checkpoint["step"]
while loader.epoch < args.epochs:
    for batch in loader:
        x, y = torch.stack(batch["x"], 1).float(), batch["y"].float()[:, None]
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(), loss.backward(), optimizer.step()
        step += 1
        if dist.get_rank() == 0 and step % 10 == 0:
            state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "loader": loader.state_dict(),
                     "step": step}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)
        if args.record:
            with open(f"{args.record}.rank{dist.get_rank()}", "a") as f:
                f.write(json.dumps({"step": step, "epoch": loader.epoch, "ids": batch["id"].tolist()}) + "\n")
        if args.stop_after_step is not None and step == args.stop_after_step:
            dist.barrier()
            dist.destroy_process_group()
            raise SystemExit(0)
dist.barrier()
dist.destroy_process_group()
