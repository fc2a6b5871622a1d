"""Stock Accelerate + shufflepoint.patch_accelerate(): every resume path, exact, in fresh processes.

Each scenario (tests/distributed/workers/accelerate_scenarios.py) records an uninterrupted stream,
checkpoints a second run, and resumes in processes started afterwards; here the resumed stream is
compared batch for batch with the recorded one. The scenarios run packed into a few launches
(2 processes on Gloo, and 1 process for the single-process rows) to keep the suite short.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("accelerate")
pytest.importorskip("torchdata")

from shufflepoint._tools.launch import launch  # noqa: E402

WORKERS = os.path.join(os.path.dirname(__file__), "workers")
sys.path.insert(0, WORKERS)
from accelerate_scenarios import EPOCHS, SCENARIOS  # noqa: E402

WORKER = os.path.join(WORKERS, "accelerate_scenarios.py")
TWO = [name for name in SCENARIOS if not name.startswith("single")]
ONE = [name for name in SCENARIOS if name.startswith("single")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("accelerate-resume"))
    for names, nproc in ((TWO, 2), (ONE, 1)):
        for phase in ("save", "resume"):
            launch([WORKER, phase, out, *names], nproc, timeout=240).check()
    chained = [name for name in TWO if SCENARIOS[name].get("chain")]
    launch([WORKER, "resume2", out, *chained], 2, timeout=240).check()
    return out


def read(out: str, name: str, phase: str, rank: int) -> dict:
    with open(os.path.join(out, name, f"{phase}_r{rank}.json")) as f:
        return json.load(f)


def expected_passes(name: str, reference: list) -> list:
    """The uninterrupted stream from the checkpoint on, one list per pass over the loader.

    A checkpoint after the last batch of epoch e (inside the loop or after it) resumes with
    epoch e + 1, as torchdata does for a finished iterator.
    """
    epoch, k = SCENARIOS[name]["save"]
    if k is None or k >= len(reference[epoch]):
        return reference[epoch + 1:]
    return [reference[epoch][k:]] + reference[epoch + 1:]


def resumed_passes(out: str, name: str, rank: int) -> list:
    passes = read(out, name, "resume", rank)["passes"]
    if SCENARIOS[name].get("chain"):
        # resume -> checkpoint -> resume: the two resumed pieces of the epoch, then the rest
        second = read(out, name, "resume2", rank)["passes"]
        passes = [passes[0] + second[0]] + second[1:]
    return passes


def verdict(name: str, got: list, reference: list) -> str:
    if got == expected_passes(name, reference):
        return "EXACT"
    epoch, k = SCENARIOS[name]["save"]
    if got and got[0] == reference[0][k or 0:]:
        return "ORDER_LOST"
    return "DIVERGED"


EXACT_SCENARIOS = [n for n in SCENARIOS if not SCENARIOS[n].get("stock") and n != "single_custom_sampler"]


@pytest.mark.parametrize("name", EXACT_SCENARIOS)
def test_resume_is_exact(runs: str, name: str) -> None:
    nproc = 1 if name in ONE else 2
    streams = {}
    for rank in range(nproc):
        reference = read(runs, name, "save", rank)["reference"]
        assert len(reference) == EPOCHS
        got = resumed_passes(runs, name, rank)
        assert verdict(name, got, reference) == "EXACT", (
            f"rank {rank}: expected {expected_passes(name, reference)[:1]}, got {got[:1]}")
        assert read(runs, name, "resume", rank)["warnings"] == []
        streams[rank] = reference
    if nproc == 2 and SCENARIOS[name].get("n", 64) == 64:
        # The uninterrupted reference itself is a partition: every sample once per epoch.
        for epoch in range(EPOCHS):
            seen = sorted(i for rank in streams for batch in streams[rank][epoch] for i in batch)
            assert seen == list(range(64))


@pytest.mark.parametrize("name", [n for n in SCENARIOS if SCENARIOS[n].get("how", "sd") == "sd"
                                  and SCENARIOS[n]["save"][1] is not None and "chain" not in SCENARIOS[n]
                                  and not SCENARIOS[n].get("stock")][:3])
def test_saved_state_carries_iteration(runs: str, name: str) -> None:
    keys = read(runs, name, "save", 0)["state_keys"]
    assert "_iteration" in keys and "_shufflepoint" in keys


@pytest.mark.parametrize("name", ["stock_seedable", "stock_acc_plain"])
def test_stock_accelerate_shows_the_seed_bug(runs: str, name: str) -> None:
    """Without the patch the same harness sees the seed's bug: the test can fail."""
    for rank in range(2):
        reference = read(runs, name, "save", rank)["reference"]
        got = resumed_passes(runs, name, rank)
        assert verdict(name, got, reference) == "ORDER_LOST"
    assert "_iteration" not in read(runs, "stock_seedable", "save", 0)["state_keys"]


def test_hidden_randomness_is_reported_at_save_and_load(runs: str) -> None:
    saved = read(runs, "single_custom_sampler", "save", 0)["warnings"]
    loaded = read(runs, "single_custom_sampler", "resume", 0)["warnings"]
    assert any("HiddenRandomSampler" in text and "state saved" in text for text in saved)
    assert any("HiddenRandomSampler" in text and "state loaded" in text for text in loaded)


def test_save_state_writes_one_loader_file_per_rank(runs: str) -> None:
    checkpoint = os.path.join(runs, "acc_plain", "ckpt1")
    names = set(os.listdir(checkpoint))
    assert {"dl_state_dict_rank0.bin", "dl_state_dict_rank1.bin", "dl_state_dict.bin"} <= names


EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _steps(record: str, rank: int) -> dict[int, list[int]]:
    with open(f"{record}.rank{rank}") as f:
        rows = [json.loads(line) for line in f]
    return {row["step"]: row["ids"] for row in rows}


# make test-examples: test_resume_is_exact[acc_plain] above covers the same path in make test (patch_accelerate, a
# stock loader prepared, accelerator.save_state / load_state, resumed batch for batch in fresh processes on 2 ranks).
@pytest.mark.examples
def test_patched_example_resumes_exactly_after_a_stop(tmp_path) -> None:
    """examples/accelerate_patched.py: stop after step 12 (checkpoint at 10), rerun, compare."""
    script = os.path.join(EXAMPLES, "accelerate_patched.py")
    interrupted, uninterrupted = tmp_path / "interrupted", tmp_path / "uninterrupted"
    common = ["--checkpoint-every", "5"]
    launch([script, *common, "--checkpoint-dir", str(interrupted), "--record", str(tmp_path / "first"),
            "--stop-after-step", "12"], 2, timeout=240).check()
    resumed = launch([script, *common, "--checkpoint-dir", str(interrupted),
                      "--record", str(tmp_path / "second")], 2, timeout=240).check()
    assert "resumed at step 10, epoch 1" in resumed.stdout
    launch([script, *common, "--checkpoint-dir", str(uninterrupted), "--record", str(tmp_path / "whole")],
           2, timeout=240).check()
    for rank in range(2):
        whole, first, second = (_steps(str(tmp_path / n), rank) for n in ("whole", "first", "second"))
        assert sorted(whole) == list(range(1, 25))
        assert {s: first[s] for s in range(1, 11)} == {s: whole[s] for s in range(1, 11)}
        assert second == {s: whole[s] for s in range(11, 25)}
