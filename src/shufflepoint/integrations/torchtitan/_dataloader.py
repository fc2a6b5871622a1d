"""``ShufflepointDataLoader``: a torchtitan data loader whose order survives a change of data-parallel degree."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from shufflepoint._errors import Plain, refusal
from shufflepoint._loading.loader import DataLoader
from shufflepoint.integrations.torchtitan._touch import IGNORE_INDEX, BaseDataLoader

Batch = tuple[dict[str, torch.Tensor], torch.Tensor]


def next_token_batch(rows: dict[str, torch.Tensor]) -> Batch:
    """Collated ``Packed`` rows of ``seq_len + 1`` tokens as torchtitan's batch: inputs and positions of the
    first ``seq_len`` tokens, labels the next token, ``-100`` where the next token opens another document
    (torchtitan's own text loader never predicts across a document edge either).

    >>> ids = torch.tensor([[5, 6, 7, 8, 9]]); positions = torch.tensor([[0, 1, 0, 1, 2]])
    >>> inputs, labels = next_token_batch({"input_ids": ids, "position_ids": positions})
    >>> inputs["input"].tolist(), inputs["positions"].tolist(), labels.tolist()
    ([[5, 6, 7, 8]], [[0, 1, 0, 1]], [[6, -100, 8, 9]])
    """
    ids, positions = rows["input_ids"], rows["position_ids"]
    labels = ids[:, 1:].clone()
    labels[positions[:, 1:] == 0] = IGNORE_INDEX
    return {"input": ids[:, :-1], "positions": positions[:, :-1]}, labels


class ShufflepointDataLoader(BaseDataLoader):
    """torchtitan's data loader, read by ``shufflepoint.DataLoader``: set it as the job's
    ``dataloader`` config and torchtitan's trainer builds, iterates and checkpoints it as its own.

    ``Config.build_dataset(tokenizer=, row_tokens=)`` returns the map-style dataset of rows of
    ``row_tokens = seq_len + 1`` tokens: a ``shufflepoint.Packed`` corpus, or a ``Mixture`` of them
    (a schedule too). Its state is a few integers, the same on every rank, so a checkpoint taken at
    one data-parallel degree resumes at any other (torchtitan's own loaders refuse that), each row of
    the interrupted epoch served once; at the same degree the batches continue exactly::

        config.dataloader = ShufflepointDataLoader.Config(
            build_dataset=lambda tokenizer, row_tokens: shufflepoint.Packed(corpus, row_tokens, ...),
            seed=1234)
    """

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        build_dataset: Callable[..., Any] | None = None
        """``fn(tokenizer=, row_tokens=)`` -> the dataset of packed rows (``Packed``, ``Mixture``)."""

        seed: int = 0
        """The order's seed (with the epoch and position, the whole order)."""

        shuffle_block: int | None = None
        """Documents per shuffled block of a ``Packed`` corpus (see docs/packing.md)."""

        num_workers: int = 0
        """Worker processes; any number, changed freely between runs."""

        epochs: int | None = None
        """Stop after this many epochs (torchtitan then ends the run); None: as many as the steps need."""

    def __init__(self, config: Config, *, dp_world_size: int, dp_rank: int, tokenizer: Any = None, seq_len: int,
                 local_batch_size: int, snapshot_every_n_steps: int | None = None, **kwargs: Any) -> None:
        if not callable(config.build_dataset):
            raise ValueError(refusal(
                "build_dataset", config.build_dataset, "fn(tokenizer=, row_tokens=) returning a map-style dataset of "
                "packed rows", "ShufflepointDataLoader.Config(build_dataset=lambda tokenizer, row_tokens: "
                "shufflepoint.Packed(corpus, row_tokens, ...))"))
        if kwargs:
            raise TypeError(refusal("ShufflepointDataLoader", Plain(", ".join(sorted(kwargs))), "the arguments "
                                    "torchtitan 0.3.0's trainer passes", "put loader settings in its Config"))
        dataset = config.build_dataset(tokenizer=tokenizer, row_tokens=seq_len + 1)
        self.config = config
        self.loader = DataLoader(dataset, local_batch_size, seed=config.seed, shuffle_block=config.shuffle_block,
                                 num_workers=config.num_workers, rank=dp_rank, world_size=dp_world_size,
                                 drop_last=True)
        self.dp_rank, self.dp_world_size = dp_rank, dp_world_size

    def __iter__(self) -> Iterator[Batch]:
        """Endless (or ``epochs`` long) batches: the loader continues its epoch, then the next."""
        while self.config.epochs is None or self.loader.epoch < self.config.epochs:
            for rows in self.loader:
                yield next_token_batch(rows)

    def state_dict(self) -> dict[str, Any]:
        """The ``shufflepoint.DataLoader`` state: a few integers, identical on every rank."""
        return self.loader.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from ``state_dict`` at this job's data-parallel degree, whatever the saved one was."""
        self.loader.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return (f"ShufflepointDataLoader(dp_rank={self.dp_rank}, dp_world_size={self.dp_world_size}, "
                f"epoch={self.loader.epoch}, cursor={self.loader.cursor})")
