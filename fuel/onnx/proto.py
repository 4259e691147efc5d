"""Conversions between ONNX protobuf messages and NumPy / fuel: dtypes, tensors, attributes."""

from __future__ import annotations

import numpy as np

from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.onnx.errors import OnnxError, UnsupportedDType

# TensorProto.DataType -> fuel dtype.
_ONNX_TO_FUEL: dict[int, DType] = {
    1: dt.float32, 2: dt.uint8, 3: dt.int8, 5: dt.int16, 6: dt.int32, 7: dt.int64,
    9: dt.bool_, 10: dt.float16, 11: dt.float64, 16: dt.bfloat16, 4: dt.uint16, 12: dt.uint32,
    13: dt.uint64, 17: dt.float8_e4m3fn, 18: dt.float8_e4m3fnuz, 19: dt.float8_e5m2,
    20: dt.float8_e5m2fnuz, 24: dt.float8_e8m0fnu, 21: dt.uint4, 22: dt.int4,
    23: dt.float4_e2m1fn, 25: dt.uint2, 26: dt.int2, 8: dt.string,
}
_FUEL_TO_ONNX = {value.name: key for key, value in _ONNX_TO_FUEL.items()}
_ONNX_NAMES = {
    0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32",
    7: "INT64", 8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64",
    14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ",
    19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1",
    24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2",
}


def onnx_type_name(elem_type: int) -> str:
    """``FLOAT``, ``UINT16``, ... for a TensorProto.DataType value."""
    return _ONNX_NAMES.get(int(elem_type), f"type {elem_type}")


def fuel_dtype(elem_type: int, where: str = "") -> DType:
    """The fuel dtype of an ONNX element type; UnsupportedDType naming ``where`` otherwise."""
    found = _ONNX_TO_FUEL.get(int(elem_type))
    if found is None:
        prefix = f"{where}: " if where else ""
        raise UnsupportedDType(
            f"{prefix}ONNX element type {onnx_type_name(elem_type)} has no fuel dtype "
            f"(supported: {', '.join(onnx_type_name(k) for k in sorted(_ONNX_TO_FUEL))})"
        )
    return found


def onnx_elem_type(dtype: DType) -> int:
    """The TensorProto.DataType value of a fuel dtype."""
    return _FUEL_TO_ONNX[dtype.name]


def tensor_to_array(tensor, where: str = "", base_dir: str = "") -> np.ndarray:
    """A NumPy array from a TensorProto (external data resolved against ``base_dir``)."""
    from onnx import numpy_helper

    fuel_dtype(tensor.data_type, where or f"tensor {tensor.name!r}")
    try:
        array = numpy_helper.to_array(tensor, base_dir)
    except Exception as error:  # protobuf / external-data failures
        raise OnnxError(f"{where or 'tensor ' + repr(tensor.name)}: cannot decode tensor data: "
                        f"{type(error).__name__}: {error}") from None
    return np.asarray(array)


def attribute_value(attribute, where: str = ""):
    """A Python value for an AttributeProto: numbers, str, lists, arrays, or graphs as-is."""
    from onnx import AttributeProto

    kind = attribute.type
    if kind == AttributeProto.FLOAT:
        return float(attribute.f)
    if kind == AttributeProto.INT:
        return int(attribute.i)
    if kind == AttributeProto.STRING:
        return attribute.s.decode("utf-8", errors="replace")
    if kind == AttributeProto.TENSOR:
        return tensor_to_array(attribute.t, where)
    if kind == AttributeProto.GRAPH:
        return attribute.g
    if kind == AttributeProto.FLOATS:
        return [float(v) for v in attribute.floats]
    if kind == AttributeProto.INTS:
        return [int(v) for v in attribute.ints]
    if kind == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in attribute.strings]
    if kind == AttributeProto.GRAPHS:
        return list(attribute.graphs)
    if kind == AttributeProto.TENSORS:
        return [tensor_to_array(t, where) for t in attribute.tensors]
    if kind == AttributeProto.SPARSE_TENSOR:
        from onnx import numpy_helper

        values = numpy_helper.to_array(attribute.sparse_tensor.values)
        indices = numpy_helper.to_array(attribute.sparse_tensor.indices)
        dense = np.zeros(tuple(attribute.sparse_tensor.dims), dtype=values.dtype)
        if indices.ndim == 1:
            dense.reshape(-1)[indices] = values
        else:
            dense[tuple(indices.T)] = values
        return dense
    raise OnnxError(f"{where}: attribute {attribute.name!r} has an unsupported type {kind}")


def value_info_signature(value_info) -> tuple[str, object, tuple | None]:
    """(kind, element type or None, shape with ints/str/None dims or None) of a ValueInfo."""
    type_proto = value_info.type
    kind = type_proto.WhichOneof("value")
    if kind != "tensor_type":
        return kind or "unknown", None, None
    tensor_type = type_proto.tensor_type
    shape = None
    if tensor_type.HasField("shape"):
        dims = []
        for dim in tensor_type.shape.dim:
            which = dim.WhichOneof("value")
            dims.append(int(dim.dim_value) if which == "dim_value" else (
                dim.dim_param if which == "dim_param" else None))
        shape = tuple(dims)
    return "tensor", int(tensor_type.elem_type), shape
