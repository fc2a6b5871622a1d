"""The corpus index: rows per shard, built once in parallel and kept as a small sidecar file.

The index is what makes a corpus of files a map-style dataset: with ``rows[s]`` known, dataset
index i is (shard, row) by a prefix sum, and the ``blocks`` order needs nothing else. It is O(S),
never O(N): formats that need row offsets (JSONL lines, tar members) find them when a shard is
opened, from the local copy.

Identity. Each shard is recorded as (name, size, version, rows): ``name`` relative to the
corpus root (so a corpus moved or mirrored elsewhere keeps its identity), ``size`` in bytes,
``version`` what the storage reports (mtime, etag, generation) and ``rows``. The *content hash*
covers the reader's options and (name, size, rows) of every shard, in order; it is what joins the
loader's ``dataset_fingerprint``. ``version`` only decides whether a cached sidecar is still valid
(a rewritten shard is counted again); a shard rewritten with the same size and row count keeps
the hash (the limit of an index that never reads whole shards to hash them).

Sidecars are content-addressed copies in the cache folder (``index-<hash>.json``), plus one
beside a local corpus when its folder is writable. Because old ones stay, a state saved on an
older corpus can be refused with a message that names the shards that changed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

FORMAT = "shufflepoint-index"
VERSION = 1


@dataclass(frozen=True)
class ShardRecord:
    name: str  # relative to the corpus root
    size: int
    version: str
    rows: int


@dataclass(frozen=True)
class CorpusIndex:
    """Rows per shard of one corpus, with the reader and options that define what a row is."""

    root: str
    reader: str
    options: dict[str, Any]
    shards: tuple[ShardRecord, ...]

    @property
    def rows(self) -> np.ndarray:
        return np.array([s.rows for s in self.shards], dtype=np.int64)

    @property
    def content_hash(self) -> str:
        identity = {"reader": self.reader, "options": self.options,
                    "shards": [[s.name, s.size, s.rows] for s in self.shards]}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    def url(self, shard: int) -> str:
        return join(self.root, self.shards[shard].name)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "root": self.root, "reader": self.reader,
                "options": self.options, "content_hash": self.content_hash,
                "shards": [[s.name, s.size, s.version, s.rows] for s in self.shards]}

    @classmethod
    def from_json(cls, value: Any, where: str) -> CorpusIndex:
        """Read a sidecar; ValueError naming the file and the field for anything malformed."""
        if not isinstance(value, dict) or value.get("format") != FORMAT:
            raise ValueError(f"{where}: not a shufflepoint corpus index (no format {FORMAT!r})")
        if value.get("version") != VERSION:
            raise ValueError(f"{where}: index version {value.get('version')!r}, expected {VERSION}")
        try:
            shards = tuple(ShardRecord(str(n), int(size), str(v), int(rows)) for n, size, v, rows in value["shards"])
            index = cls(str(value["root"]), str(value["reader"]), dict(value["options"]), shards)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{where}: damaged corpus index ({error!r})") from error
        if index.content_hash != value.get("content_hash"):
            raise ValueError(f"{where}: its content_hash does not match its shards (edited or damaged)")
        return index


def join(root: str, name: str) -> str:
    if not root:
        return name
    return root.rstrip("/") + "/" + name if "://" in root else os.path.join(root, name)


def common_root(urls: Sequence[str]) -> str:
    """The folder (or URL prefix ending at a '/') that every shard is under."""
    if not urls:
        return ""
    folders = [u.rsplit("/", 1)[0] if "/" in u else "" for u in urls]
    prefix = os.path.commonprefix(folders)
    while prefix and not all(f == prefix or f.startswith(prefix.rstrip("/") + "/") for f in folders):
        prefix = prefix[:-1]
    return prefix.rstrip("/")


def relative(root: str, url: str) -> str:
    return url[len(root) + 1:] if root and url.startswith(root.rstrip("/") + "/") else url


def build(urls: Sequence[str], *, reader: str, options: dict[str, Any],
          info: Callable[[str], tuple[int, str]], count_rows: Callable[[str], int],
          known: CorpusIndex | None = None, threads: int = 8, progress: bool = True) -> CorpusIndex:
    """Count every shard's rows, in parallel; shards whose (size, version) ``known`` already has
    are not opened again."""
    root = common_root(urls)
    cached = {s.name: s for s in known.shards} if known is not None and known.reader == reader and \
        known.options == options else {}

    def one(url: str) -> ShardRecord:
        name = relative(root, url)
        size, version = info(url)
        seen = cached.get(name)
        if seen is not None and (seen.size, seen.version) == (size, version):
            return seen
        return ShardRecord(name, size, version, count_rows(url))

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        results = pool.map(one, urls)
        records = tuple(_with_progress(results, len(urls), progress))
    return CorpusIndex(root, reader, dict(options), records)


def _with_progress(results: Any, total: int, progress: bool) -> Any:
    if not progress:
        return results
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return results
    return tqdm(results, total=total, desc="shufflepoint: indexing shards", unit="shard", disable=None)


def changed_shards(old: CorpusIndex, new: CorpusIndex, limit: int = 5) -> str:
    """A sentence naming what differs between two indexes of a corpus, for a refused resume."""
    if old.reader != new.reader or old.options != new.options:
        return (f"the reader changed: {old.reader} {old.options} when saved, {new.reader} {new.options} now")
    before = {s.name: s for s in old.shards}
    after = {s.name: s for s in new.shards}
    parts = []
    resized = [n for n in after if n in before and (after[n].size, after[n].rows) != (before[n].size, before[n].rows)]
    for name in resized:
        parts.append(f"{name} changed ({before[name].rows} rows, {before[name].size} bytes -> "
                     f"{after[name].rows} rows, {after[name].size} bytes)")
    parts += [f"{name} is new" for name in after if name not in before]
    parts += [f"{name} is gone" for name in before if name not in after]
    if not parts and [s.name for s in old.shards] != [s.name for s in new.shards]:
        parts.append("the same shards in another order")
    shown = "; ".join(parts[:limit]) + (f"; and {len(parts) - limit} more" if len(parts) > limit else "")
    return shown or "no shard differs by name, size or rows"
