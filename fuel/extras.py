"""Install hints for the optional extras, right for where fuel runs from: a source checkout gets
``pip install -e '<checkout>[extra]'``, an installed package ``pip install 'pyfuel[extra]'``."""

from __future__ import annotations

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


def install_command(extra: str) -> str:
    """The pip command that installs ``extra`` (e.g. "models", "serve")."""
    root = source_checkout()
    if root is not None:
        return f"pip install -e '{root}[{extra}]'"
    return f"pip install 'pyfuel[{extra}]'"
