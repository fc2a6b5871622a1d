"""The ``shufflepoint`` command: argument parsing and printing only; the work is in the modules.

    shufflepoint demo                     # the whole story in under a minute (make demo)
    shufflepoint audit TARGET --nproc 2   # does *your* loader resume exactly? (exit 0 / 1 / 2)
    shufflepoint inspect PATH             # what a checkpoint holds, and whether its order survives
    shufflepoint doctor                   # versions, and whether the installed Accelerate has #4195

Exit codes (the ruff/ty convention): 0 clean, 1 findings (a verdict other than EXACT or
EXACTLY_ONCE, an order that cannot be recovered, a bug found), 2 usage or tool errors.
Results go to stdout, progress to stderr; ``--json PATH`` (``-`` for stdout) writes the
machine-readable report.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Sequence
from typing import Any, TextIO

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"found {text!r}, expected an integer >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"found {value}, expected an integer >= 1")
    return value


def _parser() -> argparse.ArgumentParser:
    from shufflepoint import __version__

    parser = argparse.ArgumentParser(
        prog="shufflepoint",
        description="Prove that a distributed PyTorch data pipeline resumes exactly after a restart.",
        epilog="Exit codes: 0 clean, 1 findings, 2 usage errors.",
    )
    parser.add_argument("--version", action="version", version=f"shufflepoint {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    demo = commands.add_parser(
        "demo", help="train, SIGKILL and resume a tiny model: stock Accelerate vs patched vs shufflepoint",
        description="Two processes on Gloo train a tiny model for 2 epochs, checkpoint mid-epoch 1, are "
                    "SIGKILLed and resume in new processes, for stock Accelerate, Accelerate + "
                    "patch_accelerate(), shufflepoint.DataLoader and an elastic 2 -> 1 resume. Prints a "
                    "verdict table and writes a loss plot.")
    demo.add_argument("--out", default="out/demo", help="directory for the plot and the run's files "
                                                       "(default: %(default)s)")
    demo.add_argument("--json", metavar="PATH", help="also write the results as JSON (- for stdout)")

    audit = commands.add_parser(
        "audit", help="run TARGET's loader, interrupt it, resume it in new processes, judge",
        description="Runs the loader returned by TARGET in N real processes (torchrun, Gloo), saves its "
                    "state at --save-at, resumes in M new processes and compares with the uninterrupted run. "
                    "Verdicts: EXACT, EXACTLY_ONCE (world size changed: every sample once), ORDER_LOST, "
                    "DUPLICATED, DROPPED, DIVERGED, ERROR.",
        epilog="TARGET's factory takes no arguments and is called in every process once RANK, WORLD_SIZE, "
               "LOCAL_RANK, MASTER_ADDR and MASTER_PORT are set; it returns a loader with state_dict() and "
               "load_state_dict(). Each epoch the audit calls loader.sampler.set_epoch(epoch) if the loader has "
               "no set_epoch of its own (DistributedSampler's contract), then iterates the loader; a loader "
               "that keeps its own epoch (Accelerate's, shufflepoint's) gets nothing but its saved state. "
               "Exit 0 for EXACT / EXACTLY_ONCE, 1 otherwise, 2 for usage errors.")
    audit.add_argument("target", metavar="TARGET", help="path/to/file.py:factory or package.module:factory")
    audit.add_argument("--nproc", type=_positive, required=True, help="processes for the first run")
    audit.add_argument("--resume-nproc", type=_positive, help="processes for the resume (default: --nproc)")
    audit.add_argument("--epochs", type=_positive, default=2, help="epochs to run (default: %(default)s)")
    audit.add_argument("--save-at", default="1:3", metavar="EPOCH:STEP",
                       help="save after STEP batches of EPOCH (default: %(default)s, the seed's point)")
    audit.add_argument("--kill", action="store_true",
                       help="SIGKILL the first run right after the save; the reference is a separate run")
    audit.add_argument("--json", metavar="PATH", help="write the report as JSON (- for stdout)")
    audit.add_argument("--sample-id", metavar="MODULE:FN",
                       help="FN(batch) -> list of sample ids, instead of the built-in identity")

    inspect = commands.add_parser(
        "inspect", help="what a loader checkpoint holds and whether its shuffle order is recoverable",
        description="PATH: a state file (.pt, .bin, .json) or an Accelerate save_state directory.")
    inspect.add_argument("path", metavar="PATH")
    inspect.add_argument("--json", metavar="PATH", help="write the findings as JSON (- for stdout)")

    doctor = commands.add_parser(
        "doctor", help="versions, and whether the installed Accelerate has the #4195 resume bug (probed)")
    doctor.add_argument("--json", metavar="PATH", help="write the findings as JSON (- for stdout)")
    return parser


def _write_json(path: str | None, payload: dict[str, Any]) -> None:
    if path is None:
        return
    text = json.dumps(payload, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)


def _out(json_path: str | None) -> TextIO:
    """Where the human-readable text goes: stderr when the JSON takes stdout."""
    return sys.stderr if json_path == "-" else sys.stdout


_PROGRESS_LOCK = threading.Lock()


def _progress(line: str) -> None:
    """One whole line to stderr; the demo reports from two threads at once."""
    with _PROGRESS_LOCK:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _usage_error(command: str, message: str) -> int:
    print(f"shufflepoint {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _audit(args: argparse.Namespace) -> int:
    from shufflepoint._tools import audit as _audit

    try:
        config = _audit.AuditConfig(
            target=_audit.parse_target(args.target), nproc=args.nproc,
            resume_nproc=args.resume_nproc or args.nproc, epochs=args.epochs,
            save_at=_audit.parse_save_at(args.save_at), kill=args.kill, sample_id=args.sample_id)
        report = _audit.run_audit(config, progress=_progress)
    except _audit.UsageError as error:
        return _usage_error("audit", str(error))
    print(_audit.render(report), file=_out(args.json), flush=True)
    _write_json(args.json, report)
    return int(report["exit_code"])


def _demo(args: argparse.Namespace) -> int:
    from shufflepoint._tools import demo as _demo

    try:
        result = _demo.run_demo(args.out, progress=_progress)
    except RuntimeError as error:  # a launch failed or timed out: the tool, not a finding
        return _usage_error("demo", str(error))
    print(_demo.render(result), file=_out(args.json), flush=True)
    _write_json(args.json, result)
    return int(result["exit_code"])


def _inspect(args: argparse.Namespace) -> int:
    from shufflepoint._tools import inspect as _inspect

    try:
        found = _inspect.inspect_path(args.path)
    except _inspect.InspectError as error:
        return _usage_error("inspect", str(error))
    print(_inspect.render(found), file=_out(args.json), flush=True)
    _write_json(args.json, found)
    return int(found["exit_code"])


def _doctor(args: argparse.Namespace) -> int:
    from shufflepoint._tools import doctor as _doctor

    found = _doctor.run_doctor()
    print(_doctor.render(found), file=_out(args.json), flush=True)
    _write_json(args.json, found)
    return int(found["exit_code"])


_COMMANDS = {"audit": _audit, "demo": _demo, "inspect": _inspect, "doctor": _doctor}


def main(argv: Sequence[str] | None = None) -> int:
    """The console script. Returns the exit code (argparse exits 2 itself on a bad command line)."""
    args = _parser().parse_args(argv)
    return _COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
