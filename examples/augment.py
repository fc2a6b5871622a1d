"""Random augmentations that survive a resume, under torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/augment.py

The dataset crops and flips with torch's global RNG (as torchvision v2 transforms do) and adds
noise from an explicit per-sample generator. Kill it anywhere, run it again with the same or another
--nproc_per_node or --num-workers: every sample keeps the exact augmentation it had in the
uninterrupted run. --record FILE appends each sample's id and a digest of what the model saw.
"""

import argparse
import hashlib
import json
import os

import torch
import torch.distributed as dist

import shufflepoint

parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint", default="checkpoints/augment.pt")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--num-workers", type=int, default=2)
parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption")
parser.add_argument("--record", default=None)
args = parser.parse_args()


class Images(torch.utils.data.Dataset):
    """200 synthetic 3x32x32 images; each read takes a random 24x24 crop and a random flip."""

    def __len__(self):
        return 200

    def __getitem__(self, index):
        image = torch.linspace(0, 1, 3 * 32 * 32).reshape(3, 32, 32) + index
        top, left = torch.randint(0, 9, (2,)).tolist()  # torch's global RNG, like RandomCrop
        image = image[:, top:top + 24, left:left + 24]
        return {"id": index, "image": image.flip(-1) if torch.rand(()) < 0.5 else image}


dist.init_process_group("gloo")
dataset = Images()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3 * 24 * 24, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

# --- the README's augmentation example starts here ---
def add_noise(sample, rng):  # rng: this sample's own numpy Generator, keyed by (seed, epoch, index)
    noise = torch.from_numpy(rng.normal(0, 0.05, size=(3, 24, 24))).float()
    return dict(sample, image=sample["image"] + noise)


loader = shufflepoint.DataLoader(dataset, batch_size=16, seed=1234, num_workers=args.num_workers,
                                 transform=add_noise, seed_per_sample=True)  # seeds torch/numpy/random per sample
# --- the README's augmentation example ends here ---
step = 0
if os.path.exists(args.checkpoint):  # resume: model, optimizer and the data order
    checkpoint = torch.load(args.checkpoint)
    model.load_state_dict(checkpoint["model"]), optimizer.load_state_dict(checkpoint["optim"])
    loader.load_state_dict(checkpoint["loader"])
    step = checkpoint["step"]
while loader.epoch < args.epochs:
    epoch = loader.epoch
    for batch in loader:
        loss = model(batch["image"].flatten(1)).pow(2).mean()
        optimizer.zero_grad(), loss.backward(), optimizer.step()
        step += 1
        if dist.get_rank() == 0 and step % 5 == 0:  # every rank's loader state is the same
            state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "loader": loader.state_dict(),
                     "step": step}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)  # atomic: a kill never leaves half a file
        if args.record:
            with open(f"{args.record}.rank{dist.get_rank()}", "a") as f:
                for i, image in zip(batch["id"].tolist(), batch["image"], strict=True):
                    digest = hashlib.sha1(image.numpy().tobytes()).hexdigest()[:16]
                    f.write(json.dumps({"step": step, "epoch": epoch, "id": i, "digest": digest}) + "\n")
        if args.stop_after_step is not None and step == args.stop_after_step:
            dist.barrier()
            dist.destroy_process_group()
            raise SystemExit(0)
dist.barrier()  # no rank closes Gloo while another still talks to it
dist.destroy_process_group()
