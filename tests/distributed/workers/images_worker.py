"""One process of tests/distributed/test_images_resume.py: decoded, augmented photos from WebDataset shards
through ``shufflepoint.DataLoader`` with workers (``--num-workers 0``: in this process), each batch's keys
and image digests written as JSON lines;
``--stop-after`` saves the loader's state and exits, ``--load`` resumes from it (a fresh process)."""

import argparse
import hashlib
import json

import torch

import shufflepoint

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--cache", required=True)
parser.add_argument("--record", required=True)
parser.add_argument("--checkpoint", required=True)
parser.add_argument("--num-workers", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--stop-after", type=int, default=None)
parser.add_argument("--load", action="store_true")
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()

corpus = shufflepoint.Shards(f"{args.data}/*.tar", cache_dir=args.cache, progress=False)
decode = shufflepoint.DecodeImage(size=40)
loader = shufflepoint.DataLoader(corpus, batch_size=args.batch_size, seed=5, num_workers=args.num_workers,
                                 transform=decode, pin_memory=True, persistent_workers=False)
if args.load:
    loader.load_state_dict(torch.load(args.checkpoint))
with open(args.record, "a") as out:
    while loader.epoch < args.epochs:
        epoch = loader.epoch
        for batch in loader:
            images = decode.to_device(batch, "cpu")
            assert images.dtype == torch.uint8 and images.shape[1:] == (3, 40, 40)
            digests = [hashlib.sha1(image.numpy().tobytes()).hexdigest()[:16] for image in images]
            out.write(json.dumps({"epoch": epoch, "keys": batch["__key__"], "images": digests}) + "\n")
            out.flush()
            if args.stop_after is not None and loader.step == args.stop_after:
                torch.save(loader.state_dict(), args.checkpoint)
                raise SystemExit(0)
