"""The corpus index: rows per shard, built once in parallel and kept as a small sidecar file.

The index is what makes a corpus of files a map-style dataset: with ``rows[s]`` known, dataset
index i is (shard, row) by a prefix sum, and the ``blocks`` order needs nothing else. It is O(S),
never O(N): formats that need row offsets (JSONL lines, tar members) find them when a shard is
opened, from the local copy.

Identity. Each shard is recorded as (name, size, version, rows[, checksum]): ``name`` relative to
the corpus root, ``size`` in bytes, ``version`` what the storage reports (S3 ETag, GCS generation,
a local file's mtime_ns; "" where it reports none), ``rows``, and with ``verify="checksum"`` the
sha256 of its bytes. The *content hash* covers the reader's options and (name, size, version, rows)
of every shard, in order; it is what joins the loader's ``dataset_fingerprint``, so a shard
rewritten in place, even with the same size and rows, changes it, and a resume is refused naming
the shard. The price: the same data under other versions (copied to another bucket or disk) is
another fingerprint; the refusal says so, and ``strict=False`` accepts it. The checksum is not in
the hash: turning ``verify="checksum"`` on or off keeps the identity.

Index format 1 (shufflepoint 0.2) hashed (name, size, rows) only. Its sidecars still load: their
rows are reused wherever (size, version) still match the storage, and they are written again in the
current format. Format 2 (0.3-0.4) is JSON; format 3 (``_shards/index/index_file.py``) holds the same
records as columns, with the same content hash. A state saved by 0.2 carries the old hash;
``explain`` recognises it and says how to resume (see ``legacy_hash``).

Sidecars are content-addressed copies in the cache folder (``index-<hash>.idx``), plus one
beside a local corpus when its folder is writable, or one published beside a remote corpus by
``shufflepoint index``. Because old ones stay, a state saved on an older corpus can be refused
with a message that names the shards that changed.

Words: docs/glossary.md (corpus index, shard, row, content hash, sidecar, fingerprint).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from operator import itemgetter
from typing import Any

import numpy as np

from shufflepoint._errors import Plain, refusal
from shufflepoint._shards.index import collector
from shufflepoint._shards.index.records import ShardColumns as ShardColumns  # the index's shards; re-exported
from shufflepoint._shards.index.records import ShardRecord as ShardRecord
from shufflepoint._shards.storage import hub
from shufflepoint._shards.storage.storage import is_remote

_REBUILD = "delete it to rebuild (shufflepoint index SOURCES publishes a new one)"

FORMAT = "shufflepoint-index"
VERSION = 3  # the columnar file (_shards/index/index_file.py); 2 is the JSON sidecar, with the same content hash
JSON_VERSION = 2
READS = (1, 2, 3)  # index formats this shufflepoint reads
CURRENT = (2, 3)  # formats whose content hash covers versions: an index read from one is kept as it is


@dataclass(frozen=True)
class CorpusIndex:
    """Rows per shard of one corpus, with the reader and options that define what a row is."""

    root: str
    reader: str
    options: dict[str, Any]
    shards: ShardColumns  # any sequence of ShardRecord is taken, and kept as columns
    read_as: int = field(default=VERSION, compare=False)  # the format of the sidecar it was read from
    # The columnar file's bytes as read: a node keeps a published index by writing them, not re-encoding it.
    text: bytes = field(default=b"", compare=False, repr=False)
    hashed: str = field(default="", compare=False, repr=False)  # the content hash a checked file recorded
    globs: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # see index_file.for_glob

    def __post_init__(self) -> None:
        if not isinstance(self.shards, ShardColumns):
            object.__setattr__(self, "shards", ShardColumns.of(self.shards))

    @property
    def rows(self) -> np.ndarray:
        return self.shards.rows  # read-only, shared

    @cached_property
    def content_hash(self) -> str:
        """Computed once (a JSON dump and a sha256 of every record: 2 ms at 1,000 shards, asked by
        the sidecar check, the fingerprint and the loader), or the one a columnar file recorded."""
        return self.hashed or self._hash(self.shards.identity())  # json writes a tuple as a list

    def urls(self) -> list[str]:
        """Every shard's URL or path, in order (``url`` of each, without a call per shard)."""
        names = self.shards.names
        if not self.root:
            return list(names)
        prefix = self.root.rstrip("/") + "/" if "://" in self.root else os.path.join(self.root, "")
        return [prefix + name for name in names]

    @property
    def legacy_hash(self) -> str:
        """The content hash as index format 1 (shufflepoint 0.2) computed it: no versions."""
        shards = self.shards
        return self._hash(list(zip(shards.names, shards.sizes.tolist(), shards.rows.tolist(), strict=True)))

    def _hash(self, shards: Sequence[Sequence[Any]]) -> str:
        identity = {"reader": self.reader, "options": self.options, "shards": shards}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    def url(self, shard: int) -> str:
        return join(self.root, self.shards[shard].name)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": JSON_VERSION, "root": self.root, "reader": self.reader,
                "options": self.options, "content_hash": self.content_hash,
                "shards": [[s.name, s.size, s.version, s.rows, s.checksum] for s in self.shards]}

    @classmethod
    def from_json(cls, value: Any, where: str) -> CorpusIndex:
        """Read a JSON sidecar (format 1 or 2); ValueError naming the file and the field for anything
        malformed. (Format 3, the columnar file, is ``index_file.decode``'s.)"""
        if not isinstance(value, dict) or value.get("format") != FORMAT:
            raise ValueError(refusal(where, Plain("no corpus index format"), f"format {FORMAT!r}", _REBUILD,
                                     why="it is not a shufflepoint corpus index"))
        version = value.get("version")
        if version not in (1, JSON_VERSION):
            raise ValueError(refusal(where, Plain(f"index version {version!r}"), f"one of "
                                     f"{', '.join(map(str, READS))}", _REBUILD))
        try:
            shards = ShardColumns.of(_record(entry, version) for entry in value["shards"])
            index = cls(str(value["root"]), str(value["reader"]), dict(value["options"]), shards, read_as=version)
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(refusal(where, Plain("a damaged corpus index"), "a corpus index's fields", _REBUILD,
                                     why=repr(error))) from error
        if (index.content_hash if version == JSON_VERSION else index.legacy_hash) != value.get("content_hash"):
            raise ValueError(refusal(where, Plain("a content_hash that does not match its shards"), "the hash of "
                                     "its shards", _REBUILD, why="the index was edited or damaged"))
        return index


def same_sidecar(a: CorpusIndex, b: CorpusIndex) -> bool:
    """Whether the two write the same sidecar (``to_json``): the content hash covers reader, options
    and each shard's name, size, version and rows; root and checksums are compared apart. O(shards)
    string compares, no JSON (the hashes are computed once per index anyway)."""
    return a.content_hash == b.content_hash and a.root == b.root and a.shards.checksums == b.shards.checksums


def _record(entry: Any, version: int) -> ShardRecord:
    if version == 1:
        name, size, shard_version, rows = entry
        return ShardRecord(str(name), int(size), str(shard_version), int(rows))
    name, size, shard_version, rows, checksum = entry
    return ShardRecord(str(name), int(size), str(shard_version), int(rows), str(checksum))


def join(root: str, name: str) -> str:
    if not root:
        return name
    return root.rstrip("/") + "/" + name if "://" in root else os.path.join(root, name)


def common_root(urls: Sequence[str]) -> str:
    """The folder (or URL prefix ending at a '/') that every shard is under."""
    if not urls:
        return ""
    # The urls' common prefix cut after its last '/': every url is under it, and no longer folder holds
    # them all. min/max compares in C, no folder string per url (1e5 shards: ~5 ms, not ~60 ms).
    prefix = os.path.commonprefix([min(urls), max(urls)])
    return prefix[:prefix.rfind("/") + 1].rstrip("/")


def relative(root: str, url: str) -> str:
    return url[len(root) + 1:] if root and url.startswith(root.rstrip("/") + "/") else url


Count = Callable[[str, int, str], tuple[int, str]]  # (url, size, version) -> (rows, checksum or "")


def build(urls: Sequence[str], *, reader: str, options: dict[str, Any],
          info: Callable[[str], tuple[int, str]], count: Count, known: Sequence[CorpusIndex] = (),
          more_known: Callable[[], Sequence[CorpusIndex]] | None = None, checksums: bool = False,
          threads: int = 8, progress: bool = True,
          before_counting: Callable[[list[tuple[str, int]]], None] | None = None) -> CorpusIndex:
    """Every shard's (size, version) from ``info``; its rows (and checksum, with ``checksums``)
    from any ``known`` index that recorded the same (size, version) for it, then from those
    ``more_known()`` returns (asked only when ``known`` left a shard uncounted: a published index
    costs a GET), else from ``count``, in parallel. ``before_counting`` sees the (url, size) of the
    shards about to be counted."""
    root = common_root(urls)
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        # A local stat takes microseconds: a thread per call would cost more than the call (1,000
        # local shards: 30 ms through the pool, 3 ms here). Remote lookups wait on the network.
        remote = any(is_remote(url) for url in urls)
        found = _infos(pool, info, urls) if remote else _local_infos(info, urls)
        with collector.paused():  # ~1e6 small objects at 1e5 shards (see _shards/index/collector.py); not the counting
            whole, records = _known(root, urls, found, (lambda: known, more_known), reader=reader, options=options,
                                    checksums=checksums)
        if whole is not None:
            return whole  # a restart, or a published index: its hash computed once (its check), no lookup per shard
        todo = [i for i, record in enumerate(records) if record is None]
        if before_counting is not None and todo:
            before_counting([(urls[i], found[i][0]) for i in todo])
        counted = pool.map(lambda i: count(urls[i], *found[i]), todo)
        for i, (rows, checksum) in zip(todo, _with_progress(counted, len(todo), progress), strict=True):
            records[i] = ShardRecord(relative(root, urls[i]), found[i][0], found[i][1], rows, checksum)
    return CorpusIndex(root, reader, dict(options), ShardColumns.of(r for r in records if r is not None))


def _known(root: str, urls: Sequence[str], found: Sequence[tuple[int, str]],
           sources: Sequence[Callable[[], Sequence[CorpusIndex]] | None], *, reader: str, options: dict[str, Any],
           checksums: bool) -> tuple[CorpusIndex | None, list[ShardRecord | None]]:
    """(an index that records exactly these shards, or None; else each shard's record where a known
    index has its (size, version), None where it must be counted). ``sources`` are asked in turn, the
    next only while a shard is still uncounted."""
    reusable: dict[str, list[ShardRecord]] = {}
    records: list[ShardRecord | None] = [None] * len(urls)
    for source in sources:
        if source is None or all(records):
            continue
        indexes = source()
        if not indexes:
            continue
        for index in indexes:  # a restart, or a published index: every shard as it records it, in order
            if _describes(index, root, urls, found, reader=reader, options=options, checksums=checksums):
                return index, records
        for index in indexes:
            if index.reader == reader and index.options == options:
                for record in index.shards:
                    reusable.setdefault(record.name, []).append(record)
        records = [r or _reuse(reusable, relative(root, url), size, version, checksums)
                   for r, url, (size, version) in zip(records, urls, found, strict=True)]
    return None, records


def _local_infos(info: Callable[[str], tuple[int, str]], urls: Sequence[str]) -> list[tuple[int, str]]:
    with collector.paused():  # a stat each: microseconds, no waiting (see _shards/index/collector.py)
        return [info(url) for url in urls]


def _infos(pool: ThreadPoolExecutor, info: Callable[[str], tuple[int, str]], urls: Sequence[str],
           ) -> list[tuple[int, str]]:
    """``info`` of every url: one by one while the answers are instant (a listing already gave them: 1e5
    shards through a thread pool cost seconds of locks), the rest in parallel once lookups wait on the
    network (64 of them waiting over 2 ms each on average). Waiting is wall time this thread spent off
    the CPU: a collection of the process's objects (~0.1 s, CPU) once sent 1e5 listed shards to the pool.
    The instant ones run with the collector held off (a tuple per shard: see _shards/index/collector.py)."""
    found: list[tuple[int, str]] = []
    with collector.paused():
        for first in range(0, len(urls), 64):
            wall, cpu = time.perf_counter(), time.thread_time()
            found += [info(url) for url in urls[first:first + 64]]
            if (time.perf_counter() - wall) - (time.thread_time() - cpu) > 64 * 2e-3:
                break
        else:
            return found
    return found + list(pool.map(info, urls[len(found):]))


_SIZE, _VERSION = itemgetter(0), itemgetter(1)  # of an ObjectInfo, or a (size, version) pair


def _describes(index: CorpusIndex, root: str, urls: Sequence[str], found: Sequence[tuple[int, str]], *, reader: str,
               options: dict[str, Any], checksums: bool) -> bool:
    """Whether ``index`` records exactly these shards, in this order, with these (size, version): then it is
    the index, as a whole. Whole-list compares, not a lookup per shard (1e5 shards: ~30 ms, not 1 s)."""
    if (index.reader, index.options, index.root, len(index.shards)) != (reader, options, root, len(urls)) or \
            index.read_as not in CURRENT:
        return False
    shards = index.shards
    if "" in shards.checksums if checksums else any(shards.checksums):  # records as ``_reuse`` would keep them
        return False
    if root and not root.endswith("/"):  # ``relative``, inlined
        prefix, cut = root + "/", len(root) + 1
        names = [url[cut:] if url.startswith(prefix) else url for url in urls]
    else:
        names = [relative(root, url) for url in urls]
    if shards.names != names:
        return False
    sizes = np.fromiter(map(_SIZE, found), np.int64, len(found))
    if not np.array_equal(sizes, shards.sizes):
        return False
    versions = list(map(_VERSION, found))  # str already, from a listing or a stat: no conversion per shard
    return versions == shards.versions or [str(v) for v in versions] == shards.versions


def _reuse(reusable: dict[str, list[ShardRecord]], name: str, size: int, version: str,
           checksums: bool) -> ShardRecord | None:
    same = [r for r in reusable.get(name, ())
            if (r.size, r.version) == (size, version) and (r.checksum or not checksums)]
    if not same:
        return None
    return ShardRecord(name, size, version, same[0].rows, same[0].checksum if checksums else "")  # checked if asked


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
    common = [n for n in after if n in before]
    resized = [n for n in common if (after[n].size, after[n].rows) != (before[n].size, before[n].rows)]
    rewritten = [n for n in common if n not in resized and after[n].version != before[n].version]
    parts = [f"{name} changed ({before[name].rows} rows, {before[name].size} bytes -> "
             f"{after[name].rows} rows, {after[name].size} bytes)" for name in resized]
    if rewritten and len(rewritten) == len(common) > 1 and old.root != new.root:
        parts.append(f"every shard has another version: the corpus was copied or moved ({old.root} when saved, "
                     f"{new.root} now), or all were rewritten; if the bytes are the same, load with strict=False")
    else:
        parts += [f"{name} was rewritten (version {before[name].version or '(none)'} when saved, "
                  f"{after[name].version or '(none)'} now; the same size and rows, other bytes)" for name in rewritten]
    parts += [f"{name} is new" for name in after if name not in before]
    parts += [f"{name} is gone" for name in before if name not in after]
    if not parts and [s.name for s in old.shards] != [s.name for s in new.shards]:
        parts.append("the same shards in another order")
    shown = "; ".join(parts[:limit]) + (f"; and {len(parts) - limit} more" if len(parts) > limit else "")
    return shown or "no shard differs by name, size, version or rows"


def explain(saved_hash: str, old: CorpusIndex | None, new: CorpusIndex, where: str) -> str:
    """Why a state's corpus hash is not this index's: the shards that changed, as far as known."""
    if saved_hash == new.legacy_hash:
        return ("The state was saved by shufflepoint 0.2, whose corpus fingerprint did not cover shard versions; "
                "every shard has the same name, size and rows now, but whether one was rewritten in place since "
                "cannot be told. If the corpus was not rewritten, load with strict=False (a ResumeWarning) once; "
                "states saved from then on carry the versions")
    if old is None:
        return (f"The corpus changed; its old index ({saved_hash[:12]}...) is not in {where}, "
                "so the changed shards cannot be named")
    return moved_commit(old.root, new.root) + "The corpus changed: " + changed_shards(old, new)


def moved_commit(old_root: str, new_root: str) -> str:
    """For a Hub corpus read at another commit than the state's: both commits, and how to read the old one."""
    if not (hub.is_hub(old_root) and hub.is_hub(new_root)):
        return ""
    before, after = hub.HubPath.of(old_root), hub.HubPath.of(new_root)
    if before.repo_id != after.repo_id or before.revision == after.revision:
        return ""
    return (f"The Hub dataset {before.repo_id} was read at commit {before.revision} when the state was saved; the "
            f"revision asked points at commit {after.revision} now. To resume exactly, read the commit the run "
            f"started on: revision={before.revision!r} (Shards.from_hub), or @{before.revision} in the hf:// URL. ")
