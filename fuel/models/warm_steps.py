"""Warm starts: the step shapes a decoder ran under ``fuel tune``, recorded per model file
beside the judge's winners, and prepared when a later process loads the same file (captured
and run once on zero ids, so their buffers' pages are in), so that its first prompt of a
recorded row bucket replays like a warm one instead of being planned.

The record is ``<winners file's stem>.steps.json`` in the winners file's folder: for each
model file (its resolved path, size and modification time) the ``(cache capacity, rows,
all_logits)`` steps it ran. A changed file no longer matches and warms nothing;
``FUEL_JUDGE=off`` (the test suite's setting) reads no record.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from fuel.runtime.judge import mode, winners_path

FORMAT = 1
Step = tuple[int, int, bool]  # (cache capacity, rows, all_logits)


def record_path() -> Path:
    """Where the recorded steps live: beside the judge's winners file."""
    winners = winners_path()
    return winners.with_name(f"{winners.stem}.steps.json")


def model_key(path: os.PathLike | str) -> str:
    """A model file's identity in the record: resolved path, size and modification time."""
    resolved = Path(path).resolve()
    status = resolved.stat()
    return f"{resolved}|{status.st_size}|{status.st_mtime_ns}"


def _entries() -> dict:
    try:
        data = json.loads(record_path().read_text())
    except (OSError, ValueError):
        return {}
    entries = data.get("models") if isinstance(data, dict) and data.get("format") == FORMAT \
        else None
    return entries if isinstance(entries, dict) else {}


def record(path: os.PathLike | str, steps: Iterable[Step]) -> None:
    """Store ``steps`` as the ones to warm for the model file at ``path`` (merged with the
    record's other models; a folder that cannot be written keeps nothing)."""
    entries = _entries()
    entries[model_key(path)] = sorted([int(c), int(r), bool(a)] for c, r, a in set(steps))
    target = record_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"format": FORMAT, "models": entries}, indent=1))
        os.replace(temporary, target)
    except OSError:
        pass


def recorded(path: os.PathLike | str) -> list[Step]:
    """The steps recorded for the model file at ``path`` (none with ``FUEL_JUDGE=off``, for
    a file changed since, or one never tuned)."""
    if mode() == "off":
        return []
    try:
        found = _entries().get(model_key(path), [])
    except OSError:
        return []
    steps = []
    for entry in found if isinstance(found, list) else []:
        if isinstance(entry, list) and len(entry) == 3 and \
                all(isinstance(v, int) for v in entry[:2]) and entry[0] >= entry[1] >= 1:
            steps.append((entry[0], entry[1], bool(entry[2])))
    return steps
