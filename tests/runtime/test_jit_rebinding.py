"""fuel.jit replays with argument storages that come back: a caller that refills its argument
tensors in place gets results of the new contents, and the replay re-prepares only the steps
that write its (fresh) outputs; new argument storages are prepared again."""

import numpy as np

import fuel
from fuel.runtime.replay import BoundPlan


def _refill(tensor: fuel.Tensor, values: np.ndarray) -> None:
    storage = tensor._node.buffer
    storage.backend.write_from_host(storage, values)


def _function(x, y):
    product = x @ y.t()  # a step reading the arguments, then one writing the output
    return (product * 0.1).exp().sum(-1, keepdim=True) + 1.0


def _reference(x, y):
    return np.exp((x @ y.T) * 0.1).sum(-1, keepdims=True) + 1.0


def test_refilled_arguments_replay_without_preparing_their_steps(monkeypatch):
    prepared = []
    original = BoundPlan._prepare

    def counting(self, index, graph):
        prepared.append(index)
        return original(self, index, graph)

    monkeypatch.setattr(BoundPlan, "_prepare", counting)
    rng = np.random.default_rng(0)
    x_values, y_values = rng.standard_normal((2, 4, 8)).astype(np.float32)
    x, y = fuel.from_numpy(x_values.copy()), fuel.from_numpy(y_values.copy())
    replay = fuel.jit(_function)
    replay(x, y)  # capture
    counts = []
    for _ in range(4):
        x_values = rng.standard_normal((4, 8)).astype(np.float32)
        _refill(x, x_values)
        prepared.clear()
        out = replay(x, y).numpy()
        counts.append(sorted(prepared))
        np.testing.assert_allclose(out, _reference(x_values, y_values), rtol=1e-5)
    capture = next(iter(replay.captures.values()))[0]
    # The steps touching an output storage (fresh every run) and those reading an argument.
    writers = sorted({index for storage_id in range(capture.output_base, len(capture.current))
                      for index in capture.touching[storage_id]})
    readers = {index for slot in capture.argument_slots if slot >= 0
               for index in capture.touching[slot]}
    assert readers - set(writers)  # some steps read only the arguments
    assert counts[1:] == [writers] * 3  # after the first replay: only the output writers

    fresh = fuel.from_numpy(rng.standard_normal((4, 8)).astype(np.float32))
    prepared.clear()
    out = replay(fresh, y).numpy()
    assert set(prepared) == readers | set(writers)  # a new storage: its steps prepared again
    np.testing.assert_allclose(out, _reference(fresh.numpy(), y_values), rtol=1e-5)
