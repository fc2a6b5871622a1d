"""``shufflepoint index SOURCES``: count a corpus's rows once and publish the index beside it.

JSONL and WebDataset shards keep no row counts, so a node with no index of them downloads every
shard to count it. Run this once (on any machine that can write to the bucket or folder): it
builds the index as ``Shards`` does and writes it beside the corpus, where every node's ``Shards``
finds it (one small GET) and reads only the shards it trains on. A shard changed since is noticed
by its (size, version) and counted again by the node that meets it, with a warning to re-run this.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from typing import Any

from shufflepoint._shards.indexing import publish


def sources_of(given: Sequence[str]) -> str | list[str]:
    return given[0] if len(given) == 1 else list(given)


def storage_options(text: str | None) -> dict[str, Any]:
    """``--storage-options`` JSON (for fsspec: endpoint, credentials, ...); ValueError naming it."""
    if text is None:
        return {}
    try:
        found = json.loads(text)
    except ValueError as error:
        raise ValueError(f"--storage-options: found {text!r}, expected a JSON object ({error})") from None
    if not isinstance(found, dict):
        raise ValueError(f"--storage-options: found {text!r}, expected a JSON object")
    return found


def open_corpus(sources: str | list[str], *, format: str | None, columns: list[str] | None, seq_len: int | None,
                dtype: str | None, options: dict[str, Any], cache_dir: str | None, verify: str) -> Any:
    """The ``Shards`` the training job would build (its index counted, or read where it can be)."""
    from shufflepoint._shards.dataset import Shards

    with warnings.catch_warnings():  # the advice to run this command, given while running it
        warnings.filterwarnings("ignore", message="indexing downloads")
        return Shards(sources, format=format, columns=columns, seq_len=seq_len, dtype=dtype, cache_dir=cache_dir,
                      storage_options=options, verify=verify, progress=True)


def index_and_publish(corpus: Any) -> dict[str, Any]:
    index = corpus.index
    where = publish(index, corpus._storage)
    return {"published": where, "root": index.root, "reader": index.reader, "options": index.options,
            "shards": len(index.shards), "rows": int(index.rows.sum()), "bytes": sum(s.size for s in index.shards),
            "checksums": all(s.checksum for s in index.shards), "fingerprint": corpus.fingerprint}


def render(found: dict[str, Any]) -> str:
    return "\n".join([
        f"  published  : {found['published']}",
        f"  corpus     : {found['shards']:,} {found['reader']} shards under {found['root']}, {found['rows']:,} rows, "
        f"{found['bytes']:,} bytes" + (" (sha256 of each recorded)" if found["checksums"] else ""),
        f"  fingerprint: {found['fingerprint']}",
        "  every node's Shards over these sources now reads this index instead of counting rows",
    ])
