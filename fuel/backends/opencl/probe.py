"""Probing an OpenCL device: does it run fuel's real kernels, not just a trivial one?

Some ICDs list a device whose compiler builds a trivial kernel but fails real ones (the PoCL
bundled by ``pocl-binary-distribution``, LLVM 14, on AMD EPYC: a float64 matmul program builds
without its kernel, and a later ``finish`` may crash the process). So each device is probed in a
child process (a crash there only disqualifies the device) that runs a representative set of
fuel's kernels on it through fuel itself (elementwise and fused, reductions, a row kernel, a
convolution, matmuls, a quantized dot) and compares each with NumPy.

Results are cached in ``$FUEL_CACHE_DIR/opencl-probe.json`` (default ``~/.cache/fuel``) keyed by
the platforms listed, the device, its driver version and this probe's revision, so a later
process probes nothing. ``python -m fuel.backends.opencl.probe P D`` probes platform P's device
D and prints the verdict as JSON; ``--bundled`` lists the platforms that come from Python wheels
(found with the system's ICD folder hidden).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

TARGET_ENVIRONMENT = "FUEL_OPENCL_PROBE_TARGET"  # "P:D": the child sees that device only
PROBE_TIMEOUT_S = 180.0
_CACHE_NAME = "opencl-probe.json"


def cache_path() -> Path:
    """``$FUEL_CACHE_DIR/opencl-probe.json`` or ``~/.cache/fuel/opencl-probe.json``."""
    configured = os.environ.get("FUEL_CACHE_DIR")
    root = Path(configured).expanduser() if configured else Path.home() / ".cache" / "fuel"
    return root / _CACHE_NAME


@functools.cache
def revision() -> str:
    """This probe's revision: its own source and the fuel version that runs it."""
    from fuel.backends.opencl import codegen

    digest = hashlib.blake2b(digest_size=8)
    for module in (__file__, codegen.__file__):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()


# ------------------------------------------------------------------ the checks (child side)

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


# ------------------------------------------------------------------ the parent side

def device_key(platforms: list[str], label: str, driver: str) -> str:
    """The cache key of one device: every platform listed (ICDs loaded together can break
    each other), the device, its driver version and this probe's revision."""
    text = "\n".join([revision(), label, driver, *platforms])
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def _read_cache() -> dict:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):
        return {}


def _write_cache(entries: dict) -> None:
    current = revision()  # entries of an older probe are dropped
    entries = {key: entry for key, entry in entries.items()
               if not isinstance(entry, dict) or entry.get("revision") == current}
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False,
                                         suffix=".tmp") as handle:
            json.dump(entries, handle, indent=1, sort_keys=True)
        os.replace(handle.name, path)
    except OSError:  # a read-only cache only costs a probe next time
        pass


def _child_environment(extra: dict[str, str]) -> dict[str, str]:
    environment = dict(os.environ)
    environment.pop("FUEL_OPENCL_DEVICE", None)  # the child sees only its target
    environment.update(extra)
    root = str(Path(__file__).resolve().parents[3])  # fuel's own checkout or site-packages
    environment["PYTHONPATH"] = os.pathsep.join(
        [root] + [p for p in environment.get("PYTHONPATH", "").split(os.pathsep) if p])
    return environment


def _run_child(arguments: list[str], extra: dict[str, str]) -> tuple[str, dict | None]:
    """(error, parsed JSON verdict) of ``python -m fuel.backends.opencl.probe ARGUMENTS``."""
    try:
        done = subprocess.run([sys.executable, "-m", "fuel.backends.opencl.probe", *arguments],
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              env=_child_environment(extra), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"the probe did not finish within {PROBE_TIMEOUT_S:.0f} s", None
    except OSError as error:
        return f"the probe could not start ({error})", None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return "", json.loads(line)
            except ValueError:
                break
    if done.returncode < 0:
        return f"the probe crashed (signal {-done.returncode}) running fuel's kernels", None
    tail = [line for line in done.stderr.splitlines() if line.strip()][-1:] or ["no output"]
    return f"the probe exited with status {done.returncode}: {tail[0][:200]}", None


def probe_devices(candidates: list, platforms: list[str]) -> None:
    """Set ``candidate.error`` ('' when it works) and ``candidate.bundled`` for each, from the
    cache or by probing the uncached ones in child processes (in parallel)."""
    entries = _read_cache()
    keys = {}
    for candidate in candidates:
        keys[id(candidate)] = device_key(platforms, candidate.label, candidate.driver)
    bundled_key = "bundled:" + hashlib.blake2b("\n".join(platforms).encode(),
                                               digest_size=12).hexdigest()
    missing = [c for c in candidates if keys[id(c)] not in entries]
    changed = False

    def probe_one(candidate) -> dict:
        started = time.perf_counter()
        target = f"{candidate.platform_index}:{candidate.device_index}"
        error, verdict = _run_child([target], {TARGET_ENVIRONMENT: target})
        if verdict is not None:
            error = verdict.get("error", "")
        return {"label": candidate.label, "error": error, "revision": revision(),
                "seconds": round(time.perf_counter() - started, 2)}

    if missing:
        with ThreadPoolExecutor(max_workers=min(4, len(missing))) as pool:
            for candidate, entry in zip(missing, pool.map(probe_one, missing)):
                entries[keys[id(candidate)]] = entry
        changed = True
    if bundled_key not in entries:
        entries[bundled_key] = _bundled_platforms()
        changed = True
    if changed:
        _write_cache(entries)
    bundled = set(entries[bundled_key])
    for candidate in candidates:
        candidate.error = entries[keys[id(candidate)]]["error"]
        candidate.bundled = candidate.platform_label in bundled


def _bundled_platforms() -> list[str]:
    """Platforms still listed with the system's ICD folder hidden: the ones a Python wheel
    ships (pyopencl's bundled PoCL); [] when that cannot be told."""
    with tempfile.TemporaryDirectory() as empty:
        error, verdict = _run_child(["--bundled"], {"OCL_ICD_VENDORS": empty})
    return list(verdict.get("platforms", [])) if verdict else []


def platform_label(platform) -> str:
    return f"{platform.name.strip()} [{platform.version.strip()}]"


def _main(arguments: list[str]) -> int:
    if arguments == ["--bundled"]:
        try:
            import pyopencl as cl

            platforms = [platform_label(p) for p in cl.get_platforms()]
        except Exception:
            platforms = []
        print(json.dumps({"platforms": platforms}), flush=True)
        return 0
    if len(arguments) != 1 or arguments[0] != os.environ.get(TARGET_ENVIRONMENT):
        print(f"usage: {TARGET_ENVIRONMENT}=P:D python -m fuel.backends.opencl.probe P:D, or "
              "python -m fuel.backends.opencl.probe --bundled", file=sys.stderr)
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
