"""A loader that follows a live membership: each step's global batch dealt among the replica groups of that
step's quorum, the position moved only by committed steps (``LiveLoader``).

A fault-tolerance manager (torchft's ``Manager``, read through the ``Quorum`` protocol) keeps a run going while
replica groups fail and rejoin. A membership change is a resize without a restart: the position model reads the
epoch in lots (``_core/membership.py``), a step takes as many lots as its quorum needs, and every rank's share
is arithmetic on (step positions, participants, participating rank, group rank). Per step:

1. ``settle``: the previous step committed if the manager's ``current_step()`` moved past the loader's count;
   then (and only then) the position advances by the lots that step read, dealt to the participants it had.
   A step that did not commit is dealt again, to whoever takes part next.
2. ``start_quorum()``, then ``num_participants()`` and ``participating_rank()`` (they wait for the quorum).
3. The step's positions, cut from where the position stands; this rank's share read, or, for a group that is
   healing or a spare (participating rank None), an empty batch of the same structure (nothing is read). Under
   ``spans`` each participant reads a whole lot of its own stretch (``membership.stretch_lot``), the order laid along
   the stretches, so a group keeps to its shards.

A healing group receives a peer's state through the manager's state transfer (``register_state_dict_fn``): the
state is the same few integers on every rank, and the step's own commit then advances it like its peers'.

Prefetch: the next step's share is read ahead assuming the same quorum; at the next step it is used only if its
indices are exactly the ones dealt now (else it is dropped, counted in ``prefetch_dropped``). With ``num_workers``,
torch's worker processes read the shares of the next ``num_workers x prefetch_factor`` steps the same way
(``live_workers.py``): a share read under a quorum that did not hold is dropped, counted, and read again.

Words: docs/glossary.md (participant, lot, membership change, commit, step, position model, state).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
import torch.utils.data

from shufflepoint._core.membership import Changes, Sizing, step_share
from shufflepoint._core.plan import Layout
from shufflepoint._errors import DAMAGED, Plain, ResumeWarning, StateError, field_error, refusal, warn_user
from shufflepoint._loading.agreement import validate_everywhere
from shufflepoint._loading.capabilities import dataset_length
from shufflepoint._loading.deal import deal_of
from shufflepoint._loading.live_workers import Share, Shares, Workers, pinned, read_share
from shufflepoint._loading.orders import Identity, OrderCache
from shufflepoint._loading.position import LoaderPosition, expected_state
from shufflepoint._order import check_int

KIND = "shufflepoint.live"  # the state's ``kind``
VERSION = 2  # 2: the history as columns (``membership.encode``), every change kept, each with its group size
_END = object()


def _checked_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(refusal(name, value, "a bool", f"pass {name}=True or False"))
    return value


def _checked_transform(transform: Any) -> Any:
    if transform is not None and not callable(transform):
        raise TypeError(refusal("transform", transform, "fn(sample, rng) or None", "pass a function or leave it out"))
    return transform


@runtime_checkable
class Quorum(Protocol):
    """What the loader reads of a fault-tolerance manager (torchft's ``Manager`` has all of it)."""

    def start_quorum(self) -> None: ...

    def num_participants(self) -> int: ...

    def participating_rank(self) -> int | None: ...

    def current_step(self) -> int: ...


@dataclass(frozen=True)
class _Drawn:
    """A step dealt and not yet settled: its participants and lots, and whether this group took part (a group
    that heals does not: torchft moves its step to the peers' at the quorum, before the peer's state arrives)."""

    participants: int
    lots: int
    participating: bool = True


def empty_like(batch: Any) -> Any:
    """``batch`` with zero samples: every tensor or array cut to ``[:0]`` (a healing group's batch)."""
    if isinstance(batch, (torch.Tensor, np.ndarray)):
        return batch[:0]
    if isinstance(batch, dict):
        return {key: empty_like(value) for key, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # private: a namedtuple's documented marker
        return type(batch)(*(empty_like(value) for value in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(empty_like(value) for value in batch)
    return batch


class LiveLoader:
    """Batches of the step the manager's quorum deals to this rank; the position moves on committed steps only.

    Args:
        dataset: a map-style dataset (``__getitem__``, ``__len__``).
        batch_size: samples per rank per step (dynamic: the global batch is participants x group ranks x this).
        replica_groups: the most replica groups the job runs (torchft's ``num_replica_groups``); a quorum of more
            is refused by name.
        group_rank: this process's rank inside its replica group (HSDP: its place in the sharded dimension).
        group_world_size: ranks per replica group.
        global_batch: a fixed global batch instead of ``batch_size``: each participant's share grows when a group
            is missing; refused unless every quorum from ``min_groups`` to ``replica_groups`` splits it evenly.
        min_groups: the fewest groups that train a step (torchft's ``min_replica_size``). Default 1.
        seed: with the epoch, it fixes the whole order. Default 0.
        shuffle: False reads the epoch in index order. Default True.
        drop_last: drop the epoch's last incomplete lot. Default False.
        order: the permutation (as ``shufflepoint.DataLoader``'s ``order``); None: the default for the dataset.
        deal: as ``shufflepoint.DataLoader``'s ``deal``; None: the default for the dataset.
        dataset_fingerprint: the dataset's identity, checked on load (as ``shufflepoint.DataLoader``'s).
        collate_fn: turns a list of samples into a batch. Default torch's ``default_collate``.
        prefetch: read the next step's share in a thread while the step trains (``num_workers=0``). Default True.
        num_workers: torch's worker processes reading the next steps' shares under the quorum the loader expects;
            a share read under another is dropped and read again. The batches are those of 0. Default 0.
        prefetch_factor: steps each worker reads ahead (torch's; only with ``num_workers``). Default torch's, 2.
        pin_memory: the batches in pinned memory (where an accelerator is present). Default False.
        transform: ``fn(sample, rng)`` applied to each sample with its own ``numpy.random.Generator`` keyed by
            (seed, epoch, index), as ``shufflepoint.DataLoader``'s: the same numbers in any worker, after any change.
        manager: the manager to follow (``follow`` may give it later).
    """

    def __init__(self, dataset: Any, batch_size: int | None = None, *, replica_groups: int, group_rank: int = 0,
                 group_world_size: int = 1, global_batch: int | None = None, min_groups: int = 1, seed: int = 0,
                 shuffle: bool = True, drop_last: bool = False, order: str | None = None, deal: str | None = None,
                 dataset_fingerprint: str | None = None, collate_fn: Callable[[list[Any]], Any] | None = None,
                 prefetch: bool = True, num_workers: int = 0, prefetch_factor: int | None = None,
                 pin_memory: bool = False, transform: Callable[[Any, np.random.Generator], Any] | None = None,
                 manager: Quorum | None = None) -> None:
        self.sizing = Sizing(replica_groups, group_world_size, batch_size, global_batch, min_groups)
        self.group_rank = check_int("group_rank", group_rank, 0, group_world_size - 1)
        self.seed = check_int("seed", seed, 0, 2**64 - 1)
        if not isinstance(shuffle, bool):
            raise TypeError(refusal("shuffle", shuffle, "a bool", "pass shuffle=True or False"))
        self._shuffle = shuffle
        self.dataset = dataset
        layout = Layout(dataset_length(dataset), 1, self.sizing.lot, drop_last)
        orders = OrderCache(order if shuffle else "identity", layout.n, self.seed, dataset=dataset,
                            grid=self.sizing.lot)
        dealt = deal_of(deal, orders)
        stretched = dealt.stretched and global_batch is None  # spans: each group its own stretch
        self._stretches = self.sizing.groups if stretched and self.sizing.groups > 1 else 0  # membership.stretch_lot
        # a scheduled dataset's grid (a Mixture's): K lots, so that its windows are lots, read in the order a step
        # reads them (a step's edge is an edge of the order's virtual stretch: shares and passes exact at each)
        orders = orders.on_grid(self.sizing.lot * max(self._stretches, 1)).read_part_after_part(self.sizing.lot)
        self._identity = Identity(dataset_fingerprint, dataset, orders)
        self._position = LoaderPosition(layout, orders, dealt)
        self._collate = collate_fn if collate_fn is not None else torch.utils.data.default_collate
        self._transform, self._pin = _checked_transform(transform), _checked_bool("pin_memory", pin_memory)
        self._lock = threading.RLock()
        self._committed, self._changes = 0, Changes()
        self._drawn: _Drawn | None = None
        self._workers = self._start_workers(num_workers, prefetch_factor)
        self._plan: list[Any] | None = None  # what the workers are told to read next (``_predict``)
        threads = prefetch and self._workers is None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="shufflepoint-prefetch") if threads else None
        self._ahead: tuple[int, np.ndarray, Future[Any]] | None = None
        self._empty: Any = None
        self.prefetch_dropped = 0  # batches read ahead under a quorum that did not hold, never handed out
        self.last_indices: list[int] = []  # the dataset indices of the batch handed out last
        self.last_quorum: tuple[int, int | None] = (0, None)  # (participants, participating rank) it was dealt by
        self.manager: Quorum | None = None
        if manager is not None:
            self.follow(manager)

    def __repr__(self) -> str:
        return (f"LiveLoader(epoch={self.epoch}, step={self.step}, lot={self.sizing.lot}, "
                f"replica_groups={self.sizing.groups}, group_world_size={self.sizing.group_world}, seed={self.seed})")

    def follow(self, manager: Quorum, register: Callable[[str, Any, Any], None] | None = None) -> None:
        """Follow ``manager``'s quorums and commits; ``register(key, load_fn, state_fn)``: how a rejoining group
        gets this loader's state from a peer (torchft: ``manager.register_state_dict_fn``)."""
        if not isinstance(manager, Quorum):
            raise TypeError(refusal("manager", manager, "a fault-tolerance manager (start_quorum, num_participants, "
                                    "participating_rank, current_step)", "pass the torchft Manager"))
        self.manager = manager
        if register is not None:
            register("shufflepoint", self.load_state_dict, self.state_dict)

    # -- where the run stands ----------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """Committed steps since the run began."""
        with self._lock:
            self._settle()
            return self._committed

    @property
    def epoch(self) -> int:
        """The epoch the next committed step belongs to."""
        with self._lock:
            self._settle()
            return self._position.epoch

    @property
    def cursor(self) -> int:
        """Positions of this epoch's stream the committed steps have read (all participants)."""
        with self._lock:
            self._settle()
            return self._position.cursor

    def _manager(self) -> Quorum:
        if self.manager is None:
            raise RuntimeError(refusal("manager", None, "a manager to follow", "pass manager= or call follow()"))
        return self.manager

    def _settle(self) -> None:
        """Advance by the step dealt last if the manager committed it (module docstring, 1.)."""
        if self.manager is None or self._drawn is None:
            return
        now = self.manager.current_step()
        if now == self._committed:
            return  # not committed (yet): a step dealt and not committed is dealt again at the next one
        if now != self._committed + 1:
            if not self._drawn.participating:
                return  # healing: the peer's state arrives inside should_commit() (load_state_dict), then settles
            self._disagree(now)
        drawn, self._drawn = self._drawn, None
        self._advance(drawn)

    def _disagree(self, now: int) -> None:
        raise RuntimeError(refusal(
            "Manager.current_step()", now, f"{self._committed} (this loader's committed steps)",
            "restore the Manager's state_dict and the loader's from the same checkpoint, and draw every step's "
            "batch from this loader", why="the loader cannot tell which positions the other steps read"))

    def _advance(self, drawn: _Drawn) -> None:
        position, lot = self._position, self.sizing.lot
        live = self._live()
        left = -(-position.samples_left() // lot)
        lots = min(drawn.lots, left)
        self._changes = self._changes.committed(self._committed, position.step, drawn.lots, drawn.participants,
                                                self.sizing.group_world)
        live.received += lots
        self._committed += 1
        if position.samples_left() == 0:
            position.end_pass(live)

    def _live(self) -> Any:
        position = self._position
        if position.live is None:
            position.begin_pass()
        if position.samples_left() == 0:  # an epoch with nothing left (a state saved at its end)
            position.end_pass(position.live)  # type: ignore[arg-type]
            position.begin_pass()
        return position.live

    # -- the steps -------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        """The steps of the current epoch, from where the run stands; the next ``iter()`` reads the next epoch."""
        epoch = self.epoch
        while True:
            batch = self._next_step(epoch)
            if batch is _END:
                return
            yield batch

    def _next_step(self, epoch: int) -> Any:
        manager = self._manager()
        with self._lock:
            self._settle()
            if manager.current_step() != self._committed:
                self._disagree(manager.current_step())
            self._live()
            if self._position.epoch != epoch:
                return _END
        manager.start_quorum()
        participants, participant = self.quorum(manager)
        self.sizing.check_quorum(participants, participant)
        self.last_quorum = (participants, participant)
        with self._lock:
            self._drawn = _Drawn(participants, self.sizing.lots(participants), participant is not None)
            if participant is None:
                self.last_indices = []
                return self._empty_batch()
            epoch, indices = self._step(participants, participant)
            ahead = self._predicted(participants, participant)
        batch = self._read(epoch, indices)
        self._prefetch(ahead)
        self.last_indices = indices.tolist()
        return batch

    def quorum(self, manager: Quorum) -> tuple[int, int | None]:
        """(participants, this group's participating rank or None) of the step just started: the manager's own
        (an adapter whose manager trains fewer groups than it numbers in some step says so here)."""
        return manager.num_participants(), manager.participating_rank()

    def _step(self, participants: int, participant: int, received: int = 0) -> tuple[int, np.ndarray]:
        """(epoch, this rank's indices of the next step) ``received`` lots past where the position stands."""
        epoch, cut, done = self._placed(received)
        mine = self._share(cut, done, participants, participant)
        return epoch, np.asarray(self._order(epoch, cut).take(mine), dtype=np.int64)

    def _order(self, epoch: int, cut: Any) -> Any:
        """The epoch's order as ``cut`` reads it; with stretches, laid along them (a block never straddles two)."""
        orders = self._position.orders
        return orders.laid(epoch, self._stretches) if self._stretches else orders.get(epoch, cut)

    def _placed(self, received: int = 0) -> tuple[int, Any, int]:
        """(epoch, cut, positions of it read) ``received`` lots past the position. With stretches the cut is the one
        the history places the lot in (its leg's), so that the lots' order (``membership.stretch_lot``) is the same
        on a group that loaded the state as on the peer that wrote it; without, the position's own rest."""
        position = self._position
        if not self._stretches:
            cut, done = position.rest()
            return position.epoch, cut, done + received * self.sizing.lot
        placed = position.history.place(position.step + received)
        return placed.epoch, placed.cut, placed.batch * placed.layout.batch_size

    def _share(self, cut: Any, done: int, participants: int, participant: int) -> np.ndarray:
        """Positions of this rank's share of the step that reads ``cut`` from ``done`` (``membership.step_share``)."""
        return step_share(lambda start, stop: cut.rank_positions(0, start, stop), self.sizing.lot,
                          cut.samples_per_rank(), done, self.sizing.lots(participants), participants, participant,
                          self.sizing.group_world, self.group_rank, self._stretches)

    def _predicted(self, participants: int, participant: int) -> tuple[int, np.ndarray] | None:
        """The next step's indices if this step commits and the quorum holds (None: the epoch ends)."""
        if self._executor is None:
            return None
        position, lot = self._position, self.sizing.lot
        lots = min(self.sizing.lots(participants), -(-position.samples_left() // lot))
        if lots * lot >= position.samples_left():
            return None
        return self._step(participants, participant, lots)

    def _read(self, epoch: int, indices: np.ndarray) -> Any:
        if self._workers is not None and indices.size:
            share = (epoch, tuple(indices.tolist()))
            batch, dropped = self._workers.take(share, lambda: self._restart(epoch))
            self.prefetch_dropped += dropped
            return batch
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            if ahead[0] == epoch and np.array_equal(ahead[1], indices):
                return ahead[2].result()
            ahead[2].cancel()
            self.prefetch_dropped += 1
        return pinned(self._samples(epoch, indices)) if self._pin else self._samples(epoch, indices)

    def _samples(self, epoch: int, indices: Any) -> Any:
        return read_share(self.dataset, epoch, indices, self.seed, self._transform, self._collate)

    def _prefetch(self, ahead: tuple[int, np.ndarray] | None) -> None:
        if ahead is None or self._executor is None or ahead[1].size == 0:
            return
        epoch, indices = ahead
        future = self._executor.submit(lambda: self._samples(epoch, indices))
        self._ahead = (epoch, indices, future)

    # -- worker processes (live_workers.py) -------------------------------------------------------------
    def _start_workers(self, num_workers: int, prefetch_factor: int | None) -> Workers | None:
        check_int("num_workers", num_workers, 0, 1024)
        if prefetch_factor is not None:
            check_int("prefetch_factor", prefetch_factor, 1, 1024)
            if num_workers == 0:
                raise ValueError(refusal("prefetch_factor", prefetch_factor, "None with num_workers=0",
                                         "leave prefetch_factor out, or give num_workers"))
        if num_workers == 0:
            return None
        shares = Shares(self.dataset, self.seed, self._transform, self._collate)
        return Workers(shares, self._predict, num_workers, prefetch_factor, self._pin)

    def close(self) -> None:
        """Shut the worker processes down now (they also go with the loader); later steps read in this process."""
        with self._lock:
            self._workers = self._plan = None

    def _restart(self, epoch: int) -> None:
        """The workers' next share is the step being dealt (under its quorum), then the steps after it."""
        participants, participant = self.last_quorum
        with self._lock:
            epoch, cut, done = self._placed()
            self._plan = [epoch, cut, done, participants, participant, self._order(epoch, cut), 0]

    def _predict(self) -> Share | None:
        """The share of the next step the workers are to read: under the quorum of the plan, every step committing
        (None: nothing to read, past the epoch's end or without a plan)."""
        with self._lock:
            if self._plan is None or self._plan[4] is None:
                return None
            epoch, cut, done, participants, participant, order, ahead = self._plan
            self._plan[6] += 1
            start = done + ahead * self.sizing.lots(participants) * self.sizing.lot
            if start >= cut.samples_per_rank():
                return None
            mine = self._share(cut, start, participants, participant)
            indices = tuple(int(i) for i in order.take(mine))
            return (epoch, indices) if indices else None

    def _empty_batch(self) -> Any:
        """Zero samples in the collated structure: ``collate_fn([])`` where it can, else a batch of one sample (read
        once per process) cut to ``[:0]``."""
        if self._empty is None:
            try:
                self._empty = self._collate([])
            except (IndexError, TypeError, ValueError, RuntimeError):  # default_collate needs one sample's shape
                self._empty = empty_like(self._samples(0, [0]))
        return self._empty

    # -- the past ---------------------------------------------------------------------------------------
    def which(self, step: int) -> dict[int, list[int]]:
        """For each global rank (participant x group_world_size + group rank) of committed ``step``, the dataset
        indices of its batch, by arithmetic from the state (every membership change is in it, with the group size
        of its steps)."""
        check_int("step", step, 0, 2**63 - 1)
        with self._lock:
            self._settle()
            if step >= self._committed:
                raise ValueError(refusal("step", step, f"a committed step, below {self._committed}",
                                         "ask a step this run has committed"))
            first, lots, participants, group_world = self._changes.lot_step(step)
            placed = self._position.history.place(first)
            cut, lot = placed.cut, placed.layout.batch_size
            order = self._order(placed.epoch, cut)
            found = {}
            for rank in range(participants * group_world):
                mine = step_share(lambda start, stop: cut.rank_positions(0, start, stop), lot, cut.samples_per_rank(),
                                  placed.batch * lot, lots, participants, rank // group_world, group_world,
                                  rank % group_world, self._stretches)
                found[rank] = np.asarray(order.take(mine), dtype=np.int64).tolist()
        return found

    # -- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The run's position after its committed steps: a small dict of JSON values, the same on every rank."""
        with self._lock:
            self._settle()
            return {"kind": KIND, "version": VERSION, "step": self._committed, "changes": self._changes.to_state(),
                    "stretches": self._stretches,
                    "replica_groups": self.sizing.groups, "group_world_size": self.sizing.group_world,
                    "position": self._position.state(kind="loader", seed=self.seed, shuffle=self._shuffle,
                                                     dataset_fingerprint=self._identity.fingerprint)}

    def load_state_dict(self, state: dict[str, Any], *, strict: bool = True) -> None:
        """Take a peer's or a checkpoint's position (``StateError`` naming the field, nothing changed). The step
        being dealt, if any, is kept: a healing group's commit then advances the peer's state like its own."""
        if not isinstance(state, dict) or state.get("kind") != KIND:
            found = state.get("kind") if isinstance(state, dict) else type(state).__name__
            raise field_error("kind", found, repr(KIND), "load a state written by LiveLoader.state_dict()",
                              why=DAMAGED)
        if state.get("version") not in (1, VERSION):
            raise field_error("version", state.get("version"), f"1 to {VERSION}", "load a state of this release")
        if (state["version"] == 1) != isinstance(state.get("changes"), list):  # version 1: a list; 2: the columns
            raise field_error("changes", Plain(type(state.get("changes")).__name__),
                              f"{'a list' if state['version'] == 1 else 'a string'} in a version {state['version']}"
                              " state", "load a state written by LiveLoader.state_dict()", why=DAMAGED)
        group_world = state.get("group_world_size")
        if isinstance(group_world, bool) or not isinstance(group_world, int) or group_world < 1:
            raise field_error("group_world_size", group_world, "an int >= 1",
                              "load a state written by LiveLoader.state_dict()")
        step = state.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise field_error("step", step, "an int >= 0", "load a state written by LiveLoader.state_dict()")
        stretches = state.get("stretches", 0) if state["version"] == 1 else state.get("stretches")
        if isinstance(stretches, bool) or not isinstance(stretches, int) or not 0 <= stretches <= 2**31:
            raise field_error("stretches", stretches, "an int >= 0 (0: lots read in order)",
                              "load a state written by LiveLoader.state_dict()", why=DAMAGED)
        position_state = state.get("position")
        saved: dict[str, Any] = position_state if isinstance(position_state, dict) else {}
        if stretches and saved.get("batch_size") != self.sizing.lot and (saved.get("cursor") or saved.get("segments")):
            name = "group_world_size" if group_world != self.sizing.group_world else "batch_size"
            raise field_error(name, Plain(f"a lot of {self.sizing.lot} samples (group ranks x batch)"),
                              f"the state's lot of {saved.get('batch_size')} until its epoch ends",
                              f"resume with the run's {name} and change it at an epoch's start",
                              why="under spans each group reads lots of its own stretch: the epoch's lots already "
                              "read are not a prefix that another lot size could continue")
        try:
            changes = Changes.from_state(state.get("changes"), group_world)
        except ValueError as error:
            raise StateError(str(error)) from error
        if changes.last is not None and changes.last.step >= step:
            raise field_error("changes", Plain(f"an entry at step {changes.last.step}"),
                              f"entries before step {step}", "load a state written by LiveLoader.state_dict()")
        position = self._position
        validate = lambda saved, expected: validate_everywhere(  # noqa: E731
            saved, expected, strict=strict, rank=0, world_size=1, verify_ranks=False)
        expected = lambda orders, deal, saved: expected_state(  # noqa: E731
            "loader", self.seed, self._shuffle, self._identity, position.layout, orders, deal, saved)
        with self._lock:
            drawn = self._drawn
            position.load(state["position"], expected, validate)
            self._identity = self._identity.for_orders(position.orders)
            self._committed, self._changes, self._drawn, self._stretches = step, changes, drawn, stretches
            self._ahead = self._plan = None
        self._check_windows()

    def _check_windows(self) -> None:
        """Say so where a scheduled dataset's windows (its grid: the run's first K lots, kept in the state) are no
        longer what a full step of this loader reads: its passes and shares are then exact at each window's edge
        only, not at every committed step."""
        grid, step = self._position.orders.grid, self.sizing.lot * max(self._stretches, 1)
        if grid is not None and grid != step:
            # LIMIT(live-windows-not-lots): docs/shards.md#limits
            warn_user(f"grid: the run's Mixture reads windows of {grid} rows (its first steps' lots), and this "
                      f"loader's steps read lots of {self.sizing.lot} rows: each source's passes and shares stay exact "
                      "at every epoch's end and every window's edge, but only to within a window between them (a row "
                      "may be read once more before another of its source). Keep the run's group size and batch size "
                      "to keep them exact at every committed step", ResumeWarning)

