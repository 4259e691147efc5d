"""``full`` on wgpu: a shader writing one value (its bits as the device holds the dtype) into
every element; the matmul kernel fills with it too (an empty inner dim gives zeros)."""

from __future__ import annotations

import numpy as np

from fuel.backends.wgpu.elements import device_bytes, element_bytes
from fuel.backends.wgpu.loops import device_context, record_dispatch
from fuel.backends.wgpu.windows import split_launch
from fuel.compiler.render_wgsl import STORAGE_WORDS, shader_header
from fuel.ir.layout import Layout


def full_kernel(inputs, outputs, layouts, params) -> None:
    out = outputs[0]
    count = layouts[-1].numel
    if count == 0:
        return
    word = STORAGE_WORDS[out.dtype]
    if word == "f16":  # the float16 value passed as the f32 holding it (converts exactly)
        with np.errstate(over="ignore"):  # beyond float16's range: its infinity
            bits = np.float32(np.float16(params.value)).view(np.int32)
        stored = "f16(bitcast<f32>(params[1]))"
    else:  # the word's bits, as the device holds the value (int64 as int32, bool as u32)
        held = device_bytes(np.asarray([params.value]), out.dtype, out.device)
        bits, stored = held.view(np.int32)[0], f"bitcast<{word}>(params[1])"
    source = "\n".join([shader_header([word], [True], ["b0"]),
                        f"  b0[params[2] + item] = {stored};", "}", ""])
    context = device_context(out)
    for piece in split_launch(context, (count,), [out.buffer],
                              [Layout((count,), (1,), layouts[-1].offset)],
                              [element_bytes(out.dtype)], label="full"):
        items = piece.shape[0]
        record_dispatch(context, source, "full", piece.bindings, [True],
                        [items, int(bits), piece.layouts[0].offset], items)
