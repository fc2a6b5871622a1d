"""shufflepoint as torchtitan's data loader (torchtitan 0.3.0): ``ShufflepointDataLoader``.

torchtitan builds its data loader from the job's config (``config.dataloader.build(dp_world_size=,
dp_rank=, tokenizer=, seq_len=, local_batch_size=, ...)``) and checkpoints it under ``"dataloader"``
with ``torch.distributed.checkpoint``. Its own loaders keep a per-rank iterator state and refuse a
checkpoint taken at another data-parallel degree ("dataloader resharding is not supported yet").
``ShufflepointDataLoader.Config(build_dataset=...)`` in its place keeps the same trainer, checkpointer
and batch format, and its state is shufflepoint's: a resume on another data-parallel degree serves each
row of the interrupted epoch once, and ``Packed`` rows and ``Mixture`` schedules survive it::

    from shufflepoint.integrations.torchtitan import ShufflepointDataLoader

    config.dataloader = ShufflepointDataLoader.Config(
        build_dataset=lambda tokenizer, row_tokens: shufflepoint.Packed(corpus, row_tokens, tokenize=...),
        seed=1234)

Modules: ``_touch`` (every touch point on torchtitan, and the version check), ``_dataloader`` (the loader
and the batch conversion). See examples/torchtitan_loader.py and docs/integrations.md.

Words: docs/glossary.md (state, rank, world size, elastic).
"""

from shufflepoint.integrations.torchtitan._dataloader import ShufflepointDataLoader, next_token_batch
from shufflepoint.integrations.torchtitan._touch import TESTED_TORCHTITAN, check_version

__all__ = ["TESTED_TORCHTITAN", "ShufflepointDataLoader", "check_version", "next_token_batch"]
