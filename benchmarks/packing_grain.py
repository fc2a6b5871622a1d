"""Grain's packed-iterator restore, measured (run by ``benchmarks/packing.py`` in its own venv).

    .venv-grain/bin/python benchmarks/packing_grain.py TOKENS SEQ_LEN   # prints one JSON object

The pipeline torchtitan builds (``torchtitan/components/data/{dataset,packing,loader}.py``): a map
source of tokenized documents, ``shuffle``, ``to_iter_dataset``, then Grain's
``ConcatThenSplitIterDataset`` or ``FirstFitPackIterDataset`` (8 bins), on one DP rank. For each
checkpoint (10%, 50%, 90% of the stream) a fresh iterator reads to it and takes ``get_state()``;
then a new pipeline's iterator gets ``set_state`` and one ``next()``: the restore and first row,
timed (median of 5). Grain restores the map source's position in O(1) and re-packs what its packer
held since its last empty buffer (``packing_concat_then_split.py``: ``set_state``; ``packing.py``:
``PackingDatasetIterator.set_state``). Iteration rows/s is reported too: the cost of a replay from
the stream's start, which Grain does not do. Documents are lognormal (mean 500 tokens), their ids
views of one buffer; ``ReadOptions(num_threads=0)``: no prefetch threads in the timings.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import grain
import grain.experimental as grain_experimental
import numpy as np


class Documents:
    """Map source: document d is ``{"input_ids": int32 view}`` of lognormal length (mean 500)."""

    def __init__(self, tokens: int) -> None:
        rng = np.random.default_rng(0)
        lengths = np.maximum(1, rng.lognormal(np.log(500) - 0.5, 1.0, tokens // 400)).astype(np.int64)
        self.lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens))]
        self.buffer = rng.integers(0, 50_257, 1 << 20, dtype=np.int32)
        self.offsets = (np.arange(self.lengths.size) * 7919) % (self.buffer.size - int(self.lengths.max()))

    def __len__(self) -> int:
        return int(self.lengths.size)

    def __getitem__(self, document: int) -> dict[str, np.ndarray]:
        start = int(self.offsets[document])
        return {"input_ids": self.buffer[start:start + int(self.lengths[document])]}


def pipeline(source: Documents, packer: str, seq_len: int) -> Any:
    dataset = grain.MapDataset.source(source).shuffle(seed=1)
    iterable = dataset.to_iter_dataset(grain.ReadOptions(num_threads=0))
    if packer == "concat_then_split":
        return grain_experimental.ConcatThenSplitIterDataset(iterable, length_struct={"input_ids": seq_len})
    truncated = iterable.map(lambda document: {"input_ids": document["input_ids"][:seq_len]})  # first-fit needs it
    return grain_experimental.FirstFitPackIterDataset(truncated, length_struct={"input_ids": seq_len},
                                                      num_packing_bins=8, seed=1)


def measure(source: Documents, packer: str, seq_len: int) -> dict[str, Any]:
    rows = int(source.lengths.sum()) // seq_len  # concat-then-split's rows; first-fit packs fewer
    found: dict[str, Any] = {"restore_s": {}, "rows_at": {}}
    for fraction in (0.1, 0.5, 0.9):
        target = int(rows * fraction) if packer == "concat_then_split" else int(rows * fraction * 0.9)
        iterator = iter(pipeline(source, packer, seq_len))
        start = time.perf_counter()
        for _ in range(target):
            next(iterator)
        read = time.perf_counter() - start
        state = iterator.get_state()
        found.setdefault("rows_per_s", target / read)
        times = []
        for _ in range(5):
            start = time.perf_counter()
            fresh = iter(pipeline(source, packer, seq_len))
            fresh.set_state(state)
            next(fresh)
            times.append(time.perf_counter() - start)
        found["restore_s"][str(fraction)] = statistics.median(times)
        found["rows_at"][str(fraction)] = target
        found.setdefault("state", json.dumps(state, default=str)[:300])
    return found


def main() -> None:
    tokens, seq_len = int(sys.argv[1]), int(sys.argv[2])
    source = Documents(tokens)
    result = {"grain": getattr(grain, "__version__", "?"), "tokens": int(source.lengths.sum()),
              "documents": len(source), "seq_len": seq_len}
    for packer in ("concat_then_split", "first_fit"):
        result[packer] = measure(source, packer, seq_len)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
