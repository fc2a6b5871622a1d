"""Packed at 1e9 tokens against Megatron-Core, Grain and torchtitan (issue 21, point 7); run by
``benchmarks/packing.py``. What is measured and what is computed, per system:

- shufflepoint, measured: ``Packed`` over 1e9 tokens of lognormal documents (mean 500 and 2,000
  tokens) whose token ids are views of one 32 MB buffer (so no 8 GB of ids; a document's content
  repeats others'). Counting the tokens (construction), then a fresh loader over a copy of the
  ``Packed`` without per-epoch tables loads a state at 50% of the epoch and takes one batch of 8.
  Bytes: the numpy arrays the ``Packed`` holds, before and after that first batch.
- Megatron-Core, computed from its array widths (NVIDIA/Megatron-LM at d98e8a6; docs/packing.md
  cites the lines): the ``.idx`` (int32 length + int64 pointer per document, int64 document
  boundary), and per (seed, seq_len, num_samples) key the ``document_index`` (int32 per document
  per epoch), ``sample_index`` ((samples + 1) x 2 of int32, int64 past 2**31) and ``shuffle_index``
  (uint32 per sample, int64 past 2**32).
- Grain 0.2.18, measured in its own venv (``packing_grain.py``) at 1e7 tokens, at 10/50/90% of the
  stream, and extrapolated linearly (fit over the three) to 50% of 1e9 tokens.
- torchtitan, computed from its code: its Grain loader restores Grain's state per DP rank; its
  Hugging Face streaming source re-reads the current shard up to its position.
"""

from __future__ import annotations

import copy
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np

import shufflepoint

MEANS, SEQ_LENS, MEASURED_SEQ_LEN, BATCH = (500, 2000), (2048, 4096), 2048, 8
HF_SHARDS = 64  # torchtitan's streaming case: the corpus in 64 files, a resume re-reads half of one


class SyntheticDocuments:
    """A map-style corpus of ``{"input_ids": int64 view}`` documents of the given lengths."""

    def __init__(self, lengths: np.ndarray, seed: int = 0) -> None:
        self.lengths = lengths
        self.buffer = np.random.default_rng(seed).integers(0, 50_257, 1 << 22, dtype=np.int64)
        self.offsets = (np.arange(lengths.size, dtype=np.int64) * 7919) % (self.buffer.size - int(lengths.max()))

    def __len__(self) -> int:
        return int(self.lengths.size)

    def __getitem__(self, document: int) -> dict[str, np.ndarray]:
        return self.__getitems__([document])[0]

    def __getitems__(self, documents: list[int]) -> list[dict[str, np.ndarray]]:
        starts, sizes = self.offsets[documents].tolist(), self.lengths[documents].tolist()
        return [{"input_ids": self.buffer[start:start + size]} for start, size in zip(starts, sizes, strict=True)]


def lognormal_lengths(tokens: int, mean: int) -> np.ndarray:
    """Document lengths (sigma 1.0, at least 1 token) whose sum is just under ``tokens``."""
    rng = np.random.default_rng(mean)
    lengths = np.maximum(1, rng.lognormal(np.log(mean) - 0.5, 1.0, int(tokens / mean * 1.05) + 100)).astype(np.int64)
    return lengths[: int(np.searchsorted(np.cumsum(lengths), tokens, side="right"))]


def megatron_bytes(tokens: int, documents: int, seq_len: int, epochs: int = 1) -> dict[str, int]:
    """Megatron-Core GPTDataset's index arrays, one document per sequence, add_extra_token_to_sequence."""
    samples = (epochs * tokens - 1) // seq_len
    document_index = epochs * documents
    sample_width = 4 if document_index <= 2**31 - 1 else 8
    shuffle_width = 4 if samples < 2**32 - 2 else 8
    return {"idx": documents * (4 + 8) + (documents + 1) * 8, "document_index": 4 * document_index,
            "sample_index": 2 * (samples + 1) * sample_width, "shuffle_index": shuffle_width * samples,
            "samples": samples}


def held_bytes(packed: shufflepoint.Packed) -> int:
    """Bytes of the numpy arrays reachable from ``packed`` through shufflepoint's objects, its dataset excluded."""
    seen, stack, total = {id(packed.dataset)}, [packed], 0
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, np.ndarray):
            total += value.nbytes
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif type(value).__module__.startswith("shufflepoint"):  # its own objects: tables, orders
            stack.extend(vars(value).values())
    return total


def shufflepoint_at(tokens: int, mean: int, block: int) -> dict[str, Any]:
    lengths = lognormal_lengths(tokens, mean)
    corpus = SyntheticDocuments(lengths)
    start = time.perf_counter()
    packed = shufflepoint.Packed(corpus, MEASURED_SEQ_LEN, progress=False)
    count_s = time.perf_counter() - start
    loader = shufflepoint.DataLoader(packed, BATCH, seed=1, shuffle_block=block, world_size=1, rank=0)
    loader.seek(0, len(loader) // 2)
    state, times = loader.state_dict(), []
    for _ in range(3):
        fresh = copy.copy(packed)  # as in a new process whose tokens are counted: no per-epoch table yet
        before = held_bytes(fresh)
        start = time.perf_counter()
        resumed = shufflepoint.DataLoader(fresh, BATCH, seed=1, shuffle_block=block, world_size=1, rank=0)
        resumed.load_state_dict(state)
        batch = next(iter(resumed))
        times.append(time.perf_counter() - start)
    assert tuple(batch["input_ids"].shape) == (BATCH, MEASURED_SEQ_LEN)
    return {"mean": mean, "documents": int(lengths.size), "tokens": int(lengths.sum()), "rows": len(packed),
            "count_s": count_s, "resume_s": statistics.median(times), "per_document_bytes": before,
            "per_epoch_bytes": held_bytes(fresh) - before}


def grain_restore(python: str, tokens: int) -> dict[str, Any] | None:
    """Grain's measured restore (``packing_grain.py`` in its own venv), or None when it is not installed."""
    if not Path(python).exists():
        return None
    script = Path(__file__).with_name("packing_grain.py")
    done = subprocess.run([python, str(script), str(tokens), str(MEASURED_SEQ_LEN)], capture_output=True, text=True,
                          check=True, timeout=600)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def extrapolate(measured: dict[str, Any], rows: int) -> tuple[float, float, bool]:
    """(restore seconds at ``rows``, the linear fit's slope per 1,000 rows, whether the points are flat).

    The fit over the three checkpoints is the extrapolation when its growth over the measured span
    exceeds the points' spread; otherwise the restore does not grow with the position (Grain's
    state is the source index and the packer's buffer) and the median of the points stands."""
    x = np.array([measured["rows_at"][key] for key in sorted(measured["restore_s"])], dtype=float)
    y = np.array([measured["restore_s"][key] for key in sorted(measured["restore_s"])])
    slope, intercept = np.polyfit(x, y, 1)
    if slope > 0 and slope * (x.max() - x.min()) > (y.max() - y.min()) / 2:
        return float(intercept + slope * rows), float(slope * 1000), False
    return float(np.median(y)), float(slope * 1000), True


def scale_report(quick: bool, block: int, grain_python: str, parquet_tokens_per_s: float) -> tuple[list[str], dict]:
    tokens = 10**8 if quick else 10**9
    ours = [shufflepoint_at(tokens, mean, block) for mean in MEANS]
    grain = grain_restore(grain_python, 2 * 10**6 if quick else 10**7)
    label = f"{tokens:.0e}".replace("+0", "")
    lines = [f"At {label} tokens, one epoch, shuffle_block {block}. Index bytes (MB = 1e6 B):", "",
             "| mean document | seq_len | documents | rows | Megatron `.idx` (disk) | Megatron per epoch: document "
             "+ sample + shuffle index (disk, mmap) | shufflepoint per document (memory) | shufflepoint per epoch "
             "(memory, measured) |", "|---|---|---|---|---|---|---|---|"]
    megatron = {}
    for found in ours:
        for seq_len in SEQ_LENS:
            arrays = megatron_bytes(found["tokens"], found["documents"], seq_len)
            megatron[f"{found['mean']}/{seq_len}"] = arrays
            epoch = arrays["document_index"] + arrays["sample_index"] + arrays["shuffle_index"]
            lines.append(f"| {found['mean']:,} | {seq_len} | {found['documents']:,} | {found['tokens'] // seq_len:,} "
                         f"| {arrays['idx'] / 1e6:.1f} | {epoch / 1e6:.1f} ({arrays['document_index'] / 1e6:.1f} + "
                         f"{arrays['sample_index'] / 1e6:.1f} + {arrays['shuffle_index'] / 1e6:.1f}) "
                         f"| {found['per_document_bytes'] / 1e6:.1f} | {found['per_epoch_bytes'] / 1e6:.2f} |")
    half = tokens // MEASURED_SEQ_LEN // 2
    lines += ["", f"Resume at 50% of the epoch (row {half:,} of {tokens // MEASURED_SEQ_LEN:,}, seq_len "
              f"{MEASURED_SEQ_LEN}), time to the first batch:", "", "| system | what a resume does | time | how |",
              "|---|---|---|---|"]
    for found in ours:
        lines.append(f"| shufflepoint, mean {found['mean']:,} | seek: O(blocks) table + one block of documents "
                     f"| {found['resume_s'] * 1000:.1f} ms | measured |")
    for found in ours:
        parquet = found["tokens"] / parquet_tokens_per_s
        lines.append(f"| shufflepoint construction, mean {found['mean']:,} | counts every document's tokens "
                     "once per corpus (a `Shards` corpus keeps them in its cache folder; a restart reads them "
                     f"back) | {found['count_s']:.1f} s in memory; "
                     f"{parquet:.0f} s from Parquet | measured; Parquet: {label} tokens at this run's count rate "
                     f"({parquet_tokens_per_s / 1e6:.1f}M tokens/s, documents of ~460 tokens) |")
    lines.append("| Megatron-Core | looks up `consumed_train_samples` in the three mmapped `.npy` | O(1) "
                 "| computed; a new `seq_length`, `num_samples`, seed or split first rebuilds them |")
    result = {"tokens": tokens, "shufflepoint": ours, "megatron": megatron, "grain": grain}
    if grain is None:
        lines.append(f"| Grain 0.2.18 | (not installed at {grain_python}) | | |")
    else:
        for packer in ("concat_then_split", "first_fit"):
            measured = grain[packer]
            at_half, slope, flat = extrapolate(measured, half)
            points = ", ".join(f"{measured['restore_s'][k] * 1000:.1f}" for k in sorted(measured["restore_s"]))
            replay = half / measured["rows_per_s"]
            lines.append(f"| Grain {grain['grain']} `{packer}`, one rank | `set_state`: the source index, then "
                         f"re-packs its buffer | {at_half * 1000:.1f} ms | measured at {grain['tokens']:.0e} tokens "
                         f"(rows {', '.join(f'{r:,}' for r in measured['rows_at'].values())}): {points} ms; linear fit "
                         f"slope {slope * 1000:.4f} ms per 1,000 rows, "
                         + ("within the points' spread: flat, so their median is taken" if flat else "extrapolated")
                         + f" at {label} (a replay to row {half:,} at its {measured['rows_per_s']:,.0f} rows/s "
                         f"would take {replay:.0f} s) |")
            result[f"grain_{packer}_at_half_s"] = at_half
        lines.append("| torchtitan, Grain loader | Grain's `set_state` on each DP rank; refuses another DP degree | "
                     "as Grain | computed from its code |")
    shard = tokens / HF_SHARDS / 2
    lines.append(f"| torchtitan, HF streaming source | re-reads the current shard to its position; refuses another "
                 f"DP degree | {shard / parquet_tokens_per_s:.1f} s | computed: half of one of {HF_SHARDS} shards "
                 f"({shard:.1e} tokens) at this run's Parquet read rate |")
    return lines, result
