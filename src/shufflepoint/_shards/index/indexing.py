"""How ``Shards`` gets its index without downloading the corpus, and how one index serves every node.

Per shard, the cheapest source of its rows wins:

1. an index that recorded the same (size, version) for it: this node's cache
   (``corpus-<key>.json``), the sidecar beside a local corpus, or the index *published* beside
   the corpus by ``shufflepoint index SOURCES`` (``.shufflepoint-index-<options key>.json`` in
   the same folder or bucket prefix: one small GET, read by every node instead of scanning);
2. its size (token ``.bin`` files);
3. the metadata its format keeps (Parquet footers, ``.npy`` headers): a few ranged reads;
4. a scan: the shard is downloaded into the node cache (where the first read finds it) and
   opened. JSONL and WebDataset keep no row counts, so a node with no index of them scans every
   shard; a warning says how many bytes that is, and how to publish the index instead.

With ``verify="checksum"`` every shard counted here is downloaded and hashed (sha256), so that a
download can be checked where the storage reports no version (plain HTTP).

Words: docs/glossary.md (corpus index, shard, node cache, sidecar).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from shufflepoint._errors import Plain, refusal
from shufflepoint._shards.index import index as _index
from shufflepoint._shards.index import index_file, sidecar
from shufflepoint._shards.index.integrity import file_checksum
from shufflepoint._shards.readers.base import CountsRowsFromMetadata, CountsRowsFromSize, Reader
from shufflepoint._shards.storage import hub
from shufflepoint._shards.storage.storage import PUBLISHED_PREFIX, Storage, is_remote

Fetch = Callable[[str, int, str], str]  # (url, size, version) -> a local path holding the whole shard


def published_name(reader: str, options: dict[str, Any]) -> str:
    """The published index's file name: by reader and options only, so a corpus that grows keeps
    finding it (its records are matched to shards by name, size and version). Columnar (``.idx``)."""
    key = hashlib.sha256(json.dumps({"reader": reader, "options": options}, sort_keys=True).encode()).hexdigest()
    return f"{PUBLISHED_PREFIX}-{key[:16]}.idx"


def published_names(reader: str, options: dict[str, Any]) -> tuple[str, str]:
    """Where a published index may be: the columnar file, then the JSON one shufflepoint <= 0.4 published."""
    name = published_name(reader, options)
    return name, name[:-len(".idx")] + ".json"


def read_published(storage: Storage, root: str, reader: str, options: dict[str, Any]) -> _index.CorpusIndex | None:
    """The index published beside the corpus at ``root``, if any (a damaged one: a warning, None). None beside
    a Hub dataset, where none is published (``publish`` refuses): no request for it."""
    if hub.is_hub(root):
        return None
    for name in published_names(reader, options):
        url = _index.join(root, name)
        data = storage.read_small(url)
        if data is not None:
            return parse_published(data, url)
    return None


def parse_published(data: bytes, url: str) -> _index.CorpusIndex | None:
    try:
        return sidecar.parse(data, url)
    except ValueError as error:  # json's errors are ValueErrors too
        warnings.warn(f"the published corpus index {url} is not readable ({error}); counting rows here "
                      "instead. Re-run shufflepoint index to publish it again.", stacklevel=6)
        return None


class Indexer:
    """Builds the index of one source list for one reader, reusing every index it can find."""

    def __init__(self, storage: Storage, reader: Reader, cache_dir: str, fetch: Fetch, checksums: bool) -> None:
        self.storage, self.reader, self.cache_dir = storage, reader, cache_dir
        self.fetch, self.checksums = fetch, checksums
        self.published: str | None = None  # the published index found, if any

    def load_or_build(self, urls: list[str], threads: int, progress: bool,
                      listed: _index.CorpusIndex | None = None) -> _index.CorpusIndex:
        """``listed``: the published index these ``urls`` were read from (``published_listing``): it is the
        index, kept in the node cache as it was read."""
        options = self.reader.options()
        key = sidecar.corpus_key(urls, self.reader.name, options)
        if listed is not None:
            with sidecar.building(self.cache_dir, key):
                sidecar.save(listed, self.cache_dir, key, unless_same=True)
            self._warn_unversioned(listed, urls)
            return listed
        root = _index.common_root(urls)
        with sidecar.building(self.cache_dir, key):
            latest = sidecar.load_latest(self.cache_dir, key, root)

            def published() -> list[_index.CorpusIndex]:
                found = self.read_published(root, options)
                return [found] if found is not None else []

            built = _index.build(urls, reader=self.reader.name, options=options, info=self._info, count=self.count,
                                 known=[latest] if latest is not None else [], more_known=published,
                                 checksums=self.checksums, threads=threads, progress=progress,
                                 before_counting=self._before_counting)
            if latest is None or latest.read_as != _index.VERSION or not _index.same_sidecar(latest, built):
                sidecar.save(built, self.cache_dir, key)
        self._warn_unversioned(built, urls)
        return built

    def _warn_unversioned(self, built: _index.CorpusIndex, urls: list[str]) -> None:
        if "" not in built.shards.versions or self.checksums:  # the usual case: one C-level scan
            return
        unversioned = [name for name, version, url in zip(built.shards.names, built.shards.versions, urls, strict=True)
                       if is_remote(url) and not version]
        if unversioned:
            warnings.warn(f"the storage reports no version for {len(unversioned)} shard(s) (e.g. {unversioned[0]}; "
                          "plain HTTP without ETag or Last-Modified?): one rewritten with the same size would be read "
                          "without notice. Pass verify='checksum' to check every copy's content.",
                          UserWarning, stacklevel=5)

    def read_published(self, root: str, options: dict[str, Any]) -> _index.CorpusIndex | None:
        found = read_published(self.storage, root, self.reader.name, options)
        if found is not None:
            self.published = _index.join(root, published_name(self.reader.name, options))
        return found

    def _info(self, url: str) -> tuple[int, str]:
        return self.storage.info(url)  # an ObjectInfo is the (size, version) tuple itself: no new tuple per shard

    def count(self, url: str, size: int, version: str) -> tuple[int, str]:
        """(rows, checksum) of one shard, reading as little of it as its format allows."""
        if self.checksums:
            path = self.fetch(url, size, version)
            rows = self._rows_without_download(url, size, version)
            return (rows if rows is not None else self._open_and_count(path, url)), file_checksum(path)
        rows = self._rows_without_download(url, size, version)
        if rows is not None:
            return rows, ""
        return self._open_and_count(self.fetch(url, size, version), url), ""

    def _rows_without_download(self, url: str, size: int, version: str) -> int | None:
        rows = self.reader.rows_from_size(url, size) if isinstance(self.reader, CountsRowsFromSize) else None
        if rows is not None:
            return int(rows)
        if not isinstance(self.reader, CountsRowsFromMetadata):
            return None
        with self.storage.ranges(url, size, version) as read:
            found = self.reader.rows_from_metadata(read, size, url)
        return None if found is None else int(found)

    def _open_and_count(self, path: str, url: str) -> int:
        opened = self.reader.open(path, url)
        try:
            return len(opened)
        finally:
            opened.close()

    def needs_scan(self, url: str, size: int) -> bool:
        """Whether counting this shard downloads it whole."""
        if self.checksums:
            return True
        if isinstance(self.reader, CountsRowsFromSize) and self.reader.rows_from_size(url, size) is not None:
            return False
        return not isinstance(self.reader, CountsRowsFromMetadata)

    def _before_counting(self, todo: list[tuple[str, int]]) -> None:
        scans = [(url, size) for url, size in todo if is_remote(url) and self.needs_scan(url, size)]
        if not scans:
            return
        total = sum(size for _, size in scans)
        why = ("verify='checksum' hashes every shard it indexes" if self.checksums
               else f"{self.reader.name} shards keep no row counts")
        stale = (f"The index published at {self.published} does not match them (they changed since it was "
                 "published): re-run `shufflepoint index` on the corpus. " if self.published else
                 "Publish the index once, beside the corpus: `shufflepoint index SOURCES` (same format "
                 "options); every node then reads it (one small GET) instead of scanning. ")
        warnings.warn(f"indexing downloads {len(scans)} shard(s) whole, {total:,} bytes, on every node that has no "
                      f"index of them ({why}). {stale}The downloads stay in the node cache for the reads.",
                      UserWarning, stacklevel=6)


def publish(index: _index.CorpusIndex, storage: Storage, glob: str | None = None) -> str:
    """Write ``index`` beside its corpus, where every node's ``Shards`` looks; returns the URL or path.

    One file per folder, reader and options: the records of other shards it already holds (another
    glob over the same folder) are kept after this index's while those shards are still there,
    unchanged, so publishing one corpus never makes another one's nodes scan again. ``glob``: the
    pattern that listed ``index``'s shards, recorded with them so that a ``Shards`` over it reads them
    from this file instead of listing the storage; another glob recorded before is kept while all of
    its shards are."""
    if hub.is_hub(index.root):  # LIMIT(hub-publish): docs/hub.md#limits
        raise ValueError(refusal(f"publishing the index of {index.root}", Plain("a Hub dataset"), "a folder or "
                                 "bucket shufflepoint may write to", "nothing to do: each node keeps the listing and "
                                 "index of a Hub commit in its cache folder (docs/hub.md); use a shared cache_dir "
                                 "for one per job", why="publishing would be a commit to the dataset's repository"))
    url = _index.join(index.root, published_name(index.reader, index.options))
    existing = read_published(storage, index.root, index.reader, index.options)
    ours = set(index.shards.names)
    others = [s for s in existing.shards if s.name not in ours] if existing is not None else []
    if others:
        listed = {_index.relative(index.root, u) for u in storage.expand(_index.join(index.root, "**"))}

        def unchanged(record: _index.ShardRecord) -> bool:
            found = storage.info(_index.join(index.root, record.name))  # from the listing: no request
            return (found.size, found.version) == (record.size, record.version)

        others = [s for s in others if s.name in listed and unchanged(s)]
    shards = _index.ShardColumns.of((*index.shards, *others))
    merged = _index.CorpusIndex(index.root, index.reader, dict(index.options), shards)
    globs = _kept_globs(existing, merged)
    if glob is not None:
        globs[glob_key(glob, index.root)] = np.arange(len(index.shards))
    data = index_file.encode(merged, globs)
    if is_remote(url):
        storage.write_small(url, data)
    else:
        sidecar.write_whole(url, lambda f: f.write(data))
    return url


def _kept_globs(existing: _index.CorpusIndex | None, merged: _index.CorpusIndex) -> dict[str, np.ndarray]:
    """The globs ``existing`` recorded whose shards are all in ``merged``, unchanged: their numbers there."""
    if existing is None or not existing.globs:
        return {}
    at = {record: i for i, record in enumerate(merged.shards)}
    kept = {}
    for pattern, numbers in existing.globs.items():
        found = [at.get(existing.shards[i]) for i in numbers.tolist()]
        if None not in found:
            kept[pattern] = np.array(found, dtype=np.int64)
    return kept


def glob_key(pattern: str, root: str) -> str:
    """How a glob is recorded in a published index: relative to the corpus root (local paths absolute first)."""
    absolute = pattern if is_remote(pattern) else os.path.abspath(pattern.removeprefix("file://"))
    return _index.relative(root, absolute)
