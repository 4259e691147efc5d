"""ONNX op converters, one module per op family; importing this package registers them all."""

from fuel.onnx.ops import (  # noqa: F401
    activations,
    attention,
    attention_extra,
    control,
    conv,
    elementwise,
    indexing,
    linalg,
    loss,
    misc,
    ml,
    normalization,
    quantize,
    reduce,
    resize,
    rnn,
    sequence,
    shape,
    signal,
    strings,
)
