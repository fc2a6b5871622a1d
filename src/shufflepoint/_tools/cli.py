"""The ``shufflepoint`` command: argument parsing and printing only; the work is in the modules.

    shufflepoint demo                     # the whole story in under a minute (make demo)
    shufflepoint audit TARGET --nproc 2   # does *your* loader resume exactly? (exit 0 / 1 / 2)
    shufflepoint inspect PATH             # what a checkpoint holds, and whether its order survives
    shufflepoint inspect --verify CORPUS  # is every shard still the one the corpus index recorded?
    shufflepoint index SOURCES            # count a corpus's rows once, publish the index beside it
    shufflepoint index SOURCES --tokens input_ids  # and the token counts, for Packed on every node
    shufflepoint doctor                   # versions, and whether the installed Accelerate has #4195
    shufflepoint which CKPT --step N --dataset TARGET  # the samples of step N, from the checkpoint alone
    shufflepoint headroom TARGET --workers 0,2,4  # the pipeline alone: batches/s, and the stage that bounds it

Exit codes (the ruff/ty convention): 0 clean, 1 findings (a verdict other than EXACT,
SAME_GLOBAL_BATCHES or EXACTLY_ONCE, an order that cannot be recovered, a bug found), 2 usage or tool errors.
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
                    "Verdicts: EXACT, SAME_GLOBAL_BATCHES (world size changed at a fixed global batch: each global "
                    "batch holds the uninterrupted run's samples), EXACTLY_ONCE (world size changed: every sample "
                    "once), ORDER_LOST, DUPLICATED, DROPPED, DIVERGED, CONTENT_DIVERGED, ERROR.",
        epilog="TARGET's factory takes no arguments and is called in every process once RANK, WORLD_SIZE, "
               "LOCAL_RANK, MASTER_ADDR and MASTER_PORT are set; it returns a loader with state_dict() and "
               "load_state_dict(). Each epoch the audit calls loader.sampler.set_epoch(epoch) if the loader has "
               "no set_epoch of its own (DistributedSampler's contract), then iterates the loader; a loader "
               "that keeps its own epoch (Accelerate's, shufflepoint's) gets nothing but its saved state. "
               "Exit 0 for EXACT / SAME_GLOBAL_BATCHES / EXACTLY_ONCE, 1 otherwise, 2 for usage errors.")
    audit.add_argument("target", metavar="TARGET", help="path/to/file.py:factory or package.module:factory")
    audit.add_argument("--nproc", type=_positive, required=True, help="processes for the first run")
    audit.add_argument("--resume-nproc", type=_positive, help="processes for the resume (default: --nproc)")
    audit.add_argument("--epochs", type=_positive, default=2, help="epochs to run (default: %(default)s)")
    audit.add_argument("--save-at", default="1:3", metavar="EPOCH:STEP",
                       help="save after STEP batches of EPOCH (default: %(default)s, the seed's point)")
    audit.add_argument("--kill", action="store_true",
                       help="SIGKILL the first run right after the save; the reference is a separate run")
    audit.add_argument("--json", metavar="PATH", help="write the report as JSON (- for stdout)")
    audit.add_argument("--exclude", type=int, default=0, metavar="K",
                       help="exclude K samples (loader.exclude) at the save point in every run, and check that "
                            "none is served after it (verdict SERVED_EXCLUDED)")
    audit.add_argument("--sample-id", metavar="MODULE:FN",
                       help="FN(batch) -> list of sample ids, instead of the built-in identity")

    _inspect_and_index_parsers(commands)

    _which_parser(commands)

    _headroom_parser(commands)

    doctor = commands.add_parser(
        "doctor", help="versions, and whether the installed Accelerate has the #4195 resume bug (probed)")
    doctor.add_argument("--json", metavar="PATH", help="write the findings as JSON (- for stdout)")
    return parser


def _worker_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 0:
        raise argparse.ArgumentTypeError(f"found {text!r}, expected worker counts >= 0 separated by commas, e.g. 0,2,4")
    return counts


def _headroom_parser(commands: Any) -> None:
    headroom = commands.add_parser(
        "headroom", help="run a data pipeline alone, with no model: batches/s at 0..N workers, and what bounds it",
        description="TARGET's factory(num_workers=N) returns a shufflepoint.DataLoader. For each worker count it "
                    "serves --warmup batches, then --batches timed ones, each moved to --device. Prints the "
                    "batches a second and each stage's time a batch (read, transform, collate, transfer), and "
                    "names the stage that bounds the rate. Exit 0, or 2 for usage errors.")
    headroom.add_argument("target", metavar="TARGET", help="path/to/file.py:factory or package.module:factory")
    headroom.add_argument("--workers", type=_worker_counts, default=[0, 1, 2, 4], metavar="N,N,...",
                          help="the worker counts to run (default: 0,1,2,4)")
    headroom.add_argument("--batches", type=_positive, default=50, help="timed batches each (default: %(default)s)")
    headroom.add_argument("--warmup", type=_natural, default=5, help="batches before the timing (default: %(default)s)")
    headroom.add_argument("--device", default="cpu", help="where each batch is moved, e.g. cuda (default: cpu)")
    headroom.add_argument("--json", metavar="PATH", help="write the results as JSON (- for stdout)")


def _inspect_and_index_parsers(commands: Any) -> None:
    inspect = commands.add_parser(
        "inspect", help="what a loader checkpoint holds and whether its shuffle order is recoverable",
        description="PATH: a state file (.pt, .bin, .json) or an Accelerate save_state directory. With --verify: "
                    "a corpus (its sources, as given to Shards, or an index sidecar .json, local or remote), each "
                    "of its shards checked against its index (size, version, and content where the index holds "
                    "checksums). Exit 0 when all match, 1 naming each missing, truncated, resized, rewritten or "
                    "new shard, 2 when no index is found.")
    inspect.add_argument("path", metavar="PATH", nargs="+")
    inspect.add_argument("--verify", action="store_true", help="check the corpus PATH against its index")
    _corpus_options(inspect)
    inspect.add_argument("--json", metavar="PATH", help="write the findings as JSON (- for stdout)")

    index = commands.add_parser(
        "index", help="count a corpus's rows once and publish the index beside it, for every node to read",
        description="SOURCES as given to shufflepoint.Shards (a glob, a manifest, paths or URLs). Builds the index "
                    "as Shards does (JSONL and WebDataset shards are downloaded to be counted, into the cache) and "
                    "writes it beside the corpus (.shufflepoint-index-<key>.json in its folder or bucket prefix). "
                    "Every node's Shards over the same sources, format and options then reads it instead of "
                    "counting. Exit 0 when published, 2 on errors.")
    index.add_argument("sources", metavar="SOURCES", nargs="+")
    index.add_argument("--checksum", action="store_true",
                       help="also record each shard's sha256 (for Shards(verify='checksum'); reads every shard)")
    _corpus_options(index)
    index.add_argument("--tokens", metavar="FIELD",
                       help="also count the token ids of FIELD in every document and publish the counts beside the "
                       "corpus, for Packed(Shards(...), tokens=FIELD) on every node to read its share of them only")
    index.add_argument("--tokenize", metavar="MODULE:FUNCTION",
                       help="count the tokens of FUNCTION(sample) instead (Packed's tokenize=); needs --tokenizer")
    index.add_argument("--tokenizer", metavar="NAME", help="the tokenizer's identity, as Packed(tokenizer=) names it")
    index.add_argument("--count-workers", type=int, metavar="N", help="processes counting tokens (default: the CPUs)")
    index.add_argument("--json", metavar="PATH", help="write the result as JSON (- for stdout)")


def _which_parser(commands: Any) -> None:
    which = commands.add_parser(
        "which", help="the samples (shard, row, bytes; documents and token spans) of any step, from a checkpoint",
        description="CHECKPOINT: a torch.save or JSON file holding loader.state_dict(), a DCP folder, an Accelerate "
                    "save_state folder or an HF Trainer checkpoint-N folder. The loader is built over the dataset as "
                    "the run built it (seed, order, world size, batch size: from the state), the state loaded, and "
                    "step N answered per rank by arithmetic: nothing is logged during training. Exit 0 answered, 2 "
                    "when it cannot be (the state does not fit the dataset, a step never run, a bad argument).",
        epilog="--step counts the batches each rank received since the run began (0-based), across epochs and "
               "resizes; for an HF Trainer checkpoint it is the optimizer step (global_step after it, 1-based): "
               "any step the run trained up to the checkpoint, before or after a resize. Errors: one line on "
               "stderr, exit 2, and with --json a JSON object with 'error'.")
    which.add_argument("checkpoint", metavar="CHECKPOINT")
    which.add_argument("--step", type=_natural, required=True, help="the step to answer")
    which.add_argument("--dataset", nargs="+", required=True, metavar="TARGET",
                       help="path/to/file.py:factory or package.module:factory (returns the training dataset), "
                            "or the corpus's shard sources as given to shufflepoint.Shards")
    which.add_argument("--rank", type=_natural, help="only this rank (default: every rank)")
    which.add_argument("--accumulation", type=_positive,
                       help="gradient accumulation steps (HF Trainer checkpoints; default: the run's, as the "
                            "checkpoint records it; given, it must be the same)")
    which.add_argument("--no-locate", action="store_true", help="indices only, without opening any shard")
    _corpus_options(which)
    which.add_argument("--json", metavar="PATH", help="write the answer as JSON (- for stdout)")


def _natural(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"found {text!r}, expected an integer >= 0") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"found {value}, expected an integer >= 0")
    return value


def _corpus_options(parser: argparse.ArgumentParser) -> None:
    """What ``Shards`` takes to define the rows: the same values give the same index."""
    parser.add_argument("--format", help="the shard format (default: from the suffix)")
    parser.add_argument("--columns", type=lambda t: t.split(","), help="comma-separated columns (parquet, arrow)")
    parser.add_argument("--seq-len", type=_positive, help="window length (tokens)")
    parser.add_argument("--dtype", help="token dtype (tokens)")
    parser.add_argument("--storage-options", metavar="JSON", help="fsspec options as JSON (endpoint, credentials)")
    parser.add_argument("--cache-dir", help="the shard cache (default: $SHUFFLEPOINT_CACHE or ~/.cache/shufflepoint)")


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
    """The one-line error of exit code 2; a library refusal (one part a line) is joined with "; "."""
    message = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    print(f"shufflepoint {command}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _audit(args: argparse.Namespace) -> int:
    from shufflepoint._tools import audit as _audit

    try:
        config = _audit.AuditConfig(
            target=_audit.parse_target(args.target), nproc=args.nproc,
            resume_nproc=args.resume_nproc or args.nproc, epochs=args.epochs,
            save_at=_audit.parse_save_at(args.save_at), kill=args.kill, sample_id=args.sample_id,
            exclude=args.exclude)
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

    if args.verify:
        return _verify(args)
    if len(args.path) != 1:
        return _usage_error("inspect", f"found {len(args.path)} paths, expected one (several only with --verify)")
    try:
        found = _inspect.inspect_path(args.path[0])
    except _inspect.InspectError as error:
        return _usage_error("inspect", str(error))
    print(_inspect.render(found), file=_out(args.json), flush=True)
    _write_json(args.json, found)
    return int(found["exit_code"])


def _verify(args: argparse.Namespace) -> int:
    from shufflepoint._shards.index import sidecar
    from shufflepoint._shards.readers import infer_format, make_reader
    from shufflepoint._shards.storage.storage import Storage
    from shufflepoint._tools import corpus_index, inspect_corpus

    sources = corpus_index.sources_of(args.path)
    try:
        storage = Storage(corpus_index.storage_options(args.storage_options))
        first = args.path[0] if isinstance(sources, list) else sources
        reader = None if first.split("?", 1)[0].endswith((".json", ".idx")) else make_reader(
            args.format or infer_format(storage.expand(sources)[0]), columns=args.columns, seq_len=args.seq_len,
            dtype=args.dtype)
        index, where, listed = inspect_corpus.find_index(sources, storage, reader,
                                                         args.cache_dir or sidecar.default_cache_dir())
    except (LookupError, ValueError, OSError) as error:
        return _usage_error("inspect", str(error))
    found = inspect_corpus.verify(index, where, storage, listed)
    print(inspect_corpus.render_verify(found), file=_out(args.json), flush=True)
    _write_json(args.json, found)
    return int(found["exit_code"])


def _index(args: argparse.Namespace) -> int:
    from shufflepoint._tools import corpus_index

    try:
        sources = corpus_index.sources_of(args.sources)
        corpus = corpus_index.open_corpus(
            sources, format=args.format, columns=args.columns, seq_len=args.seq_len, dtype=args.dtype,
            options=corpus_index.storage_options(args.storage_options), cache_dir=args.cache_dir,
            verify="checksum" if args.checksum else "version", list_storage=True)
        found = corpus_index.index_and_publish(corpus, sources)
        source = corpus_index.token_source(args.tokens, args.tokenize, args.tokenizer)
        if source is not None:
            found.update(corpus_index.publish_token_counts(corpus, source, args.count_workers))
    except (ValueError, TypeError, OSError, ImportError) as error:
        return _usage_error("index", str(error))
    print(corpus_index.render(found), file=_out(args.json), flush=True)
    _write_json(args.json, found)
    return EXIT_OK


def _which(args: argparse.Namespace) -> int:
    from shufflepoint._tools import which as _which_tool
    from shufflepoint._tools import which_dataset
    from shufflepoint._tools.which_checkpoint import CheckpointError, read_checkpoint

    try:
        found = read_checkpoint(args.checkpoint)
        dataset = which_dataset.open_dataset(args.dataset, args)
        result = _which_tool.answer(found, dataset, args.step, rank=args.rank, accumulation=args.accumulation,
                                    locate=not args.no_locate)
    except (CheckpointError, _which_tool.WhichError, which_dataset.DatasetError) as error:
        return _refused("which", str(error), args.json)
    try:
        _write_json(args.json, result)
    except OSError as error:
        return _refused("which", f"--json: cannot write {args.json}: {error.strerror or error}", None)
    print(_which_tool.render(result), file=_out(args.json), flush=True)
    return EXIT_OK


def _refused(command: str, message: str, json_path: str | None) -> int:
    """A refusal on one line of stderr, exit 2; with ``--json``, also ``{"error": ..., "exit_code": 2}`` there."""
    line = "; ".join(part.strip() for part in message.splitlines() if part.strip())
    if json_path is not None:
        try:
            _write_json(json_path, {"schema_version": 1, "command": command, "error": line, "exit_code": EXIT_USAGE})
        except OSError as error:
            line += f"; and --json: cannot write {json_path}: {error.strerror or error}"
    return _usage_error(command, line)


def _headroom(args: argparse.Namespace) -> int:
    from shufflepoint._tools import headroom as _headroom_tool
    from shufflepoint._tools.audit.config import load_target, parse_target
    from shufflepoint._tools.audit.verdicts import UsageError

    try:
        factory = load_target(parse_target(args.target))
        found = _headroom_tool.run_headroom(factory, args.workers, args.batches, args.warmup, args.device)
    except (UsageError, _headroom_tool.HeadroomError) as error:
        return _usage_error("headroom", str(error))
    print(_headroom_tool.render(found), file=_out(args.json), flush=True)
    _write_json(args.json, found)
    return EXIT_OK


def _doctor(args: argparse.Namespace) -> int:
    from shufflepoint._tools import doctor as _doctor

    found = _doctor.run_doctor()
    print(_doctor.render(found), file=_out(args.json), flush=True)
    _write_json(args.json, found)
    return int(found["exit_code"])


_COMMANDS = {"audit": _audit, "demo": _demo, "inspect": _inspect, "index": _index, "doctor": _doctor,
             "which": _which, "headroom": _headroom}


def main(argv: Sequence[str] | None = None) -> int:
    """The console script. Returns the exit code (argparse exits 2 itself on a bad command line)."""
    args = _parser().parse_args(argv)
    return _COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
