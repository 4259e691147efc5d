"""Opt-in per-(op, backend) host-time accounting of kernel launches, named phases and a
per-launch trace.

What it measures is host wall time of the kernel call: a device kernel that only enqueues is
charged its enqueue cost; device time lands wherever the realize finally waits. With
accounting off the cost is one flag check per launch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

_enabled = False
_trace = False
_lock = threading.Lock()
_totals: dict[tuple[str, str], list] = {}
_phases: dict[str, list] = {}
_trace_rows: list[LaunchRow] = []


class LaunchRow(NamedTuple):
    """One kernel launch, in launch order. ``start`` is ``time.perf_counter()`` at launch."""

    op: str
    backend: str
    src: str
    dst: str
    bytes: int
    seconds: float
    start: float = 0.0
    kernel_source: str = ""
    node: str = ""
    device_seconds: float | None = None


def set_enabled(on: bool) -> None:
    """Turn accounting on or off. Does not clear what was recorded."""
    global _enabled
    _enabled = bool(on)


def set_trace(on: bool) -> None:
    """Also keep every launch as a LaunchRow (implies accounting). Does not clear rows."""
    global _trace
    _trace = bool(on)


def enabled() -> bool:
    """Whether accounting (or tracing) is on."""
    return _enabled or _trace


def tracing() -> bool:
    return _trace


def record(op: str, backend: str, seconds: float) -> None:
    """Add one launch of ``op`` on ``backend`` to the totals."""
    with _lock:
        row = _totals.get((op, backend))
        if row is None:
            _totals[(op, backend)] = [1, seconds]
        else:
            row[0] += 1
            row[1] += seconds


def record_launch(row: LaunchRow) -> None:
    """Account a launch, and keep it in the trace when tracing is on."""
    record(row.op, row.backend, row.seconds)
    if _trace:
        with _lock:
            _trace_rows.append(row)


def take() -> list[tuple[str, str, int, float]]:
    """Drain the totals: ``(op, backend, launches, total_seconds)``, longest first."""
    global _totals
    with _lock:
        drained, _totals = _totals, {}
    rows = [(op, backend, n, seconds) for (op, backend), (n, seconds) in drained.items()]
    rows.sort(key=lambda row: row[3], reverse=True)
    return rows


def take_trace() -> list[LaunchRow]:
    """Drain the launch trace, in launch order. A device time a backend left pending (a
    callable over its queue's event timestamps) is resolved to seconds here."""
    global _trace_rows
    with _lock:
        drained, _trace_rows = _trace_rows, []
    return [row._replace(device_seconds=row.device_seconds()) if callable(row.device_seconds)
            else row for row in drained]


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time a named phase while accounting is on. Phases nest by name: rows are not additive."""
    if not (_enabled or _trace):
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        record_phase(name, time.perf_counter() - start, start)


def record_phase(name: str, seconds: float, start: float = 0.0) -> None:
    with _lock:
        row = _phases.get(name)
        if row is None:
            _phases[name] = [1, seconds, [(start, seconds)] if _trace else []]
        else:
            row[0] += 1
            row[1] += seconds
            if _trace:
                row[2].append((start, seconds))


def take_phases() -> list[tuple[str, int, float]]:
    """Drain the phase totals: ``(phase, entries, total_seconds)``, longest first."""
    rows = [(name, n, seconds) for name, (n, seconds, _) in _take_phase_spans().items()]
    rows.sort(key=lambda row: row[2], reverse=True)
    return rows


def _take_phase_spans() -> dict[str, list]:
    global _phases
    with _lock:
        drained, _phases = _phases, {}
    return drained


def take_phase_spans() -> dict[str, tuple[int, float, list[tuple[float, float]]]]:
    """Drain phases with every (start, seconds) span kept while tracing (for Chrome traces)."""
    return {name: (n, seconds, spans) for name, (n, seconds, spans) in _take_phase_spans().items()}
