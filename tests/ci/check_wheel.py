"""make test-wheel: the release a user installs, checked as they would install it.

1. ``python -m build`` makes the sdist, then the wheel from the sdist (so the sdist is complete).
2. The wheel carries ``shufflepoint/py.typed``, nothing of ``tests/``, ``benchmarks/`` or ``examples/``,
   and the version of ``src/shufflepoint/_version.py``.
3. For each of ``shufflepoint`` and ``shufflepoint[shards]``: a fresh venv (no system site-packages, so
   neither this checkout nor the dev venv's editable install can be imported), torch==2.13.0 first and
   alone (the local CPU wheel), then the wheel. From a folder outside the checkout, without PYTHONPATH:
   ``shufflepoint`` imports from the venv, ``shufflepoint --version`` and the installed metadata say the
   version, the README's quick start (examples/quickstart.py, copied out) stops at step 40 and resumes
   on 2 processes batch for batch as the uninterrupted run, and ``shufflepoint demo`` passes. With
   ``[shards]``, examples/shards.py reads its Parquet corpus too.

    python tests/ci/check_wheel.py [--keep DIR]

Exit 0 when every check passes; otherwise each failed check is printed and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
TORCH = "torch==2.13.0"  # the local CPU wheel; pinned again as a constraint so no resolve can swap it
EXTRAS = ["", "[shards]"]
FORBIDDEN_TOP = {"tests", "benchmarks", "examples"}


def source_version() -> str:
    """The version as _version.py writes it, read without importing this checkout."""
    found = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "src/shufflepoint/_version.py").read_text(), re.M)
    if found is None:
        raise SystemExit("src/shufflepoint/_version.py: no __version__ = \"...\" line")
    return found[1]


def wheel_problems(names: list[str], metadata: str, version: str) -> list[str]:
    """What is wrong with a wheel's file list and METADATA text (empty when nothing is)."""
    problems = []
    for needed in ("shufflepoint/__init__.py", "shufflepoint/py.typed", "shufflepoint/_version.py"):
        if needed not in names:
            problems.append(f"the wheel lacks {needed}")
    stray = sorted({name.split("/")[0] for name in names if set(name.split("/")[:-1]) & FORBIDDEN_TOP
                    or name.split("/")[0] in FORBIDDEN_TOP})
    if stray:
        problems.append(f"the wheel carries {', '.join(stray)} (only the package belongs in it)")
    declared = re.search(r"^Version: (\S+)$", metadata, re.M)
    if declared is None or declared[1] != version:
        problems.append(f"the wheel's METADATA says version {declared[1] if declared else None}, "
                        f"src/shufflepoint/_version.py {version}")
    return problems


def run(command: list[str], cwd: pathlib.Path, env: dict[str, str] | None = None, timeout: int = 600) -> str:
    """Run a command; its output, or SystemExit with its tail on a failure."""
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)
    if done.returncode != 0:
        raise CheckFailed(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-4000:]}")
    return done.stdout


class CheckFailed(Exception):
    pass


def build(out: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    out.mkdir(parents=True)
    run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=out)
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise CheckFailed(f"python -m build made {[p.name for p in out.iterdir()]}, expected one wheel, one sdist")
    return wheels[0], sdists[0]


def check_contents(wheel: pathlib.Path, version: str) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        text = archive.read(metadata).decode() if metadata else ""
    return wheel_problems(names, text, version)


def clean_env(venv: pathlib.Path) -> dict[str, str]:
    """The user's environment: this venv first on PATH, nothing of the checkout or the dev venv."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    return env


def install(wheel: pathlib.Path, extra: str, work: pathlib.Path) -> pathlib.Path:
    venv = work / f"venv{extra.strip('[]') and '-' + extra.strip('[]')}"
    run([sys.executable, "-m", "venv", str(venv)], cwd=work)
    python = str(venv / "bin" / "python")
    constraints = work / "constraints.txt"
    constraints.write_text(TORCH + "\n")
    run([python, "-m", "pip", "install", "-q", TORCH], cwd=work, env=clean_env(venv))
    run([python, "-m", "pip", "install", "-q", "-c", str(constraints), f"{wheel}{extra}"], cwd=work,
        env=clean_env(venv))
    return venv


IMPORTED_FROM = """
import importlib.metadata, json, shufflepoint
print(json.dumps({"file": shufflepoint.__file__, "version": shufflepoint.__version__,
                  "metadata": importlib.metadata.version("shufflepoint")}))
"""


def check_installed(venv: pathlib.Path, version: str, work: pathlib.Path) -> list[str]:
    env, problems = clean_env(venv), []
    found = json.loads(run([str(venv / "bin" / "python"), "-c", IMPORTED_FROM], cwd=work, env=env).splitlines()[-1])
    site = pathlib.Path(found["file"]).resolve()
    if not site.is_relative_to(venv.resolve()):
        problems.append(f"{venv.name}: shufflepoint was imported from {site}, not from the venv")
    if found["version"] != version or found["metadata"] != version:
        problems.append(f"{venv.name}: __version__ {found['version']}, metadata {found['metadata']}, "
                        f"expected {version}")
    said = run([str(venv / "bin" / "shufflepoint"), "--version"], cwd=work, env=env).strip()
    if said != f"shufflepoint {version}":
        problems.append(f"{venv.name}: shufflepoint --version said {said!r}")
    return problems


def torchrun(venv: pathlib.Path, script: pathlib.Path, args: list[str], work: pathlib.Path) -> None:
    run([str(venv / "bin" / "python"), "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(script), *args], cwd=work, env=clean_env(venv))


def records(prefix: pathlib.Path, rank: int) -> list[object]:
    return [json.loads(line) for line in pathlib.Path(f"{prefix}.rank{rank}").read_text().splitlines()]


def check_quickstart(venv: pathlib.Path, work: pathlib.Path) -> list[str]:
    """The README's example, copied out of the checkout: stopped at step 40 (mid-epoch 1), resumed, it
    trains every rank on the uninterrupted run's batches."""
    folder = work / f"quickstart-{venv.name}"
    folder.mkdir()
    script = pathlib.Path(shutil.copy(ROOT / "examples" / "quickstart.py", folder))
    common = ["--epochs", "2", "--record"]
    torchrun(venv, script, ["--checkpoint", str(folder / "a.pt"), *common, str(folder / "whole")], folder)
    for stop in (["--stop-after-step", "40"], []):
        torchrun(venv, script, ["--checkpoint", str(folder / "b.pt"), *common, str(folder / "parts"), *stop], folder)
    problems = []
    for rank in range(2):
        whole, parts = records(folder / "whole", rank), records(folder / "parts", rank)
        if len(whole) != 64 or parts != whole:
            problems.append(f"{venv.name}: quickstart rank {rank}: {len(parts)} batches stopped and resumed, "
                            f"{len(whole)} uninterrupted, {'equal' if parts == whole else 'not equal'}")
    return problems


def check_demo(venv: pathlib.Path, work: pathlib.Path) -> list[str]:
    out = work / f"demo-{venv.name}"
    run([str(venv / "bin" / "shufflepoint"), "demo", "--out", str(out), "--json", str(out / "result.json")],
        cwd=work, env=clean_env(venv))
    result = json.loads((out / "result.json").read_text())
    unexpected = [row["label"] for row in result["variants"] if not row["as_expected"]]
    return [f"{venv.name}: demo variants not as expected: {unexpected}"] if unexpected else []


def check_shards(venv: pathlib.Path, work: pathlib.Path) -> list[str]:
    """The [shards] extra reads Parquet: examples/shards.py writes its corpus and trains an epoch on it."""
    folder = work / f"shards-{venv.name}"
    folder.mkdir()
    script = pathlib.Path(shutil.copy(ROOT / "examples" / "shards.py", folder))
    torchrun(venv, script, ["--data", str(folder / "corpus"), "--checkpoint", str(folder / "s.pt"), "--epochs", "1",
                            "--record", str(folder / "served")], folder)
    served = sorted(i for rank in range(2) for r in records(folder / "served", rank) for i in r["ids"])  # type: ignore[index]
    return [] if served == list(range(5000)) else [f"{venv.name}: shards example served {len(served)} ids, not 0..4999"]


def check(work: pathlib.Path) -> list[str]:
    version = source_version()
    started = time.monotonic()
    wheel, sdist = build(work / "dist")
    print(f"built {sdist.name}, {wheel.name} ({time.monotonic() - started:.0f} s)", flush=True)
    problems = check_contents(wheel, version)
    for extra in EXTRAS:
        step = time.monotonic()
        venv = install(wheel, extra, work)
        print(f"installed shufflepoint{extra} in a fresh venv ({time.monotonic() - step:.0f} s)", flush=True)
        problems += check_installed(venv, version, work)
        problems += check_quickstart(venv, work)
        problems += check_demo(venv, work)
        if extra == "[shards]":
            problems += check_shards(venv, work)
        print(f"shufflepoint{extra}: checked ({time.monotonic() - step:.0f} s)", flush=True)
    print(f"make test-wheel: {time.monotonic() - started:.0f} s in all", flush=True)
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temporary folder)")
    args = parser.parse_args()
    if args.keep:
        work = pathlib.Path(args.keep).resolve()
        work.mkdir(parents=True, exist_ok=True)
        problems = _checked(work)
    else:
        with tempfile.TemporaryDirectory(prefix="shufflepoint-wheel-") as folder:
            problems = _checked(pathlib.Path(folder))
    for problem in problems:
        print("FAILED:", problem)
    print("test-wheel:", "FAILED" if problems else "passed")
    return 1 if problems else 0


def _checked(work: pathlib.Path) -> list[str]:
    try:
        return check(work)
    except (CheckFailed, subprocess.TimeoutExpired) as failure:
        return [str(failure)]


if __name__ == "__main__":
    sys.exit(main())
