"""The resume contract, one helper for every stateful component.

Run a component uninterrupted over a few epochs, taking its state before every item and after
every epoch. Then, from *every* one of those states, build a fresh component, load the state
(after a JSON or torch.save round trip) and check:

- the rest of the stream, tagged by epoch, equals the uninterrupted run's rest;
- the state's key set never changes (torch.distributed.checkpoint relies on it);
- get/set round-trips: a freshly loaded component reports the state it was given.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Component:
    name: str
    make: Callable[[], Any]
    # run(obj, first_epoch, epochs) yields ("item", epoch, value) and ("epoch_end", epoch, None)
    run: Callable[[Any, int, int], Iterator[tuple[str, int, Any]]]
    # the epoch a user's loop would resume in, given the state it saved (its own bookkeeping)
    resume_epoch: Callable[[dict[str, Any]], int]
    json_state: bool = True
    round_trips: bool = True


def run_epochs(loader: Any, first_epoch: int, epochs: int, item: Any = None) -> Any:
    """The usual training loop as a Component's ``run``: ``set_epoch`` each epoch (a no-op for the
    restored one), then every batch (as ``item(batch)``), then an epoch end."""
    for epoch in range(first_epoch, epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            yield "item", epoch, batch if item is None else item(batch)
        yield "epoch_end", epoch, None


def _roundtrip(state: dict[str, Any], as_json: bool) -> dict[str, Any]:
    if as_json:
        return json.loads(json.dumps(state))
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def assert_resume_contract(component: Component, epochs: int = 3, every: int = 1) -> int:
    """Returns how many save points were checked."""
    reference_obj = component.make()
    events: list[tuple[str, int, Any]] = []
    states: list[tuple[int, dict[str, Any]]] = []  # (items before this point, state)
    items = 0
    stream = component.run(reference_obj, 0, epochs)
    while True:
        states.append((items, reference_obj.state_dict()))
        try:
            kind, epoch, value = next(stream)
        except StopIteration:
            break
        events.append((kind, epoch, value))
        if kind == "item":
            items += 1
    reference_items = [(e, v) for kind, e, v in events if kind == "item"]
    keys = set(states[0][1])
    checked = 0
    for index, (done, state) in enumerate(states):
        assert set(state) == keys, f"{component.name}: state keys changed at point {index}"
        if index % every and index != len(states) - 1:
            continue
        fresh = component.make()
        loaded = _roundtrip(state, component.json_state)
        fresh.load_state_dict(loaded)
        if component.round_trips:
            assert fresh.state_dict() == state, f"{component.name}: get/set does not round-trip at {index}"
        resumed = [(e, v) for kind, e, v in component.run(fresh, component.resume_epoch(loaded), epochs)
                   if kind == "item"]
        assert resumed == reference_items[done:], (
            f"{component.name}: resumed stream differs after {done} items (save point {index})"
        )
        checked += 1
    return checked


def served_across_a_resize(make: Callable[[int, int, int], Any], first: tuple[int, int], then: tuple[int, int],
                           steps: int, epoch: int = 1) -> Counter[Any]:
    """What ``first`` = (world, batch) loaders (``make(rank, world, batch)``) serve in ``steps`` batches each of
    ``epoch``, then what fresh ``then`` loaders, loading their state (the same on every rank), serve to the
    epoch's end, tail padding left out: the counts an "every sample once" check compares with one pass."""
    world, batch_size = first
    loaders = [make(rank, world, batch_size) for rank in range(world)]
    seen: Counter[Any] = Counter()
    for loader in loaders:
        loader.set_epoch(epoch)
        iterator = iter(loader)
        for _ in range(steps):
            seen.update(next(iterator))
    state = loaders[0].state_dict()
    assert all(loader.state_dict() == state for loader in loaders)
    world, batch_size = then
    for rank in range(world):
        resumed = make(rank, world, batch_size)
        resumed.load_state_dict(state)
        assert resumed.epoch == epoch
        real = resumed.real_samples_left(rank)  # before the pass: the tail padding is not counted
        seen.update([row for batch in resumed for row in batch][:real])
    return seen
