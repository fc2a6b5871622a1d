"""``shufflepoint index SOURCES``: count a corpus's rows once and publish the index beside it.

JSONL and WebDataset shards keep no row counts, so a node with no index of them downloads every
shard to count it. Run this once (on any machine that can write to the bucket or folder): it
builds the index as ``Shards`` does and writes it beside the corpus, where every node's ``Shards``
finds it (one small GET) and reads only the shards it trains on. A shard changed since is noticed
by its (size, version) and counted again by the node that meets it, with a warning to re-run this.

With ``--tokens FIELD`` (or ``--tokenize MODULE:FUNCTION --tokenizer NAME``) it also counts every
document's tokens and publishes them beside the corpus (``_shards/counting/count_files.py``): the per-shard
totals (O(shards), read whole by every node) and the per-document counts, of which each node reads
the byte ranges of the shards it reads. ``Packed`` then counts nothing and reads only its share.

Words: docs/glossary.md (corpus index, shard, sidecar).
"""

from __future__ import annotations

import importlib
import json
import warnings
from collections.abc import Sequence
from typing import Any

from shufflepoint._shards.counting import count_files
from shufflepoint._shards.counting.token_counts import TokenSource, count_ranges
from shufflepoint._shards.index.indexing import publish


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
                dtype: str | None, options: dict[str, Any], cache_dir: str | None, verify: str,
                list_storage: bool = False) -> Any:
    """The ``Shards`` the training job would build (its index counted, or read where it can be).
    ``list_storage``: list the shards in the storage even where a published index recorded the glob
    (``shufflepoint index`` publishes what is there now)."""
    from shufflepoint._shards.corpora.shards.shards import Shards

    class ListedShards(Shards):
        """Lists the storage even for a glob a published index recorded (``_shards/index/published_listing.py``)."""

        _published_listing = False

    with warnings.catch_warnings():  # the advice to run this command, given while running it
        warnings.filterwarnings("ignore", message="indexing downloads")
        kind = ListedShards if list_storage else Shards
        return kind(sources, format=format, columns=columns, seq_len=seq_len, dtype=dtype, cache_dir=cache_dir,
                    storage_options=options, verify=verify, progress=True)


def index_and_publish(corpus: Any, sources: str | list[str] | None = None) -> dict[str, Any]:
    """Publish ``corpus``'s index; ``sources``: a glob it was listed by, recorded with it (see
    ``_shards/index/published_listing.py``)."""
    index = corpus.index
    glob = sources if isinstance(sources, str) and any(c in sources for c in "*?[") else None
    where = publish(index, corpus.storage, glob=glob)
    return {"published": where, "root": index.root, "reader": index.reader, "options": index.options,
            "shards": len(index.shards), "rows": int(index.rows.sum()), "bytes": int(index.shards.sizes.sum()),
            "checksums": all(index.shards.checksums), "fingerprint": corpus.fingerprint}


def token_source(field: str | None, tokenize: str | None, tokenizer: str | None) -> TokenSource | None:
    """What a token is, as ``Packed`` will be told: ``--tokens FIELD``, or ``--tokenize MODULE:FUNCTION`` named by
    ``--tokenizer``; None when neither is asked."""
    if field is None and tokenize is None and tokenizer is None:
        return None
    function = None
    if tokenize is not None:
        module, _, name = tokenize.partition(":")
        if not module or not name:
            raise ValueError(f"--tokenize: found {tokenize!r}, expected MODULE:FUNCTION (an importable function)")
        function = getattr(importlib.import_module(module), name)
    return TokenSource.checked(field, function, tokenizer)


def publish_token_counts(corpus: Any, source: TokenSource, workers: int | None) -> dict[str, Any]:
    """Count every document's tokens (a pool over shards) and publish them beside the corpus."""
    index = corpus.index
    starts = [0, *index.rows.cumsum().tolist()]
    ranges = [(a, b) for a, b in zip(starts[:-1], starts[1:], strict=True)]
    counts = count_ranges(corpus, source.count, ranges, workers, True)
    totals_url, counts_url = count_files.publish(corpus.storage, index, source.identity, counts)
    return {"token_totals": totals_url, "token_counts": counts_url, "tokens": int(sum(int(c.sum()) for c in counts)),
            "token_source": source.identity}


def render(found: dict[str, Any]) -> str:
    tokens = [] if "token_totals" not in found else [
        f"  tokens     : {found['tokens']:,} ({found['token_source']}), per-shard totals at {found['token_totals']}, "
        f"per-document counts at {found['token_counts']}",
        "  every node's Packed over this corpus now reads these totals and its own shards' counts only"]
    return "\n".join([
        f"  published  : {found['published']}",
        f"  corpus     : {found['shards']:,} {found['reader']} shards under {found['root']}, {found['rows']:,} rows, "
        f"{found['bytes']:,} bytes" + (" (sha256 of each recorded)" if found["checksums"] else ""),
        f"  fingerprint: {found['fingerprint']}",
        "  every node's Shards over these sources now reads this index instead of counting rows",
    ] + tokens)
