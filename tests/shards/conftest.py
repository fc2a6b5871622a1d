"""Fixtures of the shard tests: a real local S3 server (moto over HTTP) with a fault-injecting proxy.

``s3_server``: one server for the whole session (started on first use, killed at the end); see
``s3_server.py`` for its API (``endpoint_url``, ``direct_url``, ``storage_options``,
``fail_next``, ``drop_next``, ``reset``, ``create_bucket``, ``put_files``, ``upload``, ``put``,
``delete``, ``faults``). ``s3``: the same server with its faults reset before and after the test.
``s3_bucket``: a fresh, empty bucket name on it, so tests never see each other's objects.
"""

from __future__ import annotations

import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # s3_server.py, beside this file
from s3_server import S3Server  # noqa: E402


@pytest.fixture(scope="session")
def s3_server():
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture()
def s3(s3_server):
    s3_server.reset()
    yield s3_server
    s3_server.reset()


@pytest.fixture()
def s3_bucket(s3):
    name = "test-" + uuid.uuid4().hex[:12]
    s3.create_bucket(name)
    return name
