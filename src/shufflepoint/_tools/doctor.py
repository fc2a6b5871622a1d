"""``shufflepoint doctor``: the seed's environment checklist, automated.

Versions; whether Gloo is there (the audit and the demo need it); and whether the installed
Accelerate has the #4195 resume bug, found by *trying* it, not by reading the version number:
in this process, a DataLoader(shuffle=True) is prepared the way Accelerate prepares it for rank 0
of 2 processes (``prepare_data_loader(num_processes=2, process_index=0,
use_stateful_dataloader=True)``), read through epoch 0 and 3 batches of epoch 1, its state taken
and loaded into a freshly prepared one; the rest of epoch 1 is compared with the true rest. The
same probe runs again with ``patch_accelerate()`` to show whether the patch fixes it here.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys
import warnings
from typing import Any

from shufflepoint._tools import audit as _audit

SCHEMA_VERSION = 1
_SAVE = _audit.SavePoint(epoch=1, step=3)


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def probe_accelerate(seedable: bool = False) -> dict[str, Any]:
    """One in-process resume of an Accelerate-prepared stateful loader; the seed's setup."""
    import torch
    from accelerate.data_loader import prepare_data_loader
    from torch.utils.data import DataLoader, TensorDataset

    def prepared() -> Any:
        torch.manual_seed(1234)
        loader = DataLoader(TensorDataset(torch.arange(64)), batch_size=4, shuffle=True)
        return prepare_data_loader(loader, num_processes=2, process_index=0, use_stateful_dataloader=True,
                                   use_seedable_sampler=seedable)

    def ids(batch: Any) -> list[int]:
        return [int(v) for v in batch[0].tolist()]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchdata's set_vital; the patch's ResumeWarning is not expected here
        loader = prepared()
        epochs = [[ids(b) for b in loader]]
        iterator = iter(loader)
        consumed = [ids(next(iterator)) for _ in range(_SAVE.step)]
        state = loader.state_dict()
        epochs.append(consumed + [ids(b) for b in iterator])
        fresh = prepared()
        fresh.load_state_dict(state)
        resumed = [ids(b) for b in fresh]
    result = _audit.judge_rank(0, epochs, [resumed], _SAVE)
    return {"verdict": result.verdict, "detail": result.detail, "state_has_iteration": "_iteration" in state,
            "expected_first_batch": epochs[1][_SAVE.step], "resumed_first_batch": resumed[0] if resumed else None}


def run_doctor() -> dict[str, Any]:
    """Every check, as a JSON-ready dict with ``exit_code`` and ``advice``."""
    versions: dict[str, str | None] = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in ("shufflepoint", "torch", "numpy", "accelerate", "torchdata", "matplotlib"):
        versions[name] = _version(name)
    import torch.distributed as dist

    from shufflepoint.integrations import accelerate as integration

    gloo = bool(dist.is_available() and dist.is_gloo_available())
    found: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "versions": versions, "gloo": gloo}
    advice: list[str] = []
    problems = 0
    if not gloo:
        problems += 1
        advice.append("torch.distributed with Gloo is not available: `shufflepoint audit` and `shufflepoint demo` "
                      "need it (install a torch build with distributed support)")
    if versions["matplotlib"] is None:
        advice.append("matplotlib is not installed: `shufflepoint demo` prints its table but writes no plot "
                      "(pip install 'shufflepoint[plot]')")
    found["patch_active"] = integration.is_patched()
    accelerate, torchdata = versions["accelerate"], versions["torchdata"]
    if accelerate is None or torchdata is None:
        missing = [n for n in ("accelerate", "torchdata") if versions[n] is None]
        found["accelerate_4195"] = {"status": "not applicable", "detail": f"{' and '.join(missing)} not installed"}
        advice.append("Accelerate's stateful loaders are not in use here; shufflepoint.DataLoader needs neither")
    else:
        problems += _check_accelerate(accelerate, found, advice)
    advice.append("to check your own pipeline end to end, in real processes: "
                  "shufflepoint audit path/to/your_script.py:make_loader --nproc 2")
    found["advice"] = advice
    found["exit_code"] = 1 if problems else 0
    return found


def _probe_stock_and_patched(in_range: bool) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The #4195 probe without the patch, and with it where the version allows; the process is left
    patched or not as it was found."""
    from shufflepoint.integrations import accelerate as integration

    was_patched = integration.is_patched()
    try:
        integration.unpatch_accelerate()
        stock = {"plain": probe_accelerate(False), "seedable": probe_accelerate(True)}
        patched = None
        if in_range:
            integration.patch_accelerate()
            try:
                patched = {"plain": probe_accelerate(False), "seedable": probe_accelerate(True)}
            finally:
                integration.unpatch_accelerate()
    finally:
        if was_patched:
            integration.patch_accelerate()
    return stock, patched


def _check_accelerate(version: str, found: dict[str, Any], advice: list[str]) -> int:
    """Probe the installed Accelerate for #4195, stock and patched; fill ``found`` and ``advice``.
    Returns the number of problems found."""
    from shufflepoint.integrations import accelerate as integration

    in_range = integration.version_in_range(version)
    low, high = integration.TESTED_ACCELERATE
    found["patch_tested_range"] = [low, high]
    found["patch_supports_installed"] = in_range
    stock, patched = _probe_stock_and_patched(in_range)
    buggy = [k for k, v in stock.items() if v["verdict"] != _audit.EXACT]
    found["accelerate_4195"] = {"status": "present" if buggy else "absent", "stock": stock, "patched": patched}
    problems = 0
    if buggy:
        problems += 1
        advice.append(
            f"Accelerate {version} has the #4195 bug: a stateful loader resumed in new processes "
            f"continues at the right position in the wrong order. Add `shufflepoint.patch_accelerate()` before "
            f"`accelerator.prepare(...)` in your training script, or use shufflepoint.DataLoader.")
        if patched is not None and all(v["verdict"] == _audit.EXACT for v in patched.values()):
            advice.append("with patch_accelerate() the same probe resumes EXACT here")
        elif patched is None:
            advice.append(f"patch_accelerate() was tested on Accelerate {low} up to {high} (exclusive) and "
                          f"refuses {version}: use shufflepoint.DataLoader, or install a tested "
                          "Accelerate")
            problems += 1
        else:
            problems += 1
            advice.append("with patch_accelerate() the probe is still not exact here: please report this")
    if not found["patch_active"]:
        advice.append("patch_accelerate() acts per process, so it is not active in this doctor process; "
                      "call it in every training process, before accelerator.prepare(...)")
    return problems


def render(found: dict[str, Any]) -> str:
    v = found["versions"]
    lines = ["shufflepoint doctor", ""]
    for name in ("python", "torch", "accelerate", "torchdata", "numpy", "matplotlib", "shufflepoint"):
        lines.append(f"  {name:<13} {v[name] or 'not installed'}")
    lines.append(f"  {'gloo':<13} {'available' if found['gloo'] else 'NOT available'}")
    lines.append("")
    bug = found["accelerate_4195"]
    lines.append(f"  Accelerate #4195 (resume keeps the position, loses the order): {bug['status'].upper()}")
    if "stock" in bug:
        for name, label in (("plain", "shuffle=True"), ("seedable", "use_seedable_sampler=True")):
            stock = bug["stock"][name]
            lines.append(f"    stock,   {label:<26} {stock['verdict']:<11} {stock['detail']}")
            if bug["patched"] is not None:
                patched = bug["patched"][name]
                lines.append(f"    patched, {label:<26} {patched['verdict']:<11} {patched['detail']}")
        plain = bug["stock"]["plain"]
        lines.append(f"    stock state has '_iteration': {plain['state_has_iteration']}; "
                     f"first resumed batch {plain['resumed_first_batch']}, expected {plain['expected_first_batch']}")
    else:
        lines.append(f"    {bug['detail']}")
    lines.append(f"  patch_accelerate() active in this process: {'yes' if found['patch_active'] else 'no'}")
    lines.append("")
    lines += [f"  - {a}" for a in found["advice"]]
    return "\n".join(lines)
