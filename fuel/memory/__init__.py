"""Storage: a backend buffer plus dtype, element count and device. Layouts never live here."""

from __future__ import annotations

from fuel.memory.storage import Storage, StorageBackend

__all__ = ["Storage", "StorageBackend"]
