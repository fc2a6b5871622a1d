"""The peers' mixtures beside ours in ``make bench-locality MIXTURES=1`` (issue 33, item 7): the same token
shards, dealt to the same two sources (``web``: even shards, ``books``: odd), written in each peer's own format
(MDS for MosaicML Streaming, ``litdata.optimize`` chunks for LitData; one shard or chunk per source shard) into
the same local S3 server, read by 2 nodes x 2 ranks under torchrun (benchmarks/_locality_peer_worker.py in the
peer's venv, ``make bench-shards``'), each node with its own cache folder and S3 key; the same proxy counts every
GET body byte per node (the peers' index files included). A node's share is the peer's corpus bytes / 2.

Plans: proportions = rows (each source once an epoch) and 3:1 (web over-, books under-sampled), two epochs on
the same caches (LitData also with the one node it counts on CPU-only machines); and a resize: 2 x 2 ranks to
50% of the epoch, then 3 nodes x 2 ranks from rank 0's dataloader state (a refusal is a row with the peer's
error). A peer whose venv is missing is left out, with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_locality_peer_worker.py"
PEERS = {"streaming": "MosaicML Streaming 0.13.0", "litdata": "LitData 0.2.76"}


def python(peer: str) -> Path:
    return HERE.parent / f".venv-bench-{peer}" / "bin" / "python"


def build(peer: str, root: Path, tokens: Path, spec: dict, server: Any) -> tuple[list[str], int]:
    """The two sources in the peer's format (converted once, kept in ``root``), uploaded; their URLs and bytes."""
    paths = sorted(tokens.glob("part-*.bin"))
    urls, total = [], 0
    for name, inputs in (("web", paths[0::2]), ("books", paths[1::2])):
        out = root / f"mix-{peer}-{name}"
        if not out.exists():
            options = {"peer": peer, "out": str(out), "inputs": [str(p) for p in inputs], "seq_len": spec["seq_len"],
                       "rows": spec["rows"]}
            subprocess.run([str(python(peer)), str(WORKER), "convert", json.dumps(options)], check=True)
        client = server.client()
        for path in sorted(p for p in out.rglob("*") if p.is_file()):
            data = path.read_bytes()
            client.put_object(Bucket="bench", Key=f"mix-{peer}-{name}/{path.relative_to(out)}", Body=data)
            total += len(data)
        urls.append(f"s3://bench/mix-{peer}-{name}")
    return urls, total


def coverage(marks: Path, epoch: int, samples: int) -> str:
    """What the ranks read in an epoch: samples read / the corpus', and the distinct ones / the corpus'."""
    found = [np.load(path) for path in sorted(marks.glob(f"ids-*-{epoch}.npy"))]
    read = np.concatenate(found) if found else np.zeros(0, dtype=np.int64)
    return f"{read.size / samples:.2f} read, {np.unique(read).size / samples:.2f} distinct"


def peer_mixtures(locality: Any, server: Any, root: Path, tokens: Path, spec: dict, fresh: Any) -> list[dict]:
    """Each peer's plans on 2 nodes x 2 ranks (rows as ``locality.mixtures``'); a missing venv: one row saying so."""
    rows: list[dict] = []
    samples = spec["shards"] * spec["rows"]
    for peer, title in PEERS.items():
        venv = python(peer).parent.parent
        if not (venv / ".installed").exists():
            rows.append({"scenario": f"{title}: not run ({venv.name} not built: make bench-shards builds it)",
                         "nodes": 2, "ratio": [], "bytes": {}})
            continue
        urls, corpus_bytes = build(peer, root, tokens, spec, server)
        share = corpus_bytes / 2
        job = {"peer": peer, "urls": urls, "endpoint": server.endpoint_url, "seed": locality.SEED,
               "batch_size": locality.BATCH}
        plans = [("proportions = rows", [0.5, 0.5], {}), ("proportions 3:1", [0.75, 0.25], {})]
        if peer == "litdata":  # as it counts nodes without CUDA: one
            plans.append(("proportions = rows, one node as counted on CPU", [0.5, 0.5], {"cpu_count": True}))
        for label, weights, extra in plans:
            folder = fresh(f"peer-{peer}-{len(rows)}")
            marks = folder / "marks"
            marks.mkdir()
            script = [str(python(peer)), str(WORKER), json.dumps({**job, "weights": weights, "epochs": [0, 1],
                                                                  "marks": str(marks), **extra})]
            found = locality.run_agents(server, folder, marks, ["n0", "n1"], ["indexed", "epoch-0", "epoch-1"],
                                        script, nproc=2, counted=None)
            name = f"{title}, {label}"
            rows.append({"scenario": f"{name}: epoch 1 (2 nodes x 2 ranks)", "nodes": 2, "peer": peer,
                         "ratio": locality.ratios(found["epoch-0"], share), "bytes": found["epoch-0"],
                         "index_ratio": locality.ratios(found["indexed"], share),
                         "samples": coverage(marks, 0, samples)})
            rows.append({"scenario": f"{name}: epoch 2, same caches", "nodes": 2, "peer": peer,
                         "ratio": locality.ratios(found["epoch-1"], share), "bytes": found["epoch-1"],
                         "samples": coverage(marks, 1, samples)})
        rows.append(resize(locality, server, fresh, job, title, corpus_bytes, samples))
    return rows


def resize(locality: Any, server: Any, fresh: Any, job: dict, title: str, corpus_bytes: int, samples: int) -> dict:
    """Proportions = rows on 2 nodes x 2 ranks to 50% of the epoch (rank 0 saves the dataloader's state), then
    the rest on 3 nodes x 2 ranks from that state; the first 2 nodes keep their caches. A refusal is a row."""
    folder = fresh(f"peer-{job['peer']}-resize")
    state = str(folder / "state.pt")
    scenario = f"{title}, proportions = rows: 2 x 2 ranks to 50%, then 3 nodes x 2 ranks: the rest of the epoch"
    runs = [(["n0", "n1"], ["indexed", "stopped-0"], {"stop_after": samples // 8, "state_out": state}),
            (["n0", "n1", "n2"], ["indexed", "epoch-0"], {"state_in": state})]
    for nodes, phases, extra in runs:
        marks = folder / f"marks-{len(nodes)}"
        marks.mkdir()
        script = [str(python(job["peer"])), str(WORKER), json.dumps({**job, "weights": [0.5, 0.5], "epochs": [0],
                                                                     "marks": str(marks), **extra})]
        try:
            found = locality.run_agents(server, folder, marks, nodes, phases, script, nproc=2, counted=None)
        except RuntimeError as error:  # the peer refused or failed: its first rank's error, no number
            lines = [line for log in sorted(marks.glob("agent-*.log")) for line in log.read_text().splitlines()]
            reason = next((line for line in lines if line.startswith("[rank") and "Error: " in line), str(error)[-300:])
            return {"scenario": f"{scenario}: **refused**, `{reason.split(']: ', 1)[-1].strip()[:300]}`", "nodes": 3,
                    "ratio": [], "bytes": {}}
    return {"scenario": scenario, "nodes": 3, "peer": job["peer"], "bytes": found["epoch-0"],
            "ratio": locality.ratios(found["epoch-0"], corpus_bytes * 0.5 / 3),
            "samples": coverage(marks, 0, samples) + " (the second job's)"}


if __name__ == "__main__":
    sys.exit("run through benchmarks/locality.py --mixtures (or --peers)")
