"""The shipped SmolLM2 GGUF requantized by llama.cpp (``llama_cpp.llama_model_quantize``,
requantization allowed) to another format, cached under ``fuel.extras.cache_root()``; used by
``bench/models.py --llama-cpp --gguf FORMAT`` and ``bench/agreement.py --gguf FORMAT``.

    python bench/requantize.py Q4_K_M Q5_K_M Q6_K Q8_0 IQ4_NL   # make them (prints the paths)
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

FORMATS = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "IQ4_NL", "Q4_K_S", "Q5_K_S", "Q3_K_M",
           "Q2_K", "IQ4_XS", "Q5_0", "Q5_1", "Q4_0")


def smollm_path(format_name: str | None) -> Path:
    """The shipped SmolLM2 file (``format_name`` None), else its requantization to
    ``format_name`` (made once)."""
    from fuel.models.llama import DEFAULT_FILE, DEFAULT_PACKAGE, model_file

    source = model_file(None, DEFAULT_PACKAGE, DEFAULT_FILE, "the SmolLM2 GGUF file")
    if format_name is None:
        return source
    return requantized(source, format_name)


def requantized(source: Path, format_name: str) -> Path:
    """``source`` requantized to ``format_name`` (a llama.cpp ftype name such as ``Q4_K_M``),
    cached by name."""
    import llama_cpp

    name = format_name.upper()
    if name not in FORMATS:
        raise SystemExit(f"unknown format {format_name!r}; one of {', '.join(FORMATS)}")
    return _quantized(source, f"{source.stem.rsplit('.', 1)[0]}.{name}.gguf",
                      getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{name}"), name)


def float32_copy(path: Path) -> Path:
    """``path`` de-quantized by llama.cpp to float32 (``LLAMA_FTYPE_ALL_F32``), cached beside
    the requantized files as ``<stem>.F32.gguf``: llama.cpp's float reference of that file."""
    import llama_cpp

    return _quantized(path, f"{path.stem}.F32.gguf", llama_cpp.LLAMA_FTYPE_ALL_F32, "F32")


def _quantized(source: Path, file_name: str, ftype: int, label: str) -> Path:
    """``source`` written by ``llama_model_quantize`` as ``ftype`` (requantization allowed)
    under the cache folder's ``requantized/file_name``, made once."""
    import llama_cpp

    from fuel.extras import cache_root

    folder = cache_root() / "requantized"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / file_name
    if target.exists():
        return target
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.allow_requantize = True
    params.nthread = len(os.sched_getaffinity(0))
    partial = target.with_suffix(".partial")
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(partial).encode(),
                                            ctypes.byref(params))
    if status != 0:
        raise SystemExit(f"llama_model_quantize of {source.name} to {label} failed ({status})")
    partial.rename(target)
    return target


if __name__ == "__main__":
    for argument in sys.argv[1:] or FORMATS[:5]:
        print(smollm_path(argument))
