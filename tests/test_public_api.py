"""The public surface is deliberate: this test fails when __all__ drifts."""

import shufflepoint

EXPECTED = {
    "DataLoader",
    "DecodeImage",
    "HubError",
    "Identified",
    "Locatable",
    "OwnOrder",
    "Prefetching",
    "ReadsBatches",
    "Mixture",
    "Packed",
    "ORDERS",
    "Permutation",
    "ResumableSampler",
    "ResumeWarning",
    "SampleError",
    "ShardError",
    "Shards",
    "STATE_FIELDS",
    "StateError",
    "VideoClips",
    "__version__",
    "collate",
    "patch_accelerate",
    "permutation",
    "sample_rng",
    "torch_generator",
    "unpatch_accelerate",
}


def test_all_is_exactly_the_public_api():
    assert set(shufflepoint.__all__) == EXPECTED


def test_every_exported_name_exists_and_public_modules_are_private():
    for name in shufflepoint.__all__:
        obj = getattr(shufflepoint, name)
        module = getattr(obj, "__module__", "shufflepoint")
        assert module.startswith("shufflepoint"), name
        # defined under a private package (shufflepoint._loading.loader) or module
        # (shufflepoint.integrations.accelerate._patch): nothing but shufflepoint itself is public
        assert any(part.startswith("_") for part in module.split(".")[1:]) or module == "shufflepoint", (name, module)


def test_errors_have_the_documented_bases():
    assert issubclass(shufflepoint.StateError, ValueError)
    assert issubclass(shufflepoint.ResumeWarning, UserWarning)
    assert issubclass(shufflepoint.ShardError, OSError)
    error = shufflepoint.ShardError("s3://b/part-1.parquet", "vanished")
    assert error.shard == "s3://b/part-1.parquet" and str(error) == "shard s3://b/part-1.parquet: vanished"
    assert issubclass(shufflepoint.HubError, ValueError)
    assert shufflepoint.HubError("gated", "text").reason == "gated"


def test_dataloader_is_a_real_torch_dataloader():
    import torch.utils.data

    loader = shufflepoint.DataLoader(list(range(10)), 2)
    assert type(loader).__mro__[1] is torch.utils.data.DataLoader
    assert isinstance(loader, torch.utils.data.DataLoader)
    assert isinstance(shufflepoint.ResumableSampler(range(10), 1, 0), torch.utils.data.DistributedSampler)
