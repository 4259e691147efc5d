"""The ONNX backend test cases: node cases generated from the installed onnx into a cache
directory, plus the model folders its wheel ships (pytorch-converted, pytorch-operator,
simple, light)."""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field

import numpy as np

from fuel.extras import cache_root

NODE_SUITE = "node"
MODEL_SUITES = ("pytorch-converted", "pytorch-operator", "simple")
LIGHT_SUITE = "light"
ALL_SUITES = (NODE_SUITE,) + MODEL_SUITES + (LIGHT_SUITE,)
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-5
_COMPLETE = ".complete"
_FLOAT32, _INT64 = 1, 7
# rtol of the light CNNs as onnx's own runner uses them.
LIGHT_RTOL = {"densenet121": 2e-3}


@dataclass
class Case:
    """One test: a model file, one data set of inputs/outputs (or generated light inputs)."""

    name: str
    suite: str
    op: str
    path: str
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    float32_int64_inputs: bool = False
    expected_path: str = field(default="", repr=False)
    dtype_group: str = ""

    @property
    def model_path(self) -> str:
        return self.path if self.suite == LIGHT_SUITE else os.path.join(self.path, "model.onnx")


def cache_dir() -> str:
    """Where node cases are generated: ``$FUEL_ONNX_CASES``, else ``$FUEL_CACHE_DIR`` (default
    ``~/.cache/fuel``) ``/onnx-node-cases``; one folder per version of every library that
    shapes the generated data (onnx, ml_dtypes, NumPy)."""
    import ml_dtypes
    import onnx

    root = os.environ.get("FUEL_ONNX_CASES") or str(cache_root() / "onnx-node-cases")
    versions = f"onnx-{onnx.__version__}-ml_dtypes-{ml_dtypes.__version__}-numpy-{np.__version__}"
    return os.path.join(root, versions)


def onnx_data_dir() -> str:
    import onnx.backend.test

    return os.path.join(os.path.dirname(onnx.backend.test.__file__), "data")


def ensure_node_cases(directory: str | None = None, progress=None) -> str:
    """Generate the node cases into ``directory`` once (deterministic, no network)."""
    directory = directory or cache_dir()
    if os.path.exists(os.path.join(directory, _COMPLETE)):
        return directory
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            cases = collect_testcases(None)
    ops = primary_ops(cases)
    os.makedirs(directory, exist_ok=True)
    iterator = progress(cases, "generating node cases") if progress else cases
    for case in iterator:
        if ops[case.name] in ("Cast", "CastLike"):
            _define_sub_byte_casts(case)
        _write_case(os.path.join(directory, case.name), case, ops[case.name])
    with open(os.path.join(directory, _COMPLETE), "w", encoding="utf-8") as handle:
        handle.write(f"{len(cases)}\n")
    return directory


_SUB_BYTE_INTEGER_TYPES = frozenset({21, 22, 25, 26})  # UINT4, INT4, UINT2, INT2
_FLOAT_TYPES = frozenset({1, 10, 11, 16})  # FLOAT, FLOAT16, DOUBLE, BFLOAT16


def _define_sub_byte_casts(case) -> None:
    """Give a float -> 2- or 4-bit integer cast case the expected output of fuel's stated rule
    (docs/CONFORMANCE.md): truncate toward zero, 0 where out of range or NaN. ONNX leaves a
    float out of a fixed-point type's range undefined; onnx's generator takes whatever the
    installed ml_dtypes does there (0.6 wraps: -9 -> 7; 0.7 gives 0), so without this the
    expected values, and the count, would depend on the machine's ml_dtypes."""
    import ml_dtypes
    from onnx import numpy_helper

    inputs, outputs = case.data_sets[0]
    source, result = inputs[0], outputs[0]
    if not (hasattr(source, "data_type") and hasattr(result, "data_type")):
        return
    if source.data_type not in _FLOAT_TYPES or result.data_type not in _SUB_BYTE_INTEGER_TYPES:
        return
    expected = numpy_helper.to_array(result)
    values = numpy_helper.to_array(source).astype(np.float64)
    limits = ml_dtypes.iinfo(expected.dtype)
    truncated = np.trunc(values)
    with np.errstate(invalid="ignore"):
        in_range = (truncated >= int(limits.min)) & (truncated <= int(limits.max))
    defined = np.where(in_range, truncated, 0).astype(np.int64).astype(expected.dtype)
    replaced = numpy_helper.from_array(defined.reshape(expected.shape), result.name)
    outputs[0] = replaced


def primary_ops(cases) -> dict[str, str]:
    """The op each node case tests: the single node's op, or the op of the case an
    ``_expanded`` variant expands."""
    single = {c.name: c.model.graph.node[0].op_type for c in cases
              if len(c.model.graph.node) == 1}
    ops = {}
    for case in cases:
        if case.name in single:
            ops[case.name] = single[case.name]
            continue
        base = re.sub(r"_expanded.*$", "", case.name)
        found = single.get(base)
        if found is None:
            types = [n.op_type for n in case.model.graph.node if n.op_type != "Constant"]
            found = types[0] if types else "Constant"
        ops[case.name] = found
    return ops


def _write_case(path: str, case, op: str) -> None:
    from onnx import TensorProto, numpy_helper

    data_dir = os.path.join(path, "test_data_set_0")
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(path, "model.onnx"), "wb") as handle:
        handle.write(case.model.SerializeToString())
    graph = case.model.graph
    inputs, outputs = case.data_sets[0]
    for prefix, values, infos in (("input", inputs, graph.input),
                                  ("output", outputs, graph.output)):
        for index, value in enumerate(values):
            kind = infos[index].type.WhichOneof("value")
            if isinstance(value, TensorProto):
                message = value
            elif kind == "sequence_type":
                message = numpy_helper.from_list(value, infos[index].name)
            elif kind == "optional_type":
                message = numpy_helper.from_optional(value, infos[index].name)
            elif kind == "map_type":
                message = numpy_helper.from_dict(value, infos[index].name)
            else:
                message = numpy_helper.from_array(np.asarray(value), infos[index].name)
            with open(os.path.join(data_dir, f"{prefix}_{index}.pb"), "wb") as handle:
                handle.write(message.SerializeToString())
    meta = {"op": op, "rtol": case.rtol, "atol": case.atol}
    with open(os.path.join(path, "meta.json"), "w", encoding="utf-8") as handle:
        json.dump(meta, handle)


def _only_float32_int64(model) -> bool:
    initializers = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if value.type.WhichOneof("value") != "tensor_type":
            return False
        if value.type.tensor_type.elem_type not in (_FLOAT32, _INT64):
            return False
    return True


# The dtype groups of the report, in priority order: a case belongs to the first group one of
# its element types is in (TensorProto.DataType values); "float32/int64" takes the cases whose
# types are all float32, int64 or bool; "other" the rest (float64, int8/16/32, ...).
DTYPE_GROUPS: tuple[tuple[str, frozenset[int]], ...] = (
    ("string", frozenset({8})),
    ("sub-byte ints", frozenset({21, 22, 25, 26})),
    ("float4", frozenset({23})),
    ("float8", frozenset({17, 18, 19, 20, 24})),
    ("float16/bfloat16", frozenset({10, 16})),
    ("unsigned ints", frozenset({2, 4, 12, 13})),
)
FLOAT32_INT64_GROUP = "float32/int64"
OTHER_GROUP = "other"
GROUP_NAMES = tuple(name for name, _ in DTYPE_GROUPS) + (FLOAT32_INT64_GROUP, OTHER_GROUP)
_TYPE_ATTRIBUTES = ("to", "output_dtype", "dtype")


def element_types(model) -> set[int]:
    """Every tensor element type a model names: its graph's inputs, outputs, value infos,
    initializers and constants, and the element-type attributes of its nodes (Cast's ``to``)."""
    found: set[int] = set()

    def of_type(type_proto) -> None:
        kind = type_proto.WhichOneof("value")
        if kind == "tensor_type":
            found.add(type_proto.tensor_type.elem_type)
        elif kind == "sequence_type":
            of_type(type_proto.sequence_type.elem_type)
        elif kind == "optional_type":
            of_type(type_proto.optional_type.elem_type)

    def of_graph(graph) -> None:
        for value in (*graph.input, *graph.output, *graph.value_info):
            of_type(value.type)
        found.update(t.data_type for t in graph.initializer)
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.name in _TYPE_ATTRIBUTES and attribute.type == attribute.INT:
                    found.add(attribute.i)
                if attribute.type == attribute.TENSOR:
                    found.add(attribute.t.data_type)
                if attribute.type == attribute.GRAPH:
                    of_graph(attribute.g)

    of_graph(model.graph)
    found.discard(0)
    return found


def dtype_group(model) -> str:
    """The report's dtype group of a model (see DTYPE_GROUPS)."""
    types = element_types(model)
    for name, members in DTYPE_GROUPS:
        if types & members:
            return name
    return FLOAT32_INT64_GROUP if types <= {_FLOAT32, _INT64, 9} else OTHER_GROUP


def load_cases(suites=ALL_SUITES, pattern: str | None = None, progress=None) -> list[Case]:
    """Every case of ``suites`` whose name matches ``pattern`` (a regular expression)."""
    import onnx

    matcher = re.compile(pattern) if pattern else None
    found: list[Case] = []
    if NODE_SUITE in suites:
        root = ensure_node_cases(progress=progress)
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name)
            if not os.path.isdir(path) or (matcher and not matcher.search(name)):
                continue
            with open(os.path.join(path, "meta.json"), encoding="utf-8") as handle:
                meta = json.load(handle)
            model = onnx.load(os.path.join(path, "model.onnx"), load_external_data=False)
            found.append(Case(name, NODE_SUITE, meta["op"], path,
                              max(DEFAULT_RTOL, meta["rtol"]), max(DEFAULT_ATOL, meta["atol"]),
                              _only_float32_int64(model), dtype_group=dtype_group(model)))
    data = onnx_data_dir()
    for suite in MODEL_SUITES:
        if suite not in suites:
            continue
        folder = os.path.join(data, suite)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if matcher and not matcher.search(name):
                continue
            found.append(Case(name, suite, suite, os.path.join(folder, name)))
    if LIGHT_SUITE in suites:
        folder = os.path.join(data, LIGHT_SUITE)
        for file_name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            match = re.fullmatch(r"light_(.+)\.onnx", file_name)
            if not match or (matcher and not matcher.search(f"light_{match.group(1)}")):
                continue
            model_name = match.group(1)
            expected = os.path.join(folder, f"light_{model_name}_output_0.pb")
            found.append(Case(f"light_{model_name}", LIGHT_SUITE, LIGHT_SUITE,
                              os.path.join(folder, file_name),
                              LIGHT_RTOL.get(model_name, DEFAULT_RTOL), DEFAULT_ATOL,
                              expected_path=expected))
    return found


def read_data(case: Case, model) -> tuple[list, list]:
    """(inputs in graph-input order without initializers, expected outputs) of ``case``."""
    initializers = {t.name for t in model.graph.initializer}
    formal = [v for v in model.graph.input if v.name not in initializers]
    if case.suite == LIGHT_SUITE:
        inputs = []
        for value in formal:
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                          for d in value.type.tensor_type.shape.dim)
            count = int(np.prod(shape))
            inputs.append((np.arange(count).reshape(shape) / count).astype(np.float32))
        return inputs, [_read_proto(case.expected_path, model.graph.output[0].type)]
    data_dir = os.path.join(case.path, "test_data_set_0")
    inputs = []
    index = 0
    while os.path.exists(os.path.join(data_dir, f"input_{index}.pb")):
        inputs.append(_read_proto(os.path.join(data_dir, f"input_{index}.pb"),
                                  formal[index].type))
        index += 1
    outputs = []
    index = 0
    while os.path.exists(os.path.join(data_dir, f"output_{index}.pb")):
        outputs.append(_read_proto(os.path.join(data_dir, f"output_{index}.pb"),
                                   model.graph.output[index].type))
        index += 1
    return inputs, outputs


def _read_proto(path: str, type_proto):
    import onnx
    from onnx import numpy_helper

    with open(path, "rb") as handle:
        data = handle.read()
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        message = onnx.SequenceProto()
        message.ParseFromString(data)
        return numpy_helper.to_list(message)
    if kind == "optional_type":
        message = onnx.OptionalProto()
        message.ParseFromString(data)
        return numpy_helper.to_optional(message)
    if kind == "map_type":
        message = onnx.MapProto()
        message.ParseFromString(data)
        return numpy_helper.to_dict(message)
    message = onnx.TensorProto()
    message.ParseFromString(data)
    return numpy_helper.to_array(message)
