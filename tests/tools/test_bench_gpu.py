"""``make bench-gpu`` (benchmarks/gpu_feed.py) on a machine without a GPU: its arguments, the shards it
writes, the "no GPU" exit, one feed measurement in this process, and (make test-examples) the whole
script as a CPU dry run, ``--device cpu --tiny``, kill and resume included. Its GPU figures are not
measured here."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed")
pytest.importorskip("pyarrow", reason="the shards extra is not installed")

BENCHMARKS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks")
sys.path.insert(0, BENCHMARKS)

import _gpu_feed_parts as parts  # noqa: E402
import gpu_feed  # noqa: E402


def test_arguments_are_checked_by_name():
    assert gpu_feed.setup_of(gpu_feed.parse([])) == parts.FULL
    tiny = gpu_feed.setup_of(gpu_feed.parse(["--tiny", "--workers", "0,3", "--steps", "2"]))
    assert (tiny.workers, tiny.steps, tiny.seq_len) == ((0, 3), 2, parts.TINY.seq_len)
    with pytest.raises(SystemExit, match="--workers: found 'a,4', expected integers like 0,4,8"):
        gpu_feed.setup_of(gpu_feed.parse(["--workers", "a,4"]))
    with pytest.raises(SystemExit, match="--steps: found 0, expected an integer >= 1"):
        gpu_feed.setup_of(gpu_feed.parse(["--steps", "0"]))
    with pytest.raises(SystemExit):  # argparse: --device cpu needs --tiny
        gpu_feed.parse(["--device", "cpu"])


def test_the_full_setup_is_the_issues_model_and_rows():
    import torch

    assert (parts.FULL.seq_len, parts.FULL.workers) == (2048, (0, 4, 8))
    with torch.device("meta"):  # the real config, no memory: ~125M parameters
        llama, _ = parts.model(parts.FULL, torch.device("meta"), attention="sdpa")
    assert 115e6 < sum(p.numel() for p in llama.parameters()) < 135e6
    # every configuration reads from epoch 0, row 0: one configuration's rows must fit in the corpus
    assert parts.FULL.shards * parts.FULL.documents_per_shard * parts.FULL.mean_document > \
        5 * parts.FULL.tokens_needed(), "the corpus is too small for a run without a second epoch"


def test_without_a_gpu_it_says_so_and_exits_0(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_feed.main([]) == 0
    assert capsys.readouterr().out.startswith("no GPU:")
    with pytest.raises(SystemExit, match="--device cuda: torch.cuda.is_available"):
        gpu_feed.main(["--device", "cuda"])


def test_the_shards_are_written_once_deterministically_and_packed(tmp_path):
    import pyarrow.parquet as pq

    paths = parts.write_shards(str(tmp_path / "a"), parts.TINY)
    again = parts.write_shards(str(tmp_path / "b"), parts.TINY)
    assert [open(p, "rb").read() for p in paths] == [open(p, "rb").read() for p in again]
    written = os.path.getmtime(paths[0])
    assert parts.write_shards(str(tmp_path / "a"), parts.TINY) == paths and os.path.getmtime(paths[0]) == written
    table = pq.read_table(paths[0])
    lengths = [len(row) for row in table.column("input_ids").to_pylist()]
    assert len(lengths) == parts.TINY.documents_per_shard and min(lengths) >= 16
    dataset = parts.packed(str(tmp_path / "a"), parts.TINY, str(tmp_path / "index"))
    assert len(dataset) == sum(pq.read_table(p).column("input_ids").combine_chunks().values.__len__()
                               + parts.TINY.documents_per_shard for p in paths) // parts.TINY.seq_len
    import torch

    row = next(iter(parts.loader(dataset, parts.TINY, 0, torch.device("cpu"))))
    assert row["input_ids"].shape == (parts.TINY.batch, parts.TINY.seq_len)


def test_one_feed_measurement_in_this_process(tmp_path):
    """The synthetic pass and one loader pass over the same rows, on the CPU at toy sizes."""
    setup = gpu_feed.setup_of(gpu_feed.parse(["--tiny", "--workers", "0", "--steps", "2"]))
    folder = str(tmp_path / "shards")
    parts.write_shards(folder, setup)
    feed = gpu_feed.measure_feed(setup, folder, str(tmp_path / "index"), "cpu")
    assert set(feed) == {"synthetic", "workers=0", "parameters"}
    for name in ("synthetic", "workers=0"):
        row = feed[name]
        assert 0 <= row["wait_s"] <= row["step_s"] and 0 <= row["wait_share"] <= 1
    assert feed["synthetic"]["step_vs_synthetic"] == 1.0


@pytest.mark.examples  # make test-examples (~40 s: three fresh processes for the kill and resume)
def test_the_cpu_dry_run_runs_the_whole_script_and_resumes_bitwise(tmp_path):
    out = tmp_path / "out.json"
    finished = subprocess.run([sys.executable, os.path.join(BENCHMARKS, "gpu_feed.py"), "--device", "cpu", "--tiny",
                               "--cache", str(tmp_path / "cache"), "--out", str(out)],
                              capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    results = json.loads(out.read_text())
    assert set(results["feed"]) == {"synthetic", "workers=0", "workers=2", "parameters"}
    resume = results["resume"]
    assert resume["killed_run_equal_before_the_kill"] and resume["resumed_losses_bitwise_equal"]
    assert len(resume["resumed_losses"]) == parts.TINY.resume_steps - parts.TINY.stop_at
    assert set(resume["resume_s"]) == {"build_packed_and_loader", "load_state_dict", "first_batch_on_device"}
    assert "losses bitwise equal: True" in finished.stdout
