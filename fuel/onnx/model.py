"""``fuel.onnx.load`` and ``Model``: an ONNX model run through fuel's lazy graph."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from fuel.ir.errors import FuelError
from fuel.onnx.blocked import block_chains
from fuel.onnx.builder import Builder
from fuel.onnx.context import DEFAULT_DOMAINS, OptionalValue, Scope, SequenceValue, find_converter
from fuel.onnx.errors import OnnxError, UnsupportedOp, UnsupportedOpset, node_label
from fuel.onnx.proto import fuel_dtype, onnx_type_name, value_info_signature
from fuel.onnx.qdq import fold_qdq
from fuel.onnx.replay import ModelReplay, feed_signature
from fuel.runtime.jit import collector_paused
from fuel.tensor import Tensor

MIN_OPSET = 1
MAX_OPSET = 28
# Opset ranges of the other domains whose ops fuel implements.
DOMAIN_OPSETS = {"ai.onnx.ml": (1, 5), "ai.onnx.preview.training": (1, 1),
                 "ai.onnx.preview": (1, 1), "com.microsoft": (1, 1)}


@dataclass(frozen=True)
class InputSpec:
    """A graph input: name, kind ("tensor", "sequence_type", ...), element type and shape
    (ints for fixed dims, strings for named free dims, None for unnamed ones)."""

    name: str
    kind: str
    elem_type: int | None
    shape: tuple | None

    @property
    def dtype(self):
        """The fuel dtype of a tensor input."""
        return fuel_dtype(self.elem_type, f"graph input {self.name!r}")


def load(source) -> Model:
    """Load an ONNX model from a path, bytes or an ``onnx.ModelProto``."""
    return Model(source)


class Model:
    """A loaded ONNX model. ``run(feeds)`` returns NumPy outputs by name, in graph order."""

    def __init__(self, source) -> None:
        # errors name the file a model came from (a path's last part; None for bytes, protos)
        self.file_name = os.path.basename(os.fspath(source)) if isinstance(
            source, (str, os.PathLike)) else None
        try:
            self._load(source)
        except FuelError as error:
            raise self._named(error) from error.__cause__

    def _named(self, error: FuelError) -> FuelError:
        """``error`` with the model's file name in front (as it is when it already names it)."""
        message = str(error)
        if self.file_name is None or self.file_name in message:
            return error
        try:
            named = type(error)(f"{self.file_name}: {message}")
        except TypeError:  # an error class with a constructor of its own
            named = OnnxError(f"{self.file_name}: {message}")
        named.__dict__.update(error.__dict__)
        return named

    def _load(self, source) -> None:
        self.proto, self.base_dir = _parse(source)
        graph = self.proto.graph
        self.opsets = _check_opsets(self.proto)
        _check_ops(graph)
        self._graph = fold_qdq(graph, self.base_dir)  # what runs: QDQ convs folded
        initializers = {t.name for t in graph.initializer}
        self.inputs = [_input_spec(v) for v in graph.input if v.name not in initializers]
        self.output_names = [v.name for v in graph.output]
        self._check_input_types()
        self._replay = ModelReplay([spec.name for spec in self.inputs])

    def _check_input_types(self) -> None:
        for spec in self.inputs:
            if spec.kind == "tensor":
                spec.dtype  # noqa: B018 - raises UnsupportedDType for string, uint16, ...

    def __repr__(self) -> str:
        names = ", ".join(s.name for s in self.inputs)
        return f"fuel.onnx.Model({self.proto.graph.name!r}, inputs=[{names}], " \
               f"outputs={self.output_names})"

    def graph_tensors(self, feeds: dict, device="cpu") -> dict[str, object]:
        """The outputs as lazy fuel values (Tensors; lists for sequences), nothing realized
        except the small shape-deciding subgraphs; profile or ``explain`` them."""
        return self._build(feeds, device)[0]

    def _build(self, feeds: dict, device) -> tuple[dict[str, object], Builder, dict]:
        builder = Builder(self.opsets, device, self.base_dir)
        scope = Scope()
        bound = self._bind_feeds(feeds, builder)
        for name, value in bound.items():
            scope.values[name] = value
        try:
            builder.run_graph(self._graph, scope)
        except OnnxError as error:
            if not builder.dim_conflicts:
                raise
            raise type(error)(f"{error}; the feeds disagree on a named dim the model declares "
                              f"shared: {'; '.join(builder.dim_conflicts)}") from error
        result = {}
        for name in self.output_names:
            if name not in scope:
                raise OnnxError(f"graph output {name!r} is not produced by any node")
            result[name] = scope.lookup(name)
        return block_chains(result), builder, bound

    def run(self, feeds: dict | None = None, device="cpu") -> dict[str, object]:
        """Run the model on ``feeds`` (name -> array); outputs by name in graph order.

        The first call per feed signature (dtypes, shapes, device) builds the graph; when
        nothing in it depends on the feeds' values, its plan is captured and later calls with
        that signature replay it (see fuel.onnx.replay)."""
        try:
            return self._run(feeds, device)
        except FuelError as error:
            raise self._named(error) from error.__cause__

    def _run(self, feeds: dict | None, device) -> dict[str, object]:
        feeds = feeds or {}
        if feeds.__class__ is dict:  # the last replay's very arrays again
            again = self._replay.again(feeds, device)
            if again is not None:
                return dict(zip(self.output_names, again))
        signature = feed_signature(self.inputs, feeds, device) if isinstance(feeds, dict) \
            else None
        if signature is not None:
            arrays = [feeds[spec.name] for spec in self.inputs]
            replayed = self._replay.run(signature, arrays, device)
            if replayed is not None:
                return dict(zip(self.output_names, replayed))
        import fuel
        from fuel.runtime.executor import PLAN_CACHE

        realizes = PLAN_CACHE.hits + PLAN_CACHE.misses
        with collector_paused():  # a new shape's build and capture (as fuel.jit's)
            values, builder, bound = self._build(feeds, device)
            captured = None
            if signature is not None and signature not in self._replay.captures:
                host_decided = builder.host_decided or builder.draws_random or (
                    PLAN_CACHE.hits + PLAN_CACHE.misses - realizes > builder.host_realizes)
                captured = self._replay.capture(signature,
                                                [bound[s.name] for s in self.inputs], values,
                                                host_decided)
        if captured is not None:
            return dict(zip(self.output_names, captured))
        tensors = [t for v in values.values() for t in _tensors_in(v)]
        if tensors:
            fuel.realize(*tensors)
        return {name: _to_host(value) for name, value in values.items()}

    # ------------------------------------------------------------------ feeds
    def _bind_feeds(self, feeds: dict, builder: Builder) -> dict[str, object]:
        if not isinstance(feeds, dict):
            raise OnnxError(f"feeds must be a dict of input name -> array, got "
                            f"{type(feeds).__name__}")
        known = {s.name for s in self.inputs} | {t.name for t in self.proto.graph.initializer}
        unknown = sorted(set(feeds) - known)
        if unknown:
            raise OnnxError(f"feeds name unknown inputs {unknown}; the model's inputs are "
                            f"{[s.name for s in self.inputs]}")
        bound: dict[str, object] = {}
        free_dims: dict[str, object] = {}
        for spec in self.inputs:
            if spec.name not in feeds:
                raise OnnxError(f"missing feed for graph input {spec.name!r} "
                                f"({_describe_spec(spec)})")
            bound[spec.name] = _bind_one(spec, feeds[spec.name], builder, free_dims)
            if isinstance(bound[spec.name], Tensor):
                builder.feed_nodes.add(id(bound[spec.name]._node))
        for name in set(feeds) - {s.name for s in self.inputs}:  # overriding an initializer
            bound[name] = builder.constant(np.asarray(feeds[name]))
        builder.dim_conflicts = free_dims.get(DIM_CONFLICTS, [])
        return bound


def _bind_one(spec: InputSpec, value, builder: Builder, free_dims: dict):
    if spec.kind == "sequence_type":
        if not isinstance(value, (list, tuple)):
            raise OnnxError(f"feed {spec.name!r} must be a list (the input is a sequence)")
        items = [builder.constant(np.asarray(v)) for v in value]
        return SequenceValue(items, items[0].dtype if items else None)
    if spec.kind == "optional_type":
        if value is None:
            return OptionalValue(None)
        if isinstance(value, (list, tuple)):
            items = [builder.constant(np.asarray(v)) for v in value]
            return OptionalValue(SequenceValue(items, items[0].dtype if items else None))
        return OptionalValue(builder.constant(np.asarray(value)))
    if spec.kind != "tensor":
        raise UnsupportedOp(f"graph input {spec.name!r} is a {spec.kind}, which fuel does not "
                            "support")
    array = np.asarray(value)
    dtype = spec.dtype
    if array.dtype != dtype.numpy:
        raise OnnxError(f"feed {spec.name!r} has dtype {array.dtype}; the model declares "
                        f"{onnx_type_name(spec.elem_type)} ({dtype.name})")
    _check_shape(spec, array.shape, free_dims)
    return builder.constant(array)


def _check_shape(spec: InputSpec, shape: tuple, free_dims: dict) -> None:
    if spec.shape is None:
        return
    if len(shape) != len(spec.shape):
        raise OnnxError(f"feed {spec.name!r} has shape {shape}; the model declares "
                        f"{_shape_text(spec.shape)} ({len(spec.shape)} dims)")
    for axis, (size, declared) in enumerate(zip(shape, spec.shape)):
        if isinstance(declared, int) and declared > 0 and size != declared:
            raise OnnxError(f"feed {spec.name!r} has shape {shape}; the model declares "
                            f"{_shape_text(spec.shape)} (dim {axis} must be {declared})")
        if isinstance(declared, str) and declared and declared != "?":
            # A named dim shared by inputs: ONNX Runtime only warns when the feeds disagree,
            # and so does fuel, until the model's own shapes force them equal (a node fails):
            # then the error names both inputs (``dim_conflicts``).
            seen = free_dims.setdefault(declared, (size, spec.name, axis))
            if seen[0] != size:
                conflicts = free_dims.setdefault(DIM_CONFLICTS, [])
                conflicts.append(f"free dim {declared!r} is {seen[0]} in input {seen[1]!r} "
                                 f"(dim {seen[2]}) but {size} in input {spec.name!r} "
                                 f"(dim {axis})")


DIM_CONFLICTS = "\0conflicts"  # the key under which _check_shape lists disagreeing feeds


def _shape_text(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _describe_spec(spec: InputSpec) -> str:
    if spec.kind != "tensor":
        return spec.kind
    return f"{onnx_type_name(spec.elem_type)}{_shape_text(spec.shape or ())}"


def _tensors_in(value):
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, SequenceValue):
        yield from value.items
    elif isinstance(value, OptionalValue) and value.value is not None:
        yield from _tensors_in(value.value)


def _to_host(value):
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, SequenceValue):
        return [item.numpy() for item in value.items]
    if isinstance(value, OptionalValue):
        return None if value.value is None else _to_host(value.value)
    return value


# ----------------------------------------------------------------------------- loading


def _parse(source):
    try:
        import onnx
    except ImportError:
        from fuel.onnx import missing_onnx_error

        raise missing_onnx_error() from None
    base_dir = ""
    if isinstance(source, onnx.ModelProto):
        proto = source
    else:
        if isinstance(source, (str, os.PathLike)):
            path = os.fspath(source)
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
            except OSError as error:
                raise OnnxError(f"cannot read ONNX model {path!r}: {error.strerror}") from None
            base_dir = os.path.dirname(os.path.abspath(path))
            what = repr(path)
        elif isinstance(source, (bytes, bytearray, memoryview)):
            data = bytes(source)
            what = "bytes"
        else:
            raise OnnxError(f"load() takes a path, bytes or an onnx.ModelProto, got "
                            f"{type(source).__name__}")
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(data)
        except Exception as error:  # google.protobuf.message.DecodeError and friends
            raise OnnxError(f"{what} is not a valid ONNX model (malformed or truncated "
                            f"protobuf: {error})") from None
    if not proto.HasField("graph") or not proto.graph.output:
        raise OnnxError("not a valid ONNX model: it has no graph or the graph has no outputs")
    if not proto.opset_import:
        raise OnnxError("not a valid ONNX model: it declares no opset_import")
    return proto, base_dir


def _check_opsets(proto) -> dict[str, int]:
    opsets: dict[str, int] = {}
    for entry in proto.opset_import:
        domain = "" if entry.domain in DEFAULT_DOMAINS else entry.domain
        version = int(entry.version)
        low, high = (MIN_OPSET, MAX_OPSET) if domain == "" else DOMAIN_OPSETS.get(
            domain, (version, version))
        if not low <= version <= high:
            raise UnsupportedOpset(f"opset {domain or 'ai.onnx'} version {version} is not "
                                   f"supported (fuel implements versions {low} to {high})")
        opsets[domain] = version
    return opsets


def _check_ops(graph) -> None:
    """Every node (subgraphs included) must have a converter: fail at load, naming it."""
    for node in graph.node:
        if find_converter(node.domain, node.op_type) is None:
            domain = node.domain if node.domain not in DEFAULT_DOMAINS else "ai.onnx"
            raise UnsupportedOp(f"{node_label(node)}: op {node.op_type} (domain {domain}) is "
                                "not supported by fuel")
        for attribute in node.attribute:
            if attribute.HasField("g"):
                _check_ops(attribute.g)
            for subgraph in attribute.graphs:
                _check_ops(subgraph)


def _input_spec(value_info) -> InputSpec:
    kind, elem_type, shape = value_info_signature(value_info)
    return InputSpec(value_info.name, kind, elem_type, shape)
