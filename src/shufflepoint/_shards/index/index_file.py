"""Index format 3: the corpus index as one columnar file, read in a few C-level passes at any size.

The JSON sidecar (formats 1 and 2) costs every process that builds a ``Shards`` ~0.4 CPU-s at 1e5
shards: 4.3 MB of nested lists parsed into a record per shard, then dumped again to hash. This file
holds the same records as columns, so reading it is a few ``json.loads`` of flat string arrays and
``np.frombuffer`` of the integer ones (~20 ms at 1e5 shards), and it carries its content hash:

    shufflepoint-index 3\\n
    {"format": ..., "version": 3, "root", "reader", "options", "content_hash", "shards": n,
     "sections": [[name, bytes], ...], "globs": [pattern, ...]}\\n      (one line of JSON)
    the sections, in that order: sizes and rows (int64, little-endian), names, versions and
    checksums (each a JSON array of n strings), then one int64 array of shard numbers per glob
    32 bytes: the sha256 of everything before them

The content hash is the one the JSON sidecar's records give (``CorpusIndex.content_hash``: the same
corpus keeps its fingerprint, and states saved with format 2 resume); it is computed when the file is
written and trusted when read, because the trailing sha256 (4 ms at 1e5 shards) proves the file is
the bytes its writer wrote: a truncated, damaged or edited file is refused by name.

``globs``: the source globs ``shufflepoint index`` listed to build it, each with the numbers of the
shards that glob matched then, in listing order. A ``Shards`` over the same glob takes that selection
as its listing instead of listing the storage (``_shards/index/published_listing.py``).

Words: docs/glossary.md (corpus index, content hash, sidecar, shard).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from shufflepoint._errors import Plain, refusal
from shufflepoint._shards.index.index import FORMAT, VERSION, CorpusIndex
from shufflepoint._shards.index.records import ShardColumns

MAGIC = b"shufflepoint-index 3\n"
_DIGEST = 32
_INTS = ("sizes", "rows")
_TEXTS = ("names", "versions", "checksums")
_REBUILD = "delete it to rebuild (shufflepoint index SOURCES publishes a new one)"


def is_columnar(data: bytes) -> bool:
    return data.startswith(MAGIC)


def encode(index: CorpusIndex, globs: dict[str, np.ndarray] | None = None) -> bytes:
    """The file's bytes; ``globs``: pattern -> the numbers of its shards (default: the index's own)."""
    shards = index.shards
    chosen = index.globs if globs is None else globs
    sections: list[tuple[str, bytes]] = [(name, getattr(shards, name).astype("<i8").tobytes()) for name in _INTS]
    sections += [(name, json.dumps(getattr(shards, name), separators=(",", ":")).encode()) for name in _TEXTS]
    patterns = sorted(chosen)
    sections += [(f"glob{i}", np.asarray(chosen[p], dtype="<i8").tobytes()) for i, p in enumerate(patterns)]
    head = {"format": FORMAT, "version": VERSION, "root": index.root, "reader": index.reader,
            "options": index.options, "content_hash": index.content_hash, "shards": len(shards),
            "sections": [[name, len(data)] for name, data in sections], "globs": patterns}
    body = MAGIC + json.dumps(head, sort_keys=True).encode() + b"\n" + b"".join(data for _, data in sections)
    return body + hashlib.sha256(body).digest()


def decode(data: bytes, where: str) -> CorpusIndex:
    """The index in a columnar file's bytes; ValueError naming ``where`` and what was expected."""
    if not is_columnar(data):
        raise ValueError(_damaged(where, "no columnar index header", f"a file starting {MAGIC!r}"))
    if len(data) < len(MAGIC) + _DIGEST or hashlib.sha256(memoryview(data)[:-_DIGEST]).digest() != data[-_DIGEST:]:
        raise ValueError(_damaged(where, "bytes that do not match their sha256 (truncated, damaged or edited)",
                                  "the sha256 of everything before them in its last 32 bytes"))
    end = data.find(b"\n", len(MAGIC))
    try:
        head = json.loads(data[len(MAGIC):end])
        return _index_of(head, memoryview(data)[end + 1:-_DIGEST], data)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise ValueError(refusal(where, Plain("a damaged corpus index"), "a columnar corpus index's fields "
                                 "(format 3)", _REBUILD, why=repr(error))) from error


def _index_of(head: dict[str, Any], payload: memoryview, data: bytes) -> CorpusIndex:
    if head["format"] != FORMAT or head["version"] != VERSION:
        raise ValueError(f"format {head['format']!r} version {head['version']!r}, expected {FORMAT!r} {VERSION}")
    n, found, at = int(head["shards"]), {}, 0
    for name, length in head["sections"]:
        found[str(name)] = payload[at:at + int(length)]
        at += int(length)
    if at != len(payload):
        raise ValueError(f"sections of {at} bytes, the file holds {len(payload)}")
    ints = [np.frombuffer(found[name], dtype="<i8").astype(np.int64) for name in _INTS]  # aligned, native
    texts = [json.loads(bytes(found[name])) for name in _TEXTS]
    for column in texts:
        if not isinstance(column, list) or not set(map(type, column)) <= {str}:
            raise ValueError("a text column that is not a list of strings")
    if any(len(column) != n for column in (*ints, *texts)) or any(int(c.min(initial=0)) < 0 for c in ints):
        raise ValueError(f"columns that are not {n} values each (sizes and rows >= 0)")
    globs = {}
    for i, pattern in enumerate(head["globs"]):
        numbers = np.frombuffer(found[f"glob{i}"], dtype="<i8")
        if numbers.size and not (0 <= int(numbers.min()) and int(numbers.max()) < n):
            raise ValueError(f"glob {pattern!r}: shard numbers outside 0..{n - 1}")
        globs[str(pattern)] = numbers
    content_hash = head["content_hash"]
    if not (isinstance(content_hash, str) and len(content_hash) == 64):
        raise ValueError(f"content_hash {content_hash!r}, expected 64 hex digits")
    shards = ShardColumns(texts[0], ints[0], texts[1], ints[1], texts[2])
    return CorpusIndex(str(head["root"]), str(head["reader"]), dict(head["options"]), shards, read_as=VERSION,
                       text=data, hashed=content_hash, globs=globs)


def _damaged(where: str, found: str, expected: str) -> str:
    return refusal(where, Plain(found), expected, _REBUILD, why="the corpus index was damaged or edited")


def for_glob(index: CorpusIndex, pattern: str) -> CorpusIndex | None:
    """The index of the shards ``pattern`` (relative to the root) matched when it was published, in
    listing order; None when the file records no such glob. The whole index when it is all of it."""
    numbers = index.globs.get(pattern)
    if numbers is None:
        return None
    if numbers.size == len(index.shards) and bool((numbers == np.arange(numbers.size)).all()):
        return index
    return CorpusIndex(index.root, index.reader, dict(index.options), index.shards.take(numbers), read_as=VERSION,
                       globs={pattern: np.arange(numbers.size)})
