"""Randomness keyed by the sample, not by the process that happens to load it.

torch seeds each DataLoader worker from a fresh ``base_seed`` per ``iter()`` and the worker id, so
a resumed job, or one restarted with another ``num_workers`` or world size, augments the same
sample differently. Here every draw comes from a counter-based generator (Philox) whose key is a
hash of (seed, epoch, sample index): a pure function, like the order itself, so a resume needs no
RNG state in the checkpoint and no rank, worker or batch size can change what a sample gets.

    rng = sample_rng(seed=1234, epoch=3, index=42)     # numpy.random.Generator(Philox)
    torch_generator(rng)                               # a torch.Generator drawn from it

Streams are separated by a domain tag: a sample's stream and a batch's stream (collate-time
randomness, keyed by the batch's first position in the epoch) never coincide.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import torch

from shufflepoint._order import check_int

SAMPLE_DOMAIN = 0x53414D50  # "SAMP": per-sample streams
BATCH_DOMAIN = 0x42415443  # "BATC": per-batch (collate-time) streams
_WORD = 2**32


def _sequence(domain: int, seed: int, epoch: int, key: int) -> np.random.SeedSequence:
    """A SeedSequence over a fixed-width encoding (two 32-bit words per number), so that no two
    different (seed, epoch, key) triples can spell the same entropy."""
    words = [domain]
    for value in (seed, epoch, key):
        words += [value % _WORD, value // _WORD % _WORD]
    return np.random.SeedSequence(np.array(words, dtype=np.uint32))


def _checked(seed: int, epoch: int, key: int, key_name: str) -> tuple[int, int, int]:
    return (check_int("seed", seed, 0, 2**64 - 1), check_int("epoch", epoch, 0, 2**62),
            check_int(key_name, key, 0, 2**63 - 1))


def sample_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator of dataset sample ``index`` in ``epoch``: the same numbers on every rank, in
    every worker, before and after any resume. A new Generator each call, always at its start."""
    seed, epoch, index = _checked(seed, epoch, index, "index")
    return np.random.Generator(np.random.Philox(_sequence(SAMPLE_DOMAIN, seed, epoch, index)))


def batch_rng(seed: int, epoch: int, position: int) -> np.random.Generator:
    """The generator of the batch whose first sample sits at ``position`` of the epoch's global
    stream (collate-time randomness). The same batch gets the same numbers whatever the worker;
    another world size or batch size cuts other batches, which then get other numbers."""
    seed, epoch, position = _checked(seed, epoch, position, "position")
    return np.random.Generator(np.random.Philox(_sequence(BATCH_DOMAIN, seed, epoch, position)))


def torch_generator(rng: np.random.Generator) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by one draw from ``rng``: for transforms written with
    ``torch.rand(..., generator=g)``. Deterministic, since ``rng`` is."""
    return torch.Generator().manual_seed(int(rng.integers(0, 2**63)))


def seed_globals(rng: np.random.Generator) -> None:
    """Seed torch's default CPU generator, ``numpy.random`` and ``random`` from ``rng``: code that
    draws from the global RNGs (torchvision transforms, collators) becomes a function of the key.
    Call it inside ``saved_globals()``, which puts the process's own streams back."""
    torch_seed, py_seed = (int(v) for v in rng.integers(0, 2**63, size=2))
    torch.default_generator.manual_seed(torch_seed)
    np.random.seed(rng.integers(0, _WORD, size=4, dtype=np.uint64).astype(np.uint32))
    random.seed(py_seed)


@contextlib.contextmanager
def saved_globals() -> Iterator[None]:
    """Put back exactly the states the global RNGs had before the block, even on an error, so the
    process's own streams continue as if the block had never run. Saving numpy's state costs about
    50 us, so a batch saves once and seeds per sample inside."""
    saved_torch = torch.default_generator.get_state()
    saved_numpy = np.random.get_state()
    saved_random = random.getstate()
    try:
        yield
    finally:
        torch.default_generator.set_state(saved_torch)
        np.random.set_state(saved_numpy)
        random.setstate(saved_random)


@contextlib.contextmanager
def seeded_globals(rng: np.random.Generator) -> Iterator[None]:
    """The global RNGs seeded from ``rng`` for the duration of the block, then restored."""
    with saved_globals():
        seed_globals(rng)
        yield
