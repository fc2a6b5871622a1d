"""What an audit runs: the TARGET factory, the save point, and the validated configuration."""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shufflepoint._tools.audit.verdicts import UsageError


@dataclass(frozen=True)
class SavePoint:
    """Save after ``step`` batches of epoch ``epoch`` have been received (step 0: before its first)."""

    epoch: int
    step: int

    def __str__(self) -> str:
        return f"{self.epoch}:{self.step}"


def parse_save_at(text: str) -> SavePoint:
    """``"1:3"`` -> SavePoint(epoch=1, step=3)."""
    parts = text.split(":")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--save-at: found {text!r}, expected EPOCH:STEP with two integers >= 0, e.g. 1:3")
    return SavePoint(int(parts[0]), int(parts[1]))


@dataclass(frozen=True)
class Target:
    """``path/to/file.py:factory`` or ``package.module:factory``, resolved."""

    text: str
    module: str  # a module name, or an absolute file path
    attribute: str
    is_file: bool


def parse_target(text: str, what: str = "TARGET") -> Target:
    """Split and check a TARGET; a file path is made absolute (workers may run elsewhere)."""
    location, sep, attribute = text.rpartition(":")
    if not sep or not location or not attribute.isidentifier():
        raise UsageError(
            f"{what}: found {text!r}, expected path/to/file.py:factory or package.module:factory "
            "(a factory that takes no arguments and returns the loader)"
        )
    if location.endswith(".py") or os.sep in location:
        path = os.path.abspath(location)
        if not os.path.isfile(path):
            raise UsageError(f"{what}: file {location!r} not found (from {os.getcwd()})")
        return Target(text, path, attribute, True)
    import importlib.util

    try:
        found = importlib.util.find_spec(location)
    except (ImportError, ValueError):
        found = None  # a parent package is missing
    if found is None:
        raise UsageError(
            f"{what}: module {location!r} not found on sys.path (from {os.getcwd()}); give a file path "
            "(path/to/file.py:factory) or install the package"
        )
    return Target(text, location, attribute, False)


def load_target(target: Target) -> Callable[..., Any]:
    """Import TARGET and return its factory (in a worker: may import torch, accelerate, ...)."""
    import importlib
    import importlib.util

    if target.is_file:
        name = "_shufflepoint_target_" + hashlib.blake2b(target.module.encode(), digest_size=6).hexdigest()
        sys.path.insert(0, os.path.dirname(target.module))
        spec = importlib.util.spec_from_file_location(name, target.module)
        if spec is None or spec.loader is None:
            raise UsageError(f"TARGET: cannot import {target.module!r} as a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(target.module)
    factory = getattr(module, target.attribute, None)
    if factory is None:
        public = sorted(n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n]))
        raise UsageError(
            f"TARGET {target.text!r}: {target.module!r} has no attribute {target.attribute!r}; "
            f"its callables: {', '.join(public[:12]) or 'none'}"
        )
    if not callable(factory):
        raise UsageError(f"TARGET {target.text!r}: {target.attribute!r} is a {type(factory).__name__}, not callable")
    return factory  # type: ignore[no-any-return]  # checked callable above


@dataclass(frozen=True)
class AuditConfig:
    target: Target
    nproc: int
    resume_nproc: int
    epochs: int = 2
    save_at: SavePoint = SavePoint(1, 3)
    kill: bool = False
    sample_id: str | None = None
    timeout: float = 600.0
    exclude: int = 0  # samples excluded at the save point (audit/exclusion.py)

    def __post_init__(self) -> None:
        if isinstance(self.exclude, bool) or not isinstance(self.exclude, int) or self.exclude < 0:
            raise UsageError(f"--exclude: found {self.exclude!r}, expected an integer >= 0")
        for name in ("nproc", "resume_nproc", "epochs"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UsageError(f"--{name.replace('_', '-')}: found {value!r}, expected an integer >= 1")
        if self.save_at.epoch >= self.epochs:
            raise UsageError(
                f"--save-at {self.save_at}: epoch {self.save_at.epoch} is not run with --epochs {self.epochs} "
                f"(epochs 0..{self.epochs - 1}); save in an earlier epoch or run more epochs"
            )
        if self.sample_id is not None:
            parse_target(self.sample_id, "--sample-id")

