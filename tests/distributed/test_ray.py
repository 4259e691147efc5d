"""Batch jobs on a local Ray cluster (2 CPUs, loopback) give the single-process outputs row by
row, bit for bit (same BLAS threads: one per worker, and the reference limited to one), also
when an actor is killed mid-job; bad rows are reported the same way."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fuel.distributed import embed, run_onnx

from .conftest import sentences

ROWS = 240
BATCH = 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, minilm):
    """A text file of ROWS sentences and its single-process embeddings (one BLAS thread)."""
    folder = tmp_path_factory.mktemp("corpus")
    lines = sentences(ROWS, seed=11)
    lines[17] = ""  # a bad row: reported, NaN in the output
    (folder / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = embed(folder / "in.txt", folder / "reference.npy", batch_size=BATCH,
                   threads_per_worker=1)
    assert report.bad_rows == 1
    return folder, np.load(folder / "reference.npy")


def _model_actor_pids() -> list[int]:
    """The pids of this process's descendants that are Ray Data model actors."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry))
    found, stack = [], [os.getpid()]
    while stack:
        for pid in children.get(stack.pop(), []):
            stack.append(pid)
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if command.startswith(b"ray::MapWorker") and b"ModelActor" in command:
                found.append(pid)
    return found


def test_embed_on_ray_equals_one_process(ray_cluster, corpus, tmp_path):
    folder, reference = corpus
    report = embed(folder / "in.txt", tmp_path / "ray.npy", batch_size=BATCH, ray=True,
                   workers=2, threads_per_worker=1)
    out = np.load(tmp_path / "ray.npy")
    assert out.shape == reference.shape == (ROWS, 384)
    assert np.array_equal(out, reference, equal_nan=True)
    assert report.bad_rows == 1 and report.batches_computed == ROWS // BATCH
    assert (folder / "reference.npy.errors.jsonl").read_text() == \
        Path(report.errors_path).read_text()


def test_killed_actor_loses_and_duplicates_nothing(ray_cluster, corpus, tmp_path):
    folder, reference = corpus
    output = tmp_path / "ray.npy"
    outcome: dict = {}

    def job() -> None:
        try:
            outcome["report"] = embed(folder / "in.txt", output, batch_size=BATCH, ray=True,
                                      workers=2, threads_per_worker=1)
        except BaseException as error:  # reported by the assertions below
            outcome["error"] = error

    thread = threading.Thread(target=job)
    thread.start()
    parts = tmp_path / "ray.npy.parts"
    deadline = time.monotonic() + 240
    while thread.is_alive() and time.monotonic() < deadline:
        if len(list(parts.glob("batch-*.npz"))) >= 3 and len(_model_actor_pids()) == 2:
            break
        time.sleep(0.05)
    assert thread.is_alive(), "the job ended before an actor could be killed"
    victim = _model_actor_pids()[0]
    written_before = len(list(parts.glob("batch-*.npz")))
    os.kill(victim, signal.SIGKILL)
    thread.join(timeout=300)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome.get("error")
    assert written_before < ROWS // BATCH
    assert victim not in _model_actor_pids()
    out = np.load(output)
    assert out.shape == reference.shape
    assert np.array_equal(out, reference, equal_nan=True)
    assert outcome["report"].rows == ROWS and outcome["report"].bad_rows == 1


def test_run_onnx_on_ray_equals_one_process(ray_cluster, tiny_onnx, tmp_path):
    rows = tmp_path / "rows"
    rows.mkdir()
    x = np.random.default_rng(4).standard_normal((300, 4)).astype(np.float32)
    for index, row in enumerate(x):
        np.save(rows / f"{index:04d}.npy", row)
    np.save(rows / "0042.npy", np.zeros((2, 4), np.float32))     # wrong shape
    (rows / "0137.npy").write_bytes(b"\x93NUMPY garbage")         # cannot be decoded
    local = run_onnx(tiny_onnx, rows, tmp_path / "local.npz", batch_size=16)
    remote = run_onnx(tiny_onnx, rows, tmp_path / "ray.npz", batch_size=16, ray=True,
                      workers=2, threads_per_worker=1)
    with np.load(tmp_path / "local.npz") as expected, np.load(tmp_path / "ray.npz") as out:
        for name in ("y", "s"):
            assert out[name].shape[0] == 300
            assert np.array_equal(out[name], expected[name], equal_nan=True)
    assert local.bad_rows == remote.bad_rows == 2
    assert Path(local.errors_path).read_text() == Path(remote.errors_path).read_text()
    assert '"row": 42' in Path(remote.errors_path).read_text()


def test_embed_a_ray_dataset(ray_cluster, corpus):
    folder, reference = corpus
    lines = (folder / "in.txt").read_text(encoding="utf-8").splitlines()
    dataset = ray_cluster.data.from_items([{"id": i, "text": t} for i, t in enumerate(lines)])
    rows = embed(dataset, batch_size=BATCH, workers=1, threads_per_worker=1).take_all()
    rows.sort(key=lambda row: row["id"])
    embeddings = np.stack([row["embedding"] for row in rows])
    assert embeddings.shape == reference.shape
    np.testing.assert_allclose(embeddings, reference, rtol=0, atol=1e-6)  # NaN rows equal too
    assert [row["id"] for row in rows if row["embedding_error"]] == [17]
    with pytest.raises(Exception, match="no column 'body'"):
        embed(dataset, field="body")
