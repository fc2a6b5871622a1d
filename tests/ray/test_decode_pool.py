"""``shufflepoint.integrations.ray.RayDataLoader`` on a real local multi-node Ray cluster (a head and two worker
raylets on this machine, ``ray.cluster_utils.Cluster``): each rank's stream equals the in-process loader's,
batch for batch, pixels included, for photos (``DecodeImage``), token windows, ``Packed`` rows and video clips;
an actor SIGKILLed mid-epoch and a whole node removed change no byte; the pool grows and shrinks mid-epoch; a
sample's error arrives as itself; a missing or too-small cluster is refused at start; and trainers under a Gloo
group (torchrun's shape), SIGKILLed mid-epoch, resume on another world size in fresh processes, every sample of
the interrupted epoch once, each new rank's stream the in-process loader's from the same state.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("ray.train")  # first: without Ray, `import ray` finds this folder (a namespace package)
ray = pytest.importorskip("ray")
pytest.importorskip("PIL")

import torch  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import shufflepoint  # noqa: E402
from shufflepoint.integrations.ray import RayDataLoader  # noqa: E402

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import decode_corpora as corpora  # noqa: E402
from decode_trainer import loader_for  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]
PHOTOS = 60


@pytest.fixture(scope="module")
def cluster():
    os.environ["OMP_NUM_THREADS"] = "1"
    started = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    workers = [cluster.add_node(num_cpus=2, resources={"decode": 2}) for _ in range(2)]
    ray.init(address=cluster.address, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors cannot import tests/ray
    cluster.wait_for_nodes()
    print(f"cluster of 3 raylets: {time.monotonic() - started:.1f} s")
    yield cluster, workers
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    root = tmp_path_factory.mktemp("photos")
    return corpora.photo_tars(str(root / "tars"), PHOTOS, 8), str(root / "cache")


def streams(dataset, batches, actor_options=None, **kwargs):
    """The in-process loader's first ``batches`` batches, and the Ray loader's, with its pool."""
    expected = shufflepoint.DataLoader(dataset, **kwargs)
    loader = RayDataLoader(dataset, decode_actors=2, decode_cpus=0.5, actor_options=actor_options, **kwargs)
    return take(expected, batches), loader


def take(loader, batches):
    found = []
    while len(found) < batches:
        for batch in loader:
            found.append(batch)
            if len(found) == batches:
                break
    return found


def assert_same_stream(got, expected):
    assert len(got) == len(expected)
    for number, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert corpora.same(a, b), f"batch {number} differs"


def corpus(kind, tmp_path, photos):
    """(dataset, loader kwargs) of each kind the pool must carry."""
    if kind == "photos":
        return loader_for(*photos, rank=1, world_size=2)[0], dict(
            batch_size=4, seed=3, rank=1, world_size=2, transform=shufflepoint.DecodeImage(32))
    if kind == "tokens":
        tokens = shufflepoint.Shards(corpora.tokens(str(tmp_path / "tokens"), 6, 16), seq_len=16, progress=False)
        return tokens, dict(batch_size=3, seed=5, rank=0, world_size=2)
    if kind == "packed":
        return shufflepoint.Packed(corpora.documents(40), 16), dict(batch_size=2, seed=2, rank=1, world_size=3)
    pytest.importorskip("av")
    from video_files import videos

    videos(str(tmp_path / "videos"), [30, 12, 25])
    clips = shufflepoint.VideoClips(str(tmp_path / "videos" / "*.mp4"), frames_per_clip=4, stride=3,
                                    cache_dir=str(tmp_path / "clips"))
    return clips, dict(batch_size=2, seed=9, rank=0, world_size=2, decode_threads=2)


@pytest.mark.parametrize("kind", ["photos", "tokens", "packed", "video"])
def test_each_rank_s_stream_is_the_in_process_loader_s(cluster, photos, tmp_path, kind):
    dataset, kwargs = corpus(kind, tmp_path, photos)
    batches = len(shufflepoint.DataLoader(dataset, **kwargs)) * 3 // 2  # an epoch and a half
    expected, loader = streams(dataset, batches, **kwargs)
    assert_same_stream(take(loader, batches), expected)
    assert loader.pool.stats.batches == batches and loader.pool.stats.lost == 0
    loader.pool.close()


def test_a_killed_actor_and_a_removed_node_change_no_byte(cluster, photos):
    ray_cluster, (_, second) = cluster
    dataset, kwargs = corpus("photos", None, photos)
    kwargs["rank"], kwargs["world_size"] = 0, 1
    expected, loader = streams(dataset, 2 * len(shufflepoint.DataLoader(dataset, **kwargs)),
                               actor_options={"scheduling_strategy": "SPREAD"}, **kwargs)  # one actor a node
    loader.pool.resize(3)
    got, killed = [], None
    for batch in take(loader, 3):
        got.append(batch)
    killed = loader.pool.pids()[0]
    os.kill(killed, signal.SIGKILL)  # mid-epoch: its batches in flight are computed again
    got += take(loader, 3)
    assert loader.pool.stats.lost == 1 and loader.pool.stats.recomputed >= 1
    ray_cluster.remove_node(second)  # a whole raylet: its actors and the batches its object store held
    try:
        got += take(loader, len(expected) - len(got))
    finally:
        cluster[1][1] = ray_cluster.add_node(num_cpus=2, resources={"decode": 2})  # for the next tests
        ray_cluster.wait_for_nodes()
    assert_same_stream(got, expected)
    assert loader.pool.stats.lost >= 2  # the node's actor too
    assert killed not in loader.pool.pids()
    loader.pool.close()


def test_the_pool_grows_and_shrinks_mid_epoch(cluster, photos):
    dataset, kwargs = corpus("photos", None, photos)
    batches = len(shufflepoint.DataLoader(dataset, **kwargs))
    expected, loader = streams(dataset, batches, **kwargs)
    got = take(loader, 2)
    loader.pool.resize(4)
    got += take(loader, 2)
    loader.pool.resize(1)
    got += take(loader, batches - 4)
    assert_same_stream(got, expected)
    assert loader.pool.stats.started == 4 and loader.pool.size == 1 and len(loader.pool.pids()) == 1
    in_process = shufflepoint.DataLoader(dataset, **kwargs)
    take(in_process, batches)
    assert loader.state_dict() == in_process.state_dict()  # what the loop received, as in process
    loader.pool.close()


def test_a_sample_s_error_arrives_as_itself(cluster, tmp_path):
    broken = corpora.photo_tars(str(tmp_path / "broken"), 12, 6, corrupt=5)
    dataset = shufflepoint.Shards(broken, cache_dir=str(tmp_path / "cache"), progress=False)
    kwargs = dict(batch_size=4, seed=1, transform=shufflepoint.DecodeImage(32), rank=0, world_size=1)
    with pytest.raises(Exception) as in_process:
        list(shufflepoint.DataLoader(dataset, **kwargs))
    loader = RayDataLoader(dataset, decode_actors=1, decode_cpus=0.5, **kwargs)
    with pytest.raises(type(in_process.value)) as remote:
        list(loader)
    address = re.compile(r"0x[0-9a-f]+")  # Pillow's message names a BytesIO by its address
    assert type(remote.value) is type(in_process.value)
    assert address.sub("0x", str(remote.value)) == address.sub("0x", str(in_process.value))
    assert "000005" in str(remote.value)
    assert any("decode actor" in note for note in remote.value.__notes__)
    loader.pool.close()


def noisy(sample, rng):
    return sample + rng.random(3).astype("float32")


def test_a_batch_size_change_and_an_exclusion_mid_epoch_as_in_process(cluster):
    import numpy as np

    data = [np.full(3, i, np.float32) for i in range(40)]
    kwargs = dict(batch_size=3, seed=8, transform=noisy, rank=1, world_size=2, pin_memory=True)
    loaders = [shufflepoint.DataLoader(data, **kwargs), RayDataLoader(data, decode_actors=2, decode_cpus=0.5, **kwargs)]
    streams = []
    for loader in loaders:
        got, it = [], iter(loader)
        got += [next(it) for _ in range(2)]
        loader.set_batch_size(2)  # the live iterator drops what is in flight and goes on at the new size
        got += [next(it) for _ in range(2)]
        loader.exclude(range(10, 20))
        got += list(it)
        streams.append((got, loader.state_dict()))
    assert_same_stream(streams[1][0], streams[0][0])
    assert streams[1][1] == streams[0][1]
    loaders[1].pool.close()


def crash_on_seven(sample, rng):
    """A decoder that takes its process down (a segfault, the OOM killer) on one sample."""
    if sample == 7:
        os._exit(1)
    return sample


def test_a_batch_that_kills_every_actor_is_refused_after_its_retries(cluster):
    loader = RayDataLoader(list(range(16)), batch_size=4, seed=0, transform=crash_on_seven, rank=0, world_size=1,
                           decode_actors=1, decode_cpus=0.5, retries=1)
    with pytest.raises(RuntimeError, match=r"a batch: found lost with 2 actors in turn\n  expected: at most 1 sent"):
        list(loader)
    assert loader.pool.stats.lost == 2
    loader.pool.close()


def test_a_cluster_too_small_is_refused_at_start(cluster, photos):
    dataset, kwargs = corpus("photos", None, photos)
    with pytest.raises(RuntimeError, match=r"decode_actors: found 40\n.*the cluster has \d+ CPUs"):
        iter(RayDataLoader(dataset, decode_actors=40, **kwargs))
    with pytest.raises(RuntimeError, match=r"(?s)resources'\]\['gpu_decode'\].*the cluster has 0"):
        iter(RayDataLoader(dataset, actor_options={"resources": {"gpu_decode": 1}}, **kwargs))


def test_no_cluster_is_refused_at_start():
    code = ("import shufflepoint\nfrom shufflepoint.integrations.ray import RayDataLoader\n"
            "iter(RayDataLoader(list(range(8)), batch_size=2))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "no Ray cluster connected in this process" in done.stderr, done.stderr[-2000:]
    assert "ray.init(address='auto')" in done.stderr


def test_bad_arguments_are_refused_by_name():
    for kwargs, match in [({"num_workers": 2}, "num_workers: found 2"), ({"decode_actors": 0}, "decode_actors"),
                          ({"decode_cpus": -1}, "decode_cpus: found -1"),
                          ({"actor_options": {"max_restarts": 3}}, "max_restarts"),
                          ({"skip_bad_samples": True}, "skip_bad_samples: found True")]:
        with pytest.raises((ValueError, TypeError), match=match):
            RayDataLoader(list(range(8)), batch_size=2, **kwargs)


def run_trainers(world, address, photos, record, state, kill_at):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world),
               PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "..", "src"), os.environ.get("PYTHONPATH", "")]))
    script = os.path.join(HERE, "decode_trainer.py")
    ranks = [subprocess.Popen([sys.executable, script, address, *photos, record, state, str(kill_at)],
                              env=dict(env, RANK=str(r)), stderr=subprocess.PIPE, text=True) for r in range(world)]
    for process in ranks:
        _, err = process.communicate(timeout=240)
        expected = -signal.SIGKILL if kill_at >= 0 else 0
        assert process.returncode == expected, err[-3000:]


def records(record, rank):
    with open(os.path.join(record, f"rank{rank}.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_trainers_killed_mid_epoch_resume_on_another_world_size(cluster, photos, tmp_path):
    ray_cluster, _ = cluster
    record, state = str(tmp_path / "record"), str(tmp_path / "state.pt")
    os.makedirs(record)
    run_trainers(2, ray_cluster.address, photos, record, state, kill_at=3)  # mid-epoch 0: 8 of 60 samples a step
    first = [records(record, r) for r in range(2)]
    saved = torch.load(state)
    assert saved["epoch"] == 0 and [r["step"] for r in first[0]] == [1, 2, 3]
    dataset, kwargs = loader_for(*photos)
    for rank in range(2):  # the killed run's stream is the in-process loader's
        expected = take(shufflepoint.DataLoader(dataset, rank=rank, world_size=2, **kwargs), 3)
        assert [r["digest"] for r in first[rank]] == [corpora.digest(b) for b in expected]
    for rank in range(2):
        os.rename(os.path.join(record, f"rank{rank}.jsonl"), os.path.join(record, f"old{rank}.jsonl"))
    run_trainers(3, ray_cluster.address, photos, record, state, kill_at=-1)
    second = [records(record, r) for r in range(3)]
    for rank in range(3):  # each new rank: the in-process loader from the same state, batch for batch
        fresh = shufflepoint.DataLoader(dataset, rank=rank, world_size=3, verify_ranks=False, **kwargs)
        fresh.load_state_dict(saved)
        expected = take(fresh, len(second[rank]))
        assert [r["digest"] for r in second[rank]] == [corpora.digest(b) for b in expected], f"rank {rank}"
    epoch0 = [k for rank in first for r in rank for k in r["keys"]]
    epoch0 += [k for rank in second for r in rank if r["epoch"] == 0 for k in r["keys"]]
    assert set(epoch0) == {f"{i:06d}" for i in range(PHOTOS)}  # none lost
    assert len(epoch0) - PHOTOS < 3 * 4  # duplicates only as the tail's padding (the global batch's rest)
    epoch1 = sorted(k for rank in second for r in rank if r["epoch"] == 1 for k in r["keys"])
    assert set(epoch1) == {f"{i:06d}" for i in range(PHOTOS)}


def ray_train_loop(config):
    """A TorchTrainer worker: its rank's RayDataLoader (actors beside Ray Train's own workers), an epoch's digests."""
    import ray.train

    import shufflepoint as sp
    from shufflepoint.integrations.ray import RayDataLoader as Loader

    rank = ray.train.get_context().get_world_rank()
    dataset = sp.Shards(config["corpus"], cache_dir=config["cache"], progress=False)
    loader = Loader(dataset, batch_size=4, seed=3, transform=sp.DecodeImage(32), decode_actors=1, decode_cpus=0.5)
    with open(os.path.join(config["record"], f"rank{rank}.json"), "w") as out:
        json.dump([config["digest"](batch) for batch in loader], out)
    ray.train.report({"rank": rank})


def test_under_ray_train_each_worker_s_stream_is_the_in_process_loader_s(cluster, photos, tmp_path):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    ray.cloudpickle.register_pickle_by_value(corpora)  # the workers cannot import tests/ray
    record = str(tmp_path / "record")
    os.makedirs(record)
    config = {"corpus": photos[0], "cache": photos[1], "record": record, "digest": corpora.digest}
    TorchTrainer(ray_train_loop, train_loop_config=config, torch_config=TorchConfig(backend="gloo"),
                 scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}),
                 run_config=RunConfig(storage_path=str(tmp_path / "runs"))).fit()
    dataset = shufflepoint.Shards(photos[0], cache_dir=photos[1], progress=False)
    for rank in range(2):
        expected = shufflepoint.DataLoader(dataset, batch_size=4, seed=3, rank=rank, world_size=2,
                                           transform=shufflepoint.DecodeImage(32))
        with open(os.path.join(record, f"rank{rank}.json")) as f:
            assert json.load(f) == [corpora.digest(batch) for batch in expected], f"rank {rank}"
