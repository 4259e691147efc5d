"""Plan cache, buffer pool and fuel.jit (issue: performance)."""

import numpy as np
import pytest

import fuel
from fuel.dispatch import op_profile, register_kernel
from fuel.graph import Graph
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.ops import OpKind
from fuel.memory.pool import reset_peak
from fuel.runtime.liveness import liveness_bound


def _model(x, w):
    return ((x @ w).relu() * 0.5 + x).softmax(-1).sum(0)


@pytest.fixture(autouse=True)
def fresh_cache():
    fuel.set_plan_cache_capacity(128)
    yield
    fuel.set_plan_cache_capacity(128)


def _stats_delta(function):
    before = fuel.plan_cache_stats()
    function()
    after = fuel.plan_cache_stats()
    return {k: after[k] - before[k] for k in ("hits", "misses", "invalidations")}


def test_identical_structure_hits_and_gives_identical_results():
    rng = np.random.default_rng(0)
    w = fuel.from_numpy(rng.standard_normal((8, 8)).astype(np.float32))
    first_data = rng.standard_normal((8, 8)).astype(np.float32)
    first = _model(fuel.from_numpy(first_data), w)
    assert _stats_delta(first.realize)["misses"] == 1
    results = []
    for _ in range(3):
        data = rng.standard_normal((8, 8)).astype(np.float32)
        again = _model(fuel.from_numpy(data), w)
        with fuel.profile() as prof:
            assert _stats_delta(again.realize) == {"hits": 1, "misses": 0, "invalidations": 0}
        assert "realize.plan_cache_hit" in prof.phases
        results.append((data, again.numpy()))
    fuel.set_plan_cache_capacity(0)
    for data, cached in results:
        uncached = _model(fuel.from_numpy(data), w)
        assert _stats_delta(uncached.realize)["hits"] == 0
        np.testing.assert_array_equal(cached, uncached.numpy())


@pytest.mark.parametrize("change", ["shape", "dtype", "op", "constant"])
def test_any_structural_change_misses(change):
    x = fuel.ones(4, 4)
    base = (x * 2.0).exp().sum()
    base.realize()
    variants = {
        "shape": (fuel.ones(4, 5) * 2.0).exp().sum(),
        "dtype": (fuel.ones(4, 4, dtype=fuel.float64) * 2.0).exp().sum(),
        "op": (fuel.ones(4, 4) * 2.0).log().sum(),
        "constant": (fuel.full((4, 4), 3.0) * 2.0).exp().sum(),
    }
    delta = _stats_delta(variants[change].realize)
    assert delta["misses"] == 1 and delta["hits"] == 0


def test_device_change_misses():
    from tests.runtime.threaded_backend import shared_backend

    shared_backend("threaded")
    a = np.arange(4, dtype=np.float32)
    on_cpu = fuel.from_numpy(a) + 1.0
    on_cpu.realize()
    on_device = fuel.from_numpy(a).to("threaded:0") + 1.0
    delta = _stats_delta(on_device.realize)
    assert delta["misses"] == 1 and delta["hits"] == 0
    np.testing.assert_array_equal(on_device.to("cpu").numpy(), a + 1)


def test_binding_table_extension_invalidates_cached_plans(restored_global_table):
    def graph():
        return (fuel.ones(3, dtype=fuel.int16) * 3).sum()

    graph().realize()
    assert _stats_delta(graph().realize)["hits"] == 1

    def noop(inputs, outputs, layouts, params):
        raise AssertionError("never selected: appended after numpy's kernel")

    register_kernel(OpKind.NEG, (dt.uint8, dt.uint8), BackendId.CPU, noop,
                    kernel_source="test-late")
    delta = _stats_delta(graph().realize)
    assert delta["invalidations"] == 1 and delta["misses"] == 1
    assert graph().item() == 9


def test_cache_is_bounded_lru():
    fuel.set_plan_cache_capacity(2)
    for n in range(2, 7):
        fuel.ones(n).exp().realize()
    assert fuel.plan_cache_stats()["size"] == 2
    assert _stats_delta(fuel.ones(6).exp().realize)["hits"] == 1
    assert _stats_delta(fuel.ones(2).exp().realize)["misses"] == 1


def test_stale_keys_after_realizing_an_intermediate_still_compute_correctly():
    a = fuel.from_numpy(np.arange(4, dtype=np.float32))
    b = a * 2.0
    c = b + 1.0           # built while b was lazy
    b.realize()            # b becomes a leaf: c's key still describes b's subgraph
    np.testing.assert_array_equal(c.numpy(), np.arange(4) * 2 + 1)
    d = (fuel.from_numpy(np.ones(4, np.float32)) * 2.0) + 1.0  # same key as c, b unrealized
    np.testing.assert_array_equal(d.numpy(), np.full(4, 3.0))


def test_a_hit_by_the_roots_keys_checks_the_wiring():
    """A shared subexpression and two equal ones give the same root key; the cached wiring
    tells them apart (a miss, then each shape hits its own plan)."""
    rng = np.random.default_rng(1)

    def shared(data):
        a = fuel.from_numpy(data) + 1.0
        return a * a

    def duplicated(data):
        x = fuel.from_numpy(data)
        return (x + 1.0) * (x + 1.0)

    fuel.empty_cache()
    for build, hit in ((shared, 0), (duplicated, 0), (shared, 1), (duplicated, 1),
                       (duplicated, 1)):
        data = rng.standard_normal(5).astype(np.float32)
        out = build(data)
        delta = _stats_delta(out.realize)
        assert (delta["hits"], delta["misses"]) == (hit, 1 - hit)
        np.testing.assert_allclose(out.numpy(), (data + 1) * (data + 1), rtol=1e-6)


def test_decode_like_loop_hits_every_step_after_the_first():
    cache = fuel.zeros(1, 8, 4).realize()
    w = fuel.randn(4, 4)
    weights = w.numpy()
    misses_before = fuel.plan_cache_stats()["misses"]
    hits_before = fuel.plan_cache_stats()["hits"]
    expected = np.zeros((1, 8, 4), np.float32)
    for position in range(8):
        token = fuel.randn(1, 1, 4)
        cache.index_copy_(1, fuel.tensor([position]), token @ w)  # the position is data
        logits = cache.sum(1).softmax(-1)
        fuel.realize(logits, cache)
        expected[:, position] = token.numpy()[:, 0] @ weights
    stats = fuel.plan_cache_stats()
    assert stats["hits"] - hits_before == 7 and stats["misses"] - misses_before == 1
    # four-term dots: OpenBLAS's gemm (fuel) and gemv (NumPy's vector product) round apart
    np.testing.assert_allclose(cache.numpy(), expected, rtol=1e-6, atol=2e-6)


def test_peak_memory_stays_within_ten_percent_of_the_liveness_bound():
    fuel.manual_seed(0)
    x = fuel.randn(256, 256)
    h = x
    outputs = []
    for _ in range(6):
        h = (h @ x).softmax(-1) * 2.0 + h.t()
        wide = fuel.cat([h, h], dim=1).relu()
        outputs.append(wide.sum(1))
        h = h + wide[:, :256]
    result = fuel.stack(outputs).sum(0)
    graph = Graph.build([result._node])
    bound = liveness_bound(graph)
    fuel.empty_cache()
    reset_peak("cpu")
    base = fuel.memory_stats("cpu")["allocated"] + fuel.memory_stats("cpu")["pooled"]
    result.realize()
    peak = fuel.memory_stats("cpu")["peak"] - base
    assert bound > 0 and peak <= 1.10 * bound, (peak, bound)
    print(f"peak {peak} bytes, liveness bound {bound} bytes")
    assert fuel.memory_stats("cpu")["reused"] > 0


def test_pool_never_hands_out_a_buffer_in_use():
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(4)]
    xs = [fuel.from_numpy(a) for a in arrays]
    # Many same-size intermediates alive at once, several of them roots and views of roots.
    parts = [(x * 2.0 + 1.0).exp() for x in xs]
    pairs = [parts[i] @ parts[(i + 1) % 4] for i in range(4)]
    roots = pairs + [pairs[0].t(), parts[2]]
    fuel.realize(*roots)
    expected_parts = [np.exp(a * 2 + 1) for a in arrays]
    expected_pairs = [expected_parts[i] @ expected_parts[(i + 1) % 4] for i in range(4)]
    for got, want in zip(roots, expected_pairs + [expected_pairs[0].T, expected_parts[2]]):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)
    storages = {id(r._node.buffer) for r in roots}
    assert len(storages) == 5  # the transpose shares pairs[0]'s buffer, nothing else shares
    pooled = [id(s) for bucket in fuel.memory.pool.pool_for(roots[0]._node.device).idle.values()
              for s in bucket]
    assert not storages & set(pooled)
    for _ in range(3):  # replays reuse the pooled intermediates: results stay right
        again = [(fuel.from_numpy(a) * 2.0 + 1.0).exp() for a in arrays]
        products = [again[i] @ again[(i + 1) % 4] for i in range(4)]
        fuel.realize(*products)
        for got, want in zip(products, expected_pairs):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)


def test_pool_reuse_is_safe_with_pending_device_work():
    from tests.runtime.threaded_backend import shared_backend

    shared_backend("threaded_two", delay=0.002)
    a = np.linspace(0, 1, 64, dtype=np.float32)
    x = fuel.from_numpy(a).to("threaded_two:0")
    chain = x
    for _ in range(12):  # every intermediate has the same size: the pool recycles them
        chain = (chain + x) * x
    expected = a.copy()
    for _ in range(12):
        expected = (expected + a) * a
    for _ in range(2):  # the second walk replays the plan on recycled buffers
        np.testing.assert_allclose(chain.to("cpu").numpy(), expected, rtol=1e-5)


def test_jit_replays_without_rebuilding_and_matches_eager():
    w = fuel.randn(8, 8)
    calls = []

    @fuel.jit
    def step(x, bias):
        calls.append(1)
        return (x @ w + bias).gelu().softmax(-1), (x * x).sum()

    rng = np.random.default_rng(3)
    for _ in range(4):
        a = rng.standard_normal((4, 8)).astype(np.float32)
        b = rng.standard_normal((8,)).astype(np.float32)
        out, total = step(fuel.from_numpy(a), fuel.from_numpy(b))
        eager = (fuel.from_numpy(a) @ w + fuel.from_numpy(b)).gelu().softmax(-1)
        np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=1e-6)
        np.testing.assert_allclose(total.item(), (a * a).sum(), rtol=1e-5)
    assert len(calls) == 1 and step.replays == 3
    first, _ = step(fuel.ones(4, 8), fuel.zeros(8))
    second, _ = step(fuel.zeros(4, 8), fuel.zeros(8))
    assert not np.array_equal(first.numpy(), second.numpy())  # outputs are not overwritten
    step(fuel.ones(2, 8), fuel.zeros(8))  # a new signature traces again
    assert len(calls) == 2


def test_jit_rejects_non_tensor_results():
    with pytest.raises(fuel.InvalidArgument, match="must return a Tensor"):
        fuel.jit(lambda x: 3)(fuel.ones(2))


def test_profile_phase_names_for_a_hit():
    op_profile.take_phases()
    graph = fuel.ones(7).exp
    graph().realize()
    with fuel.profile() as prof:
        graph().realize()
    assert "realize.plan_cache_hit" in prof.phases
