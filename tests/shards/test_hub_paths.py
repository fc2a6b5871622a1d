"""The pure parts of Hub support, fast enough for make test: ``hf://`` URLs taken apart and pinned, HTTP statuses
and throttling waits read off huggingface_hub's and httpx's errors. The Hub itself: tests/shards/test_hub.py."""

from __future__ import annotations

import pytest

from shufflepoint._shards.storage import faults, hub

pytest.importorskip("huggingface_hub")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(("url", "expected"), [
    ("hf://datasets/org/name/data/*.parquet", ("dataset", "org/name", None, "data/*.parquet")),
    ("hf://datasets/org/name@v1.0/a/b.parquet", ("dataset", "org/name", "v1.0", "a/b.parquet")),
    ("hf://datasets/org/name@refs%2Fconvert%2Fparquet/default/train/0000.parquet",
     ("dataset", "org/name", "refs/convert/parquet", "default/train/0000.parquet")),
    (f"hf://org/model@{COMMIT}/weights.bin", ("model", "org/model", COMMIT, "weights.bin")),
])
def test_a_hub_url_is_taken_apart_and_put_back_pinned(url, expected):
    where = hub.HubPath.of(url)
    assert tuple(where) == expected
    pinned = where.at(COMMIT)
    assert hub.HubPath.of(pinned.url()) == pinned and pinned.commit == COMMIT
    assert hub.HubPath.of(where.url()) == where  # refs/convert/parquet quoted, and read back


def test_only_a_40_hex_revision_is_a_commit():
    assert hub.is_commit(COMMIT) and not hub.is_commit("main") and not hub.is_commit(None)
    assert not hub.is_commit(COMMIT[:-1]) and not hub.is_commit(COMMIT.upper())
    with pytest.raises(ValueError, match="not pinned"):
        hub.HubPath.of("hf://datasets/org/name/x").commit  # noqa: B018


def test_a_bad_hub_url_is_refused_by_name():
    with pytest.raises(ValueError, match="(?s)sources 'hf://datasets/'.*hf://datasets/ORG/NAME"):
        hub.HubPath.of("hf://datasets/")


def _http_error(status, headers=None):
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    request = httpx2.Request("GET", "https://huggingface.co/x")
    response = httpx2.Response(status, headers=headers or {}, request=request)
    return HfHubHTTPError(f"{status}", response=response)


def test_throttling_and_server_errors_are_retried_and_the_waits_asked_are_read():
    throttled = _http_error(429, {"RateLimit": '"api";r=0;t=42'})
    assert faults.kind(throttled) == "transient" and faults.rate_limited(throttled)
    assert faults.retry_after(throttled) == 42.0
    assert faults.retry_after(_http_error(429, {"Retry-After": "7"})) == 7.0
    assert faults.retry_after(_http_error(503)) is None and faults.kind(_http_error(503)) == "transient"
    assert faults.kind(_http_error(404)) == "missing"
    assert faults.kind(_http_error(403)) == "permanent" and not faults.rate_limited(_http_error(403))
    wrapped = RuntimeError("reading failed")
    wrapped.__cause__ = throttled
    assert faults.rate_limited(wrapped)


def test_hub_urls_mixed_with_other_storage_are_refused_by_name():
    from shufflepoint._shards.index.hub_listing import is_hub_sources

    assert is_hub_sources(["hf://datasets/org/name/a.parquet", "hf://datasets/org/name/b.parquet"])
    assert not is_hub_sources(["/data/a.parquet", "s3://bucket/b.parquet"])
    with pytest.raises(ValueError, match="sources: found Hub URLs mixed with '/data/a.parquet'"):
        is_hub_sources(["hf://datasets/org/name/a.parquet", "/data/a.parquet"])
