"""The release and flakiness tools check what they say: make test-wheel (check_wheel.py) and
make test-repeat (repeat.py)."""

from __future__ import annotations

import pathlib
import re

import check_wheel
import repeat

ROOT = pathlib.Path(__file__).resolve().parents[2]
STARTS_PROCESSES = re.compile(r"subprocess\.|multiprocessing|\blaunch\(|torch\.distributed\.run|mp\.spawn|os\.fork")
# Files the pattern matches that start no process, and why.
STARTS_NONE = {"tests/tools/test_cli.py": "its launch() is replaced by the worker run in the test's own process"}
# Files that start processes but need a venv of their own (make test-ray, make docs-build): repeated by hand there.
OWN_VENV = {"tests/ray/test_decode_pool.py": ".venv-ray (make test-ray)",
            "tests/docs_site/test_site_build.py": ".venv-docs (make docs-build)"}
GOOD_WHEEL = ["shufflepoint/__init__.py", "shufflepoint/py.typed", "shufflepoint/_version.py",
              "shufflepoint/_tools/audit/__init__.py", "shufflepoint-0.5.0.dist-info/METADATA"]


def test_every_test_file_that_starts_processes_is_repeated() -> None:
    starting = {str(path.relative_to(ROOT)) for path in (ROOT / "tests").rglob("test_*.py")
                if STARTS_PROCESSES.search(path.read_text()) and path.parent.name != "ci"}
    starting -= set(STARTS_NONE) | set(OWN_VENV)
    outside = {path for path in starting if not path.startswith(repeat.DISTRIBUTED + "/")}
    missing = sorted(outside - set(repeat.PROCESS_FILES))
    assert not missing, f"these test files start processes: add them to repeat.PROCESS_FILES: {missing}"
    assert all((ROOT / path).is_file() for path in repeat.PROCESS_FILES)


def test_failures_are_read_with_their_test_ids() -> None:
    output = ("..F.\n=== short test summary info ===\n"
              "FAILED tests/distributed/test_mesh.py::test_agree[2-spans] - AssertionError: 3 != 4\n"
              "ERROR tests/shards/test_s3.py::test_fetch - TimeoutError\n1 failed, 2 passed, 1 error in 3.00s\n")
    assert repeat.failures_in(output) == [("FAILED", "tests/distributed/test_mesh.py::test_agree[2-spans]"),
                                          ("ERROR", "tests/shards/test_s3.py::test_fetch")]
    summary = repeat.report([[("FAILED", "a::x")], [], [("FAILED", "a::x"), ("ERROR", "b::y")]])
    assert summary.splitlines() == ["test-repeat: 3 failures in 3 runs", "  a::x: failed 2 of 3",
                                    "  b::y: failed 1 of 3"]


def test_a_test_that_fails_now_and_then_is_counted_and_fails_the_repeat(tmp_path: pathlib.Path, capsys) -> None:
    """Every other run fails: 2 of 3 runs, reported by id, exit 1; not hidden by a rerun."""
    (tmp_path / "test_sometimes.py").write_text(
        "import pathlib\n\n\ndef test_every_other_run():\n"
        f"    counter = pathlib.Path({str(tmp_path / 'count')!r})\n"
        "    runs = int(counter.read_text()) + 1 if counter.exists() else 1\n"
        "    counter.write_text(str(runs))\n    assert runs % 2 == 0\n\n\ndef test_always():\n    pass\n")
    code = repeat.main(["--count", "3", str(tmp_path / "test_sometimes.py")])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "test_sometimes.py::test_every_other_run: failed 2 of 3" in out, out
    assert "FAILED in run 1:" in out and "FAILED in run 3:" in out and "FAILED in run 2:" not in out, out


def test_a_repeat_with_no_failure_exits_0(tmp_path: pathlib.Path, capsys) -> None:
    (tmp_path / "test_steady.py").write_text("def test_steady():\n    pass\n")
    assert repeat.main(["--count", "2", str(tmp_path / "test_steady.py")]) == 0
    assert "test-repeat: 0 failures in 2 runs" in capsys.readouterr().out


def test_a_good_wheel_passes() -> None:
    assert check_wheel.wheel_problems(GOOD_WHEEL, "Metadata-Version: 2.4\nName: shufflepoint\nVersion: 0.5.0\n",
                                      "0.5.0") == []


def test_a_wheel_without_py_typed_or_with_tests_or_another_version_is_refused() -> None:
    names = [n for n in GOOD_WHEEL if n != "shufflepoint/py.typed"] + ["tests/test_x.py", "benchmarks/run.py",
                                                                        "shufflepoint/tests/conftest.py"]
    problems = check_wheel.wheel_problems(names, "Name: shufflepoint\nVersion: 0.2.0.dev0\n", "0.5.0")
    assert len(problems) == 3, problems
    assert "lacks shufflepoint/py.typed" in problems[0]
    assert "carries benchmarks, shufflepoint, tests" in problems[1]
    assert "says version 0.2.0.dev0" in problems[2]


def test_the_wheel_check_reads_the_one_version() -> None:
    import shufflepoint

    assert check_wheel.source_version() == shufflepoint.__version__
