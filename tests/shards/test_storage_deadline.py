"""Storage that accepts connections and never answers is named, endpoint and request, within the deadline
(``SHUFFLEPOINT_STORAGE_DEADLINE``), instead of hanging the run (issue 44: 900 s with no output)."""

from __future__ import annotations

import socket
import time

import pytest

import shufflepoint
from shufflepoint import _settings as settings
from shufflepoint._shards.storage.storage import Storage

pytest.importorskip("s3fs")


@pytest.fixture()
def silent_endpoint():
    """A socket that accepts connections (the kernel completes the handshake into the backlog) and never answers."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


def options(endpoint):
    return {"key": "k", "secret": "s", "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}


def test_an_endpoint_that_never_answers_is_named_within_the_deadline(silent_endpoint, monkeypatch, tmp_path):
    monkeypatch.setenv(settings.STORAGE_DEADLINE, "1")
    started = time.monotonic()
    with pytest.raises(shufflepoint.ShardError) as raised:
        shufflepoint.Shards("s3://bucket/web/*.parquet", storage_options=options(silent_endpoint),
                            cache_dir=str(tmp_path), progress=False)
    took = time.monotonic() - started
    text = str(raised.value)
    assert took < 3, took  # one deadline (the first request unanswered ends it), plus the construction
    assert "got no answer within 1 s" in text and f"endpoint: {silent_endpoint}" in text
    assert "request: " in text and "s3://bucket/" in text and settings.STORAGE_DEADLINE in text


def test_one_lookup_is_bounded_too(silent_endpoint, monkeypatch):
    monkeypatch.setenv(settings.STORAGE_DEADLINE, "0.5")
    storage = Storage(options(silent_endpoint), retries=5)
    started = time.monotonic()
    with pytest.raises(shufflepoint.ShardError, match=r"s3://bucket/a\.parquet: looking it up got no answer within "
                       r"0\.5 s \(1 attempt\)\n  endpoint: http://127\.0\.0\.1:\d+\n  request: looking it up "
                       r"s3://bucket/a\.parquet"):
        storage.info("s3://bucket/a.parquet")
    assert time.monotonic() - started < 2


def test_a_bad_deadline_is_refused_by_name(monkeypatch):
    for bad in ("0", "-1", "nan", "soon"):
        monkeypatch.setenv(settings.STORAGE_DEADLINE, bad)
        with pytest.raises(ValueError, match=rf"{settings.STORAGE_DEADLINE}: found '{bad}'"):
            settings.storage_deadline()
    monkeypatch.delenv(settings.STORAGE_DEADLINE)
    assert settings.storage_deadline() == 120.0


def test_requests_in_turn_share_the_deadline_of_the_first_one_left_unanswered(silent_endpoint, monkeypatch):
    """A read-ahead's request unanswered, then the batch's own: the second gets one short try (deadline / 8), not
    a whole deadline more (the trial saw 20 s for a deadline of 10); an answer from the endpoint clears it."""
    monkeypatch.setenv(settings.STORAGE_DEADLINE, "2")
    storage = Storage(options(silent_endpoint), retries=5)
    with pytest.raises(shufflepoint.ShardError):
        storage.info("s3://bucket/a.parquet")
    started = time.monotonic()
    with pytest.raises(shufflepoint.ShardError, match=r"(?s)storage s3://bucket/b\.parquet: .*an earlier request "
                                                       r"to this endpoint got no answer"):
        storage.info("s3://bucket/b.parquet")
    assert time.monotonic() - started < 1.5  # 2 / 8 s, and the call's own set-up
    assert storage._retrying("s3://bucket/c", "asking", lambda: 7) == 7  # an answer
    assert not storage._silent
