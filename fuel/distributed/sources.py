"""Inputs of batch jobs, split into numbered batches of rows that any process can read alone.

A source is plain picklable data (a path and a few offsets): Ray read tasks and the local loop
both call ``read_batch(index)``, so batch ``k`` always holds rows ``k*B .. k*B+B-1`` whoever
reads it. Rows are returned raw (bytes, a Parquet value, a dict of arrays); decoding them is the
worker's step, so that a row which cannot be decoded becomes a reported bad row.
"""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fuel.extras import install_command
from fuel.ir.errors import FuelError, InvalidArgument

TEXT_SUFFIXES = (".txt", ".text", ".lines")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")


def require_pyarrow(feature: str):
    """The ``pyarrow`` module, or a FuelError saying how to install it."""
    try:
        import pyarrow
    except ImportError:
        raise FuelError(f"{feature} needs pyarrow: {install_command('ray')}") \
            from None
    return pyarrow


@dataclass
class BatchedSource:
    """Rows of one input in fixed batches: ``read_batch(k)`` gives the raw rows of batch k."""

    path: str
    batch_size: int
    total_rows: int

    @property
    def batch_count(self) -> int:
        return (self.total_rows + self.batch_size - 1) // self.batch_size

    def batch_rows(self, index: int) -> range:
        """The global row numbers of batch ``index``."""
        start = index * self.batch_size
        return range(start, min(start + self.batch_size, self.total_rows))

    def describe_row(self, row: int) -> str:
        """How a user finds row ``row`` (0-based) in the input."""
        return f"row {row}"

    def read_batch(self, index: int) -> list:
        raise NotImplementedError


@dataclass
class TextLines(BatchedSource):
    """A text or JSONL file, one row per line; ``offsets[k]`` is the byte where batch k starts."""

    kind: str = "text"
    offsets: list[int] = field(default_factory=list)

    def describe_row(self, row: int) -> str:
        return f"row {row} (line {row + 1} of {self.path})"

    def read_batch(self, index: int) -> list[bytes]:
        count = len(self.batch_rows(index))
        lines = []
        with open(self.path, "rb") as file:
            file.seek(self.offsets[index])
            for _ in range(count):
                line = file.readline()
                if line.endswith(b"\n"):
                    line = line[:-1]
                if line.endswith(b"\r"):
                    line = line[:-1]
                lines.append(line)
        return lines


@dataclass
class ParquetColumn(BatchedSource):
    """One column of a Parquet file; ``group_starts[g]`` is the first row of row group g."""

    column: str = "text"
    kind: str = "parquet"
    group_starts: list[int] = field(default_factory=list)

    def read_batch(self, index: int) -> list:
        import pyarrow.parquet as parquet

        rows = self.batch_rows(index)
        first = max(g for g, start in enumerate(self.group_starts) if start <= rows.start)
        last = max(g for g, start in enumerate(self.group_starts) if start <= rows.stop - 1)
        table = parquet.ParquetFile(self.path).read_row_groups(
            list(range(first, last + 1)), columns=[self.column])
        offset = rows.start - self.group_starts[first]
        return table.column(0).slice(offset, len(rows)).to_pylist()


@dataclass
class NpzArrays(BatchedSource):
    """An ``.npz`` whose arrays (one per model input) hold one row per index of axis 0.
    ``members`` maps input name -> (member name, data offset, dtype, row shape)."""

    members: dict[str, tuple] = field(default_factory=dict)

    def read_batch(self, index: int) -> list[dict[str, np.ndarray]]:
        rows = self.batch_rows(index)
        columns = {}
        with zipfile.ZipFile(self.path) as archive:
            for name, (member, data_offset, dtype, row_shape) in self.members.items():
                dtype = np.dtype(dtype)
                row_bytes = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
                with archive.open(member) as stream:
                    stream.seek(data_offset + rows.start * row_bytes)
                    data = stream.read(row_bytes * len(rows))
                columns[name] = np.frombuffer(data, dtype).reshape((len(rows), *row_shape))
        return [{name: np.array(columns[name][i]) for name in columns}
                for i in range(len(rows))]


@dataclass
class FileFolder(BatchedSource):
    """A folder of ``.npy`` / ``.npz`` files, one row per file in name order."""

    files: list[str] = field(default_factory=list)

    def describe_row(self, row: int) -> str:
        return f"row {row} (file {self.files[row]})"

    def read_batch(self, index: int) -> list[tuple[str, bytes]]:
        result = []
        for row in self.batch_rows(index):
            name = self.files[row]
            result.append((name, (Path(self.path) / name).read_bytes()))
        return result


def _check_batch_size(batch_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidArgument(f"the batch size must be a positive integer, got {batch_size!r}")


def _check_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.exists():
        raise InvalidArgument(f"input {str(path)!r} does not exist")
    if not path.is_file():
        raise InvalidArgument(f"input {str(path)!r} is not a file")
    return path


def text_source(path: str | os.PathLike, batch_size: int, kind: str | None = None,
                column: str = "text") -> BatchedSource:
    """The rows of a text file (one per line), a JSONL file (``column`` of each object) or a
    Parquet file (its ``column``), chosen by ``kind`` or else by the file's suffix."""
    _check_batch_size(batch_size)
    path = _check_file(path)
    if kind is None:
        suffix = path.suffix.lower()
        kind = ("jsonl" if suffix in JSONL_SUFFIXES else
                "parquet" if suffix in PARQUET_SUFFIXES else "text")
    if kind == "parquet":
        return _parquet_source(path, batch_size, column)
    if kind not in ("text", "jsonl"):
        raise InvalidArgument(f"unknown input format {kind!r}: use text, jsonl or parquet")
    offsets = []
    rows = 0
    position = 0
    with open(path, "rb") as file:
        for line in file:
            if rows % batch_size == 0:
                offsets.append(position)
            rows += 1
            position += len(line)
    return TextLines(str(path.resolve()), batch_size, rows, kind=kind, offsets=offsets)


def _parquet_source(path: Path, batch_size: int, column: str) -> ParquetColumn:
    require_pyarrow("reading Parquet")
    import pyarrow.parquet as parquet

    try:
        metadata = parquet.ParquetFile(path).metadata
        names = parquet.ParquetFile(path).schema_arrow.names
    except Exception as error:  # pyarrow raises several types for a damaged file
        raise InvalidArgument(f"cannot read {str(path)!r} as Parquet: {error}") from None
    if column not in names:
        raise InvalidArgument(f"{str(path)!r} has no column {column!r}; its columns are "
                              f"{names} (choose one with --field)")
    starts = []
    total = 0
    for group in range(metadata.num_row_groups):
        starts.append(total)
        total += metadata.row_group(group).num_rows
    return ParquetColumn(str(path.resolve()), batch_size, total, column=column,
                         group_starts=starts)


def array_source(path: str | os.PathLike, batch_size: int) -> BatchedSource:
    """The rows of an ONNX batch job: an ``.npz`` (axis 0 of each array) or a folder of
    ``.npy`` / ``.npz`` files (one per row, in name order)."""
    _check_batch_size(batch_size)
    path = Path(path)
    if not path.exists():
        raise InvalidArgument(f"inputs {str(path)!r} do not exist")
    if path.is_dir():
        files = sorted(p.name for p in path.iterdir()
                       if p.is_file() and p.suffix.lower() in (".npy", ".npz"))
        if not files:
            raise InvalidArgument(f"folder {str(path)!r} has no .npy or .npz files")
        return FileFolder(str(path.resolve()), batch_size, len(files), files=files)
    return _npz_source(path, batch_size)


def _npz_source(path: Path, batch_size: int) -> NpzArrays:
    members = {}
    lengths = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if not member.endswith(".npy"):
                    continue
                with archive.open(member) as stream:
                    version = np.lib.format.read_magic(stream)
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    shape, fortran, dtype = read_header(stream)
                    offset = stream.tell()
                name = member[:-len(".npy")]
                if dtype.hasobject or fortran or len(shape) == 0:
                    raise InvalidArgument(
                        f"{str(path)!r}: array {name!r} must be a C-ordered array of numbers "
                        f"with one row per index of axis 0, got dtype {dtype}, shape {shape}")
                members[name] = (member, offset, dtype.str, tuple(shape[1:]))
                lengths[name] = shape[0]
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise InvalidArgument(f"cannot read {str(path)!r} as an .npz file: {error}") from None
    if not members:
        raise InvalidArgument(f"{str(path)!r} holds no arrays")
    if len(set(lengths.values())) != 1:
        raise InvalidArgument(f"the arrays of {str(path)!r} have different row counts "
                              f"(axis 0): {lengths}")
    return NpzArrays(str(path.resolve()), batch_size, next(iter(lengths.values())),
                     members=members)


def decode_array_file(name: str, data: bytes) -> dict[str, np.ndarray] | np.ndarray:
    """The contents of one ``.npy`` (an array) or ``.npz`` (name -> array) row file."""
    if name.lower().endswith(".npz"):
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    return np.load(io.BytesIO(data), allow_pickle=False)
