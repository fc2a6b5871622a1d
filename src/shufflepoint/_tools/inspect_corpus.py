"""``shufflepoint inspect`` on a corpus index sidecar: what a sharded corpus holds, as the loader sees it,
and with ``--verify``, whether every shard is still the one the index recorded.

A sidecar (``.shufflepoint-index-<key>.idx`` beside the data, ``corpus-<key>.idx`` or ``index-<hash>.idx``
in the cache, or the ``.json`` ones older versions wrote) is read and checked as ``Shards`` reads it: its content hash
must match its shards. A loader state whose ``dataset_fingerprint`` is ``shards:<hash>`` names
the same hash, so the two can be matched by eye or by ``--json``.

Words: docs/glossary.md (corpus index, shard, content hash).
"""

from __future__ import annotations

import fnmatch
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import numpy as np

from shufflepoint._errors import ShardError
from shufflepoint._shards.index import index as _index
from shufflepoint._shards.index import index_file, sidecar
from shufflepoint._shards.index.index import FORMAT, CorpusIndex
from shufflepoint._shards.index.indexing import published_names
from shufflepoint._shards.index.integrity import Finding, verify_shard
from shufflepoint._shards.index.records import ShardColumns
from shufflepoint._shards.storage.storage import Storage


def is_index(value: Any) -> bool:
    return isinstance(value, dict) and value.get("format") == FORMAT


def sidecars_in(folder: str, names: list[str]) -> list[str]:
    """The index sidecars among a folder's files."""
    return [os.path.join(folder, n) for n in names
            if n.endswith((".json", ".idx")) and n.startswith((".shufflepoint-index-", "corpus-", "index-"))]


def describe(path: str, value: Any) -> dict[str, Any]:
    """A JSON-ready summary of one sidecar (its JSON value, or a columnar file's bytes); ``damaged`` with the
    reason when it does not validate."""
    try:
        index = sidecar.parse(value, path) if isinstance(value, bytes) else CorpusIndex.from_json(value, path)
    except ValueError as error:
        return {"file": os.path.basename(path), "damaged": str(error)}
    rows = index.rows
    return {
        "file": os.path.basename(path), "damaged": None, "root": index.root, "reader": index.reader,
        "options": index.options, "content_hash": index.content_hash,
        "fingerprint": "shards:" + index.content_hash, "shards": len(index.shards), "rows": int(rows.sum()),
        "bytes": int(index.shards.sizes.sum()),
        "rows_per_shard": {"min": int(rows.min()), "median": float(np.median(rows)), "max": int(rows.max())}
        if rows.size else None,
        "empty_shards": [s.name for s in index.shards if s.rows == 0][:10],
        "index_format": index.read_as, "versioned": sum(1 for v in index.shards.versions if v),
        "checksums": sum(1 for c in index.shards.checksums if c),
    }


def describe_file(path: str) -> dict[str, Any] | None:
    """The summary of ``path`` when it is a sidecar, else None."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if index_file.is_columnar(data):
            return describe(path, data)
        value = json.loads(data)
    except (OSError, ValueError):
        return None
    return describe(path, value) if is_index(value) else None


def render(corpus: dict[str, Any]) -> list[str]:
    lines = ["", f"  {corpus['file']}  (a shufflepoint corpus index)"]
    if corpus["damaged"]:
        return [*lines, f"    DAMAGED    : {corpus['damaged']}", "    fix        : delete it; Shards rebuilds it"]
    spread = corpus["rows_per_shard"]
    lines += [
        f"    corpus     : {corpus['shards']:,} {corpus['reader']} shards under {corpus['root'] or '.'}",
        f"    rows       : {corpus['rows']:,} ({corpus['bytes']:,} bytes); per shard min {spread['min']:,}, "
        f"median {spread['median']:,.0f}, max {spread['max']:,}" if spread else "    rows       : 0",
        f"    options    : {json.dumps(corpus['options'], sort_keys=True)}",
        f"    fingerprint: {corpus['fingerprint']} (what a loader state over it records)",
        f"    integrity  : versions of {corpus['versioned']:,} of {corpus['shards']:,} shards, checksums of "
        f"{corpus['checksums']:,} (index format {corpus['index_format']}); check them: inspect --verify",
    ]
    if corpus["empty_shards"]:
        lines.append(f"    empty      : {', '.join(corpus['empty_shards'])} (no rows; they take no place in an epoch)")
    return lines


# -- inspect --verify: the corpus against its index -------------------------------------------------
def find_index(sources: str | list[str], storage: Storage, reader: Any,
               cache_dir: str) -> tuple[CorpusIndex, str, list[str] | None]:
    """The index of a corpus given as a sidecar (``.idx`` or ``.json``, local or remote) or as its sources: the
    one published beside it, beside a local corpus, or in the cache; where it was found; the shards
    listed now (None for a sidecar). LookupError when none is found."""
    if isinstance(sources, str) and sources.split("?", 1)[0].endswith((".json", ".idx")):
        data = storage.read_small(sources)
        if data is None:
            raise LookupError(f"{sources}: no such index file")
        return sidecar.parse(data, sources), sources, None
    urls = storage.expand(sources)
    root, options = _index.common_root(urls), reader.options()
    key = sidecar.corpus_key(urls, reader.name, options)
    beside = sidecar.beside_data(root, key)
    places = [_index.join(root, name) for name in published_names(reader.name, options)]
    places += [beside + suffix for suffix in (".idx", ".json")] if beside is not None else []
    places += [os.path.join(cache_dir, f"corpus-{key}{suffix}") for suffix in (".idx", ".json")]
    for place in places:
        data = storage.read_small(place)
        if data is not None:
            return _only(sidecar.parse(data, place), sources, urls), place, urls
    raise LookupError(f"no index of {sources!r} ({reader.name}) was found beside it or in {cache_dir}: publish one "
                      "with `shufflepoint index SOURCES` (or construct Shards over it once)")


def _only(index: CorpusIndex, sources: str | list[str], urls: list[str]) -> CorpusIndex:
    """The records of these sources: a published index also holds other globs' shards of its folder.
    A record is kept when its shard is listed now or its URL matches the glob (a deleted one)."""
    listed = set(urls)
    pattern = sources if isinstance(sources, str) and any(c in sources for c in "*?[") else None
    if pattern is not None and "://" not in pattern:
        pattern = os.path.abspath(pattern)
    kept = tuple(s for s in index.shards if _index.join(index.root, s.name) in listed
                 or (pattern is not None and fnmatch.fnmatchcase(_index.join(index.root, s.name), pattern)))
    return CorpusIndex(index.root, index.reader, index.options, ShardColumns.of(kept), read_as=index.read_as)


def verify(index: CorpusIndex, where: str, storage: Storage, listed: list[str] | None = None,
           progress: bool = True) -> dict[str, Any]:
    """Every shard of ``index`` checked against the storage: present, same size, same version, and,
    when the index holds checksums, same content (each shard read once, streamed)."""
    urls = [index.url(s) for s in range(len(index.shards))]
    content = bool(index.shards) and all(s.checksum for s in index.shards)
    bar = _bar(sum(s.size for s in index.shards) if content else len(urls), "B" if content else "shard", progress)

    def check(shard: int) -> Finding | None:
        record, url = index.shards[shard], urls[shard]
        try:
            found = storage.info(url)
            now: tuple[int, str] | None = (found.size, found.version)
        except ShardError:
            now = None
        hashed = (lambda: storage.checksum(url, bar.update)) if content else None
        result = verify_shard(record.name, record.size, record.version, now, hashed, record.checksum)
        if not content:
            bar.update(1)
        return result

    with ThreadPoolExecutor(max_workers=8) as pool:
        findings = [f for f in pool.map(check, range(len(urls))) if f is not None]
    bar.close()
    known = set(urls)
    findings += [Finding(_index.relative(index.root, u), "new", "listed now, not in the index")
                 for u in listed or () if u not in known]
    return {"kind": "corpus_verify", "index": where, "root": index.root, "shards": len(urls),
            "content_checked": content, "findings": [asdict(f) for f in findings], "exit_code": 1 if findings else 0}


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(total: int, unit: str, progress: bool) -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit=unit, unit_scale=unit == "B", desc="shufflepoint: verifying shards",
                disable=None if progress else True)


def render_verify(found: dict[str, Any]) -> str:
    what = "size, version and content (sha256)" if found["content_checked"] else "size and version"
    lines = [f"  index      : {found['index']}", f"  corpus     : {found['shards']:,} shards under {found['root']}, "
             f"checked: {what}"]
    lines += [f"  {f['kind'].upper():<10} : {f['shard']}: {f['detail']}" for f in found["findings"]]
    lines.append("verify: OK, every shard is the one the index recorded" if not found["findings"] else
                 f"verify: {len(found['findings'])} shard(s) differ from the index; a resume over this corpus is "
                 "refused (StateError) and a read of them is a ShardError. Re-index (shufflepoint index, or delete "
                 "the sidecar) and restart the epoch if the change was meant")
    return "\n".join(lines)
