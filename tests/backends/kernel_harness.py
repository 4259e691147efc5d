"""The kernel suite's harness: runs one case through one registered kernel, the way the
executor would."""

from __future__ import annotations

import numpy as np

from fuel.backends import BUILTIN_BACKENDS, find_backend, load_builtin_backends
from fuel.backends.base import Backend
from fuel.dispatch.kernel import BindingEntry, global_table
from fuel.ir import dtype as dt
from fuel.ir.device import CPU, BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import OPS, CopyParams, OpKind, infer
from tests.backends.kernel_cases.base import Case, tolerance


def available_builtin_backends() -> dict[BackendId, Backend]:
    """Every built-in backend that loads and is available, by id (CPU first)."""
    return {backend_id: backend for backend_id, backend in load_builtin_backends().items()
            if backend.is_available()}


def builtin_keys(table=None) -> list[tuple]:
    """(op, dtypes, backend) keys that built-in backends registered with their own source tag
    (kernels tests add at run time under other tags or test backends are left out). Fused
    kernel generators are tested by the fusion tests (tests/compiler/)."""
    table = table or global_table()
    tags = {}
    for backend_id in BUILTIN_BACKENDS:
        backend = find_backend(backend_id)
        if backend is not None:
            tags[backend_id] = {backend.kernel_source, *C_SOURCES.get(backend_id, ())}
    return [(op, dtypes, backend_id) for op, dtypes, backend_id, siblings in table.coverage()
            if backend_id in tags and op is not OpKind.FUSED
            and any(e.kernel_source in tags[backend_id] for e in siblings)]


# Hand-written C kernels a built-in backend registers under the compiler's tag (the quantized
# kernels); FUSED, the generator of fused kernels, is tested by tests/compiler.
C_SOURCES = {BackendId.CPU: ("c",)}


def key_id(key) -> str:
    op, dtypes, backend_id = key
    return f"{op.value}-{','.join(d.name for d in dtypes)}-{backend_id.value}"


def _contiguize(backend, device, storage, layout: Layout):
    entry = global_table().lookup_entry(OpKind.CONTIGUOUS, (storage.dtype, storage.dtype),
                                        backend.backend_id)
    target = backend.allocate(device, storage.dtype, layout.numel)
    dense = Layout.contiguous(layout.shape)
    with np.errstate(all="ignore"):
        entry.kernel([storage], [target], [layout, dense], None)
    return target, dense


def run_case(backend: Backend, entry: BindingEntry, op: OpKind, dtypes, case: Case, params=None,
             destination: Backend | None = None) -> np.ndarray:
    """Upload the operands to ``backend``'s first device, call the kernel on a pre-allocated
    output (on ``destination``'s first device for copies), wait, and download the output."""
    device = backend.devices()[0]
    params = case.params if params is None else params
    storages, layouts = [], []
    for item in case.operands:
        storage = backend.upload(device, item.base)
        if item.dtype is not None:  # blocks uploaded as bytes, retyped as their format (the
            # same storage: a second one over its buffer would let the pool recycle it)
            storage.dtype, storage.size = item.dtype, item.layout.numel
        layout = item.layout
        if not entry.caps.strided_input and not layout.is_dense_from_zero():
            storage, layout = _contiguize(backend, device, storage, layout)
        storages.append(storage)
        layouts.append(layout)
    shapes = tuple(item.layout.shape for item in case.operands)
    in_dtypes = tuple(dtypes[:-1]) if op is not OpKind.CAT else (dtypes[0],) * len(storages)
    out_shape, out_dtype = infer(op, params, shapes, in_dtypes)
    assert out_dtype is dtypes[-1], (op, dtypes, out_dtype)
    out_layout = Layout.contiguous(out_shape)
    if case.inplace:
        assert layouts[0].is_dense_from_zero()
        output = storages[0]
    else:
        target = destination or backend
        output = target.allocate(target.devices()[0], out_dtype, out_layout.numel)
    with np.errstate(all="ignore"):  # as in a realize: NaN and inf pass through silently
        entry.kernel(storages, [output], layouts + [out_layout], params)
    backend.synchronize(device)
    if output.backend is not backend:
        output.backend.synchronize(output.device)
    return np.asarray(output.backend.download(output, out_layout))


def copy_destinations(backends: dict[BackendId, Backend]) -> list[tuple[Backend, CopyParams]]:
    """Every available backend's first device, as (backend, CopyParams) for the Copy op."""
    return [(backend, CopyParams(backend.devices()[0] if backend_id is not BackendId.CPU
                                 else CPU))
            for backend_id, backend in backends.items()]


# ----------------------------------------------------------------------------- exactness
# How a float output must match (integer, bool and string outputs always match exactly):
PAYLOAD = "payload"  # bit for bit, NaN payloads and signs included: the op moves values
BITS = "bits"  # bit for bit (the sign of zero counts), a NaN only as a NaN: the op is exact
#                but a NaN's payload is not defined (a cast between formats, neg's NaN sign)
VALUES = "values"  # equal values (a NaN as a NaN; -0.0 equals 0.0): min and max pick either
#                    zero of a tie, and NumPy's pairwise order is not defined

# Decided from the registry (fuel.ir.ops.OPS): families that only move or select values,
# and the ops of other families whose result is one of their inputs or an exact function of
# it. Arithmetic, transcendental functions, accumulations and interpolation round: they keep
# the tolerance of the dtype.
_MOVING_FAMILIES = frozenset({"movement", "view", "select", "index", "placement"})
_EXACT_OPS = {
    OpKind.CAST: BITS, OpKind.FULL: PAYLOAD, OpKind.LABEL_ENCODE: PAYLOAD,
    OpKind.NEG: BITS, OpKind.ABS: BITS, OpKind.FLOOR: BITS, OpKind.CEIL: BITS,
    OpKind.ROUND: BITS, OpKind.SIGN: BITS, OpKind.RELU: BITS,
    OpKind.MAXIMUM: VALUES, OpKind.MINIMUM: VALUES, OpKind.MAX: VALUES, OpKind.MIN: VALUES,
    OpKind.MAX_POOL: VALUES,
}


def exactness(op: OpKind, params=None, backend_id: BackendId | None = None,
              dtype=None) -> str | None:
    """How ``op``'s float output of ``dtype`` on ``backend_id`` must match (PAYLOAD, BITS,
    VALUES), None: within the tolerance. A scatter that adds or multiplies rounds; one
    keeping the max or min is VALUES. WGSL leaves the NaN a float16 conversion gives
    indeterminate (wgpu moves float16 through them): its float16 payloads are not defined."""
    found = _EXACT_OPS.get(op)
    if found is None:
        if OPS[op].family not in _MOVING_FAMILIES:
            return None
        reduction = getattr(params, "reduction", "none")
        if reduction in ("add", "mul"):
            return None
        found = VALUES if reduction in ("max", "min") else PAYLOAD
    if found == PAYLOAD and dtype is dt.float16 and backend_id is not None:
        backend = find_backend(backend_id)
        if backend is not None and backend.kernel_source == "wgsl":
            return BITS
    return found


def _bits(array: np.ndarray) -> np.ndarray:
    return array.view(np.dtype(f"u{array.itemsize}"))


def assert_exact(actual: np.ndarray, expected: np.ndarray, mode: str, message: str) -> None:
    """Float outputs compared as ``mode`` says (PAYLOAD, BITS or VALUES)."""
    expected = expected.astype(actual.dtype)  # exact ops: the reference's values fit
    wide_actual, wide_expected = actual.astype(np.float64), expected.astype(np.float64)
    if mode == VALUES:
        np.testing.assert_array_equal(wide_actual, wide_expected, err_msg=message)
        return
    nan = np.isnan(wide_actual)
    if mode == BITS:
        same = np.where(nan | np.isnan(wide_expected), nan == np.isnan(wide_expected),
                        _bits(actual) == _bits(expected))
    else:
        same = _bits(actual) == _bits(expected)
    if not same.all():
        where = tuple(int(i) for i in np.argwhere(~same)[0])
        raise AssertionError(
            f"{message}: {int((~same).sum())} of {same.size} elements differ in their bits "
            f"({mode}); first at {where}: {actual[where]!r} (0x{int(_bits(actual)[where]):x}) "
            f"!= {expected[where]!r} (0x{int(_bits(expected)[where]):x})")


def assert_matches(actual, expected, dtype, case: Case, what: str, exact: str | None = None
                   ) -> None:
    """Exact for integers and bools; for floats as ``exact`` says (see ``exactness``), else
    within the case's (or the dtype's) tolerance."""
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    message = f"{what}: {case.description}"
    assert actual.shape == expected.shape, f"{message}: shape {actual.shape} != {expected.shape}"
    if dtype.is_floating and exact is not None and actual.dtype != object:
        assert_exact(actual, expected, exact, message)
    elif dtype.is_floating:
        rtol, atol = tolerance(dtype)
        rtol = case.rtol if case.rtol is not None else rtol
        atol = case.atol if case.atol is not None else atol
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True, err_msg=message)
    else:
        np.testing.assert_array_equal(actual, expected.astype(actual.dtype), err_msg=message)
