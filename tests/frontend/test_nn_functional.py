"""fuel.nn.functional against torch (the oracle), skipped where torch is absent."""

import numpy as np
import pytest

import fuel
import fuel.nn.functional as F
from tests.frontend.helpers import check

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _pair(shape, seed=0, dtype=np.float32):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return fuel.from_numpy(a), torch.from_numpy(a.copy())


def test_softmax_log_softmax_every_dim():
    x, t = _pair((3, 4, 5))
    for dim in (0, 1, -1):
        check(F.softmax(x, dim), TF.softmax(t, dim).numpy())
        check(F.log_softmax(x, dim), TF.log_softmax(t, dim).numpy())
        check(x.softmax(dim), t.softmax(dim).numpy())


def test_softmax_half_is_computed_in_float32():
    x, t = _pair((4, 33), dtype=np.float16)
    check(F.softmax(x, -1), TF.softmax(t.float(), -1).half().numpy())


def test_layer_norm_and_rms_norm():
    x, t = _pair((2, 5, 8))
    w, tw = _pair((8,), 1)
    b, tb = _pair((8,), 2)
    check(F.layer_norm(x, (8,), w, b, 1e-5), TF.layer_norm(t, (8,), tw, tb, 1e-5).numpy())
    check(F.layer_norm(x, (5, 8)), TF.layer_norm(t, (5, 8)).numpy())
    check(F.rms_norm(x, (8,), w, 1e-6), TF.rms_norm(t, (8,), tw, 1e-6).numpy())
    check(F.rms_norm(x, (8,)), TF.rms_norm(t, (8,)).numpy())


def test_linear_embedding_activations():
    x, t = _pair((2, 3, 6))
    w, tw = _pair((4, 6), 1)
    b, tb = _pair((4,), 2)
    check(F.linear(x, w, b), TF.linear(t, tw, tb).numpy())
    check(F.linear(x, w), TF.linear(t, tw).numpy())
    ids = np.array([[0, 3, 1], [2, 2, 0]])
    check(F.embedding(fuel.from_numpy(ids), w), TF.embedding(torch.from_numpy(ids), tw).numpy())
    check(F.gelu(x), TF.gelu(t).numpy())
    check(F.gelu(x, approximate="tanh"), TF.gelu(t, approximate="tanh").numpy())
    check(F.silu(x), TF.silu(t).numpy())
    check(F.relu(x), TF.relu(t).numpy())
    check(F.sigmoid(x), torch.sigmoid(t).numpy())


@pytest.mark.parametrize("a_shape, b_shape", [
    ((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 4)), ((2, 3), (3, 4)), ((5, 2, 3), (3, 4)),
    ((1, 2, 3), (6, 3, 4)), ((2, 1, 2, 3), (3, 3, 2)), ((4,), (2, 4, 3)),
])
def test_matmul_batched_broadcasting_and_1d(a_shape, b_shape):
    a, ta = _pair(a_shape, 1)
    b, tb = _pair(b_shape, 2)
    check(a @ b, (ta @ tb).numpy())
    check(fuel.matmul(a, b), torch.matmul(ta, tb).numpy())


def test_integer_matmul():
    a = np.arange(6).reshape(2, 3)
    check(fuel.from_numpy(a) @ fuel.from_numpy(a.T), a @ a.T)


@pytest.mark.parametrize("is_causal", [False, True])
def test_scaled_dot_product_attention(is_causal):
    q, tq = _pair((2, 3, 5, 8), 1)
    k, tk = _pair((2, 3, 7 if not is_causal else 5, 8), 2)
    v, tv = _pair((2, 3, 7 if not is_causal else 5, 8), 3)
    check(F.scaled_dot_product_attention(q, k, v, is_causal=is_causal),
          TF.scaled_dot_product_attention(tq, tk, tv, is_causal=is_causal).numpy())
    mask = np.random.default_rng(4).random((5, k.shape[-2])) > 0.3
    mask[:, 0] = True
    check(F.scaled_dot_product_attention(q, k, v, attn_mask=fuel.from_numpy(mask), scale=0.5),
          TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.from_numpy(mask),
                                          scale=0.5).numpy())
    additive, tadditive = _pair((5, k.shape[-2]), 5)
    check(F.scaled_dot_product_attention(q, k, v, attn_mask=additive),
          TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=tadditive).numpy())


def test_grouped_query_attention():
    q, tq = _pair((1, 6, 4, 8), 1)
    k, tk = _pair((1, 2, 4, 8), 2)
    v, tv = _pair((1, 2, 4, 8), 3)
    check(F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
          TF.scaled_dot_product_attention(tq, tk, tv, is_causal=True, enable_gqa=True).numpy())


def test_dropout_identity_at_inference_and_seeded_in_training():
    x, _ = _pair((100,))
    assert F.dropout(x, 0.5) is x
    fuel.manual_seed(3)
    first = F.dropout(x, 0.5, training=True).numpy()
    fuel.manual_seed(3)
    second = F.dropout(x, 0.5, training=True).numpy()
    np.testing.assert_array_equal(first, second)
    kept = first != 0
    assert 20 < kept.sum() < 80
    np.testing.assert_allclose(first[kept], x.numpy()[kept] * 2, rtol=1e-6)


def test_factories_and_seeded_random():
    check(fuel.zeros(2, 3), np.zeros((2, 3), np.float32))
    check(fuel.ones((2,), dtype=fuel.int32), np.ones(2, np.int32))
    check(fuel.full((2, 2), 7), np.full((2, 2), 7))
    assert fuel.full((1,), 2.5).dtype is fuel.float32 and fuel.full((1,), True).dtype is fuel.bool
    check(fuel.arange(5), np.arange(5))
    check(fuel.arange(1, 2, 0.25), np.arange(1, 2, 0.25, dtype=np.float32))
    check(fuel.arange(10, 0, -3), np.arange(10, 0, -3))
    check(fuel.eye(3, 4), np.eye(3, 4, dtype=np.float32))
    base = fuel.tensor([[1, 2], [3, 4]], dtype=fuel.int16)
    check(fuel.zeros_like(base), np.zeros((2, 2), np.int16))
    check(fuel.ones_like(base), np.ones((2, 2), np.int16))
    check(fuel.full_like(base, 9), np.full((2, 2), 9, np.int16))
    assert fuel.empty(2, 3).shape == (2, 3)
    fuel.manual_seed(0)
    a = fuel.randn(4, 4).numpy()
    b = fuel.rand(3).numpy()
    fuel.manual_seed(0)
    np.testing.assert_array_equal(a, fuel.randn(4, 4).numpy())
    np.testing.assert_array_equal(b, fuel.rand(3).numpy())
    assert ((b >= 0) & (b < 1)).all()


def test_tensor_conversions(default_device):
    x = fuel.tensor([[1.5, 2.0], [3.0, 4.0]])
    assert x.shape == (2, 2) and x.ndim == 2 and x.device == default_device
    assert x.tolist() == [[1.5, 2.0], [3.0, 4.0]]
    assert x[1, 1].item() == 4.0 and float(x[0, 0]) == 1.5
    np.testing.assert_array_equal(np.asarray(x), x.numpy())
    assert x.half().dtype is fuel.float16 and x.half().float().dtype is fuel.float32
    assert fuel.tensor(3).shape == () and fuel.tensor(True).dtype is fuel.bool
    r = repr(x + 1)
    assert "lazy add" in r and (x + 1)._node.buffer is None
