"""One finished job for benchmarks/exit_soak.py, run under torchrun (CPU, Gloo). It does its work, prints
``WORK DONE`` on every rank, then simply ends (or, with ``--destroy``, calls destroy_process_group() first, with
no barrier, as a user script does). What happens after ``WORK DONE`` is what the soak counts.

    python -m torch.distributed.run --standalone --nproc_per_node=2 benchmarks/_exit_soak_worker.py PATH DIR [--destroy]

PATH: ``trainer`` (our drop-in HF Trainer, train() from scratch with checkpoints in DIR), ``trainer-resume``
(the same resumed from DIR's newest checkpoint), ``native`` (shufflepoint.DataLoader: load_state_dict of a
saved state, a few batches, an all_reduce per batch as DDP would) or ``accelerate`` (patch_accelerate, a
prepared loader, load_state_dict, a few batches with accelerator.gather).
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist


def trainer(directory: str, resume: bool) -> None:
    import transformers
    from transformers.trainer_utils import get_last_checkpoint

    from shufflepoint.integrations.transformers import Trainer

    class Tokens(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 48

        def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
            ids = (torch.arange(8) * 7 + index) % 128
            return {"input_ids": ids, "labels": ids}

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8)
    args = transformers.TrainingArguments(
        output_dir=directory, per_device_train_batch_size=4, num_train_epochs=2, seed=1234, save_strategy="steps",
        save_steps=4, logging_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
        ddp_find_unused_parameters=False,
    )
    run = Trainer(model=transformers.LlamaForCausalLM(config), args=args, train_dataset=Tokens())
    run.train(resume_from_checkpoint=get_last_checkpoint(directory) if resume else None)


def native(directory: str) -> None:
    import shufflepoint

    dist.init_process_group("gloo")
    dataset = torch.utils.data.TensorDataset(torch.arange(256), torch.randn(256, 4))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    loader = shufflepoint.DataLoader(dataset, batch_size=8, seed=1234)
    saved = os.path.join(directory, "loader.pt")
    first_run = not os.path.exists(saved)  # the first run writes the state a later one loads
    dist.barrier()  # every rank has looked before rank 0 writes it (a slow rank saw it and skipped the barrier)
    if first_run:
        batches = iter(loader)
        for _ in range(3):
            next(batches)
        if dist.get_rank() == 0:
            torch.save(loader.state_dict(), saved + ".tmp")
            os.replace(saved + ".tmp", saved)
        dist.barrier()
    loader.load_state_dict(torch.load(saved))  # the load-time agreement collective
    for step, (_, x) in enumerate(loader):
        model(x).sum().backward()  # DDP's gradient all_reduce
        if step == 4:
            break


def accelerate() -> None:
    from accelerate import Accelerator, DataLoaderConfiguration

    import shufflepoint

    shufflepoint.patch_accelerate()
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    dataset = torch.utils.data.TensorDataset(torch.arange(64), torch.randn(64, 4))
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True)
    model, loader = accelerator.prepare(torch.nn.Linear(4, 1), loader)
    batches = iter(loader)
    for _ in range(2):
        next(batches)
    loader.load_state_dict(loader.state_dict())  # a stock loader: the patched state, no collective of ours
    for step, (ids, x) in enumerate(loader):
        accelerator.backward(model(x).sum())
        accelerator.gather(ids)
        if step == 3:
            break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", choices=["trainer", "trainer-resume", "native", "accelerate"])
    parser.add_argument("directory")
    parser.add_argument("--destroy", action="store_true", help="destroy_process_group() at the end, no barrier")
    args = parser.parse_args()
    if args.path in ("trainer", "trainer-resume"):
        trainer(args.directory, resume=args.path == "trainer-resume")
    elif args.path == "native":
        native(args.directory)
    else:
        accelerate()
    print(f"WORK DONE rank {os.environ.get('RANK')}", flush=True)
    if args.destroy:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
