"""Probing an OpenCL device: does it run fuel's real kernels, not just a trivial one?

Some ICDs list a device whose compiler builds a trivial kernel but fails real ones (the PoCL
bundled by ``pocl-binary-distribution``, LLVM 14, on AMD EPYC: a float64 matmul program builds
without its kernel, and a later ``finish`` may crash the process). So each device is probed in a
child process (a crash there only disqualifies the device) that runs a representative set of
fuel's kernels on it through fuel itself and compares each with NumPy: the checks are
``fuel.conformance.opencl_probe`` (they build graphs, so they live above the front end; this
module starts them by name and imports nothing of theirs).

Results are cached in ``$FUEL_CACHE_DIR/opencl-probe.json`` (default ``~/.cache/fuel``) keyed by
the platforms listed, the device, its driver version and the probe's revision, so a later
process probes nothing. ``python -m fuel.backends.opencl.probe --bundled`` lists the platforms
that come from Python wheels (run with the system's ICD folder hidden).
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

from fuel.extras import cache_root

TARGET_ENVIRONMENT = "FUEL_OPENCL_PROBE_TARGET"  # "P:D": the child sees that device only
# The child's checks run fuel's kernels through the front end, so they live in the layer
# above it (applications); this layer only starts them, by module name.
CHECKS_MODULE = "fuel.conformance.opencl_probe"
PROBE_TIMEOUT_S = 180.0
_CACHE_NAME = "opencl-probe.json"


def cache_path() -> Path:
    """``$FUEL_CACHE_DIR/opencl-probe.json`` or ``~/.cache/fuel/opencl-probe.json``."""
    return cache_root() / _CACHE_NAME


@functools.cache
def revision() -> str:
    """This probe's revision: its own source and the fuel version that runs it."""
    from fuel.backends.opencl import codegen

    checks = Path(__file__).parents[2] / "conformance" / "opencl_probe.py"
    digest = hashlib.blake2b(digest_size=8)
    for module in (Path(__file__), Path(codegen.__file__), checks):
        digest.update(module.read_bytes() if module.exists() else b"")
    return digest.hexdigest()


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


def _run_child(arguments: list[str], extra: dict[str, str],
               module: str = "fuel.backends.opencl.probe") -> tuple[str, dict | None]:
    """(error, parsed JSON verdict) of ``python -m MODULE ARGUMENTS``."""
    try:
        done = subprocess.run([sys.executable, "-m", module, *arguments],
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
        error, verdict = _run_child([target], {TARGET_ENVIRONMENT: target}, CHECKS_MODULE)
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
    """``--bundled``: print the platforms listed (the parent hides the system's ICD folder)."""
    if arguments != ["--bundled"]:
        print("usage: python -m fuel.backends.opencl.probe --bundled (devices are probed by "
              f"python -m {CHECKS_MODULE} P:D)", file=sys.stderr)
        return 2
    try:
        import pyopencl as cl

        platforms = [platform_label(p) for p in cl.get_platforms()]
    except Exception:
        platforms = []
    print(json.dumps({"platforms": platforms}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
