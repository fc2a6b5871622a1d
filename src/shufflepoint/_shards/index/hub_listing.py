"""A Hub source's listing: pinned to a commit, taken once per node, and kept.

The files of a commit never change, so their listing may be kept for good: the first process of a node
resolves the revision (``storage/hub.py``), lists the pinned glob through ``HfFileSystem`` (the Hub's
tree API, 1,000 entries a page), and writes ``hub-listing-<key>.json`` (each file's URL, size and blob
id) into the node cache under the cache's lock; every other process of the node, and every later start
on it, reads that file and sends the Hub no listing. The key is the endpoint and the *pinned* sources:
a branch that moved is another commit, hence another key, hence a new listing.

The revision's commit (one ``/api/.../revision/REV`` request) is resolved once per node and start under
torchrun (``commit_of``: the node's first process keeps it in the cache folder, keyed by the job's run id
and restart count), once per process outside it, and never when the revision is a commit already
(``Shards("hf://datasets/ORG/NAME@<commit>/...")``, ``Shards.from_hub(..., revision=<commit>)``). A job of
16,384 ranks on 2,048 nodes sends 2,048 lookups and 2,048 listings with a node-local cache folder, one
listing with a shared one, and no lookup when it names the commit (docs/hub.md).

Words: docs/glossary.md (pinned commit, Hub dataset, node cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from shufflepoint._errors import HubError, Plain, ShardError, refusal
from shufflepoint._shards.index import sidecar
from shufflepoint._shards.storage import hub
from shufflepoint._shards.storage.faults import rate_limited
from shufflepoint._shards.storage.storage import ObjectInfo, Storage

T = TypeVar("T")
SHARED_FOR_S = 600.0  # a node's processes of one start share a resolved commit for at most this long


def is_hub_sources(sources: object) -> bool:
    """Whether ``sources`` are Hub URLs (each pinned to a commit before anything is listed); a list that mixes
    Hub URLs with others is refused by name, since its Hub entries would be read unpinned."""
    if isinstance(sources, str):
        return hub.is_hub(sources)
    if not isinstance(sources, (list, tuple)) or not sources:
        return False
    on_hub = [isinstance(s, str) and hub.is_hub(s) for s in sources]
    if any(on_hub) and not all(on_hub):
        other = next(s for s, h in zip(sources, on_hub, strict=True) if not h)
        raise ValueError(refusal("sources", Plain(f"Hub URLs mixed with {other!r}"), "all hf:// URLs, or none",
                                 "make one Shards of the Hub files and another of the rest, and mix them with "
                                 "shufflepoint.Mixture", why="a Hub file is read pinned to a commit, which a list "
                                 "of other storage cannot carry"))
    return all(on_hub)


def pinned(storage: Storage, sources: str | Sequence[str], cache_dir: str) -> str | list[str]:
    """``sources`` with every revision replaced by the commit it points at (``commit_of``, once per distinct
    revision; none for a commit)."""
    commits: dict[tuple[str, str, str | None], str] = {}

    def pin(url: str) -> str:
        where = hub.HubPath.of(url)
        key = (where.repo_type, where.repo_id, where.revision)
        if key not in commits:
            commits[key] = commit_of(storage, where, cache_dir)
        return where.url(revision=commits[key])

    return pin(sources) if isinstance(sources, str) else [pin(url) for url in sources]


def commit_of(storage: Storage, where: hub.HubPath, cache_dir: str) -> str:
    """The commit ``where.revision`` points at: no request for a commit; under torchrun, one request per node
    and start (the node's first process resolves it into the cache folder, the others read it there); else
    one per process."""
    files = hub.HubFiles(storage.storage_options)

    def resolve() -> str:
        return hub_call(storage, where.url(), "resolving its revision", lambda: files.resolve_commit(where))

    start = _start()
    if hub.is_commit(where.revision) or start is None:
        return resolve()
    key = hashlib.sha256(json.dumps([hub.endpoint(storage.storage_options), where.repo_type, where.repo_id,
                                     where.revision, start]).encode()).hexdigest()[:24]
    path = os.path.join(cache_dir, f"hub-commit-{key}.json")
    with sidecar.building(cache_dir, f"hub-commit-{key}"):
        kept = _kept_commit(path)
        if kept is None:
            kept = resolve()
            text = json.dumps({"commit": kept, "time": time.time()}).encode()
            sidecar.write_whole(path, lambda f: f.write(text))
    return kept


def _start() -> str | None:
    """This process's start under torchrun: its run id and restart count (the same on every process of the job
    and start; a restart after a failure is a new start). None outside torchrun."""
    run = os.environ.get("TORCHELASTIC_RUN_ID")
    return f"{run}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}" if run else None


def _kept_commit(path: str) -> str | None:
    """A commit the node's first process resolved for this start, if it is younger than ``SHARED_FOR_S``
    (a start whose run id is reused later resolves the branch again)."""
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
        with open(path, "rb") as f:
            value = json.loads(f.read())
        if hub.is_commit(value["commit"]) and 0 <= time.time() - float(value["time"]) < SHARED_FOR_S:
            return str(value["commit"])
    return None


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
    exact = pinned(storage, sources, cache_dir)
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
