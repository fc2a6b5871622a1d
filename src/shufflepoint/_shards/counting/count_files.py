"""Where per-shard token counts live: published beside the corpus, kept in a node's cache folder.

``Packed`` needs, from outside its share, only each shard's token total and one digest; inside it,
each document's count of the shards it reads. So the counts are laid out by shard:

- *Published* by ``shufflepoint index SOURCES --tokens FIELD`` beside the corpus (like the row index):
  ``.shufflepoint-index-tokens-<key>.json``, a header line (what it is, and the sha256 of the rest),
  then one column per field (``names, sizes, versions, documents, tokens, offsets, digests``, a shard
  per row: O(shards), parsed and matched in vectorised steps), and
  ``.shufflepoint-index-tokens-<key>.bin``, every shard's counts end to end (little-endian, ``width``
  bytes each), of which a node reads the byte range of a shard it reads (``Storage.ranges``: one
  ranged GET). ``key`` hashes the reader, its options and what
  a token is (field or tokenizer).
- *Kept* by a node in its cache folder: the counts of each shard it counted (``tokens/<key>.npy``),
  and the totals of every shard of one corpus (``tokens-<key>.json``, the same records without a file).

A record is matched to a shard by (name, size, version, documents), as the row index is: a shard
rewritten since is *stale* and its counts are counted again. A shard's digest is the sha256 of its
counts as int64 (32 hex digits); the corpus's is the sha256 of every shard's total and digest,
so a node that holds its share's counts only still names them all (``Packed``'s fingerprint).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from shufflepoint._errors import Plain, refusal
from shufflepoint._shards.index import index as _index
from shufflepoint._shards.index import sidecar
from shufflepoint._shards.storage.storage import PUBLISHED_PREFIX, Storage, is_remote

FORMAT = "shufflepoint-tokens"
VERSION = 1
REPUBLISH = "re-run `shufflepoint index SOURCES --tokens FIELD` (or delete it) to publish the counts again"


def shard_digest(counts: np.ndarray) -> str:
    """One shard's counts as the totals name them: sha256 of their int64 bytes, 32 hex digits."""
    return hashlib.sha256(np.ascontiguousarray(counts, dtype="<i8").tobytes()).hexdigest()[:32]


def corpus_digest(totals: np.ndarray, digests: list[str] | np.ndarray) -> str:
    """The digest of every count of the corpus, from its shards' totals (int64) and digests (O(shards), no
    Python step per shard but the join)."""
    found = hashlib.sha256(np.ascontiguousarray(totals, dtype="<i8").tobytes())
    found.update(np.asarray(digests, dtype="S32").tobytes())
    return "shards:" + found.hexdigest()


def published_key(reader: str, options: dict[str, Any], identity: str) -> str:
    text = json.dumps({"reader": reader, "options": options, "tokens": identity}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def published_urls(index: _index.CorpusIndex, identity: str) -> tuple[str, str]:
    """(totals, counts) beside the corpus, for this reader, options and token source."""
    base = f"{PUBLISHED_PREFIX}-tokens-{published_key(index.reader, index.options, identity)}"
    return _index.join(index.root, base + ".json"), _index.join(index.root, base + ".bin")


COLUMNS = ("names", "sizes", "versions", "documents", "tokens", "offsets", "digests")


@dataclass(frozen=True)
class Totals:
    """Per-shard token totals of one token source, as published or kept, one column per field (a shard per
    row: numpy arrays and lists, so that 1e5 shards parse and match in vectorised steps); ``counts`` the
    file holding the per-document counts (published only), ``width`` its bytes per count."""

    identity: str
    names: list[str]
    sizes: np.ndarray
    versions: list[str]
    documents: np.ndarray
    tokens: np.ndarray
    offsets: np.ndarray  # in counts (not bytes) into the published counts file; -1 where there is none
    digests: list[str]
    counts: str | None = None
    width: int = 8

    def to_bytes(self) -> bytes:
        """A header line (what the file is, and the sha256 of the body), then the columns as one JSON object."""
        columns = {"names": self.names, "sizes": self.sizes.tolist(), "versions": self.versions,
                   "documents": self.documents.tolist(), "tokens": self.tokens.tolist(),
                   "offsets": self.offsets.tolist(), "digests": self.digests}
        body = json.dumps(columns, separators=(",", ":")).encode()
        head = {"format": FORMAT, "version": VERSION, "tokens": self.identity, "counts": self.counts,
                "width": self.width, "shards": len(self.names), "check": hashlib.sha256(body).hexdigest()}
        return json.dumps(head, separators=(",", ":")).encode() + b"\n" + body

    def matching(self, index: _index.CorpusIndex) -> np.ndarray:
        """For each shard of the index, its row here when the row still holds (same name, size, version and
        documents, as the row index matches a shard), else -1."""
        shards = index.shards  # columns: whole-list compares, a Python step per shard only where they differ
        names = shards.names
        if names == self.names:
            rows = np.arange(len(names), dtype=np.int64)
        else:
            where = {name: k for k, name in enumerate(self.names)}
            rows = np.fromiter((where.get(name, -1) for name in names), np.int64, len(names))
        known = rows >= 0
        at = rows[known]
        same = (self.sizes[at] == shards.sizes[known]) & (self.documents[at] == shards.rows[known])
        if not (at.size == len(self.versions) and shards.versions == self.versions):
            versions = [v for v, k in zip(shards.versions, known.tolist(), strict=True) if k]
            same &= np.fromiter((self.versions[r] == v for r, v in zip(at.tolist(), versions, strict=True)), bool,
                                at.size)
        rows[np.flatnonzero(known)[~same]] = -1
        return rows


def parse(data: bytes, where: str, identity: str) -> Totals:
    """A totals file; a refusal naming it when it is damaged or of another token source."""
    def damaged(why: str) -> ValueError:
        return ValueError(refusal(where, Plain("damaged token totals"), "a shufflepoint token totals file",
                                  REPUBLISH, why=why))
    line, _, body = data.partition(b"\n")
    try:
        head = json.loads(line)
    except ValueError as error:
        raise damaged(str(error)) from None
    if not isinstance(head, dict) or head.get("format") != FORMAT or head.get("version") != VERSION:
        raise damaged(f"format {head.get('format') if isinstance(head, dict) else None!r}, expected {FORMAT!r} "
                      f"version {VERSION}")
    if head.get("check") != hashlib.sha256(body).hexdigest():
        raise damaged("its records do not match their check (edited, truncated or half written)")
    if head.get("tokens") != identity:
        raise damaged(f"counts of {head.get('tokens')!r}, not of {identity!r}")
    try:
        columns = json.loads(body)
        found = Totals(identity, list(map(str, columns["names"])), np.asarray(columns["sizes"], np.int64),
                       list(map(str, columns["versions"])), np.asarray(columns["documents"], np.int64),
                       np.asarray(columns["tokens"], np.int64), np.asarray(columns["offsets"], np.int64),
                       list(map(str, columns["digests"])), head.get("counts"), int(head["width"]))
    except (KeyError, TypeError, ValueError) as error:
        raise damaged(repr(error)) from None
    lengths = {len(found.names), found.sizes.size, len(found.versions), found.documents.size, found.tokens.size,
               found.offsets.size, len(found.digests)}
    if lengths != {int(head.get("shards", -1))} or found.width not in (4, 8) or (found.tokens < 0).any() \
            or (found.documents < 0).any():
        raise damaged(f"columns of lengths {sorted(lengths)}, width {found.width}, or a negative count")
    return found


def read_published(storage: Storage, index: _index.CorpusIndex, identity: str) -> tuple[Totals, str] | None:
    """The totals published beside the corpus and the URL of their counts, or None when there are none."""
    totals_url, counts_url = published_urls(index, identity)
    data = storage.read_small(totals_url)
    if data is None:
        return None
    return parse(data, totals_url, identity), counts_url


def read_range(storage: Storage, url: str, totals: Totals, row: int, name: str) -> np.ndarray:
    """Shard ``name``'s counts (row ``row`` of the totals) from the published counts file: a ranged read of its
    bytes only; checked against the shard's digest (a refusal naming the file when it does not match)."""
    documents, digest = int(totals.documents[row]), totals.digests[row]
    start, end = int(totals.offsets[row]) * totals.width, (int(totals.offsets[row]) + documents) * totals.width
    try:
        info = storage.info(url)
        with storage.ranges(url, info.size, info.version) as read:
            data = read(start, end) if end > start else b""
    except OSError as error:
        raise ValueError(refusal(url, Plain(f"no counts of shard {name}"), "the counts published with the "
                                 "totals", REPUBLISH, why=str(error))) from error
    counts = np.frombuffer(data, dtype="<i4" if totals.width == 4 else "<i8").astype(np.int64)
    if counts.size != documents or shard_digest(counts) != digest:
        raise ValueError(refusal(url, Plain(f"the counts of shard {name} do not match their digest"),
                                 f"{documents} counts of digest {digest}", REPUBLISH,
                                 why="the counts file is damaged, or was published apart from its totals"))
    return counts


def of_index(index: _index.CorpusIndex, identity: str, tokens: np.ndarray, digests: list[str],
             offsets: np.ndarray | None = None, counts: str | None = None, width: int = 8) -> Totals:
    """The totals of the index's shards (offsets -1: no counts file)."""
    shards = index.shards
    return Totals(identity, list(shards.names), np.array(shards.sizes, np.int64),
                  list(shards.versions), np.asarray(index.rows, np.int64), np.asarray(tokens, np.int64),
                  np.full(len(shards), -1, np.int64) if offsets is None else offsets, list(digests), counts, width)


def publish(storage: Storage, index: _index.CorpusIndex, identity: str, counts: list[np.ndarray]) -> tuple[str, str]:
    """Write the counts, then the totals that point into them, beside the corpus; returns their URLs."""
    totals_url, counts_url = published_urls(index, identity)
    width = 4 if all(c.size == 0 or int(c.max()) < 2**31 for c in counts) else 8
    offsets = np.concatenate(([0], np.cumsum([c.size for c in counts]))).astype(np.int64)[:-1]
    tokens = np.array([int(c.sum()) for c in counts], dtype=np.int64)
    body = np.concatenate(counts).astype("<i4" if width == 4 else "<i8").tobytes() if counts else b""
    totals = of_index(index, identity, tokens, [shard_digest(c) for c in counts], offsets,
                      os.path.basename(counts_url.rstrip("/")), width)
    for url, data in ((counts_url, body), (totals_url, totals.to_bytes())):  # counts first: totals never dangle
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
    data = of_index(index, identity, totals, digests).to_bytes()
    try:
        sidecar.write_whole(path, lambda f: f.write(data))
    except OSError:
        pass
