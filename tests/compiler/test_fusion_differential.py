"""Fused against unfused: random elementwise DAGs (random ops, casts, where, scalars,
broadcast, permuted and sliced inputs, every dtype the ops take) give the same values with
fusion on as with fusion off. Exact ops must agree exactly; ops that round differently between
libm and NumPy (exp, tanh, ...) agree to a tolerance and never feed a discontinuous op."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuel
import fuel.nn.functional as F
from fuel.compiler import toolchain
from tests.backends.opencl.support import opencl_backend

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason=str(toolchain.unavailable_reason()))

DTYPES = (fuel.float32, fuel.float64, fuel.int64, fuel.int32, fuel.int16, fuel.int8, fuel.uint8,
          fuel.bool, fuel.float16, fuel.bfloat16)
# (name, arity, function, exact, float results only); exact: the same bits from libm and NumPy.
EXACT_UNARY = {
    "neg": fuel.neg, "abs": fuel.abs, "square": fuel.square, "relu": F.relu,
    "floor": fuel.floor, "ceil": fuel.ceil, "round": fuel.round, "sign": fuel.sign,
}
APPROXIMATE_UNARY = {
    "exp": fuel.exp, "tanh": fuel.tanh, "sigmoid": fuel.sigmoid, "silu": F.silu,
    "gelu": F.gelu, "sin": fuel.sin, "erf": fuel.erf, "softplus": F.softplus, "log1p": fuel.log1p,
}
EXACT_BINARY = {
    "add": fuel.add, "sub": fuel.sub, "mul": fuel.mul, "maximum": fuel.maximum,
    "minimum": fuel.minimum, "div": fuel.div,
}
INTEGER_BINARY = {"remainder": fuel.remainder, "fmod": fuel.fmod,
                  "bitwise_and": fuel.bitwise_and, "bitwise_xor": fuel.bitwise_xor,
                  "bitwise_left_shift": fuel.bitwise_left_shift}
# Over the last dim, keepdim: the reductions that fuse with their neighbours. Sums round
# differently from NumPy's pairwise sums, so only max and min are exact.
REDUCTIONS = {
    "sum": lambda x: x.sum(-1, keepdim=True), "mean": lambda x: x.mean(-1, keepdim=True),
    "amax": lambda x: x.amax(-1, keepdim=True), "amin": lambda x: x.amin(-1, keepdim=True),
}
PREDICATES = {"lt": fuel.lt, "ge": fuel.ge, "eq": fuel.eq, "logical_and": fuel.logical_and}


def _input(data, dtype, shape) -> tuple[np.ndarray, str]:
    """An array broadcastable to ``shape``, and how to view it: plain, permuted or sliced."""
    own = list(shape[data.draw(st.integers(0, len(shape))):])
    for d in range(len(own)):
        if data.draw(st.booleans()):
            own[d] = 1
    view = data.draw(st.sampled_from(["plain", "permuted", "sliced"]))
    stored = own[::-1] if view == "permuted" else [2 * s + 1 for s in own] if view == "sliced" \
        else own
    random = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
    if dtype is fuel.bool:
        values = random.random(stored) < 0.5
    elif dtype.is_floating:
        values = random.uniform(-4, 4, stored)
    elif dtype.kind == "u":
        values = random.integers(0, 30, stored)
    else:
        values = random.integers(-30, 30, stored)
    return np.asarray(values).astype(dtype.numpy), view


def _view(tensor, view):
    if view == "permuted" and tensor.ndim > 1:
        return tensor.permute(*reversed(range(tensor.ndim)))
    if view == "sliced" and tensor.ndim:
        return tensor[tuple(slice(1, None, 2) for _ in range(tensor.ndim))]
    return tensor


def _program(data):
    """A random DAG as a list of instructions (applied the same way in both runs)."""
    shape = tuple(data.draw(st.lists(st.integers(1, 5), min_size=0, max_size=3)))
    dtype = data.draw(st.sampled_from(DTYPES))
    inputs = [_input(data, dtype, shape) for _ in range(data.draw(st.integers(1, 3)))]
    steps = []
    kinds = [dtype] * len(inputs)  # each value's dtype
    exact = [True] * len(inputs)
    for _ in range(data.draw(st.integers(2, 8))):
        last = len(kinds) - 1  # mostly chains: the newest value, sometimes any
        pick = data.draw(st.sampled_from([last, last, data.draw(st.integers(0, last))]))
        other = data.draw(st.integers(0, last))
        kind, is_exact = kinds[pick], exact[pick]
        choice = data.draw(st.sampled_from(["unary", "binary", "predicate", "cast", "where",
                                            "scalar", "reduce"]))
        if choice == "unary" and kind is not fuel.bool:
            table = dict(EXACT_UNARY)
            if kind.is_floating:
                table.update(APPROXIMATE_UNARY)
            name = data.draw(st.sampled_from(sorted(table)))
            steps.append(("unary", name, pick))
            kinds.append(kind)
            exact.append(is_exact and name in EXACT_UNARY)
        elif choice == "binary" and kind is not fuel.bool and kinds[other] is not fuel.bool:
            result = fuel.promote_types(kind, kinds[other])
            table = dict(EXACT_BINARY)
            if result.is_integer:
                table.update(INTEGER_BINARY)
                table.pop("div")
            name = data.draw(st.sampled_from(sorted(table)))
            steps.append(("binary", name, pick, other))
            kinds.append(result)
            exact.append(is_exact and exact[other])
        elif choice == "predicate" and is_exact and exact[other] and kinds[other] is kind:
            steps.append(("predicate", data.draw(st.sampled_from(sorted(PREDICATES))), pick,
                          other))
            kinds.append(fuel.bool)
            exact.append(True)
        elif choice == "cast" and (is_exact or kind.is_floating):
            target = data.draw(st.sampled_from(DTYPES))
            if not is_exact and not target.is_floating:
                continue
            if kind.is_floating and target.kind == "u":
                continue  # negative floats to unsigned: platform-defined
            steps.append(("cast", target, pick))
            kinds.append(target)
            exact.append(is_exact)
        elif choice == "where" and kinds[other] is kind:
            conditions = [i for i, k in enumerate(kinds) if k is fuel.bool and exact[i]]
            if conditions:
                condition = data.draw(st.sampled_from(conditions))
                steps.append(("where", condition, pick, other))
                kinds.append(kind)
                exact.append(is_exact and exact[other])
        elif choice == "reduce" and kind in (fuel.float32, fuel.float64) and shape:
            name = data.draw(st.sampled_from(sorted(REDUCTIONS)))
            steps.append(("reduce", name, pick))
            kinds.append(kind)
            exact.append(is_exact and name in ("amax", "amin"))
        elif choice == "scalar" and kind.is_floating:
            number = data.draw(st.sampled_from([0.5, 2.0, -1.5, 3.0]))
            steps.append(("scalar", number, pick))
            kinds.append(kind)
            exact.append(is_exact)
    extra = data.draw(st.integers(len(inputs), max(len(inputs), len(kinds) - 1)))
    return inputs, steps, exact, extra


def _run(inputs, steps, extra, device="cpu"):
    values = [_view(fuel.tensor(array, device=device), view) for array, view in inputs]
    for step in steps:
        if step[0] == "unary":
            table = {**EXACT_UNARY, **APPROXIMATE_UNARY}
            values.append(table[step[1]](values[step[2]]))
        elif step[0] == "binary":
            table = {**EXACT_BINARY, **INTEGER_BINARY}
            values.append(table[step[1]](values[step[2]], values[step[3]]))
        elif step[0] == "predicate":
            values.append(PREDICATES[step[1]](values[step[2]], values[step[3]]))
        elif step[0] == "cast":
            values.append(values[step[2]].to(step[1]))
        elif step[0] == "reduce":
            values.append(REDUCTIONS[step[1]](values[step[2]]))
        elif step[0] == "where":
            values.append(fuel.where(values[step[1]], values[step[2]], values[step[3]]))
        else:
            values.append(values[step[2]] * step[1] + step[1])
    outputs = [values[-1]] if extra == len(values) - 1 else [values[-1], values[extra]]
    fuel.realize(*outputs)
    return [o.numpy() for o in outputs]


def _check(data, device="cpu"):
    """Fused on ``device`` against unfused on the CPU."""
    inputs, steps, exact, extra = _program(data)
    if not steps or extra >= len(inputs) + len(steps):
        return
    try:
        fuel.set_fusion(True)
        with np.errstate(all="ignore"):
            fused = _run(inputs, steps, extra, device)
        fuel.set_fusion(False)
        with np.errstate(all="ignore"):
            unfused = _run(inputs, steps, extra)
    finally:
        fuel.set_fusion(True)
    for index, a, b in zip((len(exact) - 1, extra), fused, unfused):
        message = f"value {index} of {steps}"
        assert a.dtype == b.dtype and a.shape == b.shape, message
        if exact[index] or not (a.dtype.kind == "f" or a.dtype == fuel.bfloat16.numpy):
            np.testing.assert_array_equal(a, b, err_msg=message)
        else:
            wide = b.astype(np.float64)
            scale = max(1.0, float(np.abs(wide[np.isfinite(wide)]).max(initial=0)))
            tolerance = {np.dtype(np.float16): 1e-3, np.dtype(fuel.bfloat16.numpy): 8e-3}.get(
                a.dtype, 1e-4)
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64),
                                       rtol=tolerance, atol=tolerance * scale, equal_nan=True,
                                       err_msg=message)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fused_dags_match_unfused(data):
    _check(data)


# Each OpenCL case builds a program (PoCL: about half a second), so the default run is short.
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fused_opencl_dags_match_unfused_cpu(opencl_device, data):
    _check(data, opencl_device)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fused_opencl_dags_match_unfused_cpu_hundreds(opencl_device, data):
    _check(data, opencl_device)


@pytest.fixture(scope="module")
def opencl_device():
    """The default OpenCL device (fusion there renders OpenCL C), or a skip naming why it is
    unavailable."""
    return str(opencl_backend().devices()[0])


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_fused_dags_match_unfused_thousands(data):
    _check(data)
