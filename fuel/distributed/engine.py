"""Batch jobs on Ray: Ray Data reads the pending batches (a datasource over a batched source),
``map_batches`` runs one fuel model actor per worker (the model loaded once per actor), and the
driver stores each returned shard under its batch number, so the output is in input order
however the batches were scheduled.

Each Ray Data row is one whole fuel batch (its number and its pickled raw rows), so Ray may
split or merge blocks freely without ever splitting a batch. Ray Data restarts a dead actor and
retries its tasks (``max_restarts=-1``, ``max_task_retries=-1``); a retried batch that comes back
twice is stored once, under its number.
"""

from __future__ import annotations

import logging
import os
import pickle
from collections.abc import Iterator

import numpy as np

from fuel.distributed.job import JobFolder, Progress
from fuel.distributed.sources import BatchedSource
from fuel.extras import install_command
from fuel.ir.errors import FuelError

# Ray's switch for a loopback-only cluster (named for Windows and macOS, where it is the default).
LOOPBACK_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
# One read task (a unit of work for an actor, and of retry) per batch, up to this many tasks.
MAX_READ_TASKS = 1000
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def require_ray():
    """The ``ray`` module with Ray Data, or a FuelError saying how to install them."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as error:
        raise FuelError(f"--ray needs Ray Data ({error}); install the ray extra: "
                         f"{install_command('ray')}") from None
    return ray


def connect(address: str | None, num_cpus: int | None = None) -> bool:
    """Join the Ray cluster at ``address`` (``auto``, ``ray://host:port``, ``host:port``), or
    start a local one (on 127.0.0.1, with ``num_cpus``, default all) when ``address`` is None or
    ``local``; True when this call started it."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    try:
        if address in (None, "", "local"):
            use_loopback()
            ray.init(num_cpus=num_cpus, include_dashboard=False,
                     logging_level=logging.WARNING)
        else:
            ray.init(address=address, logging_level=logging.WARNING)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise FuelError(f"cannot connect to the Ray cluster at {address!r}: {error}") from None
    return True


def use_loopback() -> None:
    """Make a local cluster listen on 127.0.0.1 only (Ray picks the host's outward address by
    default, which a one-machine job does not need)."""
    os.environ.setdefault(LOOPBACK_VARIABLE, "0")  # read by the processes Ray starts
    try:
        from ray._private import ray_constants
    except ImportError:
        return
    if os.environ[LOOPBACK_VARIABLE] == "0":
        ray_constants.ENABLE_RAY_CLUSTER = False


def _read_tasks(source: BatchedSource, pending: list[int], parallelism: int):
    """Ray read tasks, each producing one row per pending batch it covers."""
    import pyarrow
    from ray.data.block import BlockMetadata
    from ray.data.datasource import ReadTask

    groups = [group for group in np.array_split(np.asarray(pending, np.int64),
                                                max(1, min(parallelism, len(pending))))
              if len(group)]
    tasks = []
    for group in groups:
        indices = [int(k) for k in group]

        def read(indices=indices) -> Iterator:
            for index in indices:
                rows = pickle.dumps(source.read_batch(index), protocol=5)
                yield pyarrow.table({"batch": pyarrow.array([index], pyarrow.int64()),
                                     "rows": pyarrow.array([rows], pyarrow.binary())})

        metadata = BlockMetadata(num_rows=len(indices), size_bytes=None, exec_stats=None,
                                 input_files=[source.path])
        tasks.append(ReadTask(read, metadata))
    return tasks


def batch_datasource(source: BatchedSource, pending: list[int]):
    """A Ray Data datasource over the ``pending`` batches of ``source``."""
    from ray.data.datasource import Datasource

    class FuelBatches(Datasource):
        def estimate_inmemory_data_size(self) -> int | None:
            return None

        def get_read_tasks(self, parallelism: int, *args, **kwargs):
            return _read_tasks(source, pending, parallelism)

        def get_name(self) -> str:
            return "FuelBatches"

    return FuelBatches()


class ModelActor:
    """A Ray Data map_batches actor: loads the task's model once, then turns each row (one fuel
    batch) into its shard."""

    def __init__(self, task, threads: int) -> None:
        _limit_threads(threads)
        self.worker = task.load()

    def __call__(self, batch: dict) -> dict:
        payloads = np.empty(len(batch["batch"]), dtype=object)
        for position, rows in enumerate(batch["rows"]):
            payloads[position] = self.worker.compute(pickle.loads(rows)).to_bytes()
        return {"batch": np.asarray(batch["batch"], np.int64), "shard": payloads}


def _limit_threads(threads: int) -> None:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(threads)


def run_on_ray(task, source: BatchedSource, folder: JobFolder, progress: Progress,
               workers: int, threads_per_worker: int) -> int:
    """Compute the pending batches on the connected Ray cluster; returns how many ran."""
    ray = require_ray()
    pending = folder.pending()
    if not pending:
        return 0
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # fuel's own bar counts rows as shards are written
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    # Reads get the actors' resources and environment so that Ray Data fuses them into the
    # actors (ReadFuelBatches->MapBatches): no extra worker processes, no CPU held by readers.
    remote = {"num_cpus": threads_per_worker, "runtime_env": {"env_vars": {
        name: str(threads_per_worker) for name in THREAD_VARIABLES}}}
    dataset = ray.data.read_datasource(
        batch_datasource(source, pending),
        override_num_blocks=min(len(pending), MAX_READ_TASKS), **remote)
    dataset = dataset.map_batches(
        ModelActor, batch_size=None, batch_format="numpy", zero_copy_batch=True,
        fn_constructor_kwargs={"task": task, "threads": threads_per_worker},
        compute=ray.data.ActorPoolStrategy(size=workers), **remote)
    written = set()
    try:
        for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
            for index, payload in zip(batch["batch"], batch["shard"]):
                index = int(index)
                if index in written:
                    continue
                folder.write(index, bytes(payload))
                written.add(index)
                progress.advance(len(source.batch_rows(index)))
    except (FuelError, KeyboardInterrupt):
        raise
    except Exception as error:  # Ray wraps a worker's error in its own types
        raise FuelError(f"the Ray job failed: {_root_message(error)}") from None
    missing = sorted(set(pending) - written)
    if missing:
        raise FuelError(f"the Ray job ended without {len(missing)} batches (first: "
                        f"{missing[:5]}); re-run the same command to compute them")
    return len(written)


def _root_message(error: BaseException) -> str:
    """The message of the innermost FuelError in ``error``'s chain, else of ``error``."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        if isinstance(link, FuelError):
            return str(link)
        seen.add(id(link))
        cause = getattr(link, "cause", None)
        link = link.__cause__ or link.__context__ or (
            cause if isinstance(cause, BaseException) else None)
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def cluster_cpus() -> int:
    """How many CPUs the connected Ray cluster has."""
    ray = require_ray()
    return int(ray.cluster_resources().get("CPU", os.cpu_count() or 1))


class DatasetEmbedder:
    """A map_batches actor for a user's Ray Dataset: adds ``embedding`` (NaN for a bad row) and
    ``embedding_error`` (empty for a good row) to each batch."""

    def __init__(self, task, threads: int) -> None:
        _limit_threads(threads)
        self.task = task
        self.worker = task.load()

    def __call__(self, batch: dict) -> dict:
        values = list(batch[self.task.field_name])
        shard = self.worker.compute(values)
        embeddings = np.full((len(values), self.worker.encoder.dimension), np.nan, np.float32)
        if shard.rows:
            embeddings[shard.rows] = shard.outputs["embedding"]
        errors = np.array([shard.errors.get(i, "") for i in range(len(values))], dtype=object)
        return dict(batch) | {"embedding": embeddings, "embedding_error": errors}


def embed_dataset(dataset, task, batch_size: int, workers: int, threads_per_worker: int):
    """``dataset`` (a Ray Dataset with the text in column ``task.field_name``) with MiniLM
    embeddings added by ``workers`` actors; lazy, like any Ray Dataset."""
    ray = require_ray()
    if task.field_name not in dataset.columns():
        raise FuelError(f"the dataset has no column {task.field_name!r}; its columns are "
                        f"{dataset.columns()} (choose one with field=)")
    return dataset.map_batches(
        DatasetEmbedder, batch_size=batch_size, batch_format="numpy",
        fn_constructor_kwargs={"task": task, "threads": threads_per_worker},
        compute=ray.data.ActorPoolStrategy(size=workers), num_cpus=threads_per_worker,
        runtime_env={"env_vars": {name: str(threads_per_worker) for name in THREAD_VARIABLES}})
