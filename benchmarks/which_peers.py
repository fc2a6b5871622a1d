"""The peers of ``benchmarks/which.py``: what answering "which samples were in step N" costs elsewhere.

Each figure is measured on this machine at a size it can hold and scaled, or computed; each says which.

- OLMo-core (allenai/OLMo-core, ``src/olmo_core/data/data_loader.py``, ``NumpyFSLDataLoader.
  _build_global_indices`` at commit 0397476): per epoch, ``np.arange(N, dtype=uint32)`` shuffled by
  a numpy Generator and written as a memmapped ``global_indices`` ``.npy``; its inspection reads a
  step's slice from that file. Bytes: 4 N per epoch (computed). Build time: measured at 1e8 here
  (the same two calls), times 10 for 1e9 (the shuffle is O(N); memory-bound, so if anything slower).
- Megatron-LM ``--iterations-to-skip`` (NVIDIA/Megatron-LM ``megatron/training/training.py`` at
  d98e8a6, see ``/work/shared/research/frontier.md``): each skipped iteration still pulls its
  micro-batches from the data iterator and runs a dummy step. Measured here: the data cost alone of
  one iteration per rank (GPTDataset-style: a sample index lookup, a window of ``seq_len + 1``
  tokens sliced from a memmapped token file, default collate) at global batch 1,024 over 8 ranks;
  times 1e5. A lower bound: the dummy step and the pipeline's own work are not counted.
- A per-step log (what Soup's ``rewind.jsonl`` or a hand-written logger keeps): the sample ids of
  every step, global batch 1,024. Measured: the bytes of 1,000 steps written as JSON lines (ids
  below 1e9) and as int64, times 1,000 for 1e6 steps.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any

import numpy as np
import torch

GLOBAL_BATCH, RANKS, SEQ_LEN = 1024, 8, 4096


def olmo_global_indices(measured_n: int = 10**8, target_n: int = 10**9) -> dict[str, Any]:
    start = time.perf_counter()
    indices = np.arange(measured_n, dtype=np.uint32)
    np.random.Generator(np.random.PCG64(1234)).shuffle(indices)
    build_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "global_indices.npy")
        start = time.perf_counter()
        written = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint32, shape=(measured_n,))
        written[:] = indices
        written.flush()
        del written
        write_s = time.perf_counter() - start
        size = os.path.getsize(path)
    scale = target_n / measured_n
    return {"measured_n": measured_n, "build_s": build_s, "write_s": write_s, "file_bytes": size,
            "target_n": target_n, "target_bytes": 4 * target_n + 128, "target_build_s": (build_s + write_s) * scale}


class _GPTStyleWindows(torch.utils.data.Dataset[torch.Tensor]):
    """GPTDataset's per-sample work, simplified: a shuffled sample index, a window sliced from a memmap."""

    def __init__(self, tokens: np.ndarray, seq_len: int) -> None:
        self.tokens, self.seq_len = tokens, seq_len
        self.samples = (tokens.size - 1) // seq_len
        self.shuffle = np.random.default_rng(0).permutation(self.samples)

    def __len__(self) -> int:
        return int(self.samples)

    def __getitem__(self, index: int) -> torch.Tensor:
        start = int(self.shuffle[index]) * self.seq_len
        return torch.from_numpy(self.tokens[start:start + self.seq_len + 1].astype(np.int64))


def megatron_skip(iterations: int = 10**5, measured: int = 20) -> dict[str, Any]:
    per_rank = GLOBAL_BATCH // RANKS
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "tokens.bin")
        tokens = np.random.default_rng(0).integers(0, 50_257, (per_rank * 4) * SEQ_LEN + 1, dtype=np.uint16)
        tokens.tofile(path)
        mapped = np.memmap(path, dtype=np.uint16, mode="r")
        loader = torch.utils.data.DataLoader(_GPTStyleWindows(mapped, SEQ_LEN), batch_size=per_rank, shuffle=False)
        next(iter(loader))  # warm: the file in the page cache, as a running job has it
        times = []
        for _ in range(measured):
            start = time.perf_counter()
            batch = next(iter(loader))
            times.append(time.perf_counter() - start)
        assert tuple(batch.shape) == (per_rank, SEQ_LEN + 1)
        del loader, mapped
    per_iteration = float(np.median(times))
    return {"per_rank_batch": per_rank, "seq_len": SEQ_LEN, "per_iteration_s": per_iteration,
            "iterations": iterations, "skip_s": per_iteration * iterations}


def step_log(steps: int = 1000, target_steps: int = 10**6) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        text, binary = os.path.join(folder, "steps.jsonl"), os.path.join(folder, "steps.bin")
        with open(text, "w") as f, open(binary, "wb") as g:
            for step in range(steps):
                ids = rng.integers(0, 10**9, GLOBAL_BATCH, dtype=np.int64)
                f.write(json.dumps({"step": step, "ids": ids.tolist()}) + "\n")
                g.write(ids.tobytes())
        json_bytes, int64_bytes = os.path.getsize(text), os.path.getsize(binary)
    scale = target_steps / steps
    return {"measured_steps": steps, "json_bytes": json_bytes, "int64_bytes": int64_bytes,
            "target_steps": target_steps, "target_json_bytes": int(json_bytes * scale),
            "target_int64_bytes": int(int64_bytes * scale)}
