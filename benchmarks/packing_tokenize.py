"""``Packed(tokenize=)`` against a naive tokenize-once pipeline on the same text (issue 25, point 2).

``make bench-packing`` runs it after ``packing.py`` (~1 min here; ``--quick``: a fifth). Writes
``benchmarks/results/packing_tokenize.md`` and ``.json``.

- The text: documents of generated words (a Zipf draw over 20,000 made-up words, lognormal lengths,
  median ~180 words, a few of 4,000+), in memory as ``{"text": ...}`` dicts; a BPE tokenizer
  (vocabulary 8,000) trained on it on the fly with Hugging Face ``tokenizers``: nothing downloaded.
- ``Packed``: ``shufflepoint.DataLoader(Packed(texts, SEQ_LEN, tokenize=..., eos=...), BATCH)``,
  ``num_workers=0``, one epoch. The construction's counting pass (one tokenization of the corpus,
  kept per corpus for a ``Shards`` corpus) is timed apart and not in the rate.
- Naive: the documents in a random order, each tokenized once, appended to a buffer, cut into rows of
  ``SEQ_LEN`` and batches of ``BATCH`` with the same three tensors (``input_ids``, ``position_ids``
  restarting at each document and row, ``labels`` -100 there), built with numpy: what one writes
  without a library, not resumable.
- Rows/s of each, alternated, median of ``--repeats``; the ratio per pair (target >= 1x).
- Tokenize calls per document over an epoch (the documents the epoch's rows hold), with no workers
  and with 2 workers (counted across the worker processes in a shared array). Target <= 1.05.
torch runs on one thread, as in ``packing.py``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

import shufflepoint

SEQ_LEN, BATCH, BLOCK = 1024, 8, 4096
WORDS, VOCAB = 20_000, 8_000


def make_texts(documents: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = ["".join(rng.choice(letters, size=int(rng.integers(2, 10)))) for _ in range(WORDS)]
    lengths = np.clip(rng.lognormal(5.2, 1.0, size=documents), 5, 6000).astype(int)
    draws = np.minimum(rng.zipf(1.3, size=int(lengths.sum())), WORDS) - 1
    texts, start = [], 0
    for d, n in enumerate(lengths.tolist()):
        texts.append({"id": d, "text": " ".join(words[w] for w in draws[start:start + n])})
        start += n
    return texts


def train_tokenizer(texts: list[dict[str, Any]]) -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["[UNK]", "[EOS]"], show_progress=False)
    tokenizer.train_from_iterator((t["text"] for t in texts), trainer=trainer)
    return tokenizer


class Tokenize:
    """``tokenize=``: the BPE ids of a document; counts its calls per document when ``calls`` is set."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer, self.calls = tokenizer, None

    def __call__(self, sample: dict[str, Any]) -> list[int]:
        if self.calls is not None:
            with self.calls.get_lock():
                self.calls[sample["id"]] += 1
        ids: list[int] = self.tokenizer.encode(sample["text"]).ids
        return ids


def naive_batches(texts: list[dict[str, Any]], tokenize: Tokenize, eos: int, seed: int) -> Iterator[dict]:
    """Tokenize each document once, in a random order; cut the stream into rows and batches."""
    order = np.random.default_rng(seed).permutation(len(texts))
    pieces: list[np.ndarray] = []
    held, room = 0, SEQ_LEN * BATCH
    for d in order.tolist():
        pieces.append(np.append(np.asarray(tokenize(texts[d]), dtype=np.int64), eos))
        held += pieces[-1].size
        while held >= room:
            stream = np.concatenate(pieces)
            flat, rest = stream[:room], stream[room:]
            pieces, held = [rest], rest.size
            yield _naive_batch(flat, _starts(flat, eos))


def _starts(flat: np.ndarray, eos: int) -> np.ndarray:
    """Where a document starts in ``flat``: after each eos, and at every row start."""
    after = np.zeros(flat.size, dtype=bool)
    after[1:] = flat[:-1] == eos
    after[::SEQ_LEN] = True
    return after


def _naive_batch(flat: np.ndarray, starts: np.ndarray) -> dict[str, torch.Tensor]:
    index = np.arange(flat.size, dtype=np.int64)
    last_start = np.maximum.accumulate(np.where(starts, index, 0))
    positions = index - last_start
    labels = np.where(positions == 0, -100, flat)
    return {"input_ids": torch.from_numpy(flat.reshape(BATCH, SEQ_LEN)),
            "position_ids": torch.from_numpy(positions.reshape(BATCH, SEQ_LEN)),
            "labels": torch.from_numpy(labels.reshape(BATCH, SEQ_LEN))}


def rate(batches: Any) -> float:
    start, rows = time.perf_counter(), 0
    for batch in batches:
        rows += int(batch["input_ids"].shape[0])
    return rows / (time.perf_counter() - start)


def calls_per_document(texts: list[dict[str, Any]], tokenize: Tokenize, eos: int, workers: int) -> dict[str, float]:
    """Tokenize calls over one epoch of a fresh ``Packed``, per document its rows hold."""
    packed = shufflepoint.Packed(texts, SEQ_LEN, tokenize=tokenize, tokenizer="bpe-bench", eos=eos, progress=False)
    tokenize.calls = multiprocessing.get_context("fork").Array("i", len(texts))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = shufflepoint.DataLoader(packed, BATCH, seed=1, shuffle_block=BLOCK, num_workers=workers,
                                         multiprocessing_context="fork" if workers else None)
    for _ in loader:
        pass
    calls = np.frombuffer(tokenize.calls.get_obj(), dtype=np.int32).copy()
    tokenize.calls = None
    touched = {d for row in range(len(packed)) for d, _, _ in packed.pieces(row)}
    return {"workers": workers, "documents": len(touched), "calls": int(calls.sum()),
            "per_document": float(calls.sum()) / len(touched), "most_on_one_document": int(calls.max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fifth of the documents")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="results path without suffix")
    args = parser.parse_args()
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    texts = make_texts(1_200 if args.quick else 6_000)
    tokenizer = train_tokenizer(texts)
    eos = tokenizer.token_to_id("[EOS]")
    tokenize = Tokenize(tokenizer)
    start = time.perf_counter()
    packed = shufflepoint.Packed(texts, SEQ_LEN, tokenize=tokenize, tokenizer="bpe-bench", eos=eos, progress=False)
    counted = time.perf_counter() - start
    packed_rates, naive_rates, ratios = [], [], []
    for repeat in range(args.repeats):
        naive_rates.append(rate(naive_batches(texts, tokenize, eos, seed=repeat)))
        loader = shufflepoint.DataLoader(packed, BATCH, seed=1, shuffle_block=BLOCK)
        loader.set_epoch(repeat)
        packed_rates.append(rate(loader))
        ratios.append(packed_rates[-1] / naive_rates[-1])
    calls = [calls_per_document(texts, tokenize, eos, workers) for workers in (0, 2)]
    rows = [
        ("text", f"{len(texts):,} documents, {packed.tokens_per_epoch:,} tokens (BPE, vocabulary {VOCAB:,}), "
                 f"{len(packed):,} rows of {SEQ_LEN}"),
        ("rows/s, Packed(tokenize=), no workers", f"{statistics.median(packed_rates):,.0f}"),
        ("rows/s, naive tokenize-once pipeline", f"{statistics.median(naive_rates):,.0f}"),
        ("Packed / naive (target >= 1x)",
         f"{statistics.median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})"),
        ("construction: counting pass (one tokenization, not in the rate)", f"{counted:.2f} s"),
        *((f"tokenize calls per document, {c['workers']} workers (target <= 1.05)",
           f"{c['per_document']:.3f} ({c['calls']:,} calls, {c['documents']:,} documents, at most "
           f"{c['most_on_one_document']} on one)") for c in calls),
        ("load average (1 min) before / after", f"{load_before:.1f} / {os.getloadavg()[0]:.1f}"),
    ]
    lines = [f"| packed tokenize, repeats {args.repeats}{', quick' if args.quick else ''} | |", "|---|---|",
             *(f"| {name} | {value} |" for name, value in rows)]
    text = "\n".join(lines)
    print(text)
    out = Path(args.out or f"benchmarks/results/packing_tokenize{'_quick' if args.quick else ''}")
    out.with_suffix(".md").write_text("# Packed(tokenize=) against a naive tokenize-once pipeline (issue 25.2)\n\n"
                                      f"Written by `benchmarks/packing_tokenize.py`{' --quick' if args.quick else ''}"
                                      f" (`make bench-packing`).\n\n{text}\n")
    out.with_suffix(".json").write_text(json.dumps({"packed_rows_per_s": packed_rates, "naive_rows_per_s": naive_rates,
                                                    "ratios": ratios, "count_s": counted, "calls": calls}, indent=1)
                                        + "\n")


if __name__ == "__main__":
    main()
