"""Finished jobs that must exit 0: run each path N times in a row under torchrun (CPU, Gloo) and count how
each one ended (issue 35, part 3).

    python benchmarks/exit_soak.py [--runs 20] [--paths trainer,trainer-resume-destroy,...] [--log-dir DIR]

Paths (benchmarks/_exit_soak_worker.py does the work, prints WORK DONE on every rank, then ends):
  trainer                 our drop-in HF Trainer, train() from scratch on 2 processes, the script ends (no destroy)
  trainer-resume-destroy  the same resumed on 3 processes from a 2-process checkpoint (a resize), then
                          torch.distributed.destroy_process_group() right after train()
  native                  shufflepoint.DataLoader on 2 processes: load_state_dict, 5 DDP steps, the script ends
  native-destroy          the same, then destroy_process_group()
  accelerate              patch_accelerate on 2 processes: a prepared loader, load_state_dict, 4 steps with
                          accelerator.gather, the script ends (no end_training)

Each run ends as one of: ok (exit 0, every rank said WORK DONE), abort (SIGABRT or "terminate called without an
active exception"), hang (no exit within --timeout s: every process's stack is written to the log dir with
py-spy, then the job is killed), fail (anything else). One line per path: the counts, the wall time, and the
exit codes seen. Exit 1 when any run was not ok. ``make exit-soak`` runs it (RUNS=N, PATHS=a,b).
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import shutil
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from shufflepoint._tools.launch import launch  # noqa: E402

WORKER = str(ROOT / "benchmarks" / "_exit_soak_worker.py")
# path: (worker path argument, processes, destroy the group after the work)
PATHS = {
    "trainer": ("trainer", 2, False),
    "trainer-resume-destroy": ("trainer-resume", 3, True),
    "native": ("native", 2, False),
    "native-destroy": ("native", 2, True),
    "accelerate": ("accelerate", 2, False),
}


def outcome(returncode: int, stdout: str, stderr: str, nproc: int) -> str:
    """ok, abort or fail for a launch that exited."""
    if returncode == 0 and stdout.count("WORK DONE") == nproc:
        return "ok"
    if "terminate called without an active exception" in stderr or "Signal 6 (SIGABRT)" in stderr \
            or "SIGABRT" in stderr:
        return "abort"
    return "fail"


def prepare(path: str, base: pathlib.Path) -> None:
    """What a run of ``path`` starts from, made once: a 2-process checkpoint to resume, a saved loader state."""
    if path == "trainer-resume":
        launch([WORKER, "trainer", str(base)], 2, timeout=300).check()
        checkpoints = sorted(base.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        for later in checkpoints[1:]:  # resume from the first: the resumed run has steps left to train
            shutil.rmtree(later)
    elif path == "native":
        launch([WORKER, "native", str(base)], 2, timeout=300).check()


def soak(name: str, runs: int, timeout: float, log_dir: pathlib.Path | None, scratch: pathlib.Path) -> dict:
    worker_path, nproc, destroy = PATHS[name]
    base = scratch / f"{name}-base"
    base.mkdir()
    prepare(worker_path, base)
    counts: collections.Counter[str] = collections.Counter()
    codes: collections.Counter[int | str] = collections.Counter()
    started = time.monotonic()
    for number in range(1, runs + 1):
        directory = scratch / f"{name}-{number}"
        shutil.copytree(base, directory)
        target = [WORKER, worker_path, str(directory), *(["--destroy"] if destroy else [])]
        try:
            result = launch(target, nproc, timeout=timeout)
        except RuntimeError as error:
            if "timed out" not in str(error):
                raise
            ended, code, text = "hang", "timeout", str(error)
        else:
            ended, code = outcome(result.returncode, result.stdout, result.stderr, nproc), result.returncode
            text = f"exit code {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
        counts[ended] += 1
        codes[code] += 1
        if ended != "ok":
            print(f"  {name} run {number}: {ended} ({code})", flush=True)
            if log_dir is not None:
                (log_dir / f"{name}-{number}-{ended}.log").write_text(text)
        shutil.rmtree(directory, ignore_errors=True)
    seconds = time.monotonic() - started
    line = (f"{name:24s} runs {runs:3d}  ok {counts['ok']:3d}  abort {counts['abort']:2d}  hang {counts['hang']:2d}  "
            f"fail {counts['fail']:2d}  [{seconds:.0f} s, {seconds / runs:.1f} s/run]  exit codes {dict(codes)}")
    print(line, flush=True)
    return {"path": name, "runs": runs, **counts, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs in a row per path (default: %(default)s)")
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated, of: " + ", ".join(PATHS))
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a run counts as a hang")
    parser.add_argument("--log-dir", type=pathlib.Path, default=None, help="each failed run's output goes here")
    args = parser.parse_args(argv)
    names = [name for name in args.paths.split(",") if name]
    unknown = [name for name in names if name not in PATHS]
    if unknown or args.runs < 1:
        parser.error(f"--paths: unknown {unknown}, expected some of {list(PATHS)}" if unknown
                     else f"--runs: found {args.runs}, expected at least 1")
    if args.log_dir is not None:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    with tempfile.TemporaryDirectory(prefix="exit-soak-") as scratch:
        results = [soak(name, args.runs, args.timeout, args.log_dir, pathlib.Path(scratch)) for name in names]
    bad = sum(result["runs"] - result.get("ok", 0) for result in results)
    print(f"exit-soak: {bad} of {sum(result['runs'] for result in results)} runs did not exit 0", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
