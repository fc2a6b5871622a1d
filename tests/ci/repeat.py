"""make test-repeat: flakiness as a number. The tests that start processes, run N times in a row.

Which tests: every test under ``tests/distributed/`` (real ranks on Gloo, torchrun, SIGKILL) and the
files elsewhere that start a process of their own (``PROCESS_FILES``: a subprocess, a forked child,
torchrun). ``tests/ci/test_ci_scripts.py`` fails when a test file starts processes and is in neither.

Each run is a fresh ``pytest`` session with pytest-rerunfailures switched off (``-p no:rerunfailures``:
``make test`` reruns a hung launch once, which would hide exactly what is counted here). A run's
failures are read from pytest's short summary (``FAILED``/``ERROR`` lines with the test id); a session
that ends badly with none (a crash, an interrupted run) counts as a failure of the session itself.

    python tests/ci/repeat.py [--count 5] [--log-dir DIR] [PYTEST ARGS OR PATHS ...]

Paths given replace the default selection (to try the script on one file). Prints every failure with
its test id and the run it happened in, then one line per failing test (failed k of N); exits 1 when
anything failed, 0 when nothing did.
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DISTRIBUTED = "tests/distributed"
# Test files outside tests/distributed that start processes themselves.
PROCESS_FILES = [
    "tests/core/test_fold.py",  # a resume after 100 resizes in a fresh process
    "tests/integrations/test_accelerate_patch.py",
    "tests/loading/test_reliability.py",  # a killed launch whose pipes a stray holds
    "tests/media/test_video_clips.py",  # kept frame counts read in a fresh process
    "tests/order/test_distinct.py",
    "tests/shards/test_cache.py",
    "tests/shards/test_decode_budget.py",
    "tests/shards/test_decoded.py",
    "tests/shards/test_index.py",
    "tests/shards/test_packed_tokenize_once.py",
    "tests/shards/test_readers.py",
    "tests/shards/test_hub.py",  # the local stand-in of the Hub, a server process (marker hub)
    "tests/shards/test_s3.py",
    "tests/shards/test_storage.py",
    "tests/shards/test_token_counts.py",
    "tests/tools/test_bench_gpu.py",
    "tests/tools/test_launch.py",
    "tests/test_settings.py",  # import with a bad setting, in a fresh interpreter
    "tests/test_layout.py",  # the position model imported in a fresh interpreter that blocks torch
]
SUMMARY = re.compile(r"^(?P<kind>FAILED|ERROR) (?P<id>\S+)")


def failures_in(output: str) -> list[tuple[str, str]]:
    """(FAILED or ERROR, test id) for each line of pytest's short test summary."""
    return [(m["kind"], m["id"]) for line in output.splitlines() if (m := SUMMARY.match(line))]


def run_once(number: int, count: int, selection: list[str], log_dir: pathlib.Path | None) -> list[tuple[str, str]]:
    command = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:rerunfailures", "-p", "no:cacheprovider",
               *selection]
    print(f"== run {number} of {count}: {' '.join(command[1:])}", flush=True)
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if log_dir is not None:
        (log_dir / f"run-{number}.log").write_text(done.stdout)
    found = failures_in(done.stdout)
    if done.returncode not in (0, 5) and not found:  # 5: nothing collected, said below
        found = [("ERROR", f"(the pytest session, exit code {done.returncode})")]
    if done.returncode == 5:
        found = [("ERROR", "(no tests collected)")]
    tail = done.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print(f"   {tail[0]}  [{time.monotonic() - started:.0f} s]", flush=True)
    for kind, test in found:
        print(f"   {kind} in run {number}: {test}", flush=True)
    return found


def report(runs: list[list[tuple[str, str]]]) -> str:
    """The summary: each failing test id with how many of the runs it failed in."""
    count = len(runs)
    failed_in = collections.Counter(test for found in runs for test in {test for _, test in found})
    lines = [f"test-repeat: {sum(len(found) for found in runs)} failures in {count} runs"]
    lines += [f"  {test}: failed {times} of {count}" for test, times in sorted(failed_in.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5, help="runs in a row (default: %(default)s)")
    parser.add_argument("--log-dir", type=pathlib.Path, help="keep each run's pytest output here")
    parser.add_argument("selection", nargs="*", help=f"paths or pytest args (default: {DISTRIBUTED} and "
                                                      "PROCESS_FILES)")
    args = parser.parse_args(argv)
    if args.count < 1:
        parser.error(f"--count: found {args.count}, expected at least 1")
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    selection = args.selection or [DISTRIBUTED, *PROCESS_FILES]
    runs = [run_once(number, args.count, selection, args.log_dir) for number in range(1, args.count + 1)]
    print(report(runs), flush=True)
    return 1 if any(runs) else 0


if __name__ == "__main__":
    sys.exit(main())
