"""Where per-shard token counts live: published beside the corpus, kept in a node's cache folder.

``Packed`` needs, from outside its share, only each shard's token total and one digest; inside it,
each document's count of the shards it reads. So the counts are laid out by shard:

- *Published* by ``shufflepoint index SOURCES --tokens FIELD`` beside the corpus (like the row index):
  ``.shufflepoint-index-tokens-<key>.json``, one record per shard ``[name, size, version, documents,
  tokens, offset, digest]`` (O(shards)), and ``.shufflepoint-index-tokens-<key>.bin``, every shard's
  counts end to end (little-endian, ``width`` bytes each), of which a node reads the byte range of a
  shard it reads (``Storage.ranges``: one ranged GET). ``key`` hashes the reader, its options and what
  a token is (field or tokenizer).
- *Kept* by a node in its cache folder: the counts of each shard it counted (``tokens/<key>.npy``),
  and the totals of every shard of one corpus (``tokens-<key>.json``, the same records without a file).

A record is matched to a shard by (name, size, version, documents), as the row index is: a shard
rewritten since is *stale* and its counts are counted again. A shard's digest is the sha256 of its
counts as int64 (32 hex digits); the corpus's is the sha256 of every shard's ``[tokens, digest]``,
so a node that holds its share's counts only still names them all (``Packed``'s fingerprint).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from shufflepoint._core.errors import Plain, refusal
from shufflepoint._shards import index as _index
from shufflepoint._shards import sidecar
from shufflepoint._shards.storage import PUBLISHED_PREFIX, Storage, is_remote

FORMAT = "shufflepoint-tokens"
VERSION = 1
REPUBLISH = "re-run `shufflepoint index SOURCES --tokens FIELD` (or delete it) to publish the counts again"


def shard_digest(counts: np.ndarray) -> str:
    """One shard's counts as the totals name them: sha256 of their int64 bytes, 32 hex digits."""
    return hashlib.sha256(np.ascontiguousarray(counts, dtype="<i8").tobytes()).hexdigest()[:32]


def corpus_digest(totals: np.ndarray, digests: list[str]) -> str:
    """The digest of every count of the corpus, from its shards' totals and digests (O(shards))."""
    text = json.dumps([[int(t), d] for t, d in zip(totals.tolist(), digests, strict=True)], separators=(",", ":"))
    return "shards:" + hashlib.sha256(text.encode()).hexdigest()


def published_key(reader: str, options: dict[str, Any], identity: str) -> str:
    text = json.dumps({"reader": reader, "options": options, "tokens": identity}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def published_urls(index: _index.CorpusIndex, identity: str) -> tuple[str, str]:
    """(totals, counts) beside the corpus, for this reader, options and token source."""
    base = f"{PUBLISHED_PREFIX}-tokens-{published_key(index.reader, index.options, identity)}"
    return _index.join(index.root, base + ".json"), _index.join(index.root, base + ".bin")


@dataclass(frozen=True)
class Record:
    name: str
    size: int
    version: str
    documents: int
    tokens: int
    offset: int  # in counts (not bytes) into the published counts file; -1 where there is none
    digest: str


@dataclass(frozen=True)
class Totals:
    """Per-shard token totals of one token source, as published or kept; ``counts`` the file holding the
    per-document counts (published only), ``width`` its bytes per count."""

    identity: str
    records: dict[str, Record]
    counts: str | None = None
    width: int = 8

    def to_json(self) -> dict[str, Any]:
        shards = [[r.name, r.size, r.version, r.documents, r.tokens, r.offset, r.digest] for r in self.records.values()]
        return {"format": FORMAT, "version": VERSION, "tokens": self.identity, "counts": self.counts,
                "width": self.width, "shards": shards, "check": _check(shards)}

    def matching(self, index: _index.CorpusIndex) -> dict[int, Record]:
        """The records of the index's shards that still hold: same name, size, version and documents."""
        found = {}
        for shard in range(len(index.shards)):
            record = self.matching_one(index, shard)
            if record is not None:
                found[shard] = record
        return found

    def matching_one(self, index: _index.CorpusIndex, shard: int) -> Record | None:
        s = index.shards[shard]
        record = self.records.get(s.name)
        same = record is not None and (record.size, record.version, record.documents) == (s.size, s.version, s.rows)
        return record if same else None


def _check(shards: list[list[Any]]) -> str:
    return hashlib.sha256(json.dumps(shards, separators=(",", ":")).encode()).hexdigest()


def parse(data: bytes, where: str, identity: str) -> Totals:
    """A totals file; a refusal naming it when it is damaged or of another token source."""
    def damaged(why: str) -> ValueError:
        return ValueError(refusal(where, Plain("damaged token totals"), "a shufflepoint token totals file",
                                  REPUBLISH, why=why))
    try:
        value = json.loads(data)
    except ValueError as error:
        raise damaged(str(error)) from None
    if not isinstance(value, dict) or value.get("format") != FORMAT or value.get("version") != VERSION:
        raise damaged(f"format {value.get('format') if isinstance(value, dict) else None!r}, expected {FORMAT!r} "
                      f"version {VERSION}")
    shards = value.get("shards")
    if not isinstance(shards, list) or value.get("check") != _check(shards):
        raise damaged("its records do not match their check (edited, truncated or half written)")
    if value.get("tokens") != identity:
        raise damaged(f"counts of {value.get('tokens')!r}, not of {identity!r}")
    try:
        records = {str(r[0]): Record(str(r[0]), int(r[1]), str(r[2]), int(r[3]), int(r[4]), int(r[5]), str(r[6]))
                   for r in shards}
        width = int(value["width"])
    except (IndexError, KeyError, TypeError, ValueError) as error:
        raise damaged(repr(error)) from None
    if width not in (4, 8) or any(r.tokens < 0 or r.documents < 0 for r in records.values()):
        raise damaged(f"width {width} or a negative count")
    return Totals(identity, records, value.get("counts"), width)


def read_published(storage: Storage, index: _index.CorpusIndex, identity: str) -> tuple[Totals, str] | None:
    """The totals published beside the corpus and the URL of their counts, or None when there are none."""
    totals_url, counts_url = published_urls(index, identity)
    data = storage.read_small(totals_url)
    if data is None:
        return None
    return parse(data, totals_url, identity), counts_url


def read_range(storage: Storage, url: str, totals: Totals, record: Record) -> np.ndarray:
    """One shard's counts from the published counts file: a ranged read of its bytes only; checked against
    the shard's digest (a refusal naming the file when it does not match)."""
    start, end = record.offset * totals.width, (record.offset + record.documents) * totals.width
    try:
        info = storage.info(url)
        with storage.ranges(url, info.size, info.version) as read:
            data = read(start, end) if end > start else b""
    except OSError as error:
        raise ValueError(refusal(url, Plain(f"no counts of shard {record.name}"), "the counts published with the "
                                 "totals", REPUBLISH, why=str(error))) from error
    counts = np.frombuffer(data, dtype="<i4" if totals.width == 4 else "<i8").astype(np.int64)
    if counts.size != record.documents or shard_digest(counts) != record.digest:
        raise ValueError(refusal(url, Plain(f"the counts of shard {record.name} do not match their digest"),
                                 f"{record.documents} counts of digest {record.digest}", REPUBLISH,
                                 why="the counts file is damaged, or was published apart from its totals"))
    return counts


def publish(storage: Storage, index: _index.CorpusIndex, identity: str, counts: list[np.ndarray]) -> tuple[str, str]:
    """Write the counts, then the totals that point into them, beside the corpus; returns their URLs."""
    totals_url, counts_url = published_urls(index, identity)
    width = 4 if all(c.size == 0 or int(c.max()) < 2**31 for c in counts) else 8
    offsets = np.concatenate(([0], np.cumsum([c.size for c in counts]))).astype(np.int64)
    records = {s.name: Record(s.name, s.size, s.version, s.rows, int(c.sum()), int(o), shard_digest(c))
               for s, c, o in zip(index.shards, counts, offsets[:-1].tolist(), strict=True)}
    body = np.concatenate(counts).astype("<i4" if width == 4 else "<i8").tobytes() if counts else b""
    totals = Totals(identity, records, os.path.basename(counts_url.rstrip("/")), width)
    text = json.dumps(totals.to_json(), separators=(",", ":")).encode()
    for url, data in ((counts_url, body), (totals_url, text)):  # the counts first: totals never point at nothing
        _write(storage, url, data)
    return totals_url, counts_url


def _write(storage: Storage, url: str, data: bytes) -> None:
    if is_remote(url):
        storage.write_small(url, data)
    else:
        sidecar.write_whole(url, lambda f: f.write(data))


# -- a node's cache folder -------------------------------------------------------------------------

def kept_path(cache_dir: str, url: str, record: tuple[int, str, int], identity: str) -> str:
    """Where a node keeps one shard's counts: keyed by the shard (URL, size, version, documents) and token source."""
    text = json.dumps([url, *record, identity, VERSION])
    return os.path.join(cache_dir, "tokens", hashlib.sha256(text.encode()).hexdigest()[:32] + ".npy")


def load_kept(path: str, documents: int) -> np.ndarray | None:
    """A shard's kept counts, or None when there are none or they are not whole (counted again)."""
    try:
        found = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if found.shape != (documents,) or found.dtype.kind not in "iu" or (found.size and int(found.min()) < 0):
        return None
    return np.asarray(found, dtype=np.int64)


def save_kept(path: str, counts: np.ndarray) -> None:
    """Best effort: a read-only cache folder costs a recount of the shard when it is read again."""
    small = counts.size == 0 or int(counts.max()) < 2**31
    try:
        sidecar.write_whole(path, lambda f: np.save(f, counts.astype(np.int32 if small else np.int64),
                                                    allow_pickle=False))
    except OSError:
        pass


def node_totals_path(cache_dir: str, fingerprint: str, identity: str) -> str:
    key = hashlib.sha256(json.dumps([fingerprint, identity, VERSION]).encode()).hexdigest()[:24]
    return os.path.join(cache_dir, f"tokens-{key}.json")


def load_node_totals(path: str, identity: str) -> Totals | None:
    """The totals a node kept for one corpus; None when there are none or they are damaged (counted again)."""
    try:
        with open(path, "rb") as f:
            return parse(f.read(), path, identity)
    except (OSError, ValueError):
        return None


def save_node_totals(path: str, index: _index.CorpusIndex, identity: str, totals: np.ndarray,
                     digests: list[str]) -> None:
    records = {s.name: Record(s.name, s.size, s.version, s.rows, int(t), -1, d)
               for s, t, d in zip(index.shards, totals.tolist(), digests, strict=True)}
    text = json.dumps(Totals(identity, records).to_json(), separators=(",", ":")).encode()
    try:
        sidecar.write_whole(path, lambda f: f.write(text))
    except OSError:
        pass
