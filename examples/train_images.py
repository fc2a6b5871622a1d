"""A small CNN trained on real photographs from WebDataset shards, decoded and augmented in the workers.

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/train_images.py

The first run writes 512 crops of scikit-image's sample photographs as JPEGs in WebDataset tars (--data).
Each sample is decoded in a DataLoader worker, cropped at random to 64 x 64 and maybe mirrored, with
randomness drawn from the sample's own generator, so kill the job anywhere and start it again, with the
same or another --nproc_per_node or --num-workers: every sample comes back with the crop it had.
--record FILE appends, per rank, each batch's sample keys and a digest of each image the model saw.
Needs `pip install 'shufflepoint[images]' scikit-image`.
"""

import argparse
import hashlib
import io
import json
import os
import tarfile

import numpy as np
import torch
import torch.distributed as dist

import shufflepoint

parser = argparse.ArgumentParser()
parser.add_argument("--data", default="data/photos")
parser.add_argument("--checkpoint", default="checkpoints/train_images.pt")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--num-workers", type=int, default=2)
parser.add_argument("--stop-after-step", type=int, default=None, help="simulate a preemption")
parser.add_argument("--record", default=None)
args = parser.parse_args()


def write_photos(folder, samples=512, per_shard=64):
    """Crops of scikit-image's photographs (sides 96-480, aspects 1:2 to 2:1) as JPEGs in tars."""
    import skimage.data
    from PIL import Image

    names = ["astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry", "hubble_deep_field", "retina"]
    photos = [getattr(skimage.data, name)() for name in names]
    rng = np.random.default_rng(0)
    os.makedirs(folder, exist_ok=True)
    for shard in range(samples // per_shard):
        with tarfile.open(os.path.join(folder, f"photos-{shard:04d}.tar"), "w") as tar:
            for index in range(shard * per_shard, (shard + 1) * per_shard):
                label = int(rng.integers(len(photos)))
                photo = photos[label]
                height, width = photo.shape[:2]
                h, w = int(rng.integers(height // 4, height + 1)), int(rng.integers(width // 4, width + 1))
                top, left = int(rng.integers(height - h + 1)), int(rng.integers(width - w + 1))
                side = int(rng.integers(96, 481))
                aspect = float(np.exp(rng.uniform(np.log(0.5), np.log(2))))
                piece = Image.fromarray(photo[top:top + h, left:left + w]).resize(
                    (int(side * aspect ** 0.5), int(side / aspect ** 0.5)))
                jpeg = io.BytesIO()
                piece.save(jpeg, "JPEG", quality=90)
                for field, data in (("jpg", jpeg.getvalue()), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"{index:06d}.{field}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))


dist.init_process_group("gloo")
if dist.get_rank() == 0 and not os.path.exists(os.path.join(args.data, "photos-0000.tar")):
    write_photos(args.data)
dist.barrier()
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Conv2d(3, 16, 5, stride=2), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2), torch.nn.ReLU(),
    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 7)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

# --- docs/multimodal.md's example starts here ---
corpus = shufflepoint.Shards(os.path.join(args.data, "*.tar"))  # WebDataset: {"__key__", "jpg", "cls"}
decode = shufflepoint.DecodeImage(size=64)  # random resized crop + flip, from each sample's own generator
loader = shufflepoint.DataLoader(corpus, batch_size=16, seed=1234, num_workers=args.num_workers,
                                 transform=decode, pin_memory=torch.cuda.is_available())
# --- docs/multimodal.md's example ends here ---
step = 0
if os.path.exists(args.checkpoint):  # resume: model, optimizer and the data order
    checkpoint = torch.load(args.checkpoint)
    model.load_state_dict(checkpoint["model"]), optimizer.load_state_dict(checkpoint["optim"])
    loader.load_state_dict(checkpoint["loader"])
    step = checkpoint["step"]
while loader.epoch < args.epochs:
    epoch = loader.epoch
    for batch in loader:
        images = decode.to_device(batch, "cpu")  # uint8 [16, 3, 64, 64] until here; "cuda" on a GPU
        labels = torch.tensor([int(c) for c in batch["cls"]])
        loss = torch.nn.functional.cross_entropy(model(images.float() / 255), labels)
        optimizer.zero_grad(), loss.backward(), optimizer.step()
        step += 1
        if dist.get_rank() == 0 and step % 5 == 0:  # every rank's loader state is the same
            state = {"model": model.state_dict(), "optim": optimizer.state_dict(), "loader": loader.state_dict(),
                     "step": step}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)  # atomic: a kill never leaves half a file
        if args.record:
            digests = [hashlib.sha1(image.numpy().tobytes()).hexdigest()[:16] for image in images]
            with open(f"{args.record}.rank{dist.get_rank()}", "a") as f:
                f.write(json.dumps({"step": step, "epoch": epoch, "keys": batch["__key__"], "images": digests}) + "\n")
        if args.stop_after_step is not None and step == args.stop_after_step:
            dist.barrier()
            dist.destroy_process_group()
            raise SystemExit(0)
dist.barrier()  # no rank closes Gloo while another still talks to it
dist.destroy_process_group()
