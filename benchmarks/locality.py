"""``make bench-locality``: the bytes each node fetches from S3 under the corpus deals (issue 18).

Simulated nodes, as a cluster runs them: one torchrun agent per node (static rendezvous on
127.0.0.1, one rank each), its own cache folder and its own S3 access key; the tests' S3 server
(moto) behind a proxy that counts the body bytes of every GET per access key. The corpus is
``make bench-shards``' token corpus (1,000 shards of 10,000 windows, 1.28 GB; ``--quick``: 100 of
2,000). For each scenario the table gives, per node, the bytes fetched divided by the node's share
(the corpus, or what remained of the epoch, over the nodes):

- a whole epoch on 1, 2, 4 and 8 nodes from fresh caches (and the index's bytes before the first batch);
- a second epoch on the same nodes and caches;
- a re-deal at 50% of the epoch, 4 -> 3 and 4 -> 6 nodes at batch 256 a node (the global batch
  changes; the first nodes keep their caches);
- a resize at 50% of the epoch at a fixed global batch of 768, 4 x 192 -> 2 x 384, 3 x 256 and
  6 x 128 (the same global batches as the 4-node run, ``docs/shards.md``, "A fixed global batch");
- the ``strided`` deal on 2 nodes, for comparison (each node reads the whole corpus).

With ``--mixtures`` (issue 33) the LLM pipelines on 2 nodes x 2 ranks, and beside them the peers' mixtures
(benchmarks/locality_peers.py: MosaicML Streaming's streams with proportions, LitData's
``CombinedStreamingDataset``, in ``make bench-shards``' venvs) over the same shards and the same counter;
``--peers``: only our token Mixtures and the peers'. The single-stream peers are not rerun here;
docs/benchmarks-shards.md cites their figures. Usage: ``python benchmarks/locality.py [--quick] [--resizes]
[--mixtures [--only NAME] | --peers]``; writes ``results/locality[_quick][_resizes|_mixtures[_NAME]|_peers].md``
and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "shards"))
sys.path.insert(0, str(HERE.parent / "tests"))
import corpus as corpora  # noqa: E402  (benchmarks/shards/corpus.py)
import locality_peers  # noqa: E402  (benchmarks/locality_peers.py)

import s3_server  # noqa: E402  (tests/s3_server.py)

WORKER = HERE / "_locality_worker.py"
BATCH, SEED = 256, 1
GLOBAL_BATCH = 768  # the fixed-global-batch resizes: 4 x 192 -> 2 x 384, 3 x 256, 6 x 128
# The default 65,536 rows for the full corpus (a node's share at 8 nodes is 1.25M rows: 1/19 of it);
# one shard's rows for the quick one, whose share at 8 nodes is 25,000 rows (docs/shards.md, choosing it).
SHUFFLE_BLOCK = {"full": 65_536, "quick": 2_000}
SHARD_PATHS = "/part-"  # the bytes counted: shard GETs (not the index's)


def free_port() -> int:
    return int(s3_server.free_port())


def run_job(server: s3_server.S3Server, url: str, work: Path, spec: dict, nodes: list[str], phases: list[str],
            nproc: int = 1, **job: object) -> dict[str, dict[str, int]]:
    """One job on ``nodes`` (cache folders ``work/cache-<node>``): bytes per node fetched in each phase."""
    marks = Path(tempfile.mkdtemp(dir=work, prefix="marks-"))
    options = dict(server.storage_options)
    spec = {"url": url, "storage_options": options, "seq_len": spec["seq_len"], "batch_size": BATCH, "seed": SEED,
            "marks": str(marks), "deal": "spans", "shuffle_block": spec["shuffle_block"], **job}
    return run_agents(server, work, marks, nodes, phases, [sys.executable, str(WORKER), json.dumps(spec)], nproc)


def run_agents(server: s3_server.S3Server, work: Path, marks: Path, nodes: list[str], phases: list[str],
               script: list[str], nproc: int = 1, counted: str | None = SHARD_PATHS) -> dict[str, dict[str, int]]:
    """One torchrun agent per node running ``script`` ([python, worker, args...]; each node its cache folder
    ``work/cache-<node>``, ``SP_NODE`` its S3 key): the GET bytes of paths containing ``counted`` per node in
    each phase (the workers stop between phases, benchmarks/_phase.py)."""
    port = free_port()
    agents = []
    for rank, node in enumerate(nodes):
        env = dict(os.environ, SP_NODE=node, SP_CACHE=str(work / f"cache-{node}"), OMP_NUM_THREADS="1",
                   TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
        cmd = [script[0], "-m", "torch.distributed.run", f"--nnodes={len(nodes)}", f"--node-rank={rank}",
               f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1", f"--master-port={port}", *script[1:]]
        log = open(marks / f"agent-{node}.log", "w")
        agents.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env))
    found: dict[str, dict[str, int]] = {}
    before = server.counts.snapshot(counted)
    try:
        for name in phases:
            while not (marks / name).exists():
                if any(agent.poll() not in (None, 0) for agent in agents):
                    logs = "\n".join((marks / f"agent-{n}.log").read_text()[-2000:] for n in nodes)
                    raise RuntimeError(f"an agent failed before {name}:\n{logs}")
                time.sleep(0.05)
            now = server.counts.snapshot(counted)
            found[name] = {node: now.get(node, 0) - before.get(node, 0) for node in nodes}
            before = now
            (marks / (name + ".go")).touch()
        for agent in agents:
            agent.wait(timeout=600)
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
    done = json.loads((marks / "done.json").read_text()) if (marks / "done.json").exists() else {}
    found["_run"] = done
    return found


def ratios(bytes_by_node: dict[str, int], share: float) -> list[float]:
    return [round(b / share, 3) for b in bytes_by_node.values()]


def resizes(server: s3_server.S3Server, url: str, spec: dict, corpus_bytes: int, fresh,
            fixed_only: bool = False) -> list[dict]:
    """4 nodes to 50% of an epoch, then the rest on other node counts: re-deals at batch 256 a node (the
    global batch changes), and resizes at a fixed global batch (the same global batches, ``docs/shards.md``).
    The scenarios say whether remote shards were read by range (``SHUFFLEPOINT_RANGED_READS``)."""
    plans = [] if fixed_only else [(new, BATCH, BATCH, f"4 nodes to 50%, then {new} nodes: the rest of the epoch")
                                   for new in (3, 6)]
    plans += [(new, GLOBAL_BATCH // 4, GLOBAL_BATCH // new, f"4 x {GLOBAL_BATCH // 4} to 50%, then {new} x "
               f"{GLOBAL_BATCH // new} (global batch {GLOBAL_BATCH} kept): the rest of the epoch") for new in (2, 3, 6)]
    reads = {"1": "ranged reads", "0": "whole shards"}.get(os.environ.get("SHUFFLEPOINT_RANGED_READS", "").strip(),
                                                            "default reads (Parquet and token shards by range)")
    rows: list[dict] = []
    for new, before, after, scenario in plans:
        scenario = f"{scenario}, {reads}"
        folder = fresh(f"resize-{new}-{after}")
        state = str(folder / "state.pt")
        half = run_job(server, url, folder, spec, [f"n{k}" for k in range(4)], ["indexed", "stopped-0"], epochs=[0],
                       stop_after=0.5, state_out=state, batch_size=before)
        rest = run_job(server, url, folder, spec, [f"n{k}" for k in range(new)], ["indexed", "epoch-0"], epochs=[0],
                       state_in=state, batch_size=after)
        remaining = corpus_bytes * (1 - 0.5)
        rows.append({"scenario": scenario, "nodes": new, "ratio": ratios(rest["epoch-0"], remaining / new),
                     "bytes": rest["epoch-0"], "first_half_ratio": ratios(half["stopped-0"], corpus_bytes * 0.5 / 4)})
    return rows


def upload_mixture_sources(server: s3_server.S3Server, tokens: Path, work: Path) -> dict[str, object]:
    """The token shards dealt alternately to two sources (``web/``, ``books/``), and Parquet documents of 20-300
    tokens cut from them (``docs-web/``, ``docs-books/``, an ``input_ids`` column) for ``Packed``; their bytes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    client = server.client()
    paths = sorted(tokens.glob("*.bin"))
    sizes = {"web": 0, "books": 0, "docs-web": 0, "docs-books": 0}
    rng = np.random.default_rng(0)
    folder = work / "docs"
    folder.mkdir(parents=True, exist_ok=True)
    for number, path in enumerate(paths):
        name = ("web", "books")[number % 2]
        data = path.read_bytes()
        client.put_object(Bucket="bench", Key=f"{name}/{path.name}", Body=data)
        sizes[name] += len(data)
        ids = np.frombuffer(data, dtype=np.uint16).astype(np.int32)
        cuts = np.cumsum(rng.integers(20, 300, size=ids.size // 20))
        cuts = cuts[cuts < ids.size]
        table = pa.table({"input_ids": pa.array([part.tolist() for part in np.split(ids, cuts)],
                                                type=pa.list_(pa.int32()))})
        out = folder / f"part-{number:05d}.parquet"
        pq.write_table(table, out, row_group_size=256)
        client.put_object(Bucket="bench", Key=f"docs-{name}/{out.name}", Body=out.read_bytes())
        sizes[f"docs-{name}"] += out.stat().st_size
    return sizes


def mixtures(server: s3_server.S3Server, tokens: Path, spec: dict, fresh, peers_only: bool = False,
             only: str | None = None) -> list[dict]:
    """Issue 33: the LLM pipelines on 2 nodes x 2 ranks (each node its own cache and S3 key), two epochs:
    token windows, a Mixture of two sources (weights = rows: each once an epoch) and a scheduled one (3:1, then
    1:3 from the first epoch's middle), each under spans and strided, and Packed documents alone and mixed.
    ``only``: the pipelines whose name holds it (and no resize)."""
    sizes = upload_mixture_sources(server, tokens, fresh("docs-build"))
    tokens_both = ["s3://bench/web/part-*.bin", "s3://bench/books/part-*.bin"]
    docs_both = ["s3://bench/docs-web/part-*.parquet", "s3://bench/docs-books/part-*.parquet"]
    both, docs = sizes["web"] + sizes["books"], sizes["docs-web"] + sizes["docs-books"]
    plans = [
        ("Shards (token windows)", dict(urls=tokens_both[:1]), sizes["web"]),
        ("Mixture of 2 Shards, weights = rows", dict(urls=tokens_both, pipeline="mixture"), both),
        ("Mixture of 2 Shards, scheduled 3:1 -> 1:3", dict(urls=tokens_both, pipeline="scheduled"), both),
        ("Packed(Shards(parquet))", dict(urls=docs_both[:1], packed=spec["seq_len"]), sizes["docs-web"]),
        ("Mixture of 2 Packed, weights = rows", dict(urls=docs_both, packed=spec["seq_len"], pipeline="mixture"),
         docs),
        ("Mixture of 2 Packed, scheduled 3:1 -> 1:3", dict(urls=docs_both, packed=spec["seq_len"],
                                                             pipeline="scheduled"), docs),
    ]
    if peers_only:  # the rows the peers' mixtures compare with
        plans = [plan for plan in plans if plan[0].startswith("Mixture of 2 Shards")]
    if only:
        plans = [plan for plan in plans if only in plan[0]]
    rows: list[dict] = []
    for scenario, job, corpus_bytes in plans:
        for deal in ("spans",) if peers_only else ("spans", "strided"):
            if deal == "strided" and "Mixture" not in scenario:
                continue
            found = run_job(server, "", fresh(f"mix-{len(rows)}"), spec, ["n0", "n1"],
                            ["indexed", "epoch-0", "epoch-1"], nproc=2, epochs=[0, 1], deal=deal, **job)
            share = corpus_bytes / 2
            first, second = ratios(found["epoch-0"], share), ratios(found["epoch-1"], share)
            rows.append({"scenario": f"{scenario}, {deal}: epoch 1 (2 nodes x 2 ranks)", "nodes": 2, "ratio": first,
                         "bytes": found["epoch-0"], "index_ratio": ratios(found["indexed"], share)})
            rows.append({"scenario": f"{scenario}, {deal}: epoch 2, same caches", "nodes": 2, "ratio": second,
                         "bytes": found["epoch-1"]})
    if not only:
        rows.append(mixture_resize(server, fresh, spec, dict(urls=tokens_both, pipeline="mixture"), both))
    return rows


def mixture_resize(server: s3_server.S3Server, fresh, spec: dict, job: dict, corpus_bytes: int) -> dict:
    """The Mixture of 2 Shards (weights = rows) on 2 nodes x 2 ranks to 50% of the epoch, then the rest on 3 nodes
    x 2 ranks (re-dealt, batch 256 a rank; the first 2 nodes keep their caches), as the peers' resizes."""
    folder = fresh("mix-resize")
    state = str(folder / "state.pt")
    run_job(server, "", folder, spec, ["n0", "n1"], ["indexed", "stopped-0"], nproc=2, epochs=[0], stop_after=0.5,
            state_out=state, **job)
    rest = run_job(server, "", folder, spec, ["n0", "n1", "n2"], ["indexed", "epoch-0"], nproc=2, epochs=[0],
                   state_in=state, **job)
    return {"scenario": "Mixture of 2 Shards, weights = rows, spans: 2 x 2 ranks to 50%, then 3 nodes x 2 ranks: the "
                        "rest of the epoch", "nodes": 3, "ratio": ratios(rest["epoch-0"], corpus_bytes * 0.5 / 3),
            "bytes": rest["epoch-0"]}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the small corpus (100 shards of 2,000 windows)")
    parser.add_argument("--resizes", action="store_true", help="only the resizes at 50%% of an epoch")
    parser.add_argument("--mixtures", action="store_true", help="only the LLM pipelines: Packed, Mixture, scheduled, "
                        "and the peers' mixtures")
    parser.add_argument("--peers", action="store_true", help="only our token Mixtures and the peers' mixtures")
    parser.add_argument("--only", default=None, help="with --mixtures: only the pipelines whose name holds this "
                        "(e.g. Packed), without the peers")
    parser.add_argument("--ranged-both", action="store_true", help="fixed-global-batch resizes, ranged off and on")
    parser.add_argument("--out", default=str(HERE / "results"))
    return parser.parse_args()


def main() -> None:
    args = arguments()
    root = HERE.parent / ".bench-cache" / "shards" / ("quick" if args.quick else "full")
    spec = dict(corpora.QUICK if args.quick else corpora.FULL)
    spec["shuffle_block"] = SHUFFLE_BLOCK["quick" if args.quick else "full"]
    root.mkdir(parents=True, exist_ok=True)
    tokens = corpora.build_tokens(root, spec)
    corpus_bytes = corpora.folder_bytes(tokens, (".bin",))
    server = s3_server.S3Server().start()
    work = Path(tempfile.mkdtemp(prefix="bench-locality-"))
    rows: list[dict] = []
    try:
        server.create_bucket("bench")
        client = server.client()
        for path in sorted(tokens.glob("*.bin")):
            client.put_object(Bucket="bench", Key=f"tok/{path.name}", Body=path.read_bytes())
        url = "s3://bench/tok/part-*.bin"

        def fresh(name: str) -> Path:
            folder = work / name
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            return folder

        if args.mixtures or args.peers:
            rows += mixtures(server, tokens, spec, fresh, peers_only=args.peers, only=args.only)
            if not args.only:
                rows += locality_peers.peer_mixtures(sys.modules[__name__], server, root, tokens, spec, fresh)
        only = args.resizes or args.mixtures or args.peers or args.ranged_both
        for count in () if only else (1, 2, 4, 8):
            nodes = [f"n{k}" for k in range(count)]
            found = run_job(server, url, fresh(f"whole-{count}"), spec, nodes, ["indexed", "epoch-0", "epoch-1"],
                            epochs=[0, 1])
            share = corpus_bytes / count
            rows.append({"scenario": f"{count} node(s), epoch 1, fresh caches", "nodes": count,
                         "index_bytes": found["indexed"], "ratio": ratios(found["epoch-0"], share),
                         "bytes": found["epoch-0"], "run": found["_run"]})
            rows.append({"scenario": f"{count} node(s), epoch 2, same caches", "nodes": count,
                         "ratio": ratios(found["epoch-1"], share), "bytes": found["epoch-1"]})
        if args.ranged_both:
            for value in ("0", "1"):
                os.environ["SHUFFLEPOINT_RANGED_READS"] = value
                rows += resizes(server, url, spec, corpus_bytes, fresh, fixed_only=True)
        elif not (args.mixtures or args.peers):
            rows += resizes(server, url, spec, corpus_bytes, fresh)
        if not only:
            found = run_job(server, url, fresh("strided-2"), spec, ["n0", "n1"], ["indexed", "epoch-0"], epochs=[0],
                            deal="strided")
            rows.append({"scenario": "2 nodes, strided deal (0.2's), epoch 1", "nodes": 2,
                         "ratio": ratios(found["epoch-0"], corpus_bytes / 2), "bytes": found["epoch-0"]})
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    write(Path(args.out), {"spec": spec, "corpus_bytes": corpus_bytes, "rows": rows, "quick": args.quick,
                           "resizes": args.resizes or args.ranged_both, "mixtures": args.mixtures, "only": args.only,
                           "peers": args.peers,
                           "ranged_both": args.ranged_both, "load_average": os.getloadavg()})


def write(out: Path, result: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    only = f"_{result['only'].lower()}" if result.get("only") else ""
    name = ("locality_quick" if result["quick"] else "locality") + ("_resizes" if result.get("resizes") else "") + (
        "_mixtures" if result.get("mixtures") else "") + only + ("_peers" if result.get("peers") else "") + (
        "_ranged" if result.get("ranged_both") else "")
    (out / f"{name}.json").write_text(json.dumps(result, indent=1))
    spec = result["spec"]
    lines = [f"# make bench-locality{' (QUICK=1)' if result['quick'] else ''}", "",
             f"Token corpus: {spec['shards']} shards x {spec['rows']} windows of {spec['seq_len']} tokens, "
             f"{result['corpus_bytes'] / 1e6:.0f} MB in the local S3 server, shuffle_block {spec['shuffle_block']}, "
             f"batch {BATCH} a node unless the scenario says, one rank a node. Ratio = GET bytes of a node / its "
             "share (the corpus, or what remained of the epoch, over the nodes); one value per node. Load "
             f"average at the end: {', '.join(f'{v:.1f}' for v in result.get('load_average', ()))}.", "",
             "| scenario | GET bytes / share, per node | worst | index GET bytes per node | samples (all ranks) |",
             "|---|---|---|---|---|"]
    for row in result["rows"]:
        index = ", ".join(str(v) for v in row["index_bytes"].values()) if "index_bytes" in row else ""
        if "index_ratio" in row:  # bytes before the first batch, per node / its share (Packed counts tokens)
            index = ", ".join(f"{r:.3f}" for r in row["index_ratio"]) + " of the share"
        worst = f"{max(row['ratio']):.3f}" if row["ratio"] else "—"
        lines.append(f"| {row['scenario']} | {', '.join(f'{r:.3f}' for r in row['ratio'])} | "
                     f"{worst} | {index} | {row.get('samples', '')} |")
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
