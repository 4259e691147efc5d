"""The OpenCL probe's checks, run in a child process per device by
``fuel.backends.opencl.probe``: a representative set of fuel's kernels (elementwise and fused,
reductions, a row kernel, a convolution, matmuls, a quantized dot, float64 where the device has
it) run on the one device the child sees, each compared with NumPy. They build graphs through
the front end, hence this layer; ``python -m fuel.conformance.opencl_probe P:D`` (with
``FUEL_OPENCL_PROBE_TARGET=P:D``) prints the verdict as JSON.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

from fuel.backends.opencl.probe import TARGET_ENVIRONMENT


def _q8_0_blocks(rng: np.random.Generator, rows: int, columns: int) -> tuple[np.ndarray,
                                                                           np.ndarray]:
    """Random q8_0 bytes of a (rows, columns) weight and the float32 values they encode."""
    blocks = rows * columns // 32
    scales = (rng.random(blocks, np.float32) * 0.02 + 0.005).astype(np.float16)
    codes = rng.integers(-127, 128, (blocks, 32), dtype=np.int8)
    data = np.empty((blocks, 34), np.uint8)
    data[:, :2] = scales.view(np.uint8).reshape(blocks, 2)
    data[:, 2:] = codes.view(np.uint8)
    values = scales.astype(np.float32)[:, None] * codes.astype(np.float32)
    return data.reshape(-1), values.reshape(rows, columns)


def _checks(device: str, fp64: bool) -> list:
    """(name, run) pairs: ``run()`` returns (fuel's result, NumPy's, tolerance of the span)."""
    import fuel
    import fuel.nn.functional as F

    rng = np.random.default_rng(7)
    a = rng.standard_normal((33, 70), np.float32)
    b = rng.standard_normal((33, 70), np.float32)
    image = rng.standard_normal((1, 3, 9, 11), np.float32)
    kernel = rng.standard_normal((4, 3, 3, 3), np.float32)
    left = rng.standard_normal((2, 19, 37), np.float32)
    right = rng.standard_normal((37, 23), np.float32)

    def on(array):
        return fuel.tensor(array, device=device)

    def elementwise():
        x, y = on(a), on(b)
        return ((x * 2.0 + y).exp() - x.abs()).numpy(), np.exp(a * 2 + b) - np.abs(a), 1e-5

    def reductions():
        x = on(a)
        got = np.concatenate([x.sum(dim=0).numpy(), x.max(dim=1).values.numpy()])
        want = np.concatenate([a.sum(axis=0), a.max(axis=1)])
        return got, want, 1e-5

    def row():
        shifted = np.exp(a - a.max(axis=1, keepdims=True))
        return on(a).softmax(dim=-1).numpy(), shifted / shifted.sum(axis=1, keepdims=True), 1e-5

    def convolution():
        got = F.conv2d(on(image), on(kernel), stride=1, padding=1).numpy()
        padded = np.pad(image, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
        want = np.einsum("nchwij,ocij->nohw", windows, kernel)
        return got, want, 1e-5

    def matmul():
        return (on(left) @ on(right)).numpy(), left @ right, 1e-5

    def matmul_float64():
        l64, r64 = left.astype(np.float64), right.astype(np.float64)
        return (on(l64) @ on(r64)).numpy(), l64 @ r64, 1e-12

    def quantized_dot():
        data, values = _q8_0_blocks(rng, 24, 64)
        weight = fuel.from_quantized(data, "q8_0", (24, 64), device=device)
        x = rng.standard_normal((3, 64), np.float32)
        return fuel.quantized_matmul(on(x), weight).numpy(), x @ values.T, 1e-3

    checks = [("elementwise", elementwise), ("reduction", reductions), ("row kernel", row),
              ("convolution", convolution), ("matmul", matmul), ("quantized dot", quantized_dot)]
    if fp64:
        checks.append(("float64 matmul", matmul_float64))
    return checks


def run_checks(device: str = "opencl:0") -> str:
    """Run every check on ``device`` in this process: '' when all agree, else why not."""
    from fuel.backends import get_backend
    from fuel.ir.device import parse_device

    parsed = parse_device(device)
    fp64 = get_backend(parsed).context(parsed).fp64
    for name, check in _checks(device, fp64):
        try:
            got, want, tolerance = check()
        except Exception as error:
            return f"{name} kernel failed: {_first_line(error)}"
        got = np.asarray(got, np.float64)
        want = np.asarray(want, np.float64)
        span = float(np.max(np.abs(want))) or 1.0
        if got.shape != want.shape or not np.all(np.abs(got - want) <= tolerance * span):
            worst = float(np.max(np.abs(got - want))) if got.shape == want.shape else "shape"
            return f"{name} kernel gave wrong results (worst difference {worst})"
    return ""


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else type(error).__name__
    for line in lines:  # a build log's first error line says more than the wrapper's
        if "error" in line.lower() and line is not lines[0]:
            text = f"{text} ({line})"
            break
    return text[:300]


def _main(arguments: list[str]) -> int:
    if len(arguments) != 1 or arguments[0] != os.environ.get(TARGET_ENVIRONMENT):
        print(f"usage: {TARGET_ENVIRONMENT}=P:D python -m fuel.conformance.opencl_probe P:D",
              file=sys.stderr)
        return 2
    import warnings

    warnings.simplefilter("ignore")
    try:
        error = run_checks("opencl:0")
    except Exception as failure:  # the device could not even be set up
        error = f"setting up the device failed: {_first_line(failure)}"
    print(json.dumps({"error": error}), flush=True)
    # Leave without running the driver's teardown: some ICDs print or crash there, and the
    # verdict is already out.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
