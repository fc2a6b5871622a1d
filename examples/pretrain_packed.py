"""A tiny GPT pre-trained on packed rows of JSONL text: shufflepoint.Packed + shufflepoint.DataLoader.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/pretrain_packed.py

The text is tokenized once into ``input_ids`` (a byte tokenizer: nothing to download), packed into
rows of --seq-len tokens with an EOS after each document, and the model attends only inside each
document (a mask built from ``position_ids``). Stop it anywhere (Ctrl-C, SIGKILL, --stop-after-step
N) and run the same command again, with the same or another --nproc_per_node: it continues from
the last checkpoint with exactly the rows an uninterrupted run would have used (the same world
size), or with every row of the epoch once (another). --record FILE appends each step's rows.
"""

import argparse
import json
import os
import random

import torch
import torch.distributed as dist

import shufflepoint

parser = argparse.ArgumentParser()
parser.add_argument("--data", default="data/packed_text")
parser.add_argument("--checkpoint", default="checkpoints/pretrain_packed.pt")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--seq-len", type=int, default=64)
parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption")
parser.add_argument("--record", default=None)
args = parser.parse_args()
CONFIG = {"vocab": 257, "dim": 64, "heads": 4, "layers": 2, "seq_len": args.seq_len}  # byte ids + EOS
EOS = 256

dist.init_process_group("gloo")


def write_corpus(folder: str) -> None:
    """Three JSONL shards of made-up sentences, tokenized (UTF-8 bytes) once, as a prepared corpus."""
    rng = random.Random(0)
    words = "the a data order resume exact elastic shard token row epoch seek batch rank".split()
    os.makedirs(folder, exist_ok=True)
    for shard in range(3):
        with open(os.path.join(folder, f"part-{shard}.jsonl.tmp"), "w") as f:
            for document in range(40):
                text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 60)))
                f.write(json.dumps({"id": shard * 100 + document, "input_ids": list(text.encode())}) + "\n")
        os.replace(os.path.join(folder, f"part-{shard}.jsonl.tmp"), os.path.join(folder, f"part-{shard}.jsonl"))


class TinyGPT(torch.nn.Module):
    def __init__(self, vocab: int, dim: int, heads: int, layers: int, seq_len: int) -> None:
        super().__init__()
        self.tokens, self.positions = torch.nn.Embedding(vocab, dim), torch.nn.Embedding(seq_len, dim)
        layer = torch.nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        document = torch.cumsum(position_ids == 0, dim=1)  # a new segment wherever the position is 0
        causal = torch.ones(input_ids.shape[1], input_ids.shape[1], dtype=torch.bool).tril()
        allowed = causal & (document[:, :, None] == document[:, None, :])  # within the document only
        mask = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
        mask = mask.repeat_interleave(self.blocks.layers[0].self_attn.num_heads, dim=0)
        hidden = self.blocks(self.tokens(input_ids) + self.positions(position_ids), mask=mask)
        logits: torch.Tensor = self.head(hidden)
        return logits


if dist.get_rank() == 0 and not os.path.exists(os.path.join(args.data, "part-2.jsonl")):
    write_corpus(args.data)
dist.barrier()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(TinyGPT(**CONFIG))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

# --- the docs' example starts here ---
packed = shufflepoint.Packed(shufflepoint.Shards(os.path.join(args.data, "*.jsonl"), progress=False),
                             args.seq_len, eos=EOS, progress=False)
loader = shufflepoint.DataLoader(packed, batch_size=4, seed=1234, shuffle_block=32)
if os.path.exists(args.checkpoint):  # resume: model, optimizer and the data order
    checkpoint = torch.load(args.checkpoint)
    model.load_state_dict(checkpoint["model"]), optimizer.load_state_dict(checkpoint["optim"])
    loader.load_state_dict(checkpoint["loader"])
step = 0
while loader.epoch < args.epochs:
    for batch in loader:  # input_ids, position_ids, labels: (4, seq_len) int64
        logits = model(batch["input_ids"], batch["position_ids"])
        # predict token t+1 from tokens <= t; labels are -100 at each document start (ignored)
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, CONFIG["vocab"]),
                                                 batch["labels"][:, 1:].reshape(-1), ignore_index=-100)
        optimizer.zero_grad(), loss.backward(), optimizer.step()
        step += 1
        if dist.get_rank() == 0 and step % 5 == 0:  # every rank's loader state is the same
            state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "loader": loader.state_dict()}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)  # atomic: a kill never leaves half a file
# --- the docs' example ends here ---
        if args.record:
            with open(f"{args.record}.rank{dist.get_rank()}", "a") as f:
                rows = ["-".join(map(str, row)) for row in batch["input_ids"].tolist()]
                f.write(json.dumps({"epoch": loader.epoch, "rows": rows, "loss": round(loss.item(), 4)}) + "\n")
        if args.stop_after_step is not None and step == args.stop_after_step:
            dist.barrier()
            dist.destroy_process_group()  # close Gloo cleanly on every rank before exiting
            raise SystemExit(0)
dist.barrier()  # no rank closes Gloo while another still talks to it
dist.destroy_process_group()
