"""Dataset drift and dying workers: caught loudly, survived exactly."""

import gc
import os
import re
import signal

import pytest
import torch

import shufflepoint
from shufflepoint._tools.launch import _descendants


def ids(batch):
    return batch.tolist()


def test_auto_fingerprint_catches_a_changed_dataset():
    original = [torch.tensor(i) for i in range(50)]
    loader = shufflepoint.DataLoader(original, 5, seed=1, dataset_fingerprint="auto")
    state = loader.state_dict()
    assert state["dataset_fingerprint"].startswith("auto:n=50:")
    shufflepoint.DataLoader(list(original), 5, seed=1, dataset_fingerprint="auto").load_state_dict(state)
    edited = list(original)
    edited[0] = torch.tensor(999)
    with pytest.raises(shufflepoint.StateError, match=r"'dataset_fingerprint': found 'auto:n=50:\w+'\n"
                                                      r"  expected: 'auto:n=50:\w+'\n.*\n  fix: .*strict=False"):
        shufflepoint.DataLoader(edited, 5, seed=1, dataset_fingerprint="auto").load_state_dict(state)
    relaxed = shufflepoint.DataLoader(edited, 5, seed=1, dataset_fingerprint="auto")
    with pytest.warns(shufflepoint.ResumeWarning, match="dataset changed since the checkpoint"):
        relaxed.load_state_dict(state, strict=False)


def test_strict_false_does_not_relax_anything_else():
    state = shufflepoint.DataLoader(list(range(50)), 5, seed=1).state_dict()
    with pytest.raises(shufflepoint.StateError, match="'seed'"):
        shufflepoint.DataLoader(list(range(50)), 5, seed=2).load_state_dict(state, strict=False)


def test_fingerprint_must_be_a_string():
    with pytest.raises(TypeError, match="dataset_fingerprint: found 3"):
        shufflepoint.DataLoader(list(range(5)), 1, dataset_fingerprint=3)


class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, index):
        return torch.tensor(index)


def test_a_killed_worker_surfaces_and_the_last_state_resumes_exactly():
    reference = [ids(b) for b in shufflepoint.DataLoader(Slow(), 4, seed=6)]
    loader = shufflepoint.DataLoader(Slow(), 4, seed=6, num_workers=2)
    # Only this iterator's own workers: other children of the test process (a previous test's
    # workers still shutting down) belong to other loaders, whose SIGCHLD would surface elsewhere.
    others = set(_descendants(os.getpid()))
    it = iter(loader)
    received = [ids(next(it)) for _ in range(5)]
    state = loader.state_dict()
    workers = sorted(set(_descendants(os.getpid())) - others)
    assert len(workers) == 2
    # The death must stop the loop loudly. Torch's SIGCHLD handler would raise it from whatever line
    # the main thread is on (once, in CI, from pytest's own teardown after the data path had already
    # raised), so it is set aside here and the death surfaces through the data path alone: torch's
    # watchdog ("exited unexpectedly"), or, when the worker dies while handing a tensor over (fd
    # sharing), that hand-over's EOFError or ConnectionResetError.
    torch_handler = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    died = None
    try:
        os.kill(workers[0], signal.SIGKILL)
        for _ in range(20):
            received.append(ids(next(it)))
    except (RuntimeError, ConnectionResetError, EOFError) as error:
        died = f"{type(error).__name__}: {error}"  # not the traceback: it would keep the workers alive
    finally:
        del it  # shuts the workers down and unregisters them from torch's handler
        gc.collect()
        signal.signal(signal.SIGCHLD, torch_handler)
    assert died is not None, "the loop went on after a worker was killed"
    if died.startswith("RuntimeError"):
        assert re.search(r"DataLoader worker .* exited unexpectedly", died), died
    resumed = shufflepoint.DataLoader(Slow(), 4, seed=6, num_workers=2)
    resumed.load_state_dict(state)
    assert received[:5] + [ids(b) for b in resumed] == reference


def test_the_agreement_digest_is_canonical_and_fits_the_all_reduce():
    from shufflepoint._loading.agreement import state_digest

    state = shufflepoint.DataLoader(list(range(10)), 2, seed=4).state_dict()
    assert state_digest(state) == state_digest(dict(reversed(list(state.items()))))  # key order is not content
    assert state_digest(state) != state_digest(dict(state, cursor=state["cursor"] + 2))
    digests = [state_digest(dict(state, cursor=c)) for c in range(200)]
    assert len(set(digests)) == 200 and all(0 <= d < 2**56 for d in digests)  # -d fits an int64
    assert state_digest(None) not in digests


def test_a_killed_launch_whose_pipes_a_stray_holds_does_not_hang_its_caller():
    """A process the kill missed (here a reparented ``sleep``) keeps the launch's pipes open: the launcher stops
    reading after its wait and closes them, with a note, instead of blocking until a test runner's timeout."""
    import subprocess
    import time

    from shufflepoint._tools.launch import _drained

    proc = subprocess.Popen(["sh", "-c", "echo started; sleep 20 & exit 0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    began = time.monotonic()
    out, err = _drained(proc, "SHUFFLEPOINT_LAUNCH=nothing-carries-this", seconds=1.0)
    assert time.monotonic() - began < 10
    assert out.startswith("started") and "a process it missed held them" in err
    assert proc.returncode == 0
