"""examples/ray_train.py on a real local Ray cluster: Ray Train restarts a SIGKILLed worker, or a new
TorchTrainer of another size resumes the run, and the sample ids show the data order continued exactly.

Each rank of the example appends one JSON line per step: its pid (one per attempt: Ray starts new
worker processes on a restart), the step its attempt resumed from, the step, the epoch and the ids.
The committed stream of an attempt is its steps up to the step the next attempt resumed from.
"""

import json
import os
import sys
import time

import pytest

pytest.importorskip("ray.train")  # first: without Ray, `import ray` finds this folder (a namespace package)
ray = pytest.importorskip("ray")

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "distributed"))  # the shared exactly-once checks
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
import ray_train as example  # noqa: E402
from integration_checks import assert_epoch_exactly_once, reference  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]
SEED, BATCH = 1234, 4  # the example's loader


@pytest.fixture(scope="module")
def cluster():
    os.environ["OMP_NUM_THREADS"] = "1"
    # Each ray.train.report waits for the controller's next poll, every 2 s by default: 0.2 s here.
    os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.2")
    ray.cloudpickle.register_pickle_by_value(example)  # the workers cannot import examples/
    started = time.monotonic()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    print(f"ray.init: {time.monotonic() - started:.1f} s")
    yield
    ray.shutdown()


def attempts(record, rank):
    """One rank's records, split into attempts (a new pid each)."""
    runs = []
    with open(os.path.join(record, f"rank{rank}.jsonl")) as f:
        for line in f:
            entry = json.loads(line)
            if not runs or runs[-1][0]["pid"] != entry["pid"]:
                runs.append([])
            runs[-1].append(entry)
    return runs


def committed(runs):
    """What survives: each attempt up to where the next one resumed, then the last attempt whole."""
    stream = []
    for index, run in enumerate(runs):
        end = runs[index + 1][0]["start"] if index + 1 < len(runs) else run[-1]["step"]
        kept = [r for r in run if r["step"] <= end]
        assert [r["step"] for r in kept] == list(range(run[0]["start"] + 1, end + 1)), "steps missing"
        stream.extend((r["epoch"], r["ids"]) for r in kept)
    return stream


def config(record, **changes):
    os.makedirs(record, exist_ok=True)
    return {"samples": 64, "epochs": 3, "checkpoint_every": 4, "record": record, **changes}


def test_sigkilled_worker_is_restarted_by_ray_and_resumes_exactly(cluster, tmp_path):
    record = str(tmp_path / "record")
    result = example.fit(config(record, kill_at_step=14), 2, str(tmp_path / "storage"), "killed", max_failures=1)
    assert result.error is None
    assert os.path.exists(os.path.join(record, "killed")), "rank 1 was not killed"
    whole = reference(64, SEED, 2, BATCH, 3)
    for rank in range(2):
        runs = attempts(record, rank)
        assert [run[0]["start"] for run in runs] == [0, 12], "not one restart from the checkpoint of step 12"
        assert committed(runs) == whole[rank], f"rank {rank} is not exact"


@pytest.mark.parametrize("old_world, new_world", [(2, 3), (3, 2)])
def test_new_trainer_of_another_size_reads_each_sample_once(cluster, tmp_path, old_world, new_world):
    n, stop = 50, 4  # 50 samples: 3 ranks pad the tail; step 4 is mid-epoch 0 for both sizes
    first, second = str(tmp_path / "first"), str(tmp_path / "second")
    result = example.fit(config(first, samples=n, epochs=2, stop_at_step=stop), old_world,
                         str(tmp_path / "storage"), "first")
    assert result.checkpoint is not None
    example.fit(config(second, samples=n, epochs=2, resume_from=result.checkpoint.path), new_world,
                str(tmp_path / "storage"), "second")
    before = [committed(attempts(first, r)) for r in range(old_world)]
    after = [committed(attempts(second, r)) for r in range(new_world)]
    assert all(len(stream) == stop for stream in before)
    assert {attempts(second, r)[0][0]["start"] for r in range(new_world)} == {stop}
    as_records = [[[{"epoch": e, "ids": ids} for e, ids in stream] for stream in part] for part in (before, after)]
    assert_epoch_exactly_once(n, SEED, 0, as_records)  # split between the two trainers
    assert_epoch_exactly_once(n, SEED, 1, as_records[1:])  # the new trainer's own, whole epoch
