"""The kernel suite's harness: runs one case through one registered kernel, the way the
executor would."""

from __future__ import annotations

import numpy as np

from fuel.backends import BUILTIN_BACKENDS, find_backend, load_builtin_backends
from fuel.backends.base import Backend
from fuel.dispatch.kernel import BindingEntry, global_table
from fuel.ir.device import CPU, BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import CopyParams, OpKind, infer
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


def assert_matches(actual, expected, dtype, case: Case, what: str) -> None:
    """Exact for integers and bools; within the case's (or the dtype's) tolerance for floats."""
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    message = f"{what}: {case.description}"
    assert actual.shape == expected.shape, f"{message}: shape {actual.shape} != {expected.shape}"
    if dtype.is_floating:
        rtol, atol = tolerance(dtype)
        rtol = case.rtol if case.rtol is not None else rtol
        atol = case.atol if case.atol is not None else atol
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True, err_msg=message)
    else:
        np.testing.assert_array_equal(actual, expected.astype(actual.dtype), err_msg=message)
