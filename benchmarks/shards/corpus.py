"""The corpora of `make bench-shards`, made once and cached under .bench-cache/shards/ (gitignored).

tokens/    S shards of raw little-endian uint16 ids (shufflepoint's ``.bin`` token format). Row r of
           shard k is the window ``tokens[r*L : r*L + L + 1]`` (L = seq_len, windows share one token,
           as nanoGPT/Megatron cut them). Window positions 1 and 2 hold the global sample id
           (``k * R + r``) as two uint16, so any loader's sample names itself: ``id = w[1] << 16 | w[2]``.
hf-tokens/ the same windows as Parquet, for HF ``datasets``: a binary column ``tokens`` holding each window's
           uint16 ids, little-endian (a list<uint16> column took twice the bytes: Parquet's levels).
text/      Parquet rows ``{"id", "text"}`` of about 1 KiB each (the row-shaped workload).

The peers' own formats (MDS, LitData chunks) are converted from tokens/ in their venvs by
``peer_streaming.py convert`` and ``peer_litdata.py convert``. Each folder is published by a rename
once complete, so an interrupted build leaves nothing that looks finished.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

FULL = {"shards": 1000, "rows": 10_000, "seq_len": 64, "text_shards": 1000, "text_rows": 500}
QUICK = {"shards": 100, "rows": 2_000, "seq_len": 64, "text_shards": 100, "text_rows": 200}
TEXT_BYTES = 1000  # the text column; with the id and Parquet's framing a row is ~1 KiB


def shard_tokens(shard: int, rows: int, seq_len: int) -> np.ndarray:
    """Shard ``shard``'s token stream: random ids, each window's positions 1-2 holding its sample id."""
    tokens = np.random.default_rng(shard).integers(0, 50_257, size=rows * seq_len + 1, dtype=np.uint16)
    ids = shard * rows + np.arange(rows, dtype=np.int64)
    tokens[np.arange(rows) * seq_len + 1] = (ids >> 16).astype(np.uint16)
    tokens[np.arange(rows) * seq_len + 2] = (ids & 0xFFFF).astype(np.uint16)
    return tokens


def windows(tokens: np.ndarray, seq_len: int) -> np.ndarray:
    """The (rows, seq_len + 1) windows of a token stream, as a view."""
    rows = (tokens.size - 1) // seq_len
    stride = tokens.strides[0]
    return np.lib.stride_tricks.as_strided(tokens, (rows, seq_len + 1), (seq_len * stride, stride), writeable=False)


def _publish(build, folder: Path) -> Path:
    if folder.exists():
        return folder
    tmp = folder.with_name(folder.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    build(tmp)
    os.rename(tmp, folder)
    return folder


def build_tokens(root: Path, spec: dict) -> Path:
    def build(tmp: Path) -> None:
        for shard in range(spec["shards"]):
            shard_tokens(shard, spec["rows"], spec["seq_len"]).tofile(tmp / f"part-{shard:05d}.bin")
        (tmp / "corpus.json").write_text(json.dumps(spec))
    return _publish(build, root / "tokens")


def build_hf_tokens(root: Path, spec: dict) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def build(tmp: Path) -> None:
        for shard in range(spec["shards"]):
            rows = windows(shard_tokens(shard, spec["rows"], spec["seq_len"]), spec["seq_len"]).astype("<u2")
            column = pa.array([row.tobytes() for row in rows], pa.binary())
            pq.write_table(pa.table({"tokens": column}), tmp / f"part-{shard:05d}.parquet", row_group_size=1000,
                           compression="none")
    return _publish(build, root / "hf-tokens")


def build_text(root: Path, spec: dict) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def build(tmp: Path) -> None:
        rows = spec["text_rows"]
        for shard in range(spec["text_shards"]):
            rng = np.random.default_rng(10_000 + shard)
            letters = rng.integers(97, 123, size=(rows, TEXT_BYTES), dtype=np.uint8)
            text = [row.tobytes().decode() for row in letters]
            ids = np.arange(shard * rows, (shard + 1) * rows, dtype=np.int64)
            pq.write_table(pa.table({"id": ids, "text": text}), tmp / f"part-{shard:05d}.parquet",
                           row_group_size=100, compression="none")
    return _publish(build, root / "text")


def folder_bytes(folder: Path, suffixes: tuple[str, ...] = ()) -> int:
    """Bytes of the data files under ``folder`` (all files when no suffix is given)."""
    return sum(p.stat().st_size for p in folder.rglob("*")
               if p.is_file() and not p.name.startswith(".") and (not suffixes or p.name.endswith(suffixes)))


def build_all(root: Path, quick: bool) -> dict:
    spec = QUICK if quick else FULL
    root.mkdir(parents=True, exist_ok=True)
    return {"spec": spec, "tokens": str(build_tokens(root, spec)), "hf-tokens": str(build_hf_tokens(root, spec)),
            "text": str(build_text(root, spec))}
