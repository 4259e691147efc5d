"""On-disk cache of converted (dequantized, fused, transposed) weights, so a second start skips
the conversion. One folder per source file under ``cache_folder()``: ``meta.json`` (the index
and whatever the model stores with it), ``weights.bin`` (the arrays, 64-byte aligned) and any
extra text files (a tokenizer)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np

from fuel.models.common import cache_folder

FORMAT_VERSION = 2  # 2: the config holds end_token_ids
ALIGNMENT = 64


class WeightCache:
    """The cache entry of one source file, keyed by its path, size, mtime and ``kind``."""

    def __init__(self, source: Path, kind: str) -> None:
        source = Path(source).resolve()
        stat = source.stat()
        identity = f"{source}|{stat.st_size}|{stat.st_mtime_ns}|{kind}|{FORMAT_VERSION}"
        key = hashlib.sha256(identity.encode()).hexdigest()[:16]
        self.folder = cache_folder() / f"{source.stem}-{kind}-{key}"

    def load(self) -> tuple[dict, dict[str, np.ndarray], dict[str, str]] | None:
        """(meta, arrays, text files) from the cache, or None when absent or damaged."""
        try:
            meta = json.loads((self.folder / "meta.json").read_text(encoding="utf-8"))
            if meta.get("format") != FORMAT_VERSION:
                return None
            blob = np.fromfile(self.folder / "weights.bin", dtype=np.uint8)
            if blob.size != meta["blob_bytes"]:
                return None
            arrays = {}
            for entry in meta["tensors"]:
                dtype = np.dtype(entry["dtype"])
                count = int(np.prod(entry["shape"], dtype=np.int64))
                start = entry["offset"]
                arrays[entry["name"]] = blob[start:start + count * dtype.itemsize].view(
                    dtype).reshape(entry["shape"])
            texts = {name: (self.folder / name).read_text(encoding="utf-8")
                     for name in meta["texts"]}
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return meta["user"], arrays, texts

    def store(self, user: dict, arrays: dict[str, np.ndarray], texts: dict[str, str]
              ) -> int:
        """Write the entry atomically (a temporary folder renamed into place) and return its
        size in bytes; a failure to write only warns (0 bytes): the cache is an
        optimisation."""
        try:
            self.folder.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.folder.parent))
            try:
                size = self._write(staging, user, arrays, texts)
                if self.folder.exists():
                    shutil.rmtree(self.folder, ignore_errors=True)
                os.replace(staging, self.folder)
                return size
            finally:
                if staging.exists():
                    shutil.rmtree(staging, ignore_errors=True)
        except OSError as error:
            warnings.warn(f"fuel could not cache converted weights in {self.folder.parent}: "
                          f"{error}; set FUEL_CACHE_DIR to a writable folder", stacklevel=3)
        return 0

    @staticmethod
    def _write(folder: Path, user: dict, arrays: dict[str, np.ndarray],
               texts: dict[str, str]) -> int:
        entries = []
        offset = 0
        with open(folder / "weights.bin", "wb") as blob:
            for name, array in arrays.items():
                array = np.ascontiguousarray(array)
                padding = -offset % ALIGNMENT
                blob.write(b"\0" * padding)
                offset += padding
                entries.append({"name": name, "dtype": array.dtype.str,
                                "shape": list(array.shape), "offset": offset})
                array.tofile(blob)
                offset += array.nbytes
        for name, text in texts.items():
            (folder / name).write_text(text, encoding="utf-8")
        meta = {"format": FORMAT_VERSION, "blob_bytes": offset, "tensors": entries,
                "texts": sorted(texts), "user": user}
        (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        return offset
