"""Where shards live: local paths or any fsspec URL, listed, sized and fetched whole, with retries.

Object stores fail transiently (500s, throttling, a connection dropped mid-body); every call is
retried with exponential backoff and jitter, and a download is accepted only with exactly the
bytes the index recorded. A shard that is gone, or stays wrong after the retries, is a
``ShardError`` naming it: a sample is never skipped, and no partial file is ever returned.
fsspec is imported only when a URL needs it (the ``[s3]``/``[gcs]``/``[fsspec]`` extras).
"""

from __future__ import annotations

import glob as _glob
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from shufflepoint._core.errors import ShardError

T = TypeVar("T")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ObjectInfo:
    size: int
    version: str  # ETag, generation or mtime_ns; "" when the backend reports none


def is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def _local(url: str) -> str:
    return url[len("file://"):] if url.startswith("file://") else url


def _has_magic(text: str) -> bool:
    return any(c in text for c in "*?[")


class _Vanished(Exception):
    """The object is not there: not worth retrying."""


class Storage:
    """Lists, sizes and fetches shards. ``storage_options`` go to fsspec; ``retries`` per call."""

    def __init__(self, storage_options: dict[str, Any] | None = None, retries: int = 5,
                 backoff: float = 0.2) -> None:
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries: found {retries!r}, expected an int >= 0")
        self.storage_options = dict(storage_options or {})
        self.retries, self.backoff = retries, float(backoff)
        self._filesystems: dict[tuple[int, str], Any] = {}
        self._listed: dict[str, ObjectInfo] = {}  # what a listing already told us, by URL

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_filesystems"] = {}  # fsspec clients hold sockets and event loops: never across processes
        return state

    # -- fsspec ------------------------------------------------------------------------------
    def _fs(self, url: str) -> Any:
        protocol = url.split("://", 1)[0]
        key = (os.getpid(), protocol)
        found = self._filesystems.get(key)
        if found is None:
            try:
                import fsspec
            except ImportError:
                raise ImportError(f"reading {url} needs fsspec: pip install 'shufflepoint[s3]' (or [gcs], "
                                  "[fsspec])") from None
            found = fsspec.filesystem(protocol, **self.storage_options)
            self._filesystems[key] = found
        return found

    def _retrying(self, url: str, what: str, call: Callable[[], T]) -> T:
        last: BaseException | None = None
        for attempt in range(self.retries + 1):
            try:
                return call()
            except (FileNotFoundError, _Vanished):
                raise ShardError(url, f"vanished: it is in the index but not in the storage ({what})") from None
            except ShardError:
                raise
            except Exception as error:  # s3fs/aiohttp/botocore raise many types for one transient fault
                last = error
                if attempt < self.retries:
                    time.sleep(self.backoff * (2 ** attempt) * (0.5 + random.random()))
        raise ShardError(url, f"{what} failed after {self.retries + 1} attempts: {last!r}") from last

    # -- listing -----------------------------------------------------------------------------
    def expand(self, sources: str | Sequence[str]) -> list[str]:
        """The shard URLs of a list, a glob, a manifest (``.txt``) or a single file."""
        if isinstance(sources, (list, tuple)):
            if not all(isinstance(s, str) and s for s in sources):
                raise ValueError(f"sources: expected paths or URLs (str), found {sources!r}")
            return [s if is_remote(s) else os.path.abspath(_local(s)) for s in sources]
        if not isinstance(sources, str) or not sources:
            raise ValueError(f"sources: found {sources!r}, expected a path, URL, glob, manifest or list of them")
        if _has_magic(sources):
            return self._glob(sources)
        if sources.endswith(".txt"):
            return self._manifest(sources)
        return self.expand([sources])

    def _glob(self, pattern: str) -> list[str]:
        if not is_remote(pattern):
            return sorted(os.path.abspath(p) for p in _glob.glob(_local(pattern)) if os.path.isfile(p))
        protocol = pattern.split("://", 1)[0]
        fs = self._fs(pattern)
        found = self._retrying(pattern, "listing", lambda: fs.glob(pattern, detail=True))
        urls = []
        for path, detail in sorted(found.items()):
            if detail.get("type", "file") != "file":
                continue
            url = path if "://" in path else f"{protocol}://{path}"
            self._listed[url] = ObjectInfo(int(detail["size"]), _version(detail))
            urls.append(url)
        return urls

    def _manifest(self, manifest: str) -> list[str]:
        if is_remote(manifest):
            fs = self._fs(manifest)
            text = self._retrying(manifest, "reading the manifest", lambda: fs.cat_file(manifest).decode())
        else:
            try:
                with open(_local(manifest)) as f:
                    text = f.read()
            except FileNotFoundError:
                raise ValueError(f"sources: the manifest {manifest} does not exist") from None
        folder = manifest.rsplit("/", 1)[0]
        lines = [line.strip() for line in text.splitlines()]
        entries = [line for line in lines if line and not line.startswith("#")]
        return self.expand([e if "://" in e or os.path.isabs(e) else f"{folder}/{e}" for e in entries])

    # -- one object ----------------------------------------------------------------------------
    def info(self, url: str) -> ObjectInfo:
        listed = self._listed.get(url)
        if listed is not None:
            return listed
        if not is_remote(url):
            try:
                stat = os.stat(_local(url))
            except FileNotFoundError:
                raise ShardError(url, "not found") from None
            return ObjectInfo(stat.st_size, str(stat.st_mtime_ns))
        fs = self._fs(url)
        detail = self._retrying(url, "looking it up", lambda: fs.info(url))
        return ObjectInfo(int(detail["size"]), _version(detail))

    def fetch(self, url: str, dest: str, size: int) -> None:
        """Download the whole object to ``dest``; exactly ``size`` bytes, or a ShardError."""
        self._retrying(url, "downloading", lambda: self._fetch_once(url, dest, size))

    def _fetch_once(self, url: str, dest: str, size: int) -> None:
        fs = self._fs(url)
        got = 0
        with fs.open(url, "rb", block_size=_CHUNK, cache_type="none") as source, open(dest, "wb") as out:
            while True:
                chunk = source.read(_CHUNK)
                if not chunk:
                    break
                out.write(chunk)
                got += len(chunk)
        if got != size:
            raise _Truncated(url, got, size)


class _Truncated(OSError):
    """Fewer or more bytes than recorded: retried (a dropped body), then a clear ShardError."""

    def __init__(self, url: str, got: int, size: int) -> None:
        super().__init__(f"truncated or changed: got {got} bytes, expected {size}")


def _version(detail: dict[str, Any]) -> str:
    for key in ("ETag", "etag", "generation", "mtime", "LastModified", "last_modified"):
        if detail.get(key) is not None:
            return str(detail[key]).strip('"')
    return ""
