"""examples/torchtitan_loader.py under torchrun: shufflepoint as torchtitan's data loader, checkpointed with
torch.distributed.checkpoint under torchtitan's "dataloader" key, resumed in fresh processes on the same and
on another data-parallel degree (torchtitan's own loaders refuse the latter).

torchtitan's trainer needs a GPU; its data-pipeline objects do not. ``make test-torchtitan`` installs
torchtitan 0.3.0 (without the dependencies its trainer needs) into .venv-titan/; without it this is skipped.
"""

import importlib.util
import json
import os
import sys
from collections import Counter

import pytest

from shufflepoint._tools.launch import launch

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TITAN = os.path.abspath(os.path.join(ROOT, ".venv-titan"))
if os.path.isdir(TITAN) and TITAN not in sys.path:
    sys.path.append(TITAN)
pytest.importorskip("torchtitan", reason="torchtitan is not installed: make test-torchtitan")

EXAMPLE = os.path.join(ROOT, "examples", "torchtitan_loader.py")
STOP, BATCH, ROWS = 4, 2, 96  # 2 ranks stop after 4 steps: 16 of the epoch's 96 rows


def example():
    spec = importlib.util.spec_from_file_location("torchtitan_loader", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def uninterrupted(dp_world_size):
    """Per dp rank, the input rows of every step of an uninterrupted epoch (no processes needed)."""
    from shufflepoint.integrations.torchtitan import ShufflepointDataLoader

    config = ShufflepointDataLoader.Config(build_dataset=example().build_dataset, seed=1234, epochs=1)
    return [[inputs["input"].tolist() for inputs, _ in config.build(
        dp_world_size=dp_world_size, dp_rank=rank, tokenizer=None, seq_len=7, local_batch_size=BATCH)]
        for rank in range(dp_world_size)]


def records(prefix, ranks):
    found = []
    for rank in range(ranks):
        with open(f"{prefix}.rank{rank}") as f:
            found.append([json.loads(line) for line in f])
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchtitan")
    env = {"PYTHONPATH": os.pathsep.join([os.path.abspath(os.path.join(ROOT, "src")), TITAN,
                                          os.environ.get("PYTHONPATH", "")])}

    def run(name, nproc, *flags):
        launch([EXAMPLE, "--checkpoint-dir", str(out / "checkpoints"), "--record", str(out / name), *flags], nproc,
               env=env).check()
        return records(out / name, nproc)

    first = run("first", 2, "--stop-after-step", str(STOP))
    return first, run("same", 2), run("wider", 4)


def rows(per_rank):
    return Counter(tuple(row) for records in per_rank for record in records for row in record["rows"])


def test_the_same_degree_continues_batch_for_batch(runs):
    first, same, _ = runs
    whole = uninterrupted(2)
    for rank in range(2):
        assert [r["rows"] for r in first[rank]] == whole[rank][:STOP]
        assert [r["rows"] for r in same[rank]] == whole[rank][STOP:]


def test_another_degree_serves_each_row_of_the_epoch_once(runs):
    first, _, wider = runs
    reference = Counter(tuple(row) for batches in uninterrupted(1) for batch in batches for row in batch)
    assert sum(reference.values()) == ROWS
    assert rows(first) + rows(wider) == reference
    assert len(wider[0]) == (ROWS - 2 * BATCH * STOP) // (4 * BATCH)  # the rest, cut for 4 ranks


def test_the_annealing_phase_starts_at_its_row_on_either_degree(runs):
    """The schedule anneals to the curated corpus (token ids ending in 500-999) from row 48 of the run."""
    first, _, wider = runs
    for per_rank, start, global_batch in ((first, 0, 2 * BATCH), (wider, 2 * BATCH * STOP, 4 * BATCH)):
        before = []  # of the global batches before row 48: is each row curated?
        for rank, records in enumerate(per_rank):
            for step, record in enumerate(records):
                first_position = start + step * global_batch
                curated = [all(token % 1000 >= 500 for token in row) for row in record["rows"]]
                if first_position >= 48:
                    assert all(curated), (rank, step)
                else:
                    before += curated
        # before the anneal the 3:1 mix: mostly the web corpus (curated rows are a quarter, give or take)
        assert before and sum(before) <= len(before) // 2, before


def test_labels_are_the_next_token_inside_a_document(runs):
    first, _, _ = runs
    for record in first[0]:
        for row, labels in zip(record["rows"], record["labels"], strict=True):
            for i, label in enumerate(labels[:-1]):
                assert label in (row[i + 1], -100)
                assert (label == -100) == (row[i + 1] % 1000 in (0, 500))  # a document's first token
