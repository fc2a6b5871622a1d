"""Start N real worker processes the way torchrun does, on Gloo over loopback.

Used by the audit, the demo and the tests: every resume happens in processes that did not exist
before, which is the only way to catch state that lives outside the checkpoint.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn


@dataclass(frozen=True)
class LaunchResult:
    returncode: int
    stdout: str
    stderr: str
    killed: bool  # True when we SIGKILLed the job because `kill_when` appeared

    @property
    def aborted_after_its_program(self) -> bool:
        """Every rank ran its program to the end, then one died while Python tore it down: torch's Gloo
        threads printed "terminate called without an active exception", and every fatal error dump
        (``PYTHONFAULTHANDLER``, set by ``worker_env``) shows no Python frame in any thread. The abort
        is SIGABRT, or SIGBUS where a second rank dies in the same teardown (seen in CI on the DCP
        example), and the two dumps may interleave. Torch's Gloo threads do this now and then (see
        ``end_worker``); the job's work was done."""
        if "terminate called without an active exception" not in self.stderr \
                or "Fatal Python error: " not in self.stderr:
            return False
        # Two ranks dumping at once interleave their writes; each of these markers is one write().
        dumps = self.stderr.count("(most recent call first):")
        return dumps > 0 and self.stderr.count("<no Python frame>") == dumps

    def check(self) -> LaunchResult:
        """Raise with the tail of stderr when the launch failed (and was not killed on purpose).
        An abort in interpreter teardown after the program ended is warned about, not raised: what
        the workers wrote is complete, and the caller's own checks judge it."""
        if self.returncode != 0 and not self.killed:
            if self.aborted_after_its_program:
                warnings.warn("a worker aborted in interpreter teardown after its program ended (torch's Gloo "
                              "threads; see shufflepoint._tools.launch.end_worker)", RuntimeWarning, stacklevel=2)
                return self
            lines = self.stderr.strip().splitlines()
            ranks = [line for line in lines if line.startswith("[rank")][-30:]  # the workers' own traceback
            tail = "\n".join([*ranks, *lines[-25:]])
            raise RuntimeError(f"worker launch failed with exit code {self.returncode}:\n{tail}")
        return self


def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (Linux /proc). torchrun puts workers in new sessions,
    so a process-group kill of the launcher does not reach them."""
    found: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            found.extend(children)
            stack.extend(children)
    return found


def _tagged(tag: str) -> list[int]:
    """Every live process whose environment carries ``tag`` (Linux /proc): all that a launch
    started, wherever they were reparented."""
    needle = tag.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def kill_tree(pid: int, tag: str | None = None) -> None:
    """SIGKILL a process and all its descendants (and, with ``tag``, every process whose
    environment carries it).

    The tree is frozen first (SIGSTOP, repeated until no new process appears), so that a process
    that was spawning children at that moment (a DataLoader starting its workers) cannot leave an
    orphan behind that holds the launcher's pipes open; the tag catches one that was reparented."""
    frozen: list[int] = []
    for _ in range(50):
        found = [pid, *_descendants(pid), *(_tagged(tag) if tag else [])]
        fresh = [p for p in dict.fromkeys(found) if p not in frozen and p != os.getpid()]
        if not fresh:
            break
        for victim in fresh:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGSTOP)
        frozen += fresh
    for victim in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for workers: CPU only, Gloo on loopback, one thread each (2-core machines)."""
    env = dict(os.environ)
    env.update(
        CUDA_VISIBLE_DEVICES="",
        GLOO_SOCKET_IFNAME=env.get("GLOO_SOCKET_IFNAME", "lo"),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        PYTHONFAULTHANDLER="1",  # a fatal error prints every thread's Python stack (see LaunchResult)
        TORCHELASTIC_ERROR_FILE="",
    )
    env.pop("TORCHELASTIC_ERROR_FILE")
    if extra:
        env.update(extra)
    return env


def launch(
    target: Sequence[str],
    nproc: int,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 300.0,
    kill_when: str | None = None,
    extra_launcher_args: Sequence[str] = (),
) -> LaunchResult:
    """Run ``python -m torch.distributed.run --standalone --nproc_per_node=nproc *target``.

    ``target`` is what follows the launcher arguments: a script path and its arguments, or
    ``["-m", "module", ...]``. With ``kill_when`` (a file path), the whole process group is
    SIGKILLed as soon as that file exists, as a preempted job would be: no cleanup, no atexit.
    """
    if nproc < 1:
        raise ValueError(f"nproc: found {nproc}, expected an integer >= 1")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
        "--monitor_interval=0.1", *extra_launcher_args, *target,
    ]
    tag = f"SHUFFLEPOINT_LAUNCH={uuid.uuid4().hex}"
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=worker_env({**(env or {}), "SHUFFLEPOINT_LAUNCH": tag.split("=", 1)[1]}), start_new_session=True,
    )
    killed = False
    deadline = time.monotonic() + timeout
    try:
        if kill_when is None:
            out, err = proc.communicate(timeout=timeout)
        else:
            while proc.poll() is None:
                if os.path.exists(kill_when):
                    kill_tree(proc.pid, tag)
                    killed = True
                    break
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired(cmd, timeout)
                time.sleep(0.01)
            out, err = (_drained(proc, tag) if killed else
                        proc.communicate(timeout=max(1.0, deadline - time.monotonic())))
    except subprocess.TimeoutExpired:
        stacks = _stacks(proc.pid, tag)
        kill_tree(proc.pid, tag)
        out, err = proc.communicate()
        raise RuntimeError(f"worker launch timed out after {timeout:.0f}s:\n{err[-4000:]}\n{stacks}") from None
    except BaseException:  # interrupted (a test runner's timeout, Ctrl-C): leave no process behind
        kill_tree(proc.pid, tag)
        _drained(proc, tag)
        raise
    return LaunchResult(proc.returncode, out, err, killed)


def _drained(proc: subprocess.Popen[str], tag: str, seconds: float = 30.0) -> tuple[str, str]:
    """(stdout, stderr) of a launch already SIGKILLed: its pipes read to their end, or, where a process the kill
    missed still holds them after ``seconds`` (seen once in 3 repeats of a launch whose workers were starting
    their own), killed again and the pipes closed, with what was read: a dead launch never hangs its caller."""
    try:
        return proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired as held:
        kill_tree(proc.pid, tag)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        read = [part.decode(errors="replace") if isinstance(part, bytes) else (part or "")
                for part in (held.stdout, held.stderr)]
        return read[0], read[1] + "\n(the pipes closed after the kill: a process it missed held them)"


def _stacks(pid: int, tag: str) -> str:
    """The Python stacks of every process of a hung launch (py-spy, when installed), so that a
    hang in CI says where it hangs; empty when py-spy is not there."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        return ""
    dumps = []
    for victim in dict.fromkeys([pid, *_descendants(pid), *_tagged(tag)]):
        try:
            found = subprocess.run([spy, "dump", "--pid", str(victim)], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as error:
            dumps.append(f"-- py-spy on {victim}: {error}")
            continue
        dumps.append(f"-- process {victim}:\n{found.stdout[-3000:]}{found.stderr[-500:]}")
    return "\n".join(dumps)[-20000:]


def end_worker(code: int = 0, *, together: bool = True) -> NoReturn:
    """End a launched worker once its work is written: every rank leaves Gloo together, then the
    process exits without interpreter finalization.

    Torch's Gloo threads can abort a process while Python tears it down ("terminate called without
    an active exception", SIGABRT, no Python frame left): a run whose every record was written then
    fails. Seen in CI, and here in 5 of 42 three-process Accelerate launches on a loaded 2-core
    machine. ``os._exit`` skips that teardown; DataLoader workers still alive are stopped first.
    ``together=False`` skips the barrier, for a worker that may end while its peers failed."""
    import multiprocessing

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if together:
            dist.barrier()  # no rank closes Gloo while another still talks to it
        dist.destroy_process_group()
    for child in multiprocessing.active_children():
        child.terminate()
        child.join(timeout=5)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # private: the documented exit without atexit, after the children are joined
