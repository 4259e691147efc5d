"""Batch jobs in one process: every input row has its output row, in order; bad rows are
reported with their row numbers; an interrupted job resumes without recomputing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import fuel.distributed.job as job_module
from fuel.cli import main
from fuel.distributed import embed, read_output, run_onnx
from fuel.ir.errors import FuelError

from .conftest import sentences


def _npz_rows(path, count: int, seed: int = 2) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((count, 4)).astype(np.float32)
    np.savez(path, x=x)
    return x


def _errors(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def test_run_onnx_matches_one_model_run(tiny_onnx, tmp_path):
    import fuel.onnx

    x = _npz_rows(tmp_path / "rows.npz", 203)
    report = run_onnx(tiny_onnx, tmp_path / "rows.npz", tmp_path / "out.npz", batch_size=16)
    expected = fuel.onnx.load(tiny_onnx).run({"x": x})
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out["y"], expected["y"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(out["s"], expected["s"], rtol=1e-6, atol=1e-6)
        assert out["y"].shape == (203, 3)
    assert (report.rows, report.bad_rows, report.batches_computed) == (203, 0, 13)
    assert _errors(report.errors_path) == []
    assert not (tmp_path / "out.npz.parts").exists()


def test_parquet_output_equals_npz_output(tiny_onnx, tmp_path):
    _npz_rows(tmp_path / "rows.npz", 50)
    run_onnx(tiny_onnx, tmp_path / "rows.npz", tmp_path / "out.npz", batch_size=8)
    run_onnx(tiny_onnx, tmp_path / "rows.npz", tmp_path / "out.parquet", batch_size=8)
    for name in ("y", "s"):
        assert np.array_equal(read_output(tmp_path / "out.npz", name),
                              read_output(tmp_path / "out.parquet", name))


def test_bad_array_rows_are_reported_and_kept_in_place(tiny_onnx, tmp_path):
    folder = tmp_path / "rows"
    folder.mkdir()
    x = np.random.default_rng(3).standard_normal((12, 4)).astype(np.float32)
    for index, row in enumerate(x):
        np.save(folder / f"{index:03d}.npy", row)
    np.save(folder / "004.npy", np.zeros(5, np.float32))        # wrong shape
    (folder / "007.npy").write_bytes(b"not an array")            # cannot be decoded
    np.save(folder / "009.npy", np.ones(4, np.float64))          # float64 casts to float32
    report = run_onnx(tiny_onnx, folder, tmp_path / "out.npz", batch_size=5)
    errors = _errors(report.errors_path)
    assert [e["row"] for e in errors] == [4, 7]
    assert "shape [5]" in errors[0]["error"] and "004.npy" in errors[0]["where"]
    assert "cannot decode 007.npy" in errors[1]["error"]
    with np.load(tmp_path / "out.npz") as out:
        assert out["y"].shape == (12, 3)
        assert np.isnan(out["y"][[4, 7]]).all()
        good = [i for i in range(12) if i not in (4, 7)]
        assert np.isfinite(out["y"][good]).all()
        assert out["s"][9] == pytest.approx(4.0)


def test_interrupted_job_resumes_without_recomputing(tiny_onnx, tmp_path, monkeypatch):
    _npz_rows(tmp_path / "rows.npz", 100)
    run_onnx(tiny_onnx, tmp_path / "rows.npz", tmp_path / "whole.npz", batch_size=10)
    computed = []
    original = job_module.shard_payload

    def interrupt_at_the_fourth(worker, source, index):
        if len(computed) == 3:
            raise KeyboardInterrupt
        computed.append(index)
        return original(worker, source, index)

    monkeypatch.setattr(job_module, "shard_payload", interrupt_at_the_fourth)
    with pytest.raises(KeyboardInterrupt):
        run_onnx(tiny_onnx, tmp_path / "rows.npz", tmp_path / "out.npz", batch_size=10)
    parts = tmp_path / "out.npz.parts"
    assert sorted(p.name for p in parts.glob("batch-*.npz")) == [
        "batch-00000000.npz", "batch-00000001.npz", "batch-00000002.npz"]
    assert not (tmp_path / "out.npz").exists()
    with pytest.raises(FuelError, match="other settings"):
        run_onnx(tiny_onnx, tmp_path / "rows.npz", tmp_path / "out.npz", batch_size=20)
    monkeypatch.setattr(job_module, "shard_payload", original)
    report = run_onnx(tiny_onnx, tmp_path / "rows.npz", tmp_path / "out.npz", batch_size=10)
    assert (report.batches_skipped, report.batches_computed) == (3, 7)
    for name in ("y", "s"):
        assert np.array_equal(read_output(tmp_path / "out.npz", name),
                              read_output(tmp_path / "whole.npz", name))


def test_embedding_formats_agree_row_by_row(minilm, tmp_path):
    from fuel.models.minilm import load

    texts = sentences(70)
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    (tmp_path / "in.jsonl").write_text(
        "".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(texts)),
        encoding="utf-8")
    embed(tmp_path / "in.txt", tmp_path / "text.npy", batch_size=32)
    embed(tmp_path / "in.jsonl", tmp_path / "jsonl.parquet", field="body", batch_size=32)
    text = np.load(tmp_path / "text.npy")
    assert text.shape == (70, 384) and text.dtype == np.float32
    assert np.array_equal(text, read_output(tmp_path / "jsonl.parquet"))
    encoder = load()
    for start in range(0, 70, 32):  # each batch is one encode() of its rows
        chunk = texts[start:start + 32]
        assert np.array_equal(text[start:start + 32], encoder.encode(chunk, len(chunk)))


def test_parquet_column_input(minilm, tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    texts = sentences(40, seed=5)
    table = pyarrow.table({"sentence": texts[:20] + [None] + texts[21:]})
    parquet.write_table(table, tmp_path / "in.parquet", row_group_size=7)
    report = embed(tmp_path / "in.parquet", tmp_path / "out.npy", field="sentence",
                   batch_size=16)
    out = np.load(tmp_path / "out.npy")
    assert out.shape == (40, 384) and np.isnan(out[20]).all()
    assert [e["row"] for e in _errors(report.errors_path)] == [20]
    with pytest.raises(FuelError, match="no column 'text'"):
        embed(tmp_path / "in.parquet", tmp_path / "x.npy")


def test_bad_text_rows_are_reported_with_their_line(minilm, tmp_path):
    texts = sentences(30, seed=7)
    lines = [t.encode() for t in texts]
    lines[3] = b""
    lines[11] = b"caf\xe9 au lait"     # Latin-1, not UTF-8
    lines[25] = b"   "
    (tmp_path / "in.txt").write_bytes(b"\n".join(lines) + b"\n")
    report = embed(tmp_path / "in.txt", tmp_path / "out.npy", batch_size=8)
    errors = _errors(report.errors_path)
    assert [e["row"] for e in errors] == [3, 11, 25]
    assert errors[0]["error"] == "empty line" and "line 4 of" in errors[0]["where"]
    assert "not valid UTF-8" in errors[1]["error"]
    out = np.load(tmp_path / "out.npy")
    assert out.shape == (30, 384) and report.rows == 30 and report.bad_rows == 3
    assert np.isnan(out[[3, 11, 25]]).all()
    assert np.isfinite(np.delete(out, [3, 11, 25], axis=0)).all()


def test_bad_jsonl_rows(minilm, tmp_path):
    lines = ['{"text": "a fine sentence"}', "{not json", '{"other": 1}', '{"text": 5}',
             '{"text": "another one"}']
    (tmp_path / "in.jsonl").write_text("\n".join(lines), encoding="utf-8")  # no final newline
    report = embed(tmp_path / "in.jsonl", tmp_path / "out.npy", batch_size=2)
    errors = _errors(report.errors_path)
    assert [e["row"] for e in errors] == [1, 2, 3]
    assert "not valid JSON" in errors[0]["error"]
    assert "no field 'text'" in errors[1]["error"]
    assert "is a int" in errors[2]["error"]
    assert np.load(tmp_path / "out.npy").shape == (5, 384)


def test_cli_batch_jobs(tiny_onnx, tmp_path, capsys):
    _npz_rows(tmp_path / "rows.npz", 30)
    code = main(["run", str(tiny_onnx), "--inputs", str(tmp_path / "rows.npz"), "--output",
                 str(tmp_path / "out.npz"), "--batch-size", "7", "--no-progress"])
    assert code == 0
    assert "ran 30 rows into" in capsys.readouterr().out
    assert read_output(tmp_path / "out.npz", "y").shape == (30, 3)


@pytest.mark.parametrize("argv, match", [
    (["embed", "--input", "in.txt"], "--input needs --output"),
    (["embed", "--input", "missing.txt", "--output", "o.npy"], "does not exist"),
    (["embed", "--input", "in.txt", "--output", "o.csv"], "write .npy, .npz or .parquet"),
    (["embed", "--input", "in.txt", "--output", "o.npy", "--workers", "2"], "--workers needs"),
    (["embed", "--input", "in.txt", "--output", "o.npy", "--batch-size", "0"], "batch size"),
    (["embed", "--input", "in.txt", "--output", "nowhere/o.npy"], "does not exist"),
])
def test_cli_batch_errors_are_one_line(argv, match, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("one\ntwo\n", encoding="utf-8")
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert match in error and "Traceback" not in error


def test_run_cli_errors(tiny_onnx, tmp_path, capsys):
    _npz_rows(tmp_path / "rows.npz", 5)
    argv = ["run", str(tiny_onnx), "--inputs", str(tmp_path / "rows.npz")]
    assert main(argv + ["--output", str(tmp_path / "o.npy")]) == 2
    assert "has 2 outputs" in capsys.readouterr().err
    assert main(argv + ["--output", str(tmp_path / "o.npz"), "--save", "x.npz"]) == 2
    assert "--save is for one run" in capsys.readouterr().err
    np.savez(tmp_path / "ragged.npz", x=np.zeros((3, 4), np.float32), z=np.zeros(2))
    assert main(["run", str(tiny_onnx), "--inputs", str(tmp_path / "ragged.npz"), "--output",
                 str(tmp_path / "o.npz")]) == 2
    assert "different row counts" in capsys.readouterr().err


def test_ray_missing_says_how_to_install(tiny_onnx, tmp_path, monkeypatch, capsys):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    _npz_rows(tmp_path / "rows.npz", 5)
    assert main(["run", str(tiny_onnx), "--inputs", str(tmp_path / "rows.npz"), "--output",
                 str(tmp_path / "o.npz"), "--ray"]) == 2
    from fuel.extras import install_command

    assert install_command("ray") in capsys.readouterr().err


def test_import_fuel_distributed_imports_no_ray():
    import subprocess
    import sys

    code = ("import sys, fuel, fuel.distributed, fuel.cli; "
            "print(sorted(m for m in ('ray', 'pyarrow') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def test_a_missing_model_fails_before_any_batch(tmp_path):
    (tmp_path / "in.txt").write_text("one\ntwo\n", encoding="utf-8")
    with pytest.raises(FuelError, match="MiniLM"):
        embed(tmp_path / "in.txt", tmp_path / "o.npy", model=tmp_path / "no-model")
    assert not (tmp_path / "o.npy.parts").exists() or not list(
        (tmp_path / "o.npy.parts").glob("batch-*"))
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    with pytest.raises(FuelError):
        run_onnx(tmp_path / "broken.onnx", tmp_path / "in.txt", tmp_path / "o.npz")
