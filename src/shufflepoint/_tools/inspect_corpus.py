"""``shufflepoint inspect`` on a corpus index sidecar: what a sharded corpus holds, as the loader sees it.

A sidecar (``.shufflepoint-index-<key>.json`` beside the data, ``corpus-<key>.json`` or
``index-<hash>.json`` in the cache) is read and checked as ``Shards`` reads it: its content hash
must match its shards. A loader state whose ``dataset_fingerprint`` is ``shards:<hash>`` names
the same hash, so the two can be matched by eye or by ``--json``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from shufflepoint._shards.index import FORMAT, CorpusIndex


def is_index(value: Any) -> bool:
    return isinstance(value, dict) and value.get("format") == FORMAT


def sidecars_in(folder: str, names: list[str]) -> list[str]:
    """The index sidecars among a folder's files."""
    return [os.path.join(folder, n) for n in names
            if n.endswith(".json") and n.startswith((".shufflepoint-index-", "corpus-", "index-"))]


def describe(path: str, value: Any) -> dict[str, Any]:
    """A JSON-ready summary of one sidecar; ``damaged`` with the reason when it does not validate."""
    try:
        index = CorpusIndex.from_json(value, path)
    except ValueError as error:
        return {"file": os.path.basename(path), "damaged": str(error)}
    rows = index.rows
    return {
        "file": os.path.basename(path), "damaged": None, "root": index.root, "reader": index.reader,
        "options": index.options, "content_hash": index.content_hash,
        "fingerprint": "shards:" + index.content_hash, "shards": len(index.shards), "rows": int(rows.sum()),
        "bytes": sum(s.size for s in index.shards),
        "rows_per_shard": {"min": int(rows.min()), "median": float(np.median(rows)), "max": int(rows.max())}
        if rows.size else None,
        "empty_shards": [s.name for s in index.shards if s.rows == 0][:10],
    }


def describe_file(path: str) -> dict[str, Any] | None:
    """The summary of ``path`` when it is a sidecar, else None."""
    try:
        with open(path) as f:
            value = json.load(f)
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
    ]
    if corpus["empty_shards"]:
        lines.append(f"    empty      : {', '.join(corpus['empty_shards'])} (no rows; they take no place in an epoch)")
    return lines
