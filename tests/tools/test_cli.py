"""The shufflepoint command, in this process: parsing, exit codes, messages, JSON, inspect, doctor.

The subcommands that launch processes (audit, demo) are run for real in tests/distributed/; here
only their usage errors, which are refused before anything is launched.
"""

from __future__ import annotations

import json
import os
import runpy
import sys

import pytest
import torch

import shufflepoint
from shufflepoint._tools.audit import worker as _audit_worker
from shufflepoint._tools.cli import main

TARGETS = os.path.join(os.path.dirname(os.path.dirname(__file__)), "distributed", "targets", "loaders.py")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------------
# parsing


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"shufflepoint {shufflepoint.__version__}"
    with pytest.raises(SystemExit) as exit_info:
        main(["audit", "--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    for flag in ("--nproc", "--resume-nproc", "--epochs", "--save-at", "--kill", "--json", "--sample-id"):
        assert flag in out


@pytest.mark.parametrize("argv", [[], ["nonsense"], ["audit"], ["audit", "x.py:f"], ["audit", "x.py:f", "--nproc", "0"],
                                  ["audit", "x.py:f", "--nproc", "two"], ["inspect"]])
def test_bad_command_lines_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert "usage: shufflepoint" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["audit", "loaders.py", "--nproc", "2"], "expected path/to/file.py:factory or package.module:factory"),
    (["audit", "missing_dir/pipeline.py:make", "--nproc", "2"], "file 'missing_dir/pipeline.py' not found"),
    (["audit", "no_such_pkg_xyz.loaders:make", "--nproc", "2"], "module 'no_such_pkg_xyz.loaders' not found"),
    (["audit", f"{TARGETS}:stock_accelerate", "--nproc", "2", "--save-at", "one:3"], "expected EPOCH:STEP"),
    (["audit", f"{TARGETS}:stock_accelerate", "--nproc", "2", "--save-at", "3:1"],
     "epoch 3 is not run with --epochs 2"),
    (["audit", f"{TARGETS}:stock_accelerate", "--nproc", "2", "--sample-id", "ids"], "--sample-id: found 'ids'"),
])
def test_audit_usage_errors_exit_2_before_launching(argv, message, capsys):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("shufflepoint audit: error: ") and message in err


def test_python_dash_m_runs_the_same_command(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["shufflepoint", "inspect", "/no/such/path"])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module("shufflepoint", run_name="__main__")
    assert exit_info.value.code == 2 and "/no/such/path: no such file or directory" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# the worker's refusals, in this process (no launch): a TARGET that is not a checkpointing loader


@pytest.fixture
def one_process(monkeypatch):
    """The environment torchrun gives a 1-process job (targets read RANK and WORLD_SIZE)."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")


def _worker(tmp_path, target, phase="record"):
    code = _audit_worker.main([phase, "--target", target, "--file-target", "--out", str(tmp_path),
                               "--epochs", "2", "--save-at", "1:3"])
    with open(tmp_path / f"{phase}_r0.json") as f:
        return code, json.load(f)


@pytest.fixture
def in_process_launch(monkeypatch, one_process):
    """launch() replaced by running the worker right here as the one rank of a 1-process job: this
    tests the runner's plumbing (phases, records, errors, report), not distribution."""
    from shufflepoint._tools.launch import LaunchResult

    def fake_launch(target, nproc, **_):
        assert target[:2] == ["-m", "shufflepoint._tools.audit.worker"] and nproc == 1
        return LaunchResult(_audit_worker.main(list(target[2:])), "", "", False)

    monkeypatch.setattr("shufflepoint._tools.launch.launch", fake_launch)


def test_audit_runner_end_to_end_in_one_process(tmp_path, capsys, in_process_launch):
    code, out, err = run(capsys, "audit", f"{TARGETS}:shufflepoint_loader", "--nproc", "1", "--json", "-")
    report = json.loads(out)
    assert code == 0 and report["verdict"] == "EXACT" and report["exit_code"] == 0
    assert report["ranks"][0]["batches_expected"] == 14 and report["dataset_length"] == 67
    assert "verdict: EXACT" in err and "uninterrupted run, state saved on the way: 1 processes" in err


def test_audit_with_a_custom_sample_id(tmp_path, capsys, in_process_launch):
    ids = tmp_path / "my_ids.py"
    ids.write_text("def sample_id(batch):\n    return [f'sample-{i}' for i in batch[0].tolist()]\n")
    code, out, _ = run(capsys, "audit", f"{TARGETS}:shufflepoint_loader", "--nproc", "1", "--sample-id",
                       f"{ids}:sample_id", "--save-at", "0:2", "--json", str(tmp_path / "r.json"))
    report = json.loads((tmp_path / "r.json").read_text())
    assert code == 0 and report["verdict"] == "EXACT" and report["sample_id"] == f"{ids}:sample_id"


def test_audit_of_a_target_that_is_not_a_loader_exits_2(capsys, in_process_launch):
    code, out, err = run(capsys, "audit", f"{TARGETS}:not_a_loader", "--nproc", "1")
    assert code == 2 and out == ""
    assert "shufflepoint audit: error: record, rank 0: TARGET" in err and "which has no state_dict()" in err


def test_audit_of_a_save_point_never_reached_exits_2(capsys, in_process_launch):
    code, _, err = run(capsys, "audit", f"{TARGETS}:shufflepoint_loader", "--nproc", "1", "--save-at", "0:40")
    assert code == 2 and "--save-at 0:40: epoch 0 has 17 batches on rank 0" in err


def test_audit_of_a_failing_loader_is_error_exit_1(tmp_path, capsys, in_process_launch):
    script = tmp_path / "broken_pipeline.py"
    script.write_text("import shufflepoint\n"
                      "class Broken(shufflepoint.DataLoader):\n"
                      "    def load_state_dict(self, state):\n"
                      "        raise RuntimeError('cannot restore')\n"
                      "def make():\n"
                      "    return Broken(list(range(20)), batch_size=2)\n")
    code, out, _ = run(capsys, "audit", f"{script}:make", "--nproc", "1", "--json", str(tmp_path / "r.json"))
    report = json.loads((tmp_path / "r.json").read_text())
    assert code == 1 and report["verdict"] == "ERROR"
    assert "RuntimeError: cannot restore" in report["error"] and "verdict: ERROR" in out


def test_worker_refuses_a_target_without_state_dict(tmp_path):
    code, record = _worker(tmp_path, f"{TARGETS}:not_a_loader")
    assert code == 1 and record["error"]["kind"] == "usage"
    assert "returned a builtins.list, which has no state_dict()" in record["error"]["message"]


def test_worker_refuses_a_missing_factory(tmp_path):
    code, record = _worker(tmp_path, f"{TARGETS}:make_loader")
    assert record["error"]["kind"] == "usage"
    assert "has no attribute 'make_loader'; its callables:" in record["error"]["message"]
    assert "shufflepoint_loader" in record["error"]["message"]


def test_worker_refuses_a_save_point_the_loader_never_reaches(tmp_path, one_process):
    # shufflepoint_loader in one process: 67 samples / 4 = 17 batches per epoch
    code = _audit_worker.main(["record", "--target", f"{TARGETS}:shufflepoint_loader", "--file-target", "--out",
                               str(tmp_path), "--epochs", "2", "--save-at", "1:17"])
    record = json.loads((tmp_path / "record_r0.json").read_text())
    assert code == 1 and record["error"]["kind"] == "usage"
    assert "--save-at 1:17: epoch 1 has 17 batches on rank 0; the step must be in 0..16" in record["error"]["message"]


def test_worker_records_in_one_process(tmp_path, one_process):
    code, record = _worker(tmp_path, f"{TARGETS}:shufflepoint_loader")
    assert code == 0 and record["error"] is None
    assert record["loader"] == "shufflepoint._loading.loader.DataLoader" and record["dataset_length"] == 67
    assert [len(e) for e in record["epochs"]] == [17, 17]
    assert sorted(i for b in record["epochs"][1] for i in b) == list(range(67))
    assert (tmp_path / "state_r0.pt").exists() and "cursor" in record["state_keys"]


# ---------------------------------------------------------------------------------------------
# inspect


def _shufflepoint_state(**overrides):
    loader = shufflepoint.DataLoader(list(range(20)), batch_size=2, seed=7, world_size=2, rank=0)
    iterator = iter(loader)
    next(iterator), next(iterator)
    return {**loader.state_dict(), **overrides}


def _accelerate_state(patched: bool):
    pytest.importorskip("accelerate")
    pytest.importorskip("torchdata")
    from accelerate.data_loader import prepare_data_loader
    from torch.utils.data import DataLoader, TensorDataset

    from shufflepoint.integrations import accelerate as integration

    was = integration.is_patched()
    if patched:
        shufflepoint.patch_accelerate()
    else:
        shufflepoint.unpatch_accelerate()
    try:
        torch.manual_seed(0)
        loader = prepare_data_loader(DataLoader(TensorDataset(torch.arange(32)), batch_size=4, shuffle=True),
                                     num_processes=2, process_index=0, use_stateful_dataloader=True)
        iterator = iter(loader)
        next(iterator)
        return loader.state_dict()
    finally:
        (shufflepoint.patch_accelerate if was else shufflepoint.unpatch_accelerate)()


def test_inspect_a_shufflepoint_json_state(tmp_path, capsys):
    path = tmp_path / "loader.json"
    path.write_text(json.dumps(_shufflepoint_state()))
    code, out, _ = run(capsys, "inspect", str(path), "--json", str(tmp_path / "report.json"))
    assert code == 0
    assert "written by : shufflepoint.DataLoader" in out and "epoch      : 0" in out
    assert "cursor 8 of 20 samples" in out and out.rstrip().endswith("order recoverable: yes")
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["schema_version"] == 1 and report["exit_code"] == 0 and report["recoverable"] is True
    assert report["states"][0]["writer"] == "shufflepoint.DataLoader" and report["states"][0]["epoch"] == 0


def test_inspect_finds_the_loader_inside_a_training_checkpoint(tmp_path, capsys):
    path = tmp_path / "ckpt.pt"
    torch.save({"model": {"w": torch.zeros(2)}, "step": 4, "state": {"loader": _shufflepoint_state()}}, path)
    code, out, _ = run(capsys, "inspect", str(path))
    assert code == 0 and "ckpt.pt [state.loader]" in out


def test_inspect_a_damaged_shufflepoint_state_is_a_finding(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_shufflepoint_state(cursor="eight")))
    code, out, _ = run(capsys, "inspect", str(path))
    assert code == 1 and "state field 'cursor': found 'eight'" in out


def test_inspect_a_stock_accelerate_state_says_cursor_only(tmp_path, capsys):
    path = tmp_path / "dl_state.bin"
    torch.save(_accelerate_state(patched=False), path)
    code, out, err = run(capsys, "inspect", str(path), "--json", "-")
    assert code == 1 and "order      : NO - cursor only" in err  # with --json -, the text goes to stderr
    report = json.loads(out)
    state = report["states"][0]
    assert state["finding"] == "cursor only: this checkpoint resumes at the right position in the wrong order"
    assert "shufflepoint.patch_accelerate()" in state["fix"] and state["epoch"] is None
    assert report["recoverable"] is False and report["exit_code"] == 1


def test_inspect_a_patched_accelerate_state(tmp_path, capsys):
    path = tmp_path / "dl_state.bin"
    torch.save(_accelerate_state(patched=True), path)
    code, out, _ = run(capsys, "inspect", str(path))
    assert code == 0
    assert "Accelerate-prepared loader + shufflepoint.patch_accelerate()" in out
    assert "the shuffle generator's state at the start of the epoch is saved" in out


def test_inspect_an_accelerate_save_state_directory(tmp_path, capsys):
    """The file layout stock Accelerate's save_state writes for 2 ranks: one shared loader file."""
    stock = tmp_path / "stock"
    stock.mkdir()
    torch.save(_accelerate_state(patched=False), stock / "dl_state_dict.bin")
    for rank in range(2):
        (stock / f"random_states_{rank}.pkl").write_bytes(b"")
    (stock / "model.safetensors").write_bytes(b"")
    code, out, _ = run(capsys, "inspect", str(stock))
    assert code == 1
    assert "an Accelerate save_state directory; random states for ranks [0, 1]" in out
    assert "one file (dl_state_dict.bin) for all 2 ranks" in out and "#4164" in out

    patched = tmp_path / "patched"
    patched.mkdir()
    state = _accelerate_state(patched=True)
    for name in ("dl_state_dict.bin", "dl_state_dict_rank0.bin", "dl_state_dict_rank1.bin"):
        torch.save(state, patched / name)
    for rank in range(2):
        (patched / f"random_states_{rank}.pkl").write_bytes(b"")
    code, out, _ = run(capsys, "inspect", str(patched), "--json", str(tmp_path / "r.json"))
    report = json.loads((tmp_path / "r.json").read_text())
    assert code == 0 and report["kind"] == "accelerate_save_state"
    assert report["loaders"] == [{"index": 0, "shared_file": "dl_state_dict.bin", "rank_files": [0, 1]}]
    assert report["notes"] == []


def test_inspect_usage_errors(tmp_path, capsys):
    code, _, err = run(capsys, "inspect", str(tmp_path / "nope.pt"))
    assert code == 2 and "no such file or directory" in err
    (tmp_path / "weights.pt").write_bytes(b"")
    torch.save({"w": torch.zeros(3)}, tmp_path / "weights.pt")
    code, _, err = run(capsys, "inspect", str(tmp_path / "weights.pt"))
    assert code == 2 and "no loader state found" in err
    (tmp_path / "broken.json").write_text("{")
    code, _, err = run(capsys, "inspect", str(tmp_path / "broken.json"))
    assert code == 2 and "not readable as JSON" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(capsys, "inspect", str(empty))
    assert code == 2 and "no loader state found" in err


# ---------------------------------------------------------------------------------------------
# doctor


def test_doctor_probes_the_installed_accelerate(tmp_path, capsys):
    pytest.importorskip("accelerate")
    pytest.importorskip("torchdata")
    from shufflepoint.integrations import accelerate as integration

    was = integration.is_patched()
    code, out, _ = run(capsys, "doctor", "--json", str(tmp_path / "doctor.json"))
    assert (integration.is_patched()) == was  # the probe leaves the process as it found it
    report = json.loads((tmp_path / "doctor.json").read_text())
    assert report["versions"]["torch"] == torch.__version__ and report["gloo"] is True
    bug = report["accelerate_4195"]
    # Decided by the probe, not the version: stock Accelerate 1.13-1.15 have it, the patch fixes it.
    assert bug["status"] in ("present", "absent")
    assert bug["patched"]["plain"]["verdict"] == "EXACT" and bug["patched"]["seedable"]["verdict"] == "EXACT"
    if bug["status"] == "present":
        assert code == 1 and bug["stock"]["plain"]["verdict"] == "ORDER_LOST"
        assert "replays epoch 0's order" in bug["stock"]["plain"]["detail"]
        assert "Accelerate #4195 (resume keeps the position, loses the order): PRESENT" in out
        assert any("shufflepoint.patch_accelerate()" in line for line in report["advice"])
    else:
        assert code == 0
    import importlib.metadata

    if importlib.metadata.version("accelerate") == "1.13.0":
        assert bug["status"] == "present"  # the seed's version
        assert bug["stock"]["plain"]["expected_first_batch"] == [55, 16, 59, 0]  # the seed's reference output


# ---------------------------------------------------------------------------------------------
# demo pieces that need no processes (the demo itself runs in tests/distributed/test_demo.py)


def test_demo_plot_degrades_without_matplotlib(tmp_path, monkeypatch):
    from shufflepoint._tools.demo import report as _demo

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    path, note = _demo.plot_losses({"v": ([1.0, 0.5], [1.0, 0.5], 1, "EXACT")}, str(tmp_path / "p.png"))
    assert path is None and note == "no plot: matplotlib is not installed (pip install 'shufflepoint[plot]')"
    assert not (tmp_path / "p.png").exists()


def test_demo_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from shufflepoint._tools.demo import report as _demo

    curves = {"a": ([1.0, 0.8, 0.6], [1.0, 0.8, 0.7], 1, "ORDER_LOST"), "b": ([1.0, 0.5], [1.0, 0.5], 1, "EXACT")}
    path, note = _demo.plot_losses(curves, str(tmp_path / "p.png"))
    assert path == str(tmp_path / "p.png") and path in note
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_demo_plot_legends_leave_the_checkpoint_mark_and_the_curves_visible():
    """Each panel's legend lies outside its axes: it covered the "checkpoint, SIGKILL" mark in every panel."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from shufflepoint._tools.demo import report as _demo

    reference = [2.0 * 0.9 ** step for step in range(32)]
    curves = {name: (reference, reference, 22, verdict) for name, verdict in
              [("stock Accelerate", "ORDER_LOST"), ("shufflepoint.DataLoader", "EXACT"), ("elastic 2 -> 1", "EXACT")]}
    figure = _demo.loss_figure(curves)
    try:
        renderer = figure.canvas.get_renderer()
        figure.canvas.draw()
        for axis in figure.axes:
            legend = axis.get_legend().get_window_extent(renderer)
            marks = [text for text in axis.texts if text.get_text() == "checkpoint,\nSIGKILL"]
            assert len(marks) == 1 and not legend.overlaps(marks[0].get_window_extent(renderer)), axis.get_title()
            assert not legend.overlaps(axis.get_window_extent(renderer)), axis.get_title()
    finally:
        plt.close(figure)


def _sidecar(tmp_path):
    from shufflepoint._shards.index import index as _index
    from shufflepoint._shards.index import sidecar

    data = tmp_path / "corpus"
    data.mkdir()
    rows = {str(data / f"part-{i}.jsonl"): (100 + i, "m", i) for i in range(5)}  # part-0 is empty
    built = _index.build(list(rows), reader="jsonl", options={}, info=lambda u: rows[u][:2],
                         count=lambda u, size, version: (rows[u][2], ""), progress=False)
    sidecar.save(built, str(tmp_path / "cache"), "key")
    return data, built


def test_inspect_a_corpus_index_sidecar_and_its_folder(tmp_path, capsys):
    data, built = _sidecar(tmp_path)
    code, out, _ = run(capsys, "inspect", str(data / ".shufflepoint-index-key.idx"), "--json", "-")
    assert code == 0 and json.loads(out)["corpora"][0]["rows"] == 10
    code, out, _ = run(capsys, "inspect", str(data / ".shufflepoint-index-key.idx"))
    assert "5 jsonl shards under" in out and "10 (510 bytes)" in out
    assert f"fingerprint: shards:{built.content_hash}" in out and "empty      : part-0.jsonl" in out
    assert "corpus index valid: yes" in out
    assert "integrity  : versions of 5 of 5 shards, checksums of 0 (index format 3)" in out
    code, out, _ = run(capsys, "inspect", str(data))
    assert code == 0 and "a shufflepoint corpus index" in out
    columnar = tmp_path / "cache" / "corpus-key.idx"
    data = bytearray(columnar.read_bytes())
    data[-40] ^= 1  # a byte of the last column
    columnar.write_bytes(bytes(data))
    code, out, _ = run(capsys, "inspect", str(columnar))
    assert code == 1 and "DAMAGED" in out and "found bytes that do not match their sha256" in out
    sidecar_path = tmp_path / "cache" / "corpus-key.json"  # a JSON sidecar, as shufflepoint <= 0.4 wrote it
    value = built.to_json()
    value["shards"][1][3] = 7
    sidecar_path.write_text(json.dumps(value))
    code, out, _ = run(capsys, "inspect", str(sidecar_path))
    assert code == 1 and "DAMAGED" in out and "found a content_hash that does not match its shards" in out


def test_inspect_names_the_corpus_of_a_sharded_loader_state(tmp_path, capsys):
    state = dict(_shufflepoint_state(), dataset_fingerprint="shards:" + "ab" * 32 + ":blocks=65536", order="blocks")
    path = tmp_path / "loader.json"
    path.write_text(json.dumps(state))
    code, out, _ = run(capsys, "inspect", str(path))
    assert code == 0 and "over a sharded corpus (shards:abab" in out and "blocks order v1" in out
