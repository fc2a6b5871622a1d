"""The launcher's side of a worker's life: how a worker ends (``end_worker``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from shufflepoint._tools.launch import LaunchResult, launch

ENDS_WITH_A_CHILD = textwrap.dedent("""
    import atexit, multiprocessing, os, sys, time
    from shufflepoint._tools.launch import end_worker

    def sleep():
        time.sleep(60)

    if __name__ == "__main__":
        child = multiprocessing.get_context("spawn").Process(target=sleep, daemon=True)
        child.start()
        print(child.pid, flush=True)
        atexit.register(lambda: print("finalized", flush=True))
        end_worker(int(sys.argv[1]))
""")


def test_end_worker_exits_with_its_code_skips_finalization_and_stops_children(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(ENDS_WITH_A_CHILD)
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(script), "7"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 7, done.stderr
    assert "finalized" not in done.stdout  # os._exit: no interpreter teardown, where Gloo's threads abort
    child = int(done.stdout.split()[0])
    assert not os.path.exists(f"/proc/{child}") or "Z" in open(f"/proc/{child}/stat").read().split()[2]
    assert time.monotonic() - started < 30  # the child was stopped, not waited for


def test_ranks_that_end_with_end_worker_leave_gloo_together(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(textwrap.dedent(f"""
        import os, time
        import torch, torch.distributed as dist
        from shufflepoint._tools.launch import end_worker

        dist.init_process_group("gloo")
        rank = dist.get_rank()
        time.sleep(0.5 * rank)  # the ranks arrive at the end at different times
        total = torch.tensor([rank + 1])
        dist.all_reduce(total)
        open(os.path.join({str(tmp_path)!r}, f"r{{rank}}.{{int(total)}}"), "w").close()
        end_worker()
    """))
    launch([str(script)], 3, timeout=120).check()
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".py") == ["r0.6", "r1.6", "r2.6"]


ABORTS = textwrap.dedent("""
    import atexit, os, signal, sys
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    dist.destroy_process_group()
    GLOO = "terminate called without an active exception"  # what torch's Gloo threads print as they abort
    if sys.argv[1] == "in_teardown":  # runs after the program, as Python tears down: no Python frame left
        atexit.register(os.abort) if rank == 1 else None
    elif sys.argv[1] == "bus_in_teardown":  # one rank aborts, the other dies of SIGBUS in the same teardown
        atexit.register(os.kill, os.getpid(), signal.SIGBUS if rank == 0 else signal.SIGABRT)
    elif rank == 1:
        os.abort()  # in the middle of the program
    if sys.argv[1] != "in_the_program":
        atexit.register(print, GLOO, file=sys.stderr, flush=True)  # runs first (last in, first out)
""")


@pytest.mark.parametrize("when", ["in_teardown", "bus_in_teardown", "in_the_program"])
def test_check_tells_an_abort_in_teardown_from_one_in_the_program(tmp_path, when):
    script = tmp_path / "aborts.py"
    script.write_text(ABORTS)
    result = launch([str(script), when], 2, timeout=120)
    assert result.returncode != 0 and "Fatal Python error: " in result.stderr
    if when.endswith("in_teardown"):
        assert result.aborted_after_its_program
        with pytest.warns(RuntimeWarning, match="aborted in interpreter teardown"):
            result.check()
    else:
        assert not result.aborted_after_its_program
        with pytest.raises(RuntimeError, match="worker launch failed"):
            result.check()


GLOO = "terminate called without an active exception"
INTERLEAVED = (  # two ranks' dumps as they reached one pipe (captured from the bus_in_teardown launch)
    f"{GLOO}{GLOO}\nFatal Python error: Bus error\n\nCurrent thread 0x00007f55a4e08b80 (most recent call first):\n"
    "  <no Python frame>\n\nFatal Python error: Aborted\n\nCurrent thread 0x00007f783586fb80\n"
    "Extension modules:  (most recent call first):\nnumpy._core._multiarray_umath  <no Python frame>\n, torch._C\n")
WITH_A_FRAME = INTERLEAVED.replace(
    "  <no Python frame>\n\nFatal", '  File "/job/train.py", line 12 in step\n\nFatal')


@pytest.mark.parametrize(("stderr", "after_its_program"), [
    (INTERLEAVED, True), (WITH_A_FRAME, False), (INTERLEAVED.replace(GLOO, ""), False),
    (f"{GLOO}\nFatal Python error: Aborted\n", False)])
def test_interleaved_dumps_are_read_marker_by_marker(stderr, after_its_program):
    assert LaunchResult(-6, "", stderr, killed=False).aborted_after_its_program is after_its_program
