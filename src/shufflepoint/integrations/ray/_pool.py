"""``DecodePool``: the Ray actors that read, transform and collate a loader's batches, and how a batch finds one.

Vocabulary::

    ticket     one batch asked of the pool: its keys (what torch's sampler gave for it), the actor computing
               it, and the ``ObjectRef`` its result will be read from
    in flight  tickets sent and not yet taken; the loader keeps at most ``window`` of them
    retiring   an actor the pool shrank away: it finishes its tickets, takes no new one, then is killed

A ticket goes to the ready actor with the fewest tickets in flight. When a ticket's actor, worker or result
is gone (``_touch.lost_errors``: a killed actor, a dead node), the actor is buried, a new one takes its place
(while the pool is not shrinking), and every ticket it held is sent again to the live actors. The keys do not
change, and a batch is a pure function of its keys (``_reader.py``), so the batch comes back with the same
bytes. The pool holds nothing a state needs: the loader's state is what the loop received, as always.

Two ranks, a pool of 2 actors each, window 3::

    rank 0 loop    takes b0 b1 b2 ...     tickets b0->A0  b1->A1  b2->A0   (A1 dies: b1 -> A0, A2 started)
    rank 1 loop    takes b0 b1 b2 ...     its own pool, its own tickets: each rank's pool is its own
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from shufflepoint._errors import Plain, refusal
from shufflepoint._order import check_int
from shufflepoint.integrations.ray._reader import BatchReader, Failed
from shufflepoint.integrations.ray._touch import check_version, connected_cpus, lost_errors, ray_module


@dataclass(eq=False)
class Actor:
    handle: Any
    ready: Any  # the ObjectRef of its ready() call: its pid, once placed and holding the dataset
    inflight: list[Ticket] = field(default_factory=list)
    retiring: bool = False


@dataclass(eq=False)
class Ticket:
    keys: list[Any]
    ref: Any = None
    actor: Actor | None = None
    sent: int = 0  # how many times it was sent: a loss after 1 + retries sends is refused


@dataclass
class PoolStats:
    """What the pool did: batches taken, batches computed again after a loss, actors started (replacements and
    growth included), actors lost, and the seconds the loop waited on results (its data wait)."""

    batches: int = 0
    recomputed: int = 0
    started: int = 0
    lost: int = 0
    waited_s: float = 0.0


class DecodePool:
    """The actors of one loader. Made by ``RayDataLoader``; its ``resize(n)`` grows or shrinks it between two
    batches, and nothing about the order changes."""

    def __init__(self, actors: int, cpus: float, window: int | None, actor_options: dict[str, Any] | None,
                 retries: int, start_timeout: float) -> None:
        self._size = check_int("decode_actors", actors, 1, 65536)
        if not isinstance(cpus, (int, float)) or isinstance(cpus, bool) or not 0 < cpus <= 1024:
            raise ValueError(refusal("decode_cpus", cpus, "a number of CPUs in (0, 1024] per actor",
                                     "pass decode_cpus=1 (or 0.5 to put two actors on a core)"))
        self._window = None if window is None else check_int("window", window, 1, 1 << 20)
        if actor_options is not None and not isinstance(actor_options, dict):
            raise TypeError(refusal("actor_options", actor_options, "a dict of Ray actor options or None",
                                    "pass e.g. actor_options={'resources': {'decode': 1}}"))
        self._options = dict(actor_options or {})
        taken = sorted({"num_cpus", "max_restarts", "max_task_retries"} & self._options.keys())
        if taken:
            raise ValueError(refusal("actor_options", Plain(", ".join(taken)), "none of num_cpus, max_restarts, "
                                     "max_task_retries", "pass decode_cpus= for num_cpus; the pool restarts lost "
                                     "actors and recomputes their batches itself"))
        self._retries = check_int("retries", retries, 0, 1000)
        self._cpus, self._start_timeout = float(cpus), float(start_timeout)
        self._actors: list[Actor] = []  # active, in the order they were started
        self._retiring: list[Actor] = []
        self._remote: Any = None
        self._dataset_ref: Any = None
        self.stats = PoolStats()

    def __repr__(self) -> str:
        return (f"DecodePool(actors={self._size}, cpus={self._cpus:g}, window={self.window}, "
                f"started={self._remote is not None}, {self.stats})")

    @property
    def size(self) -> int:
        """The number of actors the pool keeps (retiring ones not counted)."""
        return self._size

    @property
    def window(self) -> int:
        """Batches in flight at most: ``window=`` or twice the pool's size."""
        return self._window or 2 * self._size

    def pids(self) -> list[int]:
        """The process ids of the active actors that are placed (for a test that kills one)."""
        ray = ray_module()
        placed = [a for a in self._actors if ray.wait([a.ready], timeout=0)[0]]
        return [ray.get(a.ready) for a in placed]

    # -- life ------------------------------------------------------------------------------------
    def start(self, dataset: Any, collate: Any) -> None:
        """Start the actors with the dataset as served and its collate (once; later calls do nothing).

        Refused with the fix when no cluster is connected or it cannot place the actors."""
        if self._remote is not None:
            return
        ray = ray_module()
        check_version()
        connected_cpus(self._size, self._cpus, self._options)
        self._remote = ray.remote(BatchReader).options(num_cpus=self._cpus, **self._options)
        self._dataset_ref = (ray.put(dataset), ray.put(collate))
        self._actors = [self._new_actor() for _ in range(self._size)]
        try:
            ray.get([a.ready for a in self._actors], timeout=self._start_timeout)
        except ray.exceptions.GetTimeoutError as error:
            free = ray.available_resources().get("CPU", 0.0)
            self.close()
            raise RuntimeError(refusal(
                "decode_actors", self._size, f"{self._size} actors of {self._cpus:g} CPUs placed within "
                f"{self._start_timeout:g} s (the cluster has {free:g} CPUs free now)",
                "add nodes, free CPUs (Ray Train's workers hold theirs), or pass fewer decode_actors",
                why="Ray could not place them: the CPUs exist but are taken")) from error

    def _new_actor(self) -> Actor:
        handle = self._remote.remote(*self._dataset_ref)
        self.stats.started += 1
        return Actor(handle, handle.ready.remote())

    def resize(self, actors: int) -> None:
        """Keep ``actors`` actors from now on: new ones join once placed; removed ones finish what they hold."""
        actors = check_int("actors", actors, 1, 65536)
        self._size = actors
        if self._remote is None:
            return
        while len(self._actors) < actors:
            self._actors.append(self._new_actor())
        while len(self._actors) > actors:
            actor = self._actors.pop()
            actor.retiring = True
            self._retiring.append(actor)
            self._retire_if_idle(actor)

    def close(self) -> None:
        """Kill every actor; the next batch starts a new pool."""
        ray = ray_module()
        for actor in self._actors + self._retiring:
            ray.kill(actor.handle, no_restart=True)
        self._actors, self._retiring, self._remote, self._dataset_ref = [], [], None, None

    # -- tickets ---------------------------------------------------------------------------------
    def send(self, ticket: Ticket) -> None:
        """Give the ticket to the ready actor with the fewest in flight (waiting for one to be placed)."""
        if ticket.sent > self._retries:
            raise RuntimeError(refusal(
                "a batch", Plain(f"lost with {ticket.sent} actors in turn"), f"at most {self._retries} sent "
                "again (retries=)", "look at the actors' logs (a decoder that crashes its process, memory)",
                why="each actor computing it died; the batch is the same everywhere, so it would kill the next"))
        actor = self._ready_actor()
        ticket.actor, ticket.sent = actor, ticket.sent + 1
        ticket.ref = actor.handle.read.remote(ticket.keys)
        actor.inflight.append(ticket)

    def _ready_actor(self) -> Actor:
        ray = ray_module()
        deadline = time.monotonic() + self._start_timeout
        while True:
            placed, _ = ray.wait([a.ready for a in self._actors], num_returns=len(self._actors), timeout=0)
            ready = [a for a in self._actors if a.ready in placed]
            if ready:
                return min(ready, key=lambda a: len(a.inflight))
            if time.monotonic() > deadline:
                raise RuntimeError(refusal(
                    "decode_actors", self._size, f"an actor placed within {self._start_timeout:g} s",
                    "add nodes or free CPUs", why="every actor of the pool was lost and none could be placed again"))
            ray.wait([a.ready for a in self._actors], num_returns=1, timeout=1.0)

    def take(self, ticket: Ticket) -> Any:
        """The ticket's batch, computed again elsewhere for as long as its actor or result is lost."""
        ray, lost = ray_module(), lost_errors()
        while True:
            actor, started = ticket.actor, time.monotonic()
            try:
                value = ray.get(ticket.ref)
            except lost:
                self.stats.waited_s += time.monotonic() - started
                if actor is not None and actor is ticket.actor:
                    self._bury(actor)  # sends its tickets (this one included) to the others
                continue
            self.stats.waited_s += time.monotonic() - started
            self._forget(ticket)
            self.stats.batches += 1
            if isinstance(value, Failed):
                value.raise_it()
            return value

    def forget(self, tickets: list[Ticket]) -> None:
        """Tickets nobody will take (a superseded iterator's): their actors stop counting them."""
        for ticket in tickets:
            self._forget(ticket)

    def _forget(self, ticket: Ticket) -> None:
        actor = ticket.actor
        if actor is not None and ticket in actor.inflight:
            actor.inflight.remove(ticket)
            if actor.retiring:
                self._retire_if_idle(actor)

    def _retire_if_idle(self, actor: Actor) -> None:
        if not actor.inflight:
            ray_module().kill(actor.handle, no_restart=True)
            self._retiring.remove(actor)

    def _bury(self, actor: Actor) -> None:
        """A lost actor: killed for good, replaced (unless retiring), its tickets sent to the others."""
        ray = ray_module()
        ray.kill(actor.handle, no_restart=True)
        self.stats.lost += 1
        if actor.retiring:
            self._retiring.remove(actor)
        else:
            self._actors.remove(actor)
            if len(self._actors) < self._size:
                self._actors.append(self._new_actor())
        orphans, actor.inflight = actor.inflight, []
        for ticket in orphans:
            self.stats.recomputed += 1
            self.send(ticket)
