"""``embed`` and ``run_onnx``: batch jobs from a file to a file, in this process or on Ray.

Both stream: a batch is read, computed and stored as a shard before the next, so memory stays
bounded; an interrupted job resumes where it stopped; bad rows go to the errors file
(``OUTPUT.errors.jsonl`` unless named) and never stop the job.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fuel.distributed.job import JobFolder, JobReport, Progress, error_lines, run_local
from fuel.distributed.outputs import check_output, write_output
from fuel.distributed.sources import BatchedSource, array_source, text_source
from fuel.distributed.tasks import EmbeddingTask, OnnxTask
from fuel.extras import install_command
from fuel.ir.errors import FuelError, InvalidArgument

DEFAULT_BATCH_SIZE = 32


def _check_workers(workers: int, threads_per_worker: int | None) -> None:
    for name, value in (("workers", workers), ("threads per worker", threads_per_worker)):
        if value is None and name != "workers":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgument(f"the number of {name} must be a positive integer, "
                                  f"got {value!r}")


@contextmanager
def thread_limit(threads: int | None) -> Iterator[None]:
    """Limit this process's BLAS threads to ``threads`` (None: no limit) for a local job, so
    that it computes exactly as a Ray worker with that many threads."""
    if threads is None:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        raise FuelError("--threads-per-worker without --ray needs threadpoolctl, part of the "
                        f"ray extra: {install_command('ray')}") from None
    with threadpool_limits(threads):
        yield


def run_job(task, source: BatchedSource, output: str | os.PathLike, description: dict,
            output_names: tuple[str, ...], *, errors: str | os.PathLike | None = None,
            ray: str | bool | None = None, workers: int = 1, threads_per_worker: int | None = None,
            progress: bool = False, label: str = "rows") -> JobReport:
    """Run ``task`` over every batch of ``source`` not done yet (on Ray when ``ray`` is an
    address, ``local`` or True, with ``threads_per_worker`` BLAS threads per actor, default 1),
    then write the output and the errors file."""
    _check_workers(workers, threads_per_worker)
    output = check_output(output, output_names)
    errors_path = Path(errors) if errors else output.with_name(output.name + ".errors.jsonl")
    folder = JobFolder(output, description, source)
    start = time.perf_counter()
    pending = folder.pending()
    skipped = source.batch_count - len(pending)
    already = sum(len(source.batch_rows(k)) for k in range(source.batch_count)) - sum(
        len(source.batch_rows(k)) for k in pending)
    bar = Progress(source.total_rows, already, label, enabled=progress)
    try:
        if ray is not None and ray is not False:
            from fuel.distributed import engine

            engine.require_ray()
            engine.connect(None if ray is True else ray)
            computed = engine.run_on_ray(task, source, folder, bar, workers,
                                         threads_per_worker or 1)
        else:
            with thread_limit(threads_per_worker):
                computed = run_local(task, source, folder, bar)
    finally:
        bar.close()
    lines = error_lines(folder)
    temporary = errors_path.with_name(f".{errors_path.name}.tmp")
    temporary.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    temporary.replace(errors_path)
    write_output(folder, output, output_names)
    folder.remove()
    return JobReport(str(output), str(errors_path), source.total_rows, len(lines), computed,
                     skipped, time.perf_counter() - start)


def _is_ray_dataset(value: Any) -> bool:
    return type(value).__module__.startswith("ray.data") and hasattr(value, "map_batches")


def embed(path: str | os.PathLike | Any, output: str | os.PathLike | None = None, *,
          field: str = "text", input_format: str | None = None,
          batch_size: int = DEFAULT_BATCH_SIZE,
          model: str | os.PathLike | None = None, device: str = "cpu",
          errors: str | os.PathLike | None = None, ray: str | bool | None = None,
          workers: int = 1, threads_per_worker: int | None = None,
          progress: bool = False) -> JobReport | Any:
    """Embed every row of a text, JSONL (``field``) or Parquet (column ``field``) file with
    MiniLM into ``output`` (.npy or .parquet), one row per input row, in input order. Given a
    Ray Dataset instead of a path, return it with ``embedding`` columns added (lazy)."""
    if _is_ray_dataset(path):
        from fuel.distributed import engine

        _check_workers(workers, threads_per_worker)
        task = EmbeddingTask("column", field, None if model is None else
                             str(Path(model).resolve()), device)
        task.check()
        return engine.embed_dataset(path, task, batch_size, workers, threads_per_worker or 1)
    if output is None:
        raise InvalidArgument("embed() of a file needs output= (.npy or .parquet)")
    source = text_source(path, batch_size, input_format, field)
    task = EmbeddingTask(source.kind, field,
                         None if model is None else str(Path(model).resolve()), device)
    task.check()
    description = {"command": "embed", "kind": task.kind, "field": field, "model": task.model,
                   "device": device}
    return run_job(task, source, output, description, ("embedding",), errors=errors, ray=ray,
                   workers=workers, threads_per_worker=threads_per_worker, progress=progress,
                   label="embedded")


def run_onnx(model: str | os.PathLike, inputs: str | os.PathLike, output: str | os.PathLike, *,
             batch_size: int = DEFAULT_BATCH_SIZE, device: str = "cpu",
             errors: str | os.PathLike | None = None, ray: str | bool | None = None,
             workers: int = 1, threads_per_worker: int | None = None,
             progress: bool = False) -> JobReport:
    """Run an ONNX model over every row of ``inputs`` (an .npz, axis 0 of each array, or a
    folder of .npy/.npz files, one per row) into ``output`` (.npz, .npy or .parquet)."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise FuelError(f"run_onnx needs the onnx package: {install_command('onnx')}") from None
    model_path = str(Path(model).resolve())
    task = OnnxTask(model_path, device)
    output_names = tuple(task.load().model.output_names)  # fails now on a model jobs cannot run
    source = array_source(inputs, batch_size)
    stat = os.stat(model_path)
    description = {"command": "run", "model": model_path, "model_bytes": stat.st_size,
                   "model_mtime_ns": stat.st_mtime_ns, "device": device}
    return run_job(task, source, output, description, output_names, errors=errors, ray=ray,
                   workers=workers, threads_per_worker=threads_per_worker, progress=progress,
                   label="ran")
