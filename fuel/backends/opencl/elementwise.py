"""The elementwise family, rendered from the kernel IR: every unary and binary op and every
cast over one dtype combination is a one-node LoopKernel (the registry's op, composite ops
lowered through their scalar expression) whose values ``render_opencl`` writes into the same
strided-walk kernel, so these kernels and fused ones come from one op definition. One program
per dtype combination holds the kernels of every op that shares it. Broadcast operands arrive
as stride-0 views and transposes as permuted strides."""

from __future__ import annotations

from functools import cache

from fuel.backends.opencl.codegen import (
    OPENCL_DTYPES,
    ProgramSpec,
    ctype,
    make_walk,
    needs_fp64,
    supports,
    walk_kernel,
)
from fuel.backends.opencl.common import STRIDED, ClKernel, kernel_list, launch_1d
from fuel.compiler.kernel_ir import KernelBuilder, Load, LoopKernel, Store
from fuel.compiler.render_opencl import element_lines, helpers, renders_alone, store_statement
from fuel.dispatch.kernel import KernelList
from fuel.ir.dtype import DType
from fuel.ir.ops import ELEMENTWISE_OPS, OpKind, definition

# The families rendered here (where and the other selections are bit-moving kernels).
RENDERED_FAMILIES = frozenset({"unary", "binary"})


def one_op_kernel(op: OpKind, combo: tuple[DType, ...]) -> LoopKernel:
    """``op`` (or a cast) over inputs of ``combo[:-1]`` giving ``combo[-1]``, as a LoopKernel
    (shape and strides are the walk's, at run time)."""
    *inputs, out = combo
    builder = KernelBuilder(())
    args = tuple(builder.load(Load(dtype, ())) for dtype in inputs)
    value = builder.cast(args[0], out) if op is OpKind.CAST else builder.apply(op, args, out)
    return builder.build(op.value, [Store(builder.cast(value, out), out)], (op.value,))


def kernel_source(name: str, kernel: LoopKernel) -> str:
    """The walk kernel ``name``: load each operand through its strides, store the value."""
    count = len(kernel.loads) + 1
    params = ", ".join(f"__global const {ctype(load.dtype).storage}* in{k}"
                       for k, load in enumerate(kernel.loads))
    body = "\n".join(element_lines(kernel, range(len(kernel.values)), lambda k: f"o{k}", "    ")
                     + ["    " + store_statement(kernel, 0, "out", f"o{count - 1}")])
    out = ctype(kernel.stores[0].dtype).storage
    return f"""
__kernel void {name}(__global {out}* out, {params}, const walk_t w) {{
{walk_kernel(count, body)}}}
"""


def run_walk(kernel: ClKernel, inputs, outputs, layouts, params) -> None:
    """Launch a walk kernel: one work-item per output element, inputs broadcast to its shape."""
    out_layout = layouts[-1]
    if out_layout.numel == 0:
        return
    shape = out_layout.shape
    views = [layout if layout.shape == shape else layout.broadcast_to(shape)
             for layout in layouts[: len(inputs)]]
    walk = make_walk(shape, views + [out_layout])
    context, compiled = kernel.bind(outputs[0])
    launch_1d(context, compiled, out_layout.numel, outputs[0].buffer,
              *[s.buffer for s in inputs], walk, walk=walk)


@cache
def elementwise_program(combo: tuple[DType, ...], ops: tuple[OpKind, ...]) -> ProgramSpec:
    """One program with a kernel per op of ``ops`` (casts included) for ``combo``."""
    fp64 = needs_fp64(*combo)
    parts = [helpers(fp64)]
    parts += [kernel_source(_kernel_name(op, combo), one_op_kernel(op, combo)) for op in ops]
    name = "elementwise_" + "_".join(d.name for d in combo)
    return ProgramSpec(name, "".join(parts), fp64)


def _kernel_name(op: OpKind, combo: tuple[DType, ...]) -> str:
    return f"cast_to_{combo[-1].name}" if op is OpKind.CAST else f"ew_{op.value}"


def _add_elementwise(kernels: KernelList) -> None:
    """Add every unary/binary op that renders, over its registry coverage, and every cast
    (one program per source dtype and float64-ness of the targets)."""
    groups: dict[tuple[DType, ...], list[OpKind]] = {}
    for op in sorted(ELEMENTWISE_OPS, key=lambda o: o.value):
        if definition(op).family not in RENDERED_FAMILIES:
            continue
        for combo in filter(supports, definition(op).coverage):
            if _renders(op, combo):
                groups.setdefault(combo, []).append(op)
    for source in OPENCL_DTYPES:
        wide = tuple(t for t in OPENCL_DTYPES if needs_fp64(source, t))
        narrow = tuple(t for t in OPENCL_DTYPES if t not in wide)
        for targets in (wide, narrow):
            if targets:
                spec = cast_program(source, targets)
                for target in targets:
                    kernels.add(OpKind.CAST, [(source, target)],
                                ClKernel(run_walk, spec, f"cast_to_{target.name}"), STRIDED)
    for combo, ops in groups.items():
        spec = elementwise_program(combo, tuple(ops))
        for op in ops:
            kernels.add(op, [combo], ClKernel(run_walk, spec, _kernel_name(op, combo)), STRIDED)


@cache
def cast_program(source: DType, targets: tuple[DType, ...]) -> ProgramSpec:
    """Casts from ``source`` to each of ``targets``, one kernel each."""
    fp64 = needs_fp64(source, *targets)
    parts = [helpers(fp64)]
    parts += [kernel_source(f"cast_to_{target.name}", one_op_kernel(OpKind.CAST, (source, target)))
              for target in targets]
    return ProgramSpec(f"cast_{source.name}_{len(targets)}", "".join(parts), fp64)


def _renders(op: OpKind, combo: tuple[DType, ...]) -> bool:
    """Whether every op of ``op``'s definition (its expression's, for a composite) renders."""
    expression = definition(op).expression
    if expression is None:
        return renders_alone(op.value, combo)
    return all(renders_alone(name, (combo[-1], combo[-1])) for name in expression.ops())


KERNELS = kernel_list()
_add_elementwise(KERNELS)
