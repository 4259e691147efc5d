"""Write a finished job's shards, in row order, to its output file (``.npy``, ``.npz`` or
Parquet) one batch at a time, so memory stays bounded whatever the row count.

Every input row has its output row; a bad row's values are NaN (0 for integer outputs, null in
Parquet) and the errors file says why.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from fuel.distributed.job import JobFolder
from fuel.ir.errors import FuelError, InvalidArgument

OUTPUT_SUFFIXES = (".npy", ".npz", ".parquet", ".pq")


def check_output(path: str | os.PathLike, output_names: tuple[str, ...] | None) -> Path:
    """The output path if its suffix is one fuel writes (``.npy`` only for one output)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in OUTPUT_SUFFIXES:
        raise InvalidArgument(f"output {str(path)!r}: write .npy, .npz or .parquet")
    if suffix == ".npy" and output_names is not None and len(output_names) != 1:
        raise InvalidArgument(f"output {str(path)!r}: the model has {len(output_names)} outputs "
                              f"{list(output_names)}; write .npz or .parquet")
    return path


def _layouts(folder: JobFolder) -> dict[str, tuple[np.dtype, tuple]]:
    """Per output name, the dtype and row shape (from the first shard that has the output)."""
    layouts: dict[str, tuple[np.dtype, tuple]] = {}
    for index in range(folder.source.batch_count):
        for name, values in folder.read(index).outputs.items():
            layout = (values.dtype, values.shape[1:])
            seen = layouts.setdefault(name, layout)
            if seen != layout:
                first = folder.source.batch_rows(index).start
                raise FuelError(f"output {name!r} is {layout[0]}{list(layout[1])} per row from "
                                f"row {first} on but {seen[0]}{list(seen[1])} before; batch jobs "
                                "write one array per output")
    return layouts


def _fill_value(dtype: np.dtype):
    return np.nan if dtype.kind in "fc" else 0


def _batches(folder: JobFolder, name: str, dtype: np.dtype,
             row_shape: tuple) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per batch, in order: the full ``(rows, *row_shape)`` values and the good-row mask."""
    for index in range(folder.source.batch_count):
        count = len(folder.source.batch_rows(index))
        shard = folder.read(index)
        values = np.full((count, *row_shape), _fill_value(dtype), dtype)
        good = np.zeros(count, bool)
        if shard.rows:
            values[shard.rows] = shard.outputs[name]
            good[shard.rows] = True
        yield values, good


def write_output(folder: JobFolder, path: Path, output_names: tuple[str, ...]) -> None:
    """Assemble the shards of ``folder`` into ``path`` (written to a temporary name first)."""
    layouts = _layouts(folder)
    names = [name for name in output_names if name in layouts]
    if not names:
        raise FuelError(f"no row of {folder.source.path!r} could be used (every row is bad); "
                        "see the errors file")
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    suffix = path.suffix.lower()
    total = folder.source.total_rows
    try:
        if suffix == ".npy":
            dtype, row_shape = layouts[names[0]]
            array = np.lib.format.open_memmap(temporary, mode="w+", dtype=dtype,
                                              shape=(total, *row_shape))
            start = 0
            for values, _ in _batches(folder, names[0], dtype, row_shape):
                array[start:start + len(values)] = values
                start += len(values)
            array.flush()
            del array
        elif suffix == ".npz":
            _write_npz(folder, temporary, names, layouts, total)
        else:
            _write_parquet(folder, temporary, names, layouts)
        temporary.replace(path)
    finally:
        if temporary.exists():
            temporary.unlink()


def _write_npz(folder: JobFolder, path: Path, names: list[str], layouts: dict,
               total: int) -> None:
    with zipfile.ZipFile(path, "w", allowZip64=True) as archive:
        for name in names:
            dtype, row_shape = layouts[name]
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                          "shape": (total, *row_shape)}
                np.lib.format.write_array_header_2_0(member, header)
                for values, _ in _batches(folder, name, dtype, row_shape):
                    member.write(np.ascontiguousarray(values).tobytes())


def _write_parquet(folder: JobFolder, path: Path, names: list[str], layouts: dict) -> None:
    from fuel.distributed.sources import require_pyarrow

    pyarrow = require_pyarrow("writing Parquet")
    import pyarrow.parquet as parquet

    fields = [pyarrow.field("row", pyarrow.int64())]
    metadata = {}
    for name in names:
        dtype, row_shape = layouts[name]
        size = int(np.prod(row_shape, dtype=np.int64))
        fields.append(pyarrow.field(name, pyarrow.list_(pyarrow.from_numpy_dtype(dtype), size)))
        metadata[f"fuel.shape.{name}"] = json.dumps(list(row_shape))
    schema = pyarrow.schema(fields, metadata=metadata)
    streams = [_batches(folder, name, *layouts[name]) for name in names]
    start = 0
    with parquet.ParquetWriter(path, schema) as writer:
        for parts in zip(*streams):
            count = len(parts[0][0])
            columns = [pyarrow.array(np.arange(start, start + count, dtype=np.int64))]
            for values, good in parts:
                flat = pyarrow.array(values.reshape(count, -1).reshape(-1))
                columns.append(pyarrow.FixedSizeListArray.from_arrays(
                    flat, values.reshape(count, -1).shape[1], mask=pyarrow.array(~good)))
            writer.write_table(pyarrow.Table.from_arrays(columns, schema=schema))
            start += count


def read_output(path: str | os.PathLike, name: str | None = None) -> np.ndarray:
    """An output file's values as one array (``name`` picks an output of an .npz or Parquet
    file; bad rows read back as NaN or 0). For tests and small outputs: it loads everything."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return np.load(path)
    if suffix == ".npz":
        with np.load(path) as archive:
            return archive[name or archive.files[0]]
    import pyarrow.parquet as parquet

    table = parquet.read_table(path)
    name = name or table.column_names[1]
    shape = json.loads(table.schema.metadata[f"fuel.shape.{name}".encode()])
    column = table.column(name).combine_chunks()
    dtype = column.type.value_type.to_pandas_dtype()
    full = np.array(column.values.to_numpy(zero_copy_only=False), dtype).reshape(
        (len(column), *shape))
    full[np.asarray(column.is_null().to_numpy(zero_copy_only=False))] = \
        _fill_value(np.dtype(dtype))
    return full
