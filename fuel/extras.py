"""Where fuel runs from and keeps its files: install hints for the optional extras (a source
checkout gets ``pip install -e '<checkout>[extra]'``, an installed package
``pip install 'pyfuel[extra]'``) and the cache folder every cache lives under."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def source_checkout() -> Path | None:
    """The project folder when fuel is imported from a checkout (its pyproject.toml names
    pyfuel), else None."""
    root = Path(__file__).resolve().parent.parent
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if 'name = "pyfuel"' in text else None


def cache_root() -> Path:
    """The folder of fuel's caches (kernels, converted weights, the OpenCL probe's verdicts,
    ONNX node cases): ``$FUEL_CACHE_DIR``, else ``~/.cache/fuel``."""
    configured = os.environ.get("FUEL_CACHE_DIR")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "fuel"


def install_command(extra: str) -> str:
    """The pip command that installs ``extra`` (e.g. "models", "serve")."""
    root = source_checkout()
    if root is not None:
        return f"pip install -e '{root}[{extra}]'"
    return f"pip install 'pyfuel[{extra}]'"
