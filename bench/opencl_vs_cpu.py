"""OpenCL vs the NumPy CPU backend, measured in the same run: matmul 1024, a 16M-element
elementwise chain and a softmax over 4096x4096.

Each workload is realized once to build its kernels and plan, then timed (best of ``--repeat``)
from lazy graph to finished result, inputs already resident on each device. Prints the ratio
OpenCL time / CPU time (below 1: OpenCL is faster).

    python bench/opencl_vs_cpu.py [--repeat 5] [--device opencl:0]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

import fuel
from fuel.backends import find_backend
from fuel.ir.device import BackendId


def _matmul(a, b, c):
    return a @ b


def _chain(a, b, c):
    return ((a * 1.5 + b).tanh() * c - a).abs().sqrt() + 0.25


def _softmax(a, b, c):
    return a.softmax(-1)


WORKLOADS = [
    ("matmul 1024x1024 @ 1024x1024", _matmul, (1024, 1024)),
    ("elementwise chain, 16M elements (8 ops)", _chain, (4096, 4096)),
    ("softmax over 4096x4096 (dim -1)", _softmax, (4096, 4096)),
]


def _inputs(shape, device):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape, dtype=np.float32) for _ in range(3)]
    return [fuel.from_numpy(a).to(device).realize() for a in arrays], arrays


def _time(function, inputs, repeat: int) -> tuple[float, np.ndarray]:
    result = function(*inputs).realize()  # builds kernels and the plan
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function(*inputs).realize()
        best = min(best, time.perf_counter() - start)
    return best, result.numpy()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", default="opencl:0")
    args = parser.parse_args()
    backend = find_backend(BackendId.OPENCL)
    if backend is None or not backend.is_available():
        reason = backend.unavailable_reason() if backend else "the backend failed to load"
        print(f"OpenCL unavailable: {reason}")
        return 1
    device = fuel.Device(BackendId.OPENCL, int(args.device.partition(":")[2] or 0))
    print(f"host: {platform.machine()}, {os.cpu_count()} cores, NumPy {np.__version__}")
    print(f"cpu backend: {find_backend(BackendId.CPU).describe_device(fuel.Device(BackendId.CPU))}")
    print(f"{device}: {backend.describe_device(device)}")
    print(f"{'workload':<42}{'cpu ms':>10}{'opencl ms':>11}{'opencl/cpu':>12}")
    for name, function, shape in WORKLOADS:
        cpu_inputs, _ = _inputs(shape, "cpu")
        device_inputs, _ = _inputs(shape, device)
        cpu_seconds, expected = _time(function, cpu_inputs, args.repeat)
        device_seconds, got = _time(function, device_inputs, args.repeat)
        np.testing.assert_allclose(got, expected, rtol=2e-3, atol=1e-4)
        print(f"{name:<42}{cpu_seconds * 1e3:>10.1f}{device_seconds * 1e3:>11.1f}"
              f"{device_seconds / cpu_seconds:>12.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
