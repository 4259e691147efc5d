"""A bound plan asks each backend for its batched launcher (``Backend.launch_batcher``): each
run of consecutive steps on one backend goes through that backend's batcher, the backends'
work is submitted at the boundaries as in the walk, results equal NumPy's, and a launch that
fails inside a batch raises the KernelError naming its node and the user's line, leaving the
plan usable."""

import inspect
import re

import numpy as np
import pytest

import fuel
from fuel.backends.base import LaunchBatcher
from fuel.backends.cpu.sequences import SequenceBatcher
from fuel.graph import Graph
from fuel.runtime.executor import PLAN_CACHE
from tests.runtime.threaded_backend import DEVICE, shared_backend


class FoldingBatcher(LaunchBatcher):
    """Folds a whole run of launchers into one launch, remembering which one is running."""

    def __init__(self) -> None:
        self.batches: list[list] = []
        self.running = -1

    def batch(self, launchers):
        launchers = list(launchers)
        self.batches.append(launchers)

        def run_all() -> None:
            for self.running, launcher in enumerate(launchers):
                launcher()

        return [run_all]

    def failed(self, error, launch, launchers):
        return self.running, error


def _pair(data: np.ndarray):
    """A CPU result and a device result realized in one walk (no copy in it); the key of
    their graph's plan."""
    device_input = fuel.from_numpy(data).to(DEVICE).realize()
    on_device = (device_input * device_input) + device_input
    on_cpu = fuel.from_numpy(data) * 3.0 + 1.0
    key = Graph.build([on_device._node, on_cpu._node]).structure_key()
    fuel.realize(on_device, on_cpu)
    return on_cpu, on_device, key


_ADD_LINE = inspect.getsourcelines(_pair)[1] + 4


@pytest.fixture
def backend(monkeypatch):
    registered = shared_backend("threaded")
    registered.fault = None
    registered.rejected = None
    batchers: list[FoldingBatcher] = []

    def launch_batcher() -> FoldingBatcher:
        batchers.append(FoldingBatcher())
        return batchers[-1]

    monkeypatch.setattr(registered, "launch_batcher", launch_batcher)
    submitted: list = []
    original_submit = registered.submit
    monkeypatch.setattr(registered, "submit",
                        lambda device: (submitted.append(device), original_submit(device)))
    yield registered, batchers, submitted
    registered.rejected = None


def test_each_backends_run_of_steps_goes_through_its_batcher(backend):
    registered, batchers, submitted = backend
    rng = np.random.default_rng(0)
    for _ in range(4):
        data = rng.standard_normal(7).astype(np.float32)
        on_cpu, on_device, key = _pair(data)
        np.testing.assert_allclose(on_cpu.numpy(), data * 3.0 + 1.0, rtol=1e-6)
        registered.synchronize(DEVICE)
        np.testing.assert_allclose(on_device.numpy(), data * data + data, rtol=1e-6)
    bound = PLAN_CACHE.plans[key].replay
    assert bound, "the plan replays bound"
    device_steps = [index for index, step in enumerate(bound.steps)
                    if step.backend is registered]
    cpu_steps = [index for index, step in enumerate(bound.steps)
                 if step.backend is not registered]
    assert device_steps and cpu_steps
    kinds = [type(batcher) for batcher in bound.launches.batchers]
    assert SequenceBatcher in kinds  # the CPU's runs: its C launch sequences
    mine = [batcher for batcher in bound.launches.batchers if batcher in batchers]
    assert mine and len(mine) == kinds.count(FoldingBatcher)
    # Every replay handed the device's launchers to its batcher, in launch order.
    batched = [launcher for batcher in mine for launcher in batcher.batches[-1]]
    assert len(batched) == len(device_steps)
    assert [len(batcher.batches) for batcher in mine] == [3] * len(mine)  # a walk, 3 replays
    assert len(bound.launches.segments) > 1
    assert submitted and set(submitted) == {DEVICE}  # the boundary submits the device's work


def test_a_failure_inside_a_batch_names_the_node_and_leaves_the_plan_usable(backend):
    registered, batchers, _ = backend
    data = np.arange(9, dtype=np.float32)  # a shape of its own: a plan bound here
    for _ in range(3):
        _pair(data)
    assert any(batcher.batches for batcher in batchers)
    registered.rejected = np.add
    with pytest.raises(fuel.KernelError) as caught:
        _pair(data)
    message = str(caught.value)
    assert "add launch rejected" in message
    assert re.match(r"node \d+ \(add float32,float32 -> float32 on threaded:0\)", message)
    assert f"test_launch_batcher.py:{_ADD_LINE}" in message
    registered.rejected = None
    on_cpu, on_device, _ = _pair(data + 1.0)
    registered.synchronize(DEVICE)
    np.testing.assert_allclose(on_device.numpy(), (data + 1.0) ** 2 + data + 1.0, rtol=1e-6)
    np.testing.assert_allclose(on_cpu.numpy(), (data + 1.0) * 3.0 + 1.0, rtol=1e-6)


class ListBatcher(LaunchBatcher):
    """Hands the launchers back as they are, ``native`` as told; counts its batch calls."""

    def __init__(self, native: bool) -> None:
        self.native = native
        self.calls = 0

    def batch(self, launchers):
        self.calls += 1
        return list(launchers)

    def failed(self, error, launch, launchers):
        return list(launchers).index(launch), error


@pytest.mark.parametrize("native", [False, True])
def test_numpy_launches_run_with_floating_point_warnings_silenced(native):
    """A batch that may run NumPy runs under ``np.errstate(all="ignore")`` (an overflow in a
    kernel is no warning); a native batch (C calls only) runs under the caller's state, its
    context spared. Run again with the same launchers, the batches are not built again."""
    from types import SimpleNamespace

    from fuel.runtime.replay import BatchedLaunches

    batcher = ListBatcher(native)
    backend = SimpleNamespace(launch_batcher=lambda: batcher)
    steps = [SimpleNamespace(backend=backend, device=None) for _ in range(1 if native else 2)]
    seen = []
    launchers = [lambda: seen.append(np.geterr()["over"]),
                 lambda: seen.append(float(np.float32(3e38) * np.float32(10.0)))]
    launches = BatchedLaunches(steps)
    with np.errstate(over="raise"):
        launches.run(launchers[:1] if native else launchers, graph=None)
        launches.run(launchers[:1] if native else launchers, graph=None, again=True)
    assert seen == (["raise"] * 2 if native else ["ignore", float("inf")] * 2)
    assert batcher.calls == 1
