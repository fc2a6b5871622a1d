import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # the shared test helpers (resume_contract)


import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# make test (and CI) draws the same examples every run: a property test that passes once passes on every
# clean clone, so a landing is never refused by a rare draw. make test-explore draws new ones each run
# (and more of them where a test does not fix its own count): that is where new cases are found, and a
# find becomes an @example pinned in its test. The profile is loaded before any test module is imported.
settings.register_profile("repeatable", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True, max_examples=300)
settings.load_profile(os.environ.get("SHUFFLEPOINT_HYPOTHESIS", "repeatable"))

# A multi-process test whose processes hang (Gloo or torchrun under a loaded 2-core CI machine: seen
# once, on 2026-12-04, in a test that takes 28 s alone) is rerun once, in a fresh tmp_path;
# pytest reports it as a rerun ("R" in the summary). Only hangs: any other failure fails at once,
# and a hang that comes back fails too.
HANGS = [r"Timeout \(>[0-9.]+s\) from pytest-timeout", r"worker launch timed out"]


def pytest_collection_modifyitems(config, items):
    # The process tests first: they hold most of make test's 14 minutes and most of its failures, so a
    # failure there shows minutes earlier. A stable sort: each file stays whole and in its own order.
    items.sort(key=lambda item: os.sep + "distributed" + os.sep not in str(item.fspath))
    if not config.pluginmanager.hasplugin("rerunfailures"):
        return
    for item in items:
        if os.sep + "distributed" + os.sep in str(item.fspath):
            item.add_marker(pytest.mark.flaky(reruns=1, only_rerun=HANGS))


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-compatible server (moto's server mode) behind a fault-injecting proxy, on 127.0.0.1."""
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    from s3_server import S3Server

    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def hub_server():
    """A local stand-in of the Hugging Face Hub's HTTP API (tests/hub_server.py), on 127.0.0.1."""
    pytest.importorskip("huggingface_hub")
    from hub_server import HubServer

    server = HubServer(page_size=25).start()  # pages of 25 entries: a listing of more follows the Link header
    yield server
    server.stop()


@pytest.fixture()
def hub(hub_server):
    """The same stand-in, its faults, log and byte counts reset before and after the test."""
    hub_server.reset()
    yield hub_server
    hub_server.reset()


@pytest.fixture()
def s3(s3_server):
    """The same server, its faults reset before and after the test."""
    s3_server.reset()
    yield s3_server
    s3_server.reset()


@pytest.fixture()
def s3_bucket(s3):
    """A fresh, empty bucket on it, so tests never see each other's objects."""
    import uuid

    name = "test-" + uuid.uuid4().hex[:12]
    s3.create_bucket(name)
    return name


@pytest.fixture()
def jobs():
    """Simulated multi-node jobs a test started (``test_multinode.Job``): every process closed at the end."""
    started: list = []
    yield started
    for job in started:
        job.close()
