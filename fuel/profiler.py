"""``with fuel.profile() as prof``: per-op tables and Chrome-trace export of every launch."""

from __future__ import annotations

import json
import os
import sys
from typing import TextIO

from fuel.dispatch import op_profile


class Profile:
    """What one ``fuel.profile()`` block recorded: op totals, phases and the launch trace."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, str, int, float]] = []
        self.phases: dict[str, tuple[int, float, list]] = {}
        self.launches: list[op_profile.LaunchRow] = []
        self._was_enabled = (False, False)

    def __enter__(self) -> Profile:
        self._was_enabled = (op_profile._enabled, op_profile._trace)
        op_profile.take()
        op_profile.take_trace()
        op_profile.take_phase_spans()
        op_profile.set_enabled(True)
        op_profile.set_trace(True)
        return self

    def __exit__(self, *exc: object) -> None:
        self.ops = op_profile.take()
        self.phases = op_profile.take_phase_spans()
        self.launches = op_profile.take_trace()
        op_profile.set_enabled(self._was_enabled[0])
        op_profile.set_trace(self._was_enabled[1])

    def table_text(self, limit: int | None = None) -> str:
        """The per-op table (host time per (op, backend), longest first) and the phases; a
        ``device ms`` column where a backend's queue timestamped the launches."""
        total = sum(row[3] for row in self.ops) or 1e-12
        device: dict[tuple[str, str], float] = {}
        for row in self.launches:
            if row.device_seconds is not None:
                key = (row.op, row.backend)
                device[key] = device.get(key, 0.0) + row.device_seconds
        width = max([16] + [len(row[0]) + 1 for row in self.ops[:limit]])
        lines = [f"{'op':<{width}}{'backend':<9}{'launches':>9}{'total ms':>11}{'mean us':>10}"
                 f"{'share':>8}" + (f"{'device ms':>11}" if device else "")]
        for op, backend, count, seconds in self.ops[:limit]:
            on_device = device.get((op, backend))
            lines.append(f"{op:<{width}}{backend:<9}{count:>9}{seconds * 1e3:>11.3f}"
                         f"{seconds / count * 1e6:>10.1f}{seconds / total:>8.1%}"
                         + (f"{on_device * 1e3:>11.3f}" if on_device is not None else ""))
        lines.append(f"{'kernels total':<{width + 18}}{total * 1e3:>11.3f}")
        if self.phases:
            lines.append("")
            lines.append(f"{'phase':<25}{'entries':>9}{'total ms':>11}")
            for name, (count, seconds, _) in sorted(self.phases.items(),
                                                    key=lambda item: -item[1][1]):
                lines.append(f"{name:<25}{count:>9}{seconds * 1e3:>11.3f}")
        return "\n".join(lines)

    def table(self, limit: int | None = None, file: TextIO | None = None) -> None:
        """Print the per-op table."""
        print(self.table_text(limit), file=file or sys.stdout)

    def export_chrome_trace(self, path: str | os.PathLike) -> None:
        """Write Chrome-trace JSON (chrome://tracing, Perfetto): phases and every launch."""
        events = []
        starts = [row.start for row in self.launches] + [
            span[0] for _, _, spans in self.phases.values() for span in spans]
        origin = min(starts) if starts else 0.0
        for name, (_, _, spans) in self.phases.items():
            for start, seconds in spans:
                events.append({"name": name, "cat": "phase", "ph": "X", "pid": 0, "tid": 0,
                               "ts": (start - origin) * 1e6, "dur": seconds * 1e6})
        for row in self.launches:
            events.append({
                "name": row.op, "cat": row.kernel_source or row.backend, "ph": "X", "pid": 0,
                "tid": 1, "ts": (row.start - origin) * 1e6, "dur": row.seconds * 1e6,
                "args": {"backend": row.backend, "src": row.src, "dst": row.dst,
                         "bytes": row.bytes, "node": row.node,
                         "device_us": None if row.device_seconds is None
                         else row.device_seconds * 1e6},
            })
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, handle)


def profile() -> Profile:
    """Profile every launch inside the ``with`` block."""
    return Profile()
