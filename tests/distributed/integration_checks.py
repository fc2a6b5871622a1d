"""Shared checks for the framework examples: what an uninterrupted run gives each rank, the
exactly-once reading of an epoch that was split between runs of different world sizes, and one
``shufflepoint audit`` run with its JSON report.

The uninterrupted reference is the loader itself, one per simulated rank: the data order is a pure
function of (seed, epoch, position), so no processes are needed to know what each rank must get.
"""

import json
from collections import defaultdict

import torch

import shufflepoint


def read_records(prefix, world_size):
    """Per rank, the JSON lines an example appended with --record (a torn last line is dropped)."""
    runs = []
    for rank in range(world_size):
        lines = []
        with open(f"{prefix}.rank{rank}") as f:
            for line in f:
                try:
                    lines.append(json.loads(line))
                except json.JSONDecodeError:  # only a SIGKILL mid-write leaves one, at the end
                    continue
        runs.append(lines)
    return runs


def reference(n, seed, world_size, batch_size, epochs, drop_last=False):
    """Per rank, [(epoch, ids)] of an uninterrupted run of shufflepoint.DataLoader."""
    ids = torch.utils.data.TensorDataset(torch.arange(n))
    streams = []
    for rank in range(world_size):
        loader = shufflepoint.DataLoader(ids, batch_size=batch_size, seed=seed, drop_last=drop_last,
                                         rank=rank, world_size=world_size)
        stream = []
        while loader.epoch < epochs:
            epoch = loader.epoch
            stream.extend((epoch, batch.tolist()) for (batch,) in loader)
        streams.append(stream)
    return streams


def batches(records):
    return [(r["epoch"], r["ids"]) for r in records]


def epoch_samples(records, epoch):
    """One rank's samples of ``epoch``, in the order it received them."""
    return [i for r in records if r["epoch"] == epoch for i in r["ids"]]


def global_stream(per_rank_samples):
    """Interleave ranks back into the global stream: rank r's t-th sample is at position r + W*t."""
    world_size = len(per_rank_samples)
    lengths = {len(s) for s in per_rank_samples}
    assert len(lengths) == 1, f"ranks received different numbers of samples: {lengths}"
    return [per_rank_samples[t % world_size][t // world_size] for t in range(world_size * lengths.pop())]


def assert_epoch_exactly_once(n, seed, epoch, parts):
    """``parts``: the runs that shared ``epoch``, in order, each as per-rank records. Together they
    must read the epoch's global order front to back, each sample once, plus fewer than
    world_size padding repeats (the tail wraps to the start of the epoch, as documented)."""
    order = shufflepoint.permutation(n, seed, epoch)
    stream = []
    for per_rank in parts:
        stream.extend(global_stream([epoch_samples(records, epoch) for records in per_rank]))
    last_world = len(parts[-1])
    assert len(stream) >= n and len(stream) - n < last_world, f"epoch {epoch}: {len(stream)} samples for {n}"
    assert stream == [int(order[p % n]) for p in range(len(stream))], f"epoch {epoch}: not the global order"
    counts = defaultdict(int)
    for sample in stream[:n]:
        counts[sample] += 1
    assert sorted(counts) == list(range(n)) and set(counts.values()) == {1}


def run_audit(tmp_path, capsys, targets, target, *flags):
    """``shufflepoint audit TARGETS:TARGET FLAGS`` in this process (it launches its own workers):
    (exit code, stdout, stderr, the JSON report), the report's exit code checked against the return."""
    from shufflepoint._tools.cli import main

    report_path = tmp_path / "report.json"
    code = main(["audit", f"{targets}:{target}", *flags, "--json", str(report_path)])
    out, err = capsys.readouterr()
    report = json.loads(report_path.read_text())
    assert report["exit_code"] == code
    return code, out, err, report
