"""Storage faults: which are worth retrying, how an object that changed under the index is named, and a call
bounded in time (``within``: the storage deadline's clock).

Recognised by class name along the MRO and the cause chain, so botocore, aiohttp, urllib3, requests
and google are never imported here (and a fault wrapped by s3fs in an OSError is still seen).

Words: docs/glossary.md (shard, corpus index).
"""

from __future__ import annotations

import errno
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

from shufflepoint._errors import ShardError

T = TypeVar("T")


class Truncated(OSError):
    """Fewer bytes than recorded, with no error from the backend: retried, then a ShardError."""

    def __init__(self, got: int, size: int) -> None:
        super().__init__(f"truncated: got {got} bytes, expected {size}")


class NoAnswer(ShardError):
    """A request to the storage got no answer within the deadline (``SHUFFLEPOINT_STORAGE_DEADLINE``): the
    endpoint is down or unreachable, which no later request of this run would find otherwise. Never taken for a
    missing object. Its subject is the object asked for (a shard, or an index sidecar: ``storage <url>``)."""

    def __init__(self, shard: str, message: str) -> None:
        super().__init__(shard, message)
        self.args = (f"storage {shard}: {message}",)


def vanished(url: str, what: str) -> ShardError:
    return ShardError(url, f"vanished: {what} found no such object, though it was listed or indexed before; "
                           "it was deleted or moved: rebuild the index (delete its sidecar) if the corpus changed")


REWRITTEN = "rewritten since it was indexed"  # every object whose size or version differs from its index's record
_REBUILD = "Rebuild the index (delete its sidecar, or re-run shufflepoint index) and restart the epoch"


def changed(found: int, size: int, more: bool = False) -> str:
    """An object of another size than its index's record: rewritten since it was indexed (replaced, cut short or
    grown), never "not readable"."""
    how = "truncated" if found < size and not more else "another size"
    what = f"more than {size} bytes" if more else f"{found} bytes now"
    return f"{REWRITTEN}: the object is {what}, {size} in the index ({how}); no row of it was read. {_REBUILD}"


def check_version(url: str, size: int, version: str, found_size: int | None, found_version: str) -> None:
    """A ShardError naming what changed when an object is not the one the index recorded: another
    size (truncated or rewritten), or the same size under another version (rewritten in place); both are
    "rewritten since it was indexed". An empty version on either side (storage that reports none) checks the
    size only."""
    if isinstance(found_size, int) and found_size != size:
        raise ShardError(url, changed(found_size, size))
    if version and found_version and found_version != version:
        raise ShardError(url, f"{REWRITTEN}: its version is {found_version} now, {version} in the index (the same "
                              f"{size} bytes, other content); no byte of it was read. {_REBUILD}")


def out_of_range(error: BaseException) -> bool:
    """Whether a ranged read was refused because the range lies past the object's end (HTTP 416, S3's
    InvalidRange): the object is shorter than the index recorded, so it was rewritten."""
    for found in _chain(error):
        response = getattr(found, "response", None)
        if isinstance(response, dict) and response.get("Error", {}).get("Code") == "InvalidRange":
            return True
        if status(found) == 416 or "InvalidRange" in str(found):
            return True
    return False


_TRANSIENT_NAMES = frozenset({
    "TimeoutError", "ConnectionError", "IncompleteRead", "RemoteDisconnected", "FSTimeoutError", "FileExpired",
    "ClientPayloadError", "ClientConnectionError", "ServerDisconnectedError", "ServerTimeoutError",  # aiohttp
    "HTTPClientError", "ResponseStreamingError", "IncompleteReadError", "ResponseParserError",  # botocore
    "ReadTimeoutError", "ConnectTimeoutError", "EndpointConnectionError",
    "ProtocolError", "ChunkedEncodingError", "TransportError",  # urllib3, requests, google-auth
    "SSLEOFError", "SSLZeroReturnError",
    "ServiceUnavailable", "TooManyRequests", "InternalServerError", "BadGateway", "GatewayTimeout",  # google
})
_TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError",
                              "ServiceUnavailable", "RequestLimitExceeded", "TooManyRequestsException",
                              "BandwidthLimitExceeded", "RequestThrottled"})
_TRANSIENT_ERRNOS = frozenset(getattr(errno, name) for name in (
    "EIO", "EREMOTEIO", "EBUSY", "EAGAIN", "ETIMEDOUT", "ECONNRESET", "ECONNABORTED", "ECONNREFUSED", "EPIPE",
    "ENETUNREACH", "ENETDOWN", "ENETRESET", "EHOSTUNREACH", "EHOSTDOWN") if hasattr(errno, name))
_STORAGE_MODULES = frozenset({"aiohttp", "botocore", "aiobotocore", "s3fs", "gcsfs", "fsspec", "google", "urllib3",
                              "requests", "adlfs", "azure", "http", "ssl", "socket", "huggingface_hub",
                              "httpx", "httpx2"})


def _chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen and len(seen) < 8:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def status(error: BaseException) -> int | None:
    """The HTTP status an error carries (aiohttp ``status``, gcsfs ``code``, botocore ``response``,
    huggingface_hub's and httpx's ``response.status_code``)."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        found = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return found if isinstance(found, int) else None
    code = getattr(response, "status_code", None)
    if isinstance(code, int) and not isinstance(code, bool) and 100 <= code < 600:
        return code
    for name in ("status", "status_code", "code"):
        value = getattr(error, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
            return value
    return None


def _transient(error: BaseException) -> bool:
    if any(cls.__name__ in _TRANSIENT_NAMES for cls in type(error).__mro__):
        return True
    if isinstance(error, OSError) and error.errno in _TRANSIENT_ERRNOS:
        return True
    response = getattr(error, "response", None)
    if isinstance(response, dict) and response.get("Error", {}).get("Code") in _TRANSIENT_CODES:
        return True
    found = status(error)
    return found is not None and (found >= 500 or found in (408, 429))


def rate_limited(error: BaseException) -> bool:
    """Whether the storage answered HTTP 429 (too many requests), anywhere along the cause chain."""
    return any(status(e) == 429 for e in _chain(error))


def retry_after(error: BaseException) -> float | None:
    """The seconds a throttled answer asks the client to wait: ``Retry-After`` (seconds), or the ``t=`` of the
    ``RateLimit`` header (the IETF draft the Hugging Face Hub answers 429s with); None when it says neither."""
    for found in _chain(error):
        headers = getattr(getattr(found, "response", None), "headers", None)
        if headers is None or not hasattr(headers, "get"):
            continue
        text = str(headers.get("Retry-After") or "").strip()
        if text.isdigit():
            return float(text)
        reset = re.search(r"(?:^|;)\s*t=(\d+)", str(headers.get("RateLimit") or ""))
        if reset:
            return float(reset.group(1))
    return None


def kind(error: BaseException) -> str:
    """"missing", "transient" (retry), "permanent" (a ShardError now) or "bug" (raised as is)."""
    if isinstance(error, FileNotFoundError) or (isinstance(error, OSError) and error.errno == errno.ENOENT):
        return "missing"
    if isinstance(error, OSError) and status(error) == 404:  # huggingface_hub: an HTTP error, not FileNotFoundError
        return "missing"
    if isinstance(error, (PermissionError, IsADirectoryError, NotADirectoryError)):
        return "permanent"
    if isinstance(error, Truncated) or any(_transient(e) for e in _chain(error)):
        return "transient"
    if isinstance(error, OSError) or type(error).__module__.split(".", 1)[0] in _STORAGE_MODULES:
        return "permanent"
    return "bug"


def describe(error: BaseException | None) -> str:
    if error is None:
        return "no attempt was made"
    text = f"{type(error).__name__}: {error}"
    cause = error.__cause__
    if cause is not None and str(cause) not in text:
        text += f" ({type(cause).__name__}: {cause})"
    return text


class Unanswered(Exception):
    """A storage call still running at the deadline (``within``)."""


def within(call: Callable[[], T], seconds: float) -> T:
    """``call()`` in a daemon thread of its own, waited for at most ``seconds``: ``Unanswered`` after that (the
    call is left to finish or fail by the backend's own timeouts, its result dropped)."""
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:  # handed to the caller's thread, raised there
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name="shufflepoint-storage-call").start()
    if not done.wait(seconds):
        raise Unanswered
    ok, value = outcome[0]
    if ok:
        return cast(T, value)
    raise value
