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

from fuel.ir.errors import InvalidArgument
from fuel.runtime.judge import mode, winners_path

FORMAT = 1
Step = tuple[int, int, bool]  # (cache capacity, rows, all_logits)
# ``FUEL_WARM_LIMIT`` (a multiple of the model's file, e.g. 1.25) bounds a warm start: steps
# are prepared while the model stays within that many times its file in resident memory
# (weights' pages included), or, where the load alone took more than that (float32 weights, a
# tiny file), while they add at most WARM_SHARE of the file or WARM_MIN_BYTES. Unset (the
# default), every recorded step is prepared: what ``fuel tune`` is run for. Each captured step
# keeps its plan, launchers and buffers (SmolLM2 Q4_1, a 94 MiB file: all 14 buckets took the
# load to 1.65x its file, about 3.8 MiB a bucket; bounded at 1.25, the buckets up to 4 rows
# and 1.26x after 16 tokens).
WARM_SHARE = 0.25
WARM_MIN_BYTES = 16 << 20  # the least a bounded warm start may add (a tiny model's steps)


def warm_limit() -> float | None:
    """``FUEL_WARM_LIMIT`` as a multiple of the file (None: unset, no bound); a malformed
    value is a clear error."""
    value = os.environ.get("FUEL_WARM_LIMIT", "").strip()
    if not value:
        return None
    try:
        limit = float(value)
    except ValueError:
        limit = -1.0
    if not limit > 0:
        raise InvalidArgument(f"FUEL_WARM_LIMIT must be a positive multiple of the model's "
                              f"file (e.g. 1.25), got {value!r}")
    return limit


def resident_bytes() -> int | None:
    """This process's resident memory in bytes (Linux's /proc/self/statm), or None where it
    cannot be read (then a warm start is not bounded)."""
    try:
        with open("/proc/self/statm") as status:
            return int(status.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def resident_limit(before_load: int | None, file_bytes: int) -> int | None:
    """The resident memory a warm start may bring this process to: ``FUEL_WARM_LIMIT``
    times the model's file above what the process held before the load, or ``WARM_SHARE`` of
    the file (at least ``WARM_MIN_BYTES``) above what it holds now where that is more. None
    (no bound) when the limit is unset or the memory unreadable."""
    limit = warm_limit()
    now = resident_bytes()
    if limit is None or before_load is None or now is None:
        return None
    return max(before_load + int(limit * file_bytes),
               now + max(int(WARM_SHARE * file_bytes), WARM_MIN_BYTES))


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
