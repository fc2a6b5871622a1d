"""A glob that ``shufflepoint index`` published is listed from the published index, not from the storage.

Listing a bucket of 1e5 shards is 100 LIST requests and ~0.35 CPU-s in every process of a job (16,384
ranks: 1.6 million requests against one prefix). ``shufflepoint index GLOB`` records, beside the index
it publishes, which shards that glob matched (``index_file``: ``globs``). A ``Shards`` over the same
glob string (same reader and options) asks the storage one HEAD for that file, finds the file in the
node cache by its (size, version) or GETs it once per node, and takes those shards, in that order, as
the corpus: no LIST, no lookup per shard, the content hash read from the file.

What is still checked, and what is not:

- a shard rewritten since (another size or version) is refused when it is fetched or opened (its
  version is checked on every read, as with any index): a ``ShardError`` naming it, never its new rows;
- a shard deleted since: a ``ShardError`` naming it when it is fetched;
- a shard *added* since (matching the glob, not in the published index) is not part of the corpus until
  the index is published again: the published index is the listing, as a manifest would be. The job's
  corpus (and its fingerprint) stays what was published; ``shufflepoint index GLOB`` again adds it (a
  new fingerprint, as a listing that grew would give).

Anything else is listed as before: a local glob (a local listing sends no request to a bucket, and a file
rewritten in place is met at construction, as before), a list of sources, a manifest, a glob that was not
published, a format neither given nor inferable from the glob's suffix, ``verify="checksum"``, an index
published by shufflepoint <= 0.4.

Words: docs/glossary.md (corpus index, shard, sidecar, fingerprint).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Sequence
from typing import Any

from shufflepoint._errors import ShardError
from shufflepoint._shards.index import hub_listing, index_file, sidecar
from shufflepoint._shards.index import index as _index
from shufflepoint._shards.index.indexing import glob_key, parse_published, published_name
from shufflepoint._shards.readers import infer_format, make_reader
from shufflepoint._shards.storage.faults import NoAnswer
from shufflepoint._shards.storage.storage import Storage, is_remote


def listing(storage: Storage, sources: str | Sequence[str], format: str | None, options: dict[str, Any],
            cache_dir: str) -> tuple[list[str], _index.CorpusIndex | None]:
    """The shard URLs of ``sources``, and the published index they were read from (None: listed by the storage)."""
    if hub_listing.is_hub_sources(sources):
        return hub_listing.listing(storage, sources, cache_dir), None  # pinned to a commit, listed once a node
    found = from_published(storage, sources, format, options, cache_dir)
    if found is not None:
        urls = found.urls()
        if urls and (format is not None or infer_format(urls[0]) == found.reader):
            return urls, found
    return storage.expand(sources), None


def from_published(storage: Storage, sources: str | Sequence[str], format: str | None, options: dict[str, Any],
                   cache_dir: str) -> _index.CorpusIndex | None:
    """The published index of exactly the shards ``sources`` (a glob) matched when it was published, or None."""
    if not isinstance(sources, str) or not is_remote(sources) or not _is_glob(sources):
        return None  # a local folder is listed: no request to a bucket, and a file rewritten in place is met there
    pattern = sources
    folder = _static_folder(pattern)
    if not folder:
        return None
    try:
        reader = make_reader(format or infer_format(pattern), **options)
    except ValueError:
        return None  # the listing names what is wrong
    url = _index.join(folder, published_name(reader.name, reader.options()))
    data, kept = _published_bytes(storage, url, cache_dir)
    found = parse_published(data, kept or url) if data is not None else None
    if found is None and kept is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(kept)  # a damaged copy (it was checked as written): the next start GETs it again
    if found is None or found.root != folder or (found.reader, found.options) != (reader.name, reader.options()):
        return None
    return index_file.for_glob(found, glob_key(pattern, folder))


def _published_bytes(storage: Storage, url: str, cache_dir: str) -> tuple[bytes | None, str | None]:
    """The published file from the node cache, where it is kept by its (size, version) as one HEAD reports
    them, else one GET for the node (under the cache's lock); and the cached copy's path, if it was read."""
    try:
        info = storage.info(url)
    except NoAnswer:
        raise  # the storage is not answering: listing it would wait as long again
    except ShardError:
        return None, None  # none published (or the storage will not say): listed as before
    where = hashlib.sha256(url.encode()).hexdigest()[:16]
    stem = f"published-{where}-" + hashlib.sha256(f"{info.size}\0{info.version}".encode()).hexdigest()[:16]
    path = os.path.join(cache_dir, stem + ".idx")
    data = _read(path, info.size)
    if data is not None:
        return data, path
    with sidecar.building(cache_dir, f"published-{where}"):
        data = _read(path, info.size)
        if data is not None:
            return data, path  # another rank of the node fetched it meanwhile
        data = storage.read_small(url)
        if data is not None and index_file.is_columnar(data) and info.version:
            sidecar.write_whole(path, lambda f: f.write(data))
            _forget_older(cache_dir, f"published-{where}-", stem + ".idx")
    return data, None


def _forget_older(cache_dir: str, prefix: str, kept: str) -> None:
    """Copies of earlier versions of the same published file: replaced (an index of 1e6 shards is 46 MB)."""
    for name in os.listdir(cache_dir):
        if name.startswith(prefix) and name.endswith(".idx") and name != kept:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(cache_dir, name))


def _read(path: str, size: int) -> bytes | None:
    """A cached copy of ``size`` bytes (a shorter one, cut by a full disk or a crash, is none)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return data if len(data) == size else None


def _is_glob(text: str) -> bool:
    magic = "*[" if text.startswith(("http://", "https://")) else "*?["  # in an http(s) URL "?" starts the query
    return any(c in text for c in magic)


def _static_folder(pattern: str) -> str:
    """The folder above the first wildcard: where ``shufflepoint index`` publishes for a glob of one folder."""
    magic = "*[" if pattern.startswith(("http://", "https://")) else "*?["
    cut = min(at for at in (pattern.find(c) for c in magic) if at >= 0)
    folder = pattern[:pattern.rfind("/", 0, cut)]
    return "" if folder.endswith(":/") or folder.endswith(":") else folder
