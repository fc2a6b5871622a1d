"""Where corpus indexes live on disk: written atomically, found again, built by one process at a time.

Two names per index, both columnar files (index format 3, ``_shards/index/index_file.py``; the JSON
sidecars of formats 1 and 2, ``.json``, are still read where no ``.idx`` is):

- ``corpus-<key>.idx``: the latest index of one *source list* (the same sources, reader and
  options give the same key), beside a local corpus when its folder is writable and always in the
  cache folder. This is what a restarted job reads instead of counting rows again.
- ``index-<content hash>.idx`` in the cache folder: every index ever built, by content. A state
  records only the content hash; this copy lets a refused resume name the shards that changed.

Several ranks constructing the same ``Shards`` at once take a lock: one builds, the others read.

Words: docs/glossary.md (sidecar, corpus index, content hash, state).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, TypeVar

from shufflepoint._errors import Plain, refusal
from shufflepoint._shards.index import collector, index_file
from shufflepoint._shards.index.index import CorpusIndex

T = TypeVar("T")


def default_cache_dir() -> str:
    """``$SHUFFLEPOINT_CACHE``, else ``$XDG_CACHE_HOME/shufflepoint``, else ``~/.cache/shufflepoint``."""
    found = os.environ.get("SHUFFLEPOINT_CACHE")
    if found:
        return found
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "shufflepoint")


def corpus_key(urls: Sequence[str], reader: str, options: dict[str, Any]) -> str:
    text = json.dumps({"urls": list(urls), "reader": reader, "options": options}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def write_whole(path: str, write: Callable[[IO[bytes]], Any]) -> None:
    """Write whole or not at all: ``write(f)`` into a temporary file in the same folder, then a rename."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.splitext(path)[1], dir=folder)
    try:
        with os.fdopen(handle, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def kept_or_made(path: str, load: Callable[[str], T | None], make: Callable[[], T],
                 save: Callable[[str, T], None]) -> T:
    """What a node computes once and keeps in its cache folder (frame counts, bucket keys): loaded from
    ``path``, else made under the folder's lock, loaded again first (another process of the node may have
    made it while this one waited), and saved whole."""
    found = load(path)
    if found is not None:
        return found
    stem = os.path.splitext(os.path.basename(path))[0]
    with building(os.path.dirname(path), stem):
        found = load(path)
        if found is None:
            found = make()
            save(path, found)
    return found


def write_json(path: str, value: Any) -> None:
    """A JSON value, written whole or not at all."""
    write_whole(path, lambda f: f.write(json.dumps(value, separators=(",", ":")).encode()))


def read_index(path: str) -> CorpusIndex | None:
    """The index in a sidecar file of any format (by its first bytes), None when there is no such file;
    ValueError naming the file for anything unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ValueError(refusal(path, Plain("an unreadable corpus index"), "a corpus index file",
                                 "delete it to rebuild", why=str(error))) from error
    return parse(data, path)


def parse(data: bytes, where: str) -> CorpusIndex:
    """An index from a file's bytes: the columnar format 3, or a JSON sidecar (formats 1 and 2)."""
    if index_file.is_columnar(data):
        return index_file.decode(data, where)
    try:
        with collector.paused():  # 1e5 shards: ~1e6 small objects (see _shards/index/collector.py)
            value = json.loads(data)
    except ValueError as error:
        raise ValueError(refusal(where, Plain("an unreadable corpus index"), "a corpus index (a columnar file "
                                 f"starting {index_file.MAGIC!r}, or JSON)", "delete it to rebuild",
                                 why=str(error))) from error
    with collector.paused():
        return CorpusIndex.from_json(value, where)


def _either(stem: str) -> CorpusIndex | None:
    """``stem.idx``, else the ``stem.json`` an older shufflepoint wrote."""
    found = read_index(stem + ".idx")
    return found if found is not None else read_index(stem + ".json")


def beside_data(root: str, key: str) -> str | None:
    """The sidecar path beside a local corpus (without its suffix), or None for a remote one."""
    if not root or "://" in root:
        return None
    return os.path.join(root, f".shufflepoint-index-{key}")


def load_latest(cache_dir: str, key: str, root: str) -> CorpusIndex | None:
    for stem in (beside_data(root, key), os.path.join(cache_dir, f"corpus-{key}")):
        if stem is not None:
            found = _either(stem)
            if found is not None:
                return found
    return None


def load_by_hash(cache_dir: str, content_hash: str) -> CorpusIndex | None:
    try:
        return _either(os.path.join(cache_dir, f"index-{content_hash}"))
    except ValueError:
        return None


def save(index: CorpusIndex, cache_dir: str, key: str, *, unless_same: bool = False) -> list[str]:
    """Write the index under both names (columnar); returns the paths written. ``unless_same``: leave a file
    that already holds these bytes (a node that starts again from the same published index)."""
    # Once for every copy; a published index as it was read (1e5 shards: no encoding at all).
    data = index.text or index_file.encode(index)
    paths = [os.path.join(cache_dir, f"index-{index.content_hash}.idx"), os.path.join(cache_dir, f"corpus-{key}.idx")]
    beside = beside_data(index.root, key)
    if beside is not None and os.access(index.root, os.W_OK):
        paths.append(beside + ".idx")
    written = []
    for path in paths:
        if unless_same and _holds(path, data):
            continue
        write_whole(path, lambda f: f.write(data))
        written.append(path)
    return written


def _holds(path: str, data: bytes) -> bool:
    try:
        if os.path.getsize(path) != len(data):
            return False
        with open(path, "rb") as f:
            return f.read() == data
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def building(cache_dir: str, key: str) -> Iterator[None]:
    """Hold the lock of one corpus key while its index is checked or built."""
    os.makedirs(cache_dir, exist_ok=True)
    with open(os.path.join(cache_dir, f"corpus-{key}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
