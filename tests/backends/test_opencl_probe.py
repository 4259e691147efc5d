"""The OpenCL probe: devices are judged by running fuel's real kernels in a child process,
verdicts are cached per device and driver under FUEL_CACHE_DIR, a system ICD is preferred to
a wheel's bundled one, and a device whose compiler fails is listed as unusable with why."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from fuel.backends.opencl import probe, runtime


def _stand_in(platform: str, bundled: bool, index: int) -> runtime.Candidate:
    def named(name: str):
        return SimpleNamespace(name=name, version="OpenCL 3.0", type=0, driver_version="1")

    candidate = runtime.Candidate(named(platform), named("cpu device"), index, 0)
    candidate.bundled = bundled
    return candidate


def test_a_system_icd_comes_before_a_bundled_one(monkeypatch):
    monkeypatch.setattr(runtime, "_kind", lambda device: "CPU")
    bundled = _stand_in("Portable Computing Language", True, 0)
    system = _stand_in("Portable Computing Language", False, 1)
    ordered = sorted([bundled, system], key=lambda c: c.sort_key)
    assert ordered == [system, bundled]


def test_verdicts_are_cached_under_fuel_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path))
    calls = []

    def child(arguments, extra, module="fuel.backends.opencl.probe"):
        calls.append(arguments)
        if arguments == ["--bundled"]:
            return "", {"platforms": ["B [OpenCL 3.0]"]}
        return "", {"error": "" if arguments == ["0:0"] else "convolution kernel failed: x"}

    monkeypatch.setattr(probe, "_run_child", child)
    first = [_stand_in("A", False, 0), _stand_in("B", False, 1)]
    probe.probe_devices(first, ["A [OpenCL 3.0]", "B [OpenCL 3.0]"])
    assert [c.error for c in first] == ["", "convolution kernel failed: x"]
    assert [c.bundled for c in first] == [False, True]
    assert sorted(calls) == [["--bundled"], ["0:0"], ["1:0"]]
    assert (tmp_path / "opencl-probe.json").exists()

    calls.clear()
    again = [_stand_in("A", False, 0), _stand_in("B", False, 1)]
    probe.probe_devices(again, ["A [OpenCL 3.0]", "B [OpenCL 3.0]"])
    assert calls == [] and [c.error for c in again] == [c.error for c in first]

    newer = [_stand_in("A", False, 0)]
    newer[0].device.driver_version = "2"  # a new driver is probed again
    probe.probe_devices(newer, ["A [OpenCL 3.0]", "B [OpenCL 3.0]"])
    assert calls == [["0:0"]]


def test_a_child_without_a_verdict_is_a_reason_not_a_crash():
    error, verdict = probe._run_child(["not-a-device"], {}, probe.CHECKS_MODULE)
    assert verdict is None and "exited with status 2" in error and "usage" in error


def _opencl_devices():
    if runtime.cl is None:
        pytest.skip("pyopencl is not installed")
    try:
        platforms = runtime.cl.get_platforms()
    except Exception as error:
        pytest.skip(f"no OpenCL platform: {error}")
    return [(p, d) for p in platforms for d in p.get_devices()]


def test_a_device_whose_compiler_refuses_an_option_is_listed_unusable(tmp_path):
    """A real device made to fail: in the child, every program build is given an option the
    compiler refuses. Detection must list no working device and say why, per device."""
    if not _opencl_devices():
        pytest.skip("no OpenCL device")
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(textwrap.dedent('''
        import os
        if os.environ.get("FUEL_OPENCL_PROBE_TARGET"):
            import pyopencl

            _build = pyopencl.Program.build

            def build(self, options=None, devices=None, cache_dir=None):
                return _build(self, options=["-fuel-option-no-compiler-knows"],
                              devices=devices, cache_dir=cache_dir)

            pyopencl.Program.build = build
    '''))
    code = ("import fuel.backends.opencl.runtime as r, json; found = r.detect_devices(); "
            "print(json.dumps([len(found.working), [c.error for c in found.rejected]]))")
    env = {**__import__("os").environ, "PYTHONPATH": str(hooks), "FUEL_CACHE_DIR": str(tmp_path)}
    env.pop("FUEL_OPENCL_DEVICE", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=600, cwd=str(probe.Path(probe.__file__).parents[3]))
    assert done.returncode == 0, done.stderr[-2000:]
    working, errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert working == 0 and errors and all("kernel failed" in e for e in errors), errors
    assert all("BUILD" in e.upper() or "OPTION" in e.upper() for e in errors), errors


def test_accepted_devices_run_the_checks_in_this_process():
    """Whatever detection accepted passes the probe's checks here too."""
    from fuel.backends.opencl import BACKEND

    if not BACKEND.is_available():
        pytest.skip(BACKEND.unavailable_reason())
    from fuel.conformance.opencl_probe import run_checks

    for device in BACKEND.devices():
        assert run_checks(str(device)) == ""
