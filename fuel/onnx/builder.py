"""Builder: walks ONNX graphs node by node, turning each into fuel's lazy tensors."""

from __future__ import annotations

import numpy as np

from fuel.frontend.build import leaf
from fuel.ir import dtype as dt
from fuel.ir.device import parse_device
from fuel.ir.errors import DTypeError, FuelError
from fuel.onnx.context import (
    DEFAULT_DOMAINS,
    NodeContext,
    OptionalValue,
    Scope,
    SequenceValue,
    find_converter,
)
from fuel.onnx.errors import OnnxError, UnsupportedDType, UnsupportedOp, node_label
from fuel.onnx.proto import tensor_to_array
from fuel.onnx.replay import depends_on
from fuel.tensor import Tensor


class Builder:
    """One build of a model on one device: host-value cache, constants, node conversion."""

    def __init__(self, opsets: dict[str, int], device="cpu", base_dir: str = "") -> None:
        self.opsets = opsets
        self.device = parse_device(device)
        self.base_dir = base_dir
        self._host: dict[int, tuple[object, np.ndarray]] = {}
        self._stamped: dict[int, object] = {}
        # For Model.run replays: the feeds' leaf ids, whether a host read saw a value computed
        # from them, and how many realizes the host reads made (any other one is suspect).
        self.feed_nodes: set[int] = set()
        self.host_decided = False
        self.host_realizes = 0
        # Whether a random op drew its numbers on the host during the build: a replay would
        # repeat them, so such builds are never captured.
        self.draws_random = False
        # How many node inputs and graph outputs name each value (subgraphs' references
        # included): converters that fuse a producer into its consumer need it to be the only
        # one (fuel.onnx.ops.conv_fusion).
        self.consumers: dict[str, int] = {}
        # Feeds that disagree on a named dim the model declares shared (Model._bind_feeds):
        # named in the error of a node their shapes make fail.
        self.dim_conflicts: list[str] = []

    # ------------------------------------------------------------------ values
    def host_value(self, tensor: Tensor) -> np.ndarray:
        """The values of ``tensor`` on the host (realizing the graph behind it once)."""
        node = tensor._node
        hit = self._host.get(id(node))
        if hit is not None and hit[0] is node:
            if id(node) in self.feed_nodes:
                self.host_decided = True
            return hit[1]
        if self.feed_nodes and depends_on(node, self.feed_nodes):
            self.host_decided = True
        if node.buffer is None:
            self.host_realizes += 1
        array = tensor.numpy()
        self._host[id(node)] = (node, array)
        return array

    def constant(self, array, dtype=None) -> Tensor:
        """A realized leaf holding ``array`` on this build's device (its host value cached)."""
        array = np.asarray(array)
        if dtype is not None:
            array = array.astype(dt.to_dtype(dtype).numpy)
        try:
            dt.from_numpy(array.dtype)
        except DTypeError as error:
            raise UnsupportedDType(str(error)) from None
        if not array.flags.c_contiguous:
            array = array.copy()
        tensor = leaf(array, self.device)
        tensor._node.buffer.constant = True  # the model's own values: kernels may keep copies
        self._host[id(tensor._node)] = (tensor._node, array)
        return tensor

    def initializer(self, proto) -> Tensor:
        return self.constant(tensor_to_array(proto, f"initializer {proto.name!r}", self.base_dir))

    # ------------------------------------------------------------------ graphs
    def run_graph(self, graph, scope: Scope) -> None:
        """Convert every node of ``graph`` in order, binding its outputs in ``scope``."""
        count_consumers(graph, self.consumers)
        for initializer in graph.initializer:
            if initializer.name not in scope.values:
                scope.values[initializer.name] = self.initializer(initializer)
        for node in graph.node:
            self.run_node(node, scope)

    def run_subgraph(self, graph, inputs: list, outer: Scope) -> list:
        """Run a subgraph (If/Loop/Scan body) with ``inputs`` bound to its formal inputs."""
        scope = Scope(outer)
        if len(inputs) != len(graph.input):
            raise OnnxError(f"subgraph {graph.name!r} takes {len(graph.input)} inputs, "
                            f"got {len(inputs)}")
        for formal, value in zip(graph.input, inputs):
            scope.values[formal.name] = value
        self.run_graph(graph, scope)
        return [lookup(scope, output.name, f"subgraph {graph.name!r}") for output in graph.output]

    def opset_of(self, domain: str) -> int:
        key = "" if domain in DEFAULT_DOMAINS else domain
        return self.opsets.get(key, 1)

    def run_node(self, node, scope: Scope) -> None:
        """Convert one node; any error names it (ONNX name and op_type)."""
        label = node_label(node)
        converter = find_converter(node.domain, node.op_type)
        if converter is None:
            raise UnsupportedOp(f"{label}: op {_qualified(node)} is not supported by fuel")
        inputs = [lookup(scope, name, label) if name else None for name in node.input]
        context = NodeContext(node, self, inputs, self.opset_of(node.domain), label, scope)
        try:
            result = converter(context)
        except OnnxError as error:
            raise type(error)(f"{label}: {error}") from error.__cause__
        except FuelError as error:
            raise OnnxError(f"{label}: {type(error).__name__}: {error}") from error
        except Exception as error:  # a NumPy or Python error inside a converter
            raise OnnxError(f"{label}: {type(error).__name__}: {error}") from error
        outputs = list(result) if isinstance(result, (list, tuple)) else [result]
        for index, name in enumerate(node.output):
            if not name:
                continue
            if index >= len(outputs) or outputs[index] is None:
                raise OnnxError(f"{label}: output {index} ({name!r}) was not produced")
            scope.values[name] = outputs[index]
            self._stamp(outputs[index], label)

    def _stamp(self, value, label: str) -> None:
        """Mark the fuel nodes this ONNX node created so realize-time errors name it."""
        if isinstance(value, SequenceValue):
            for item in value.items:
                self._stamp(item, label)
            return
        if isinstance(value, OptionalValue):
            if value.value is not None:
                self._stamp(value.value, label)
            return
        if not isinstance(value, Tensor):
            return
        site = (f"onnx {label}", 0)
        stack = [value._node]
        while stack:
            fuel_node = stack.pop()
            if self._stamped.get(id(fuel_node)) is fuel_node or fuel_node.buffer is not None:
                continue
            self._stamped[id(fuel_node)] = fuel_node
            fuel_node.site = site
            stack.extend(fuel_node.inputs)


def count_consumers(graph, counts: dict[str, int]) -> None:
    """Add to ``counts`` every use of a value by ``graph``'s nodes (and by the nodes of their
    subgraphs) and by its outputs."""
    for node in graph.node:
        for name in node.input:
            if name:
                counts[name] = counts.get(name, 0) + 1
        for attribute in node.attribute:
            for subgraph in ([attribute.g] if attribute.HasField("g") else []) + list(
                    attribute.graphs):
                count_consumers(subgraph, counts)
    for output in graph.output:
        counts[output.name] = counts.get(output.name, 0) + 1


def lookup(scope: Scope, name: str, where: str):
    try:
        return scope.lookup(name)
    except KeyError:
        raise OnnxError(f"{where}: value {name!r} is not produced by any earlier node, "
                        "initializer or graph input") from None


def _qualified(node) -> str:
    domain = node.domain if node.domain not in DEFAULT_DOMAINS else ""
    return f"{domain}::{node.op_type}" if domain else node.op_type
