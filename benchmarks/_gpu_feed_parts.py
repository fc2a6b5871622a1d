"""The parts of ``benchmarks/gpu_feed.py``: the setups, the Parquet token shards it writes itself, the
Llama it builds from a config (no hub), the loader, one training step, and the kill-and-resume children.

Kept apart from the measuring script so that a test can check each part on the CPU (``--tiny``).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

SEED = 1234


@dataclass(frozen=True)
class Setup:
    """What one run of the benchmark builds and measures. ``FULL`` is the GPU run the issue asks for
    (a ~125M-parameter Llama, rows of 2048 tokens); ``TINY`` the same steps at toy sizes, for a CPU dry run."""

    seq_len: int
    batch: int
    warmup: int  # steps not timed (allocator, kernels, the loader's first batch)
    steps: int  # steps timed per configuration
    workers: tuple[int, ...]
    resume_workers: int  # the loader's workers in the kill-and-resume runs
    stop_at: int  # the kill-and-resume runs: the checkpoint step (the kill comes 2 steps later)
    resume_steps: int  # and the steps of the whole run they are compared with
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    shards: int
    documents_per_shard: int
    mean_document: int  # tokens; lengths are log-normal around it, 16 to 4 * seq_len
    shuffle_block: int  # documents

    def tokens_needed(self) -> int:
        """Tokens one configuration reads: every configuration starts at epoch 0, row 0."""
        return (self.warmup + self.steps) * self.batch * self.seq_len


FULL = Setup(seq_len=2048, batch=8, warmup=10, steps=50, workers=(0, 4, 8), resume_workers=4, stop_at=20,
             resume_steps=40, hidden=768, layers=12, heads=12, intermediate=2560, vocab=32000, shards=16,
             documents_per_shard=1500, mean_document=700, shuffle_block=2048)
TINY = Setup(seq_len=64, batch=2, warmup=1, steps=4, workers=(0, 2), resume_workers=2, stop_at=3, resume_steps=6,
             hidden=32, layers=2, heads=2, intermediate=64, vocab=512, shards=3, documents_per_shard=60,
             mean_document=40, shuffle_block=32)


def write_shards(folder: str, setup: Setup) -> list[str]:
    """Parquet shards of token documents (an ``input_ids`` list<int32> column), written once per setup
    (a manifest names the setup; another setup writes another folder). Deterministic: the same files
    for the same setup on any machine."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    manifest = os.path.join(folder, "manifest.json")
    wanted = {"seed": SEED, "setup": asdict(setup)}
    paths = [os.path.join(folder, f"tokens-{s:04d}.parquet") for s in range(setup.shards)]
    if os.path.exists(manifest) and all(os.path.exists(p) for p in paths):
        with open(manifest) as f:
            if json.load(f) == json.loads(json.dumps(wanted)):
                return paths
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for path in paths:
        lengths = np.clip(rng.lognormal(np.log(setup.mean_document), 0.8, setup.documents_per_shard),
                          16, 4 * setup.seq_len).astype(np.int64)
        tokens = rng.integers(0, setup.vocab - 1, int(lengths.sum()), dtype=np.int32)  # vocab - 1: the EOS
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens))
        pq.write_table(pa.table({"input_ids": column}), f"{path}.tmp", row_group_size=256)
        os.replace(f"{path}.tmp", path)
    with open(f"{manifest}.tmp", "w") as f:
        json.dump(wanted, f)
    os.replace(f"{manifest}.tmp", manifest)
    return paths


def packed(folder: str, setup: Setup, cache_dir: str) -> Any:
    """``shufflepoint.Packed`` over the shards: rows of ``seq_len`` tokens, an EOS after each document."""
    import shufflepoint

    corpus = shufflepoint.Shards(os.path.join(folder, "*.parquet"), cache_dir=cache_dir, progress=False)
    return shufflepoint.Packed(corpus, setup.seq_len, eos=setup.vocab - 1, progress=False)


def loader(dataset: Any, setup: Setup, workers: int, device: Any) -> Any:
    import shufflepoint

    return shufflepoint.DataLoader(dataset, batch_size=setup.batch, seed=SEED, shuffle_block=setup.shuffle_block,
                                   num_workers=workers, pin_memory=device.type == "cuda",
                                   prefetch_factor=4 if workers else None, persistent_workers=False)


def model(setup: Setup, device: Any, attention: str) -> tuple[Any, Any]:
    """A Llama from a config (nothing downloaded), bf16 on a GPU (float32 on the CPU), and its AdamW."""
    import torch
    import transformers

    torch.manual_seed(SEED)
    config = transformers.LlamaConfig(
        vocab_size=setup.vocab, hidden_size=setup.hidden, intermediate_size=setup.intermediate,
        num_hidden_layers=setup.layers, num_attention_heads=setup.heads, num_key_value_heads=setup.heads,
        max_position_embeddings=setup.seq_len, tie_word_embeddings=True, attn_implementation=attention)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    llama = transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype)
    return llama, torch.optim.AdamW(llama.parameters(), lr=3e-4)


def to_device(batch: dict[str, Any], device: Any) -> dict[str, Any]:
    return {key: value.to(device, non_blocking=True) for key, value in batch.items()}


def train_step(llama: Any, optimizer: Any, batch: dict[str, Any]) -> float:
    """One optimizer step; the loss as a Python float (exact: its bits compare the resumed run's)."""
    llama.train()
    loss = llama(input_ids=batch["input_ids"], position_ids=batch["position_ids"], labels=batch["labels"],
                 use_cache=False).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach().float().item())  # .item() waits for the step: the step's time is whole


def deterministic(device: Any) -> None:
    """Bitwise-repeatable steps (CUBLAS_WORKSPACE_CONFIG is set by the parent, before CUDA starts)."""
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False


def resume_child(mode: str, folder: str, cache_dir: str, checkpoint: str, setup: Setup, device_name: str) -> dict:
    """One process of the kill-and-resume check. ``whole``: ``resume_steps`` steps from the start.
    ``kill``: ``stop_at`` steps, a checkpoint (model, optimizer, loader state), 2 more steps, then
    SIGKILL of itself. ``resume``: from that checkpoint to ``resume_steps``, timing the data's way back
    (build, load_state_dict, first batch on the device). Losses of every step go to the result."""
    import signal

    import torch

    device = torch.device(device_name)
    deterministic(device)
    llama, optimizer = model(setup, device, attention="eager")  # eager: deterministic backward on any GPU
    started = time.perf_counter()
    data = loader(packed(folder, setup, cache_dir), setup, setup.resume_workers, device)
    built = time.perf_counter()
    step, result = 0, {"mode": mode, "losses": []}
    if mode == "resume":
        saved = torch.load(checkpoint, map_location=device)
        llama.load_state_dict(saved["model"]), optimizer.load_state_dict(saved["optimizer"])
        loaded_model = time.perf_counter()
        data.load_state_dict(saved["loader"])
        step, placed = saved["step"], time.perf_counter()
        result["resume_s"] = {"build_packed_and_loader": built - started, "load_state_dict": placed - loaded_model}
    batches = iter(data)
    while step < (setup.stop_at + 2 if mode == "kill" else setup.resume_steps):
        before = time.perf_counter()
        batch = to_device(next(batches), device)
        if mode == "resume" and not result["losses"]:
            if device.type == "cuda":
                torch.cuda.synchronize()
            result["resume_s"]["first_batch_on_device"] = time.perf_counter() - before
        result["losses"].append(train_step(llama, optimizer, batch))
        step += 1
        if mode == "kill" and step == setup.stop_at:
            state = {"model": llama.state_dict(), "optimizer": optimizer.state_dict(),
                     "loader": data.state_dict(), "step": step}
            torch.save(state, f"{checkpoint}.tmp")
            os.replace(f"{checkpoint}.tmp", checkpoint)
    if mode == "kill":
        with open(f"{checkpoint}.losses.json", "w") as f:
            json.dump(result, f)
        os.kill(os.getpid(), signal.SIGKILL)  # as a preempted job dies: no cleanup, no flush
    return result
