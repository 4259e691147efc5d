"""What a worker does with one batch: decode its raw rows, run the model, return a shard.

A task (``EmbeddingTask``, ``OnnxTask``) is the picklable description of a job's model; its
``load()`` builds the worker once per process (a Ray actor or the local loop), and the worker's
``compute(first_row, raw_rows)`` turns one batch into a ``Shard``. The local loop and the Ray
actors run exactly this code on exactly the same batches, so their outputs are equal bit for bit.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field

import numpy as np

from fuel.ir.errors import FuelError


class RowError(Exception):
    """A row that cannot be used; the message says why (the row number is added by the job)."""


@dataclass
class Shard:
    """The result of one batch: per output name, the stacked values of its good rows (``rows``
    are their positions in the batch), and the bad rows with what is wrong with them."""

    rows: list[int] = field(default_factory=list)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """The shard as an ``.npz`` file's bytes (what a job folder stores)."""
        arrays = {f"output/{name}": value for name, value in self.outputs.items()}
        arrays["rows"] = np.asarray(self.rows, np.int64)
        arrays["errors"] = np.frombuffer(json.dumps(
            {str(k): v for k, v in self.errors.items()}).encode(), np.uint8)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        return buffer.getvalue()

    @staticmethod
    def from_bytes(data: bytes) -> Shard:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            outputs = {key[len("output/"):]: archive[key] for key in archive.files
                       if key.startswith("output/")}
            errors = json.loads(archive["errors"].tobytes().decode())
            return Shard([int(r) for r in archive["rows"]], outputs,
                         {int(k): v for k, v in errors.items()})


def decode_text(raw, kind: str, field_name: str) -> str:
    """One row of a text, JSONL or Parquet input as the sentence to embed."""
    if kind in ("text", "jsonl"):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise RowError(f"not valid UTF-8 ({error.reason} at byte {error.start})") from None
        if kind == "jsonl":
            if not line.strip():
                raise RowError("empty line")
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise RowError(f"not valid JSON ({error.msg} at column {error.colno})") from None
            if not isinstance(record, dict) or field_name not in record:
                raise RowError(f"no field {field_name!r} in this JSON line")
            raw = record[field_name]
        else:
            raw = line
    if raw is None:
        raise RowError("empty value (null)")
    if not isinstance(raw, str):
        raise RowError(f"{field_name!r} is a {type(raw).__name__}, not a string")
    if not raw.strip():
        raise RowError("empty line" if kind == "text" else "empty text")
    return raw


@dataclass
class EmbeddingTask:
    """MiniLM sentence embeddings of a text input (``model`` a folder, None for the package)."""

    kind: str = "text"
    field_name: str = "text"
    model: str | None = None
    device: str = "cpu"

    output_names = ("embedding",)

    def check(self) -> None:
        """Fail now, with the reason, if the model cannot be found (without loading it)."""
        from fuel.models.common import model_file, require
        from fuel.models.minilm import DEFAULT_FOLDER, DEFAULT_PACKAGE

        require("tokenizers", "MiniLM sentence embeddings")
        require("safetensors", "MiniLM sentence embeddings")
        model_file(self.model, DEFAULT_PACKAGE, DEFAULT_FOLDER, "the MiniLM model folder")

    def load(self) -> EmbeddingWorker:
        return EmbeddingWorker(self)


class EmbeddingWorker:
    """A loaded MiniLM: embeds the good rows of a batch in one forward pass."""

    def __init__(self, task: EmbeddingTask) -> None:
        from fuel.models.minilm import load

        self.task = task
        self.encoder = load(task.model, device=task.device)

    def compute(self, raw_rows: list) -> Shard:
        shard = Shard()
        texts = []
        for position, raw in enumerate(raw_rows):
            try:
                texts.append(decode_text(raw, self.task.kind, self.task.field_name))
                shard.rows.append(position)
            except RowError as error:
                shard.errors[position] = str(error)
        if texts:
            shard.outputs["embedding"] = self.encoder.encode(texts, batch_size=len(texts))
        return shard


@dataclass
class OnnxTask:
    """An ONNX model run row by row over an array input (rows stacked on a free batch dim)."""

    model: str = ""
    device: str = "cpu"

    def load(self) -> OnnxWorker:
        return OnnxWorker(self)


class OnnxWorker:
    """A loaded ONNX model: checks each row against the inputs, runs rows of equal shapes as
    one stacked batch when every input's first dim is free, else one row at a time."""

    def __init__(self, task: OnnxTask) -> None:
        import fuel.onnx

        self.task = task
        self.model = fuel.onnx.load(task.model)
        self.inputs = [spec for spec in self.model.inputs]
        for spec in self.inputs:
            if spec.kind != "tensor":
                raise FuelError(f"{task.model}: input {spec.name!r} is a {spec.kind}; batch "
                                "jobs feed tensors only")
        self.stacked = all(spec.shape and not (isinstance(spec.shape[0], int)
                                               and spec.shape[0] > 0)
                           for spec in self.inputs)

    def expected_shape(self, spec) -> tuple | None:
        """The shape one row must have (None where any size fits)."""
        if spec.shape is None:
            return None
        dims = spec.shape[1:] if self.stacked else spec.shape
        return tuple(d if isinstance(d, int) and d > 0 else None for d in dims)

    def decode(self, raw) -> dict[str, np.ndarray]:
        """A raw row (a dict of arrays, or a file's name and bytes) as checked model feeds."""
        from fuel.distributed.sources import decode_array_file

        if isinstance(raw, tuple):
            name, data = raw
            try:
                raw = decode_array_file(name, data)
            except Exception as error:  # NumPy raises several types for a damaged file
                raise RowError(f"cannot decode {name}: {error}") from None
            if isinstance(raw, np.ndarray):
                if len(self.inputs) != 1:
                    raise RowError(f"{name} holds one array but the model has inputs "
                                   f"{[s.name for s in self.inputs]}; use .npz rows")
                raw = {self.inputs[0].name: raw}
        missing = [spec.name for spec in self.inputs if spec.name not in raw]
        if missing:
            raise RowError(f"no value for the model's input(s) {missing}")
        feeds = {}
        for spec in self.inputs:
            value = np.asarray(raw[spec.name])
            expected = self.expected_shape(spec)
            if expected is not None and (len(expected) != value.ndim or any(
                    e is not None and e != s for e, s in zip(expected, value.shape))):
                shown = "[" + ", ".join("?" if e is None else str(e) for e in expected) + "]"
                raise RowError(f"input {spec.name!r} has shape {list(value.shape)}; the model "
                               f"expects {shown} per row")
            target = spec.dtype.numpy
            if value.dtype != target:
                if not np.can_cast(value.dtype, target, "same_kind"):
                    raise RowError(f"input {spec.name!r} has dtype {value.dtype}; the model "
                                   f"expects {np.dtype(target)}")
                value = value.astype(target)
            feeds[spec.name] = value
        return feeds

    def _run(self, feeds: dict[str, np.ndarray], count: int) -> list[dict[str, np.ndarray]]:
        """Per-row outputs of one model run over ``count`` rows."""
        outputs = self.model.run(feeds, device=self.task.device)
        rows = [{} for _ in range(count)]
        for name, value in outputs.items():
            if value is None or isinstance(value, list):
                raise FuelError(f"{self.task.model}: output {name!r} is not a tensor; batch "
                                "jobs write tensor outputs only")
            value = np.asarray(value)
            if self.stacked:
                if value.ndim == 0 or value.shape[0] != count:
                    raise FuelError(f"{self.task.model}: output {name!r} has shape "
                                    f"{list(value.shape)} for {count} stacked rows; its first "
                                    "dim is not the batch dim, so rows cannot be run together")
                for index in range(count):
                    rows[index][name] = value[index]
            else:
                rows[0][name] = value
        return rows

    def compute(self, raw_rows: list) -> Shard:
        shard = Shard()
        groups: dict[tuple, list[tuple[int, dict]]] = {}
        for position, raw in enumerate(raw_rows):
            try:
                feeds = self.decode(raw)
            except RowError as error:
                shard.errors[position] = str(error)
                continue
            key = tuple((k, v.shape) for k, v in feeds.items()) if self.stacked else (position,)
            groups.setdefault(key, []).append((position, feeds))
        results: dict[int, dict[str, np.ndarray]] = {}
        for members in groups.values():
            positions = [p for p, _ in members]
            try:
                stacked = {spec.name: np.stack([f[spec.name] for _, f in members])
                           for spec in self.inputs} if self.stacked else members[0][1]
                results.update(zip(positions, self._run(stacked, len(members))))
            except FuelError as error:
                if len(members) == 1:
                    shard.errors[positions[0]] = f"the model failed on this row: {error}"
                    continue
                for position, feeds in members:  # find the row(s) that fail
                    try:
                        one = {k: v[None] for k, v in feeds.items()}
                        results[position] = self._run(one, 1)[0]
                    except FuelError as row_error:
                        shard.errors[position] = f"the model failed on this row: {row_error}"
        shard.rows = sorted(results)
        for name in self.model.output_names:
            values = [results[p][name] for p in shard.rows]
            if values:
                shapes = {v.shape for v in values}
                if len(shapes) > 1:
                    raise FuelError(f"{self.task.model}: output {name!r} has different shapes "
                                    f"for rows of one batch {sorted(shapes)}; batch jobs write "
                                    "one array per output")
                shard.outputs[name] = np.stack(values)
        return shard
