"""A document's tokens (a field, or a tokenizer run on it) and their counts, counted once per corpus.

``Packed`` needs every document's token count. ``TokenSource`` says where a document's token ids
come from: the ``tokens`` field of the sample, or a ``tokenize`` callable named by a ``tokenizer``
identity. For a ``Shards`` corpus the counts are counted shard by shard in a pool of worker
processes (one shard per task, a progress bar over documents) and written to
``tokens-<key>.npy`` in the corpus's cache folder (beside its ``corpus-<key>.json`` index), where
``key`` hashes the corpus fingerprint (its content hash: every shard's name, size, version and
rows) and the token source's identity. A restarted job, or another rank on the node, reads that
file and no shard. Several processes constructing the same ``Packed`` at once take a lock: one
counts, the others read.

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

from shufflepoint._core.capabilities import ReadsIds, ShardedCorpus
from shufflepoint._core.errors import Plain, refusal
from shufflepoint._shards import sidecar
from shufflepoint._shards.dataset import Shards

VERSION = 1  # of the counts file; part of its key
COUNT_BATCH = 1024  # documents read at once
_FORK_ABOVE = 4 * COUNT_BATCH  # documents; fewer are counted faster than worker processes start
_COUNT_AGAIN = "delete it to count again"
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
    reads_ids = field is not None and isinstance(dataset, ReadsIds)
    for first in range(start, stop, COUNT_BATCH):
        documents = range(first, min(first + COUNT_BATCH, stop))
        arrays = dataset._read_ids(list(documents), field) if reads_ids else None
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
    return isinstance(dataset, Shards) and getattr(dataset, "_transform", None) is None


def counts_path(dataset: Any, identity: str) -> str:
    """Where a ``Shards`` corpus keeps the token counts of one tokenization (``identity``)."""
    text = json.dumps({"corpus": dataset.fingerprint, "tokens": identity, "version": VERSION}, sort_keys=True)
    key = hashlib.sha256(text.encode()).hexdigest()[:24]
    cache_dir = getattr(dataset, "_cache_dir", None) or sidecar.default_cache_dir()
    return os.path.join(cache_dir, f"tokens-{key}.npy")


@dataclass(frozen=True)
class Counted:
    """Every document's token count, and what a ``Packed`` derives from them, kept so that a corpus whose
    counts are on disk is opened in O(1): the counts and their prefix sums memory-mapped, their digest read
    (a cold ``which`` at 1e7 documents: no O(documents) pass, benchmarks/which.py)."""

    lengths: np.ndarray  # int64, or the kept file memory-mapped (int32 where every count fits)
    cumulative: np.ndarray | None = None  # [0, l0, l0 + l1, ...]: documents + 1 int64s, or None
    digest: str | None = None  # sha256 of the counts as int64 bytes (part of Packed's fingerprint), or None

    def counts_digest(self) -> str:
        return self.digest or digest(self.lengths)

    def token_starts(self, extra: int) -> np.ndarray:
        """Where each document starts in the token stream, and its end: ``documents + 1`` int64s, each document
        with ``extra`` framing tokens (bos/eos). Kept prefix sums without framing are used as they are (O(1))."""
        if self.cumulative is not None and not extra:
            return self.cumulative
        if self.cumulative is not None:  # + extra tokens for every document before
            found: np.ndarray = self.cumulative + extra * np.arange(len(self.lengths) + 1, dtype=np.int64)
            return found
        return np.concatenate(([0], np.cumsum(np.asarray(self.lengths, dtype=np.int64) + extra))).astype(np.int64)


def digest(counts: np.ndarray) -> str:
    """The sha256 of the counts as int64 bytes: what ``Packed``'s fingerprint holds of them."""
    return hashlib.sha256(np.ascontiguousarray(counts, dtype=np.int64).tobytes()).hexdigest()


def _kept(path: str) -> tuple[str, str]:
    """The files kept beside a counts file: its prefix sums and its digest."""
    return path[:-4] + ".cumulative.npy", path[:-4] + ".sha256"


def load(path: str, documents: int) -> Counted | None:
    """The counts kept at ``path``, or None when there are none; an error naming a damaged file. With their
    prefix sums and digest beside them, all memory-mapped or read in O(1); else checked whole and the two
    written (counts kept by shufflepoint 0.3)."""
    try:
        found = np.load(path, allow_pickle=False, mmap_mode="r")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise ValueError(refusal(f"{path}", Plain("unreadable token counts"), "a .npy file of token counts",
                                 _COUNT_AGAIN, why=str(error))) from error
    if found.shape != (documents,) or found.dtype.kind not in "iu":
        raise ValueError(refusal(f"{path}", Plain(f"token counts of shape {found.shape} and dtype {found.dtype}"),
                                 f"({documents},) non-negative integers", _COUNT_AGAIN, why="the file is damaged"))
    kept = _load_kept(path, documents)
    if kept is not None:
        return Counted(found, *kept)
    counts: np.ndarray = np.asarray(found, dtype=np.int64)
    if counts.size and counts.min() < 0:
        raise ValueError(refusal(f"{path}", Plain("negative token counts"), "counts >= 0", _COUNT_AGAIN,
                                 why="the file is damaged"))
    return _save_kept(path, counts)


def _load_kept(path: str, documents: int) -> tuple[np.ndarray, str] | None:
    cumulative_path, digest_path = _kept(path)
    try:
        cumulative = np.load(cumulative_path, allow_pickle=False, mmap_mode="r")
        with open(digest_path) as f:
            text = f.read().strip()
    except (OSError, ValueError):
        return None  # not kept (yet), or half written: derived from the counts again
    if cumulative.shape != (documents + 1,) or cumulative.dtype != np.int64 or int(cumulative[0]) != 0 \
            or len(text) != 64 or text.strip("0123456789abcdef"):
        return None
    return cumulative, text


def _save_kept(path: str, counts: np.ndarray) -> Counted:
    """Write the prefix sums and the digest beside the counts (each whole or not at all; best effort: a
    read-only cache folder only costs the O(documents) pass at every construction)."""
    cumulative_path, digest_path = _kept(path)
    sums = np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).astype(np.int64)
    found = Counted(counts, sums, digest(counts))
    try:
        sidecar.write_whole(cumulative_path, lambda f: np.save(f, sums, allow_pickle=False))
        sidecar.write_whole(digest_path, lambda f: f.write(found.counts_digest().encode()))
    except OSError:
        pass
    return found


def save(path: str, counts: np.ndarray) -> Counted:
    """Write whole or not at all (int32 where every count fits, else int64), then what is kept beside."""
    small = counts.size == 0 or int(counts.max()) < 2**31
    sidecar.write_whole(path, lambda f: np.save(f, counts.astype(np.int32 if small else np.int64), allow_pickle=False))
    return _save_kept(path, counts)


def load_or_count(dataset: Any, count: Count, identity: str, *, workers: int | None = None,
                  progress: bool = True) -> Counted:
    """Every document's token count: read from the corpus's counts file, else counted (and kept)."""
    if not cacheable(dataset):
        sharded = isinstance(dataset, ShardedCorpus)
        return Counted(count_shards(dataset, count, workers, progress) if sharded
                       else count_all(dataset, count, progress))
    path = counts_path(dataset, identity)
    found = load(path, len(dataset))
    if found is not None:
        return found
    with sidecar.building(os.path.dirname(path), os.path.basename(path)[:-4]):
        found = load(path, len(dataset))  # another process may have counted while this one waited
        if found is None:
            found = save(path, count_shards(dataset, count, workers, progress))
    return found


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
    size = max(1, min(len(ranges), workers or default))
    if size == 1:
        return count_all(dataset, count, progress)
    counts = np.empty(len(dataset), dtype=np.int64)
    bar = _bar(len(dataset), progress)
    with _pool(size, dataset, count) as pool:
        futures = [pool.submit(_count_task, start, stop) for start, stop in ranges]
        for future in as_completed(futures):
            start, found = future.result()
            counts[start:start + found.size] = found
            if bar is not None:
                bar.update(found.size)
    if bar is not None:
        bar.close()
    return counts


def _init(dataset: Any, count: Count) -> None:
    _worker.dataset, _worker.count = copy.copy(dataset), count


def _pool(size: int, dataset: Any, count: Count) -> Executor:
    """Forked processes, which inherit the corpus and the count (a tokenizer need not pickle); threads
    where fork is not offered."""
    if "fork" in multiprocessing.get_all_start_methods():
        return ProcessPoolExecutor(size, mp_context=multiprocessing.get_context("fork"), initializer=_init,
                                   initargs=(dataset, count))
    return ThreadPoolExecutor(size, initializer=_init, initargs=(dataset, count))
