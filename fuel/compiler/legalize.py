"""Legalization: a LoopKernel rewritten, in the IR, into what a target language has, before a
renderer writes it, so the renderers share the expression tables (``render_expression``) and
none keeps special ones for what its language lacks.

A ``Legalization`` names the dtypes a target holds narrower than the IR (WGSL has no 64-bit
integer: wgpu holds int64 as 32 bits, ``fuel/backends/wgpu/__init__.py``): ``apply`` retypes
every load, value and store of those dtypes to the narrower one and drops the casts that
become identities, so the renderer never sees them; it rewrites arithmetic over bools into
the logical ops it equals, compares ordered bools as integers and computes storage-only
dtypes (WGSL's float16) in a wider one, cast back where computed. ``renders`` is the shared
``render_expression.renders`` over the legalized dtypes, less the ops whose results depend on
the width a narrowed dtype lost (shifts past 31 bits), plus integer powers where the target
has a helper for them. Pure: imports only the IR layers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fuel.compiler.kernel_ir import (
    REDUCE_OPS,
    SCAN_OPS,
    KernelBuilder,
    Load,
    LoopKernel,
    Store,
    Value,
)
from fuel.compiler.render_expression import renders as renders_in
from fuel.ir.dtype import DType

_ORDERINGS = frozenset({"lt", "le", "gt", "ge"})
# Values that hold their dtype's value exactly: nothing is computed in them.
_EXACT = frozenset({"load", "constant", "cast", "where", "bitcast"})


@dataclass(frozen=True)
class Legalization:
    """What one target language lacks, as rewrites of the kernel IR."""

    narrowed: Mapping[DType, DType] = field(default_factory=dict)  # held in a narrower type
    width_sensitive: frozenset[str] = frozenset()  # ops that differ on a narrowed dtype
    integer_pow: bool = False  # integer powers render (the target has a helper)
    # Ops over bool operands the target has no arithmetic for, as the logical ops NumPy's
    # give the same truth values as (add: or, mul: and, sub: xor, maximum: or, ...).
    boolean_logic: Mapping[str, str] = field(default_factory=dict)
    # Where set, ordering comparisons of bools compare their 0/1 cast to this dtype.
    ordered_bools: DType | None = None
    # Storage-only dtypes computed in a wider one: each value computed in such a dtype is
    # computed in the wider one and cast back (rounded where it is computed, as the NumPy
    # kernels round each node's result); reads, constants, selections and casts are exact.
    computed_in: Mapping[DType, DType] = field(default_factory=dict)

    def dtype(self, dtype: DType) -> DType:
        """The dtype a value of ``dtype`` is held in on the target."""
        return self.narrowed.get(dtype, dtype)

    def renders(self, op: str, dtypes: tuple[DType, ...], rendered_dtypes) -> bool:
        """Whether ``op`` over ``dtypes`` (inputs then output, the IR's) renders on the target,
        whose renderer has types for ``rendered_dtypes`` (legalized dtypes)."""
        if op in self.width_sensitive and any(d in self.narrowed for d in dtypes):
            return False
        legal = tuple(self.dtype(d) for d in dtypes)
        if op == "pow" and self.integer_pow and legal[0].is_integer:
            return all(d in rendered_dtypes and d is legal[0] for d in legal)
        return renders_in(op, legal, rendered_dtypes)

    def apply(self, kernel: LoopKernel) -> LoopKernel:
        """``kernel`` with every narrowed dtype retyped and the bool ops rewritten."""
        builder = KernelBuilder(kernel.shape)
        builder.loads = [Load(self.dtype(load.dtype), load.strides, load.offset)
                         for load in kernel.loads]
        mapped: list[int] = []
        for value in kernel.values:
            dtype = self.dtype(value.dtype)
            args = tuple(mapped[a] for a in value.args)
            if value.op == "cast" and builder.values[args[0]].dtype is dtype:
                mapped.append(args[0])  # an identity once both sides are held alike
                continue
            op = value.op
            if args and builder.values[args[0]].dtype.is_bool:
                if op in self.boolean_logic:
                    op = self.boolean_logic[op]
                elif op in _ORDERINGS and self.ordered_bools is not None:
                    args = tuple(builder.cast(a, self.ordered_bools) for a in args)
            wide = self.computed_in.get(dtype)
            if wide is not None and op not in _EXACT and op not in REDUCE_OPS | SCAN_OPS:
                args = tuple(builder.cast(a, wide) if builder.values[a].dtype is dtype else a
                             for a in args)
                computed = builder.value(Value(op, wide, args, value.load, value.constant))
                mapped.append(builder.cast(computed, dtype))
                continue
            mapped.append(builder.value(Value(op, dtype, args, value.load, value.constant)))
        stores = [Store(mapped[s.value], self.dtype(s.dtype), s.per_row, s.strides)
                  for s in kernel.stores]
        return builder.build(kernel.name, stores, kernel.nodes, kernel.reduced)
