"""What ``fuel tune`` ran of a model file, kept so that a later load prepares those shapes
before its first call (``LlamaModel.warm``): the second process's first token then replays
captured steps, as a warm process's does, instead of planning them.

The record is a JSON file, ``$FUEL_WARM_FILE`` or ``<cache>/tuned/warm.json``: per model file
(its resolved path, size and modification time, so a replaced file is not warmed from the
old one's record), the KV cache capacities and the longest prompt tuned at each. It is only
ever a hint: an unreadable record is ignored, and ``FUEL_WARM=off`` turns warming off.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from fuel.extras import cache_root


def record_path() -> Path:
    """The record's file: ``$FUEL_WARM_FILE``, else ``<cache>/tuned/warm.json``."""
    configured = os.environ.get("FUEL_WARM_FILE")
    return Path(configured).expanduser() if configured else cache_root() / "tuned" / "warm.json"


def warming_enabled() -> bool:
    """False when ``FUEL_WARM`` is ``off`` (or 0/false/no)."""
    return os.environ.get("FUEL_WARM", "on").strip().lower() not in ("off", "0", "false", "no")


def model_key(path: str | os.PathLike) -> str:
    """The record's key of a model file: its resolved path, size and modification time."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return f"{resolved}|{stat.st_size}|{stat.st_mtime_ns}"


def _read(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def remember(path: str | os.PathLike, capacities: dict[int, int]) -> None:
    """Record that ``path``'s model was tuned with prompts of up to ``capacities[c]`` tokens
    on KV caches of capacity ``c`` (merged with what is recorded: the longest kept)."""
    file = record_path()
    record = _read(file)
    key = model_key(path)
    entry = {int(c): int(n) for c, n in record.get(key, {}).items()} \
        if isinstance(record.get(key), dict) else {}
    for capacity, longest in capacities.items():
        entry[int(capacity)] = max(int(longest), entry.get(int(capacity), 0))
    record[key] = {str(c): n for c, n in sorted(entry.items())}
    file.parent.mkdir(parents=True, exist_ok=True)
    temporary = file.with_name(f"{file.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(record, indent=1, sort_keys=True))
    os.replace(temporary, file)  # a concurrent reader sees the old record or the new one


def recalled(path: str | os.PathLike) -> dict[int, int]:
    """The recorded ``{capacity: longest prompt}`` of ``path``'s model ({} when none, when
    warming is off, or when the record cannot be read)."""
    if not warming_enabled():
        return {}
    try:
        key = model_key(path)
    except OSError:
        return {}
    entry = _read(record_path()).get(key)
    if not isinstance(entry, dict):
        return {}
    try:
        return {int(c): int(n) for c, n in entry.items() if int(c) > 0 and int(n) > 0}
    except (TypeError, ValueError):
        return {}
