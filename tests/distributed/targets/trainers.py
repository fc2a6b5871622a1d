"""Audit targets that return a Hugging Face Trainer (the audit runs its loop, checkpoints and resume):
``shufflepoint audit tests/distributed/targets/trainers.py:NAME``. A tiny LlamaForCausalLM from a
config (no hub), 64 samples of 4 tokens (sample i starts with token i, so every row is distinct),
per-device batch 4, seed 1234; the audit sets output_dir and num_train_epochs.
"""

from __future__ import annotations

import tempfile

import torch
import transformers

if int(transformers.__version__.split(".")[0]) < 5:
    # transformers 4.57 resumes a multi-process CPU run with torch.load(map_location=args.device), that
    # is "cpu:0", which torch 2.13 refuses (the stock Trainer too; fixed in 5.x): read "cpu:N" as the CPU.
    torch.serialization.register_package(
        11, lambda obj: None, lambda obj, location: obj if location.startswith("cpu:") else None)

N, VOCAB = 64, 128


class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, index):
        ids = torch.tensor([index, index + 1, index + 2, index + 3]) % VOCAB
        return {"input_ids": ids, "labels": ids}


def _parts():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4)
    args = transformers.TrainingArguments(
        output_dir=tempfile.mkdtemp(prefix="trainer-target-"), per_device_train_batch_size=4, learning_rate=1e-3,
        save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True, seed=1234, disable_tqdm=True,
        ddp_find_unused_parameters=False)
    return {"model": transformers.LlamaForCausalLM(config), "args": args, "train_dataset": Tokens()}


def stock_trainer():
    """transformers.Trainer as it comes: exact on the same world size, wrong on another."""
    return transformers.Trainer(**_parts())


def shufflepoint_trainer():
    """The drop-in: shufflepoint.integrations.transformers.Trainer."""
    from shufflepoint.integrations.transformers import Trainer

    return Trainer(**_parts())
