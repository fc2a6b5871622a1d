"""A document's tokens (a field, or a tokenizer run on it), and counting them.

``Packed`` needs every shard's token total, and the per-document counts of the shards it reads.
``TokenSource`` says where a document's token ids come from: the ``tokens`` field of the sample, or
a ``tokenize`` callable named by a ``tokenizer`` identity. Counting here is shard by shard in a
pool of worker processes (one shard per task, a progress bar over documents); where the counts of a
``Shards`` corpus are published, kept or exchanged is ``count_files`` and ``count_share``.

Any other dataset (a list, a map-style dataset of the user's) is counted at every construction, in
this process, and kept nowhere: nothing on disk names its content. So is a ``Shards`` with a
``transform`` (counted by shard), which can change what a document holds without changing the
corpus fingerprint.

Processes, not threads: counting is Python work on every document (a JSON or Arrow row to a list,
or a tokenizer), which threads serialise. Measured on 24,000 JSONL documents of text, 2 workers on
the shared 2-core machine: a regex tokenizer 2.80 s in one process, 3.01 s with threads, 1.67 s with
processes; a Hugging Face ``tokenizers`` word-level tokenizer 7.05 / 7.29 / 5.73 s. Reading a token
field only, the children spent the parent's CPU time per document, but that machine had no free
core to gain on (``docs/packing.md``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from shufflepoint._core.capabilities import ReadsIds, hooks_of
from shufflepoint._errors import Plain, refusal
from shufflepoint._shards.corpora.shards.shards import Shards

COUNT_BATCH = 1024  # documents read at once
_FORK_ABOVE = 4 * COUNT_BATCH  # documents; fewer are counted faster than worker processes start
Count = Callable[[Any, int], int]  # (sample, document) -> its token count


def as_token_ids(value: Any, what: str) -> np.ndarray:
    """Token ids as a 1-D int64 array; a TypeError saying ``what`` held something else."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    ids = np.asarray(value)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise TypeError(refusal(what, Plain(f"{ids.dtype} of shape {ids.shape}"), "a 1-D sequence of integer token "
                                "ids", "give each document its token ids as a list or a 1-D integer array"))
    return ids.astype(np.int64, copy=False)


@dataclass(frozen=True)
class TokenSource:
    """Where a document's token ids come from: the sample's ``field``, or ``tokenize(sample)``, whose
    ``tokenizer`` identity (a name and revision or hash) stands for it in fingerprints and keys."""

    field: str | None
    tokenize: Callable[[Any], Any] | None = None
    tokenizer: str | None = None

    @classmethod
    def checked(cls, tokens: object, tokenize: object, tokenizer: object) -> TokenSource:
        if tokenize is None:
            if tokenizer is not None:
                raise ValueError(refusal("tokenizer", tokenizer, "None without tokenize", "pass tokenize=fn(sample) "
                                         "-> token ids with it, or neither to read token ids from the tokens field"))
            field = "input_ids" if tokens is None else tokens
            if not isinstance(field, str):
                raise TypeError(refusal("tokens", field, "the name of the field holding token ids",
                                        "pass tokens='<field>'"))
            return cls(field)
        if tokens is not None:
            raise ValueError(refusal("tokens, tokenize", Plain(f"both (tokens={tokens!r})"), "one of them",
                                     "pass tokens to read token ids from a field, or tokenize (with tokenizer) to "
                                     "tokenize each document, not both"))
        if not callable(tokenize):
            raise TypeError(refusal("tokenize", tokenize, "a callable fn(sample) -> token ids",
                                    "pass a function of a sample"))
        if not isinstance(tokenizer, str) or not tokenizer.strip():
            raise ValueError(refusal("tokenizer", tokenizer, "a non-empty string naming the tokenizer (e.g. "
                                     "'gpt2@<revision>' or a hash of its vocabulary)", "pass tokenizer= with "
                                     "tokenize", why="the identity keeps the token counts and a resume to one "
                                     "tokenizer"))
        return cls(None, tokenize, tokenizer)

    @property
    def identity(self) -> str:
        """What a token is, as a key: the field's name or the tokenizer's identity."""
        return json.dumps({"field": self.field} if self.tokenize is None else {"tokenizer": self.tokenizer})

    def ids(self, sample: Any, document: int) -> np.ndarray:
        """Document ``document``'s token ids (int64); an error naming the field or the tokenizer, and the document."""
        if self.tokenize is not None:
            try:
                value = self.tokenize(sample)
            except Exception as error:  # named, with the tokenizer's own error as the cause
                raise ValueError(refusal(f"tokenize (tokenizer {self.tokenizer!r})", Plain(
                    f"document {document} failed: {type(error).__name__}"), "token ids for every document",
                    "fix the tokenize function for this document", why=str(error))) from error
            return as_token_ids(value, f"tokenize (tokenizer {self.tokenizer!r}): its output for document {document}")
        field = str(self.field)
        if not isinstance(sample, dict) or field not in sample:
            found = f"keys {sorted(map(str, sample))}" if isinstance(sample, dict) else f"a {type(sample).__name__}"
            raise ValueError(refusal(f"tokens: document {document}", Plain(f"no field {field!r} ({found})"),
                                     f"a dict whose {field!r} holds the document's token ids",
                                     "pass tokens='<field>', or tokenize"))
        return as_token_ids(sample[field], f"tokens: field {field!r} of document {document}")

    def count(self, sample: Any, document: int) -> int:
        return int(self.ids(sample, document).size)


def read(dataset: Any, documents: Sequence[int]) -> list[Any]:
    """The samples of these documents, read as one batch where the dataset can."""
    getitems = getattr(dataset, "__getitems__", None)
    if callable(getitems):
        return list(getitems(list(documents)))
    return [dataset[d] for d in documents]


def count_range(dataset: Any, count: Count, start: int, stop: int) -> np.ndarray:
    """Token counts of documents [start, stop), read in batches."""
    counts = np.empty(stop - start, dtype=np.int64)
    source = getattr(count, "__self__", None)  # a field's lists read as arrays: no Python int per token
    field = source.field if isinstance(source, TokenSource) and source.tokenize is None else None
    hooks = hooks_of(dataset) if field is not None else None
    for first in range(start, stop, COUNT_BATCH):
        documents = range(first, min(first + COUNT_BATCH, stop))
        arrays = hooks.read_ids(list(documents), str(field)) if isinstance(hooks, ReadsIds) else None
        if arrays is not None:
            counts[first - start:first - start + len(arrays)] = [ids.size for ids in arrays]
            continue
        for document, sample in zip(documents, read(dataset, documents), strict=True):
            counts[document - start] = count(sample, document)
    return counts


def _bar(total: int, progress: bool) -> Any:
    if not progress or total <= COUNT_BATCH:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="shufflepoint: counting tokens", unit="doc", disable=None)


def count_all(dataset: Any, count: Count, progress: bool) -> np.ndarray:
    """Token counts of every document, in this process, in batches."""
    n = len(dataset)
    bar = _bar(n, progress)
    parts = []
    for start in range(0, n, COUNT_BATCH):
        parts.append(count_range(dataset, count, start, min(start + COUNT_BATCH, n)))
        if bar is not None:
            bar.update(len(parts[-1]))
    if bar is not None:
        bar.close()
    return np.concatenate(parts) if parts else np.empty(0, np.int64)


def cacheable(dataset: Any) -> bool:
    """A ``Shards`` without a transform: its fingerprint says what every document holds."""
    return isinstance(dataset, Shards) and dataset.transform is None


def digest(counts: np.ndarray) -> str:
    """The sha256 of the counts as int64 bytes: what ``Packed``'s fingerprint holds of a dataset counted whole."""
    return hashlib.sha256(np.ascontiguousarray(counts, dtype=np.int64).tobytes()).hexdigest()


def _cpus() -> int:
    """The CPUs this process may run on (a container's share, not the machine's count)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if callable(affinity) else os.cpu_count() or 1


_worker = threading.local()  # each pool thread's (or process's) own copy of the corpus, and the count


def _count_task(start: int, stop: int) -> tuple[int, np.ndarray]:
    return start, count_range(_worker.dataset, _worker.count, start, stop)


def count_shards(dataset: Any, count: Count, workers: int | None, progress: bool) -> np.ndarray:
    """Token counts of a sharded corpus, one shard per task, in a pool of ``workers`` (default: the CPUs
    this process may use, or this process alone for a corpus of a few thousand documents)."""
    ends = np.cumsum(np.asarray(dataset.shard_rows, dtype=np.int64)).tolist()
    ranges = [(start, stop) for start, stop in zip([0] + ends[:-1], ends, strict=True) if stop > start]
    default = _cpus() if len(dataset) > _FORK_ABOVE else 1
    if max(1, min(len(ranges), workers or default)) == 1:
        return count_all(dataset, count, progress)
    return np.concatenate(count_ranges(dataset, count, ranges, workers, progress))


def count_ranges(dataset: Any, count: Count, ranges: list[tuple[int, int]], workers: int | None,
                 progress: bool) -> list[np.ndarray]:
    """Token counts of these document ranges (shards), one array per range, one range per task in a pool of
    ``workers`` (default: the CPUs this process may use; this process alone for a few thousand documents)."""
    documents = sum(stop - start for start, stop in ranges)
    default = _cpus() if documents > _FORK_ABOVE else 1
    size = max(1, min(len(ranges), workers or default))
    bar = _bar(documents, progress)
    found: list[np.ndarray] = [np.empty(0, np.int64)] * len(ranges)
    if size == 1:
        for k, (start, stop) in enumerate(ranges):
            found[k] = count_range(dataset, count, start, stop)
            if bar is not None:
                bar.update(stop - start)
    else:
        with _pool(size, dataset, count) as pool:
            futures = {pool.submit(_count_task, start, stop): k for k, (start, stop) in enumerate(ranges)}
            for future in as_completed(futures):
                found[futures[future]] = future.result()[1]
                if bar is not None:
                    bar.update(found[futures[future]].size)
    if bar is not None:
        bar.close()
    return found


def _init(dataset: Any, count: Count) -> None:
    _worker.dataset, _worker.count = copy.copy(dataset), count


def _pool(size: int, dataset: Any, count: Count) -> Executor:
    """Forked processes, which inherit the corpus and the count (a tokenizer need not pickle); threads
    where fork is not offered."""
    if "fork" in multiprocessing.get_all_start_methods():
        return ProcessPoolExecutor(size, mp_context=multiprocessing.get_context("fork"), initializer=_init,
                                   initargs=(dataset, count))
    return ThreadPoolExecutor(size, initializer=_init, initargs=(dataset, count))
