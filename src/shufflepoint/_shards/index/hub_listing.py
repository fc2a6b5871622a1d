"""A Hub source's listing: pinned to a commit, taken once per node, and kept.

The files of a commit never change, so their listing may be kept for good: the first process of a node
resolves the revision (``storage/hub.py``), lists the pinned glob through ``HfFileSystem`` (the Hub's
tree API, 1,000 entries a page), and writes ``hub-listing-<key>.json`` (each file's URL, size and blob
id) into the node cache under the cache's lock; every other process of the node, and every later start
on it, reads that file and sends the Hub no listing. The key is the endpoint and the *pinned* sources:
a branch that moved is another commit, hence another key, hence a new listing.

What each process still asks the Hub: the revision's commit (one ``/api/.../revision/REV`` request),
unless the revision is a commit already (``Shards("hf://datasets/ORG/NAME@<commit>/...")``, or
``Shards.from_hub(..., revision=<commit>)``): then none. A job of 16,384 ranks on 2,048 nodes sends
2,048 listings with a node-local cache, one with a shared ``cache_dir``, and 16,384 revision lookups
unless it names the commit (docs/hub.md says how).

Words: docs/glossary.md (pinned commit, Hub dataset, node cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from shufflepoint._errors import HubError, ShardError, refusal
from shufflepoint._shards.index import sidecar
from shufflepoint._shards.storage import hub
from shufflepoint._shards.storage.faults import rate_limited
from shufflepoint._shards.storage.storage import ObjectInfo, Storage

T = TypeVar("T")


def is_hub_sources(sources: object) -> bool:
    if isinstance(sources, str):
        return hub.is_hub(sources)
    return isinstance(sources, (list, tuple)) and bool(sources) and all(hub.is_hub(s) for s in sources)


def pinned(storage: Storage, sources: str | Sequence[str]) -> str | list[str]:
    """``sources`` with every revision replaced by the commit it points at (one request per distinct
    revision; none for a commit)."""
    commits: dict[tuple[str, str, str | None], str] = {}

    def pin(url: str) -> str:
        where = hub.HubPath.of(url)
        key = (where.repo_type, where.repo_id, where.revision)
        if key not in commits:
            files = hub.HubFiles(storage.storage_options)
            commits[key] = hub_call(storage, url, "resolving its revision", lambda: files.resolve_commit(where))
        return where.url(revision=commits[key])

    return pin(sources) if isinstance(sources, str) else [pin(url) for url in sources]


def hub_call(storage: Storage, url: str, what: str, call: Callable[[], T]) -> T:
    """``call()`` with the storage's retries; rate limiting that outlasts them is a ``HubError``."""
    try:
        return storage.retrying(url, what, call)
    except ShardError as error:
        if rate_limited(error):
            raise HubError("rate_limited", refusal(f"Hub source {url}", error.args[0].split(": ", 1)[-1],
                                                   "an answer within the retries", "wait and start again, or set "
                                                   "HF_TOKEN (a higher limit), or pass a commit as the revision "
                                                   "(no lookup per process)")) from error
        raise


def listing(storage: Storage, sources: str | Sequence[str], cache_dir: str) -> list[str]:
    """The pinned shard URLs of Hub ``sources``, from the node's kept listing or listed once for the node."""
    exact = pinned(storage, sources)
    key = hashlib.sha256(json.dumps({"endpoint": hub.endpoint(storage.storage_options), "sources": exact},
                                    sort_keys=True).encode()).hexdigest()[:24]
    path = os.path.join(cache_dir, f"hub-listing-{key}.json")
    found = _read(path)
    if found is None:
        with sidecar.building(cache_dir, f"hub-listing-{key}"):
            found = _read(path)  # another process of the node listed it meanwhile
            if found is None:
                first = exact if isinstance(exact, str) else exact[0]
                urls = hub_call(storage, first, "listing", lambda: _expanded(storage, exact))
                found = [[url, *storage.info(url)] for url in urls]
                text = json.dumps({"format": "shufflepoint-hub-listing", "files": found}).encode()
                sidecar.write_whole(path, lambda f: f.write(text))
    for url, size, version in found:
        storage.remember(url, ObjectInfo(size, version))
    return [url for url, _, _ in found]


def _expanded(storage: Storage, sources: str | list[str]) -> list[str]:
    """The files of a pinned glob, file, or list of them (each listed; a file listed twice is refused)."""
    if isinstance(sources, str):
        return storage.expand(sources)
    return storage.expand([url for entry in sources for url in storage.expand(entry)])


def _read(path: str) -> list[list[Any]] | None:
    """A kept listing, or None (none yet, or a damaged one: listed again)."""
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
        with open(path, "rb") as f:
            value = json.loads(f.read())
        files = value["files"]
        if value["format"] == "shufflepoint-hub-listing" and all(
                isinstance(u, str) and isinstance(n, int) and isinstance(v, str) for u, n, v in files):
            return list(files)
    return None
