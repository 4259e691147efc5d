"""A batch job's folder of finished shards (what makes a job resumable), its progress bar and the
local (single-process) loop.

Shards live in ``OUTPUT.parts/`` as ``batch-00000012.npz``, each written to a temporary name and
renamed, so a shard on disk is always whole. ``manifest.json`` records what the job is; a re-run
with the same settings skips the batches already there, one with other settings is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from fuel.distributed.sources import BatchedSource
from fuel.distributed.tasks import Shard
from fuel.ir.errors import FuelError, InvalidArgument


@dataclass
class JobReport:
    """What a finished batch job did."""

    output: str
    errors_path: str
    rows: int
    bad_rows: int
    batches_computed: int
    batches_skipped: int
    seconds: float

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("inf")


class JobFolder:
    """The finished shards of one job, next to its output file."""

    def __init__(self, output: str | os.PathLike, description: dict,
                 source: BatchedSource) -> None:
        self.output = Path(output)
        self.path = self.output.with_name(self.output.name + ".parts")
        self.source = source
        if not self.output.parent.is_dir():
            raise InvalidArgument(f"cannot write {str(self.output)!r}: folder "
                                  f"{str(self.output.parent)!r} does not exist")
        stat = os.stat(source.path)
        self.manifest = {"job": description, "input": source.path, "input_bytes": stat.st_size,
                         "input_mtime_ns": stat.st_mtime_ns, "rows": source.total_rows,
                         "batch_size": source.batch_size}
        self._open()

    def _open(self) -> None:
        manifest_path = self.path / "manifest.json"
        if manifest_path.exists():
            try:
                recorded = json.loads(manifest_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                recorded = None
            if recorded != json.loads(json.dumps(self.manifest)):
                differences = sorted(key for key in self.manifest
                                     if not recorded or recorded.get(key) != self.manifest[key])
                raise FuelError(
                    f"{str(self.path)!r} holds an unfinished job with other settings or another "
                    f"input (differs in: {', '.join(differences)}); re-run with the same "
                    "settings to resume it, or delete that folder to start over")
            return
        self.path.mkdir(exist_ok=True)
        temporary = manifest_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.manifest, indent=1), encoding="utf-8")
        temporary.replace(manifest_path)

    def shard_path(self, index: int) -> Path:
        return self.path / f"batch-{index:08d}.npz"

    def pending(self) -> list[int]:
        """The batches not written yet, in order."""
        return [k for k in range(self.source.batch_count) if not self.shard_path(k).exists()]

    def write(self, index: int, payload: bytes) -> None:
        """Store batch ``index``'s shard (atomically: a temporary file renamed)."""
        temporary = self.path / f".batch-{index:08d}.{os.getpid()}.tmp"
        temporary.write_bytes(payload)
        temporary.replace(self.shard_path(index))

    def read(self, index: int) -> Shard:
        return Shard.from_bytes(self.shard_path(index).read_bytes())

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


class Progress:
    """A one-line progress bar on stderr: rows done, rows/s and the time left."""

    def __init__(self, total: int, done: int = 0, label: str = "rows",
                 stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total, self.done, self.label = total, done, label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.start = time.perf_counter()
        self.counted = 0
        self.last_print = 0.0

    def advance(self, rows: int) -> None:
        self.done += rows
        self.counted += rows
        now = time.perf_counter()
        if self.enabled and (now - self.last_print > 0.25 or self.done >= self.total):
            self.last_print = now
            self._print(now)

    def _print(self, now: float) -> None:
        elapsed = now - self.start
        rate = self.counted / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        eta = time.strftime("%H:%M:%S", time.gmtime(left)) if rate > 0 else "--:--:--"
        percent = 100.0 * self.done / self.total if self.total else 100.0
        self.stream.write(f"\r{self.label} {self.done:,}/{self.total:,} ({percent:5.1f}%)  "
                          f"{rate:,.1f} rows/s  ETA {eta}  ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.last_print:
            self.stream.write("\n")
            self.stream.flush()


def shard_payload(worker, source: BatchedSource, index: int) -> bytes:
    """Read batch ``index`` of ``source`` and compute its shard with a loaded worker."""
    return worker.compute(source.read_batch(index)).to_bytes()


def run_local(task, source: BatchedSource, folder: JobFolder, progress: Progress) -> int:
    """Compute every pending batch in this process, in order; returns how many ran."""
    pending = folder.pending()
    if not pending:
        return 0
    worker = task.load()
    for index in pending:
        folder.write(index, shard_payload(worker, source, index))
        progress.advance(len(source.batch_rows(index)))
    return len(pending)


def error_lines(folder: JobFolder) -> list[str]:
    """The errors file's lines: one JSON object per bad row, in row order."""
    lines = []
    source = folder.source
    for index in range(source.batch_count):
        first = source.batch_rows(index).start
        for position, message in sorted(folder.read(index).errors.items()):
            row = first + position
            lines.append(json.dumps({"row": row, "where": source.describe_row(row),
                                     "error": message}))
    return lines


def report_dict(report: JobReport) -> dict:
    return asdict(report) | {"rows_per_second": report.rows_per_second}
