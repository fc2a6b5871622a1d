"""The patch machinery: what ``patch_accelerate()`` replaces (every touch point, named), the version
range it was tested on, and how ``unpatch_accelerate()`` puts the originals back."""

from __future__ import annotations

import importlib.metadata
import warnings
from dataclasses import dataclass
from typing import Any

from shufflepoint._errors import Plain, ResumeWarning, refusal
from shufflepoint.integrations.accelerate._hooks import (
    _make_begin,
    _make_end,
    _make_load_state_dict,
    _make_skip_first_batches,
    _make_state_dict,
)
from shufflepoint.integrations.accelerate._native import _make_gather_for_metrics, _make_prepare_data_loader
from shufflepoint.integrations.accelerate._save_state import (
    _make_load_accelerator_state,
    _make_save_accelerator_state,
)

# The versions every test of this module ran on: from the first (inclusive) to the second
# (exclusive). Each touch point below was read in the sources of 1.13.0, 1.14.0 and 1.15.0.
TESTED_ACCELERATE: tuple[str, str] = ("1.13.0", "1.16.0")
"""The Accelerate releases the patch is tested on: from the first (inclusive) to the second (exclusive);
``patch_accelerate`` refuses any other unless forced."""

_TOUCH_POINTS = (
    "accelerate.data_loader.DataLoaderShard.state_dict / .load_state_dict (inherited from "
    "DataLoaderAdapter): add and read _iteration and the order source",
    "accelerate.data_loader.DataLoaderDispatcher.state_dict / .load_state_dict: same",
    "accelerate.data_loader.DataLoaderShard.begin / .end and DataLoaderDispatcher.begin / .end "
    "(DataLoaderStateMixin): the epoch-start and epoch-end hooks",
    "accelerate.data_loader.DataLoaderAdapter.dl_state_dict: the snapshot state_dict() returns",
    "accelerate.data_loader.DataLoaderShard.iteration / DataLoaderDispatcher.iteration: the epoch",
    "accelerate.data_loader.skip_first_batches (also bound in accelerate.accelerator and "
    "accelerate): carry the epoch (#4071) and report the epoch's end to the source loader",
    "accelerate.accelerator.save_accelerator_state / load_accelerator_state: per-rank files",
    "accelerate.accelerator.Accelerator.prepare_data_loader: a shufflepoint.DataLoader is wrapped, not "
    "re-sharded, and listed in Accelerator._dataloaders",
    "accelerate.accelerator.Accelerator.gather_for_metrics: the padded tail of a shufflepoint.DataLoader "
    "with more than one padded rank is trimmed by position",
    "accelerate.data_loader.DataLoaderStateMixin and accelerate.state.GradientState._add_dataloader: "
    "end_of_dataloader and remainder of a prepared shufflepoint.DataLoader",
    "torchdata StatefulDataLoader._initial_iter_for_state_dict: the iterator built by the eager "
    "state_dict() in DataLoaderAdapter.__init__ (#4204)",
)


@dataclass
class _Patch:
    originals: list[tuple[Any, str, bool, Any]]  # (owner, name, owned_in_dict, value)
    version: str


_PATCH: _Patch | None = None


def patch_accelerate(force: bool = False) -> None:
    """Make stock Accelerate checkpoint and resume the data order exactly. Idempotent.

    Call once per process, before ``accelerator.prepare(...)``. Checks the installed Accelerate
    against ``TESTED_ACCELERATE`` and refuses any other version with ``RuntimeError``;
    ``force=True`` patches anyway and says so with a ``ResumeWarning``.

    >>> import shufflepoint
    >>> shufflepoint.patch_accelerate()
    >>> shufflepoint.patch_accelerate()      # a second call changes nothing
    >>> shufflepoint.unpatch_accelerate()    # the original methods are back
    """
    global _PATCH
    if _PATCH is not None:
        return
    version = _installed_accelerate_version()
    if not version_in_range(version):
        low, high = TESTED_ACCELERATE
        if not force:
            raise RuntimeError(refusal(
                "shufflepoint.patch_accelerate", Plain(f"Accelerate {version}"),
                f"a tested version, {low} up to (not including) {high}",
                f"install a tested version (pip install 'accelerate>={low},<{high}'), or call "
                "patch_accelerate(force=True) to try anyway",
                why="the patch reaches into Accelerate's internals, which change between releases, so an untested "
                "version could resume silently wrong"))
        warnings.warn(
            f"patch_accelerate(force=True) on Accelerate {version}, outside the tested range "
            f"{low} to {high} (exclusive): exact resume is not guaranteed; run "
            f"`shufflepoint audit` on your pipeline before trusting it.",
            ResumeWarning,
            stacklevel=2,
        )
    originals = []
    for owner, name, value in _replacements():
        owned = name in vars(owner)
        originals.append((owner, name, owned, vars(owner)[name] if owned else None))
        setattr(owner, name, value)
    _PATCH = _Patch(originals=originals, version=version)


def _replacements() -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) for every touch point that the patch replaces."""
    import accelerate
    import accelerate.accelerator as accelerator_module
    import accelerate.data_loader as data_loader_module

    shard = data_loader_module.DataLoaderShard
    dispatcher = data_loader_module.DataLoaderDispatcher
    replacements: list[tuple[Any, str, Any]] = []
    for cls in (shard, dispatcher):
        replacements += [
            (cls, "state_dict", _make_state_dict(cls.state_dict)),
            (cls, "load_state_dict", _make_load_state_dict(cls.load_state_dict)),
            (cls, "begin", _make_begin(cls.begin)),
            (cls, "end", _make_end(cls.end)),
        ]
    original_skip = data_loader_module.skip_first_batches
    patched_skip = _make_skip_first_batches(original_skip)
    for module in (data_loader_module, accelerator_module, accelerate):
        if getattr(module, "skip_first_batches", None) is original_skip:
            replacements.append((module, "skip_first_batches", patched_skip))
    replacements += [
        (accelerator_module, "save_accelerator_state",
         _make_save_accelerator_state(accelerator_module.save_accelerator_state)),
        (accelerator_module, "load_accelerator_state",
         _make_load_accelerator_state(accelerator_module.load_accelerator_state)),
        (accelerator_module.Accelerator, "prepare_data_loader",
         _make_prepare_data_loader(accelerator_module.Accelerator.prepare_data_loader)),
        (accelerator_module.Accelerator, "gather_for_metrics",
         _make_gather_for_metrics(accelerator_module.Accelerator.gather_for_metrics)),
    ]
    return replacements


def unpatch_accelerate() -> None:
    """Put back every original that ``patch_accelerate()`` replaced. A no-op when not patched.

    Loaders prepared while patched keep the state they gathered, but from now on behave as stock
    Accelerate does.
    """
    global _PATCH
    if _PATCH is None:
        return
    for owner, name, owned, value in reversed(_PATCH.originals):
        if owned:
            setattr(owner, name, value)
        else:
            delattr(owner, name)
    _PATCH = None


def is_patched() -> bool:
    """Whether ``patch_accelerate()`` is in effect in this process."""
    return _PATCH is not None


def _installed_accelerate_version() -> str:
    try:
        return importlib.metadata.version("accelerate")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(refusal("shufflepoint.patch_accelerate", Plain("no Accelerate installed"),
                                   "Accelerate installed", "install it (pip install 'shufflepoint[accelerate]') or "
                                   "drop the call")) from None


def version_in_range(version: str) -> bool:
    """Whether ``version`` is a final release within ``TESTED_ACCELERATE`` (a pre-release or a local build
    is not)."""

    def release(text: str) -> tuple[int, ...] | None:
        parts = text.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            return None  # pre-releases, dev and local builds are not a tested version
        return tuple(int(p) for p in parts)

    found, low, high = release(version), release(TESTED_ACCELERATE[0]), release(TESTED_ACCELERATE[1])
    assert low is not None and high is not None
    return found is not None and low <= found < high
