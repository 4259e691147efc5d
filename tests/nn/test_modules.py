"""fuel.nn's Modules and losses against torch's: same weights (loaded through state_dict),
same inputs; outputs and every parameter's gradient compared."""

import numpy as np
import pytest

import fuel
import fuel.nn as nn
import fuel.nn.functional as F

torch = pytest.importorskip("torch")
TNN = torch.nn
TF = torch.nn.functional
RTOL = dict(rtol=1e-4, atol=1e-5)


def _load_from_torch(module: nn.Module, reference) -> None:
    module.load_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()
                            if not k.endswith("num_batches_tracked")})


def _compare(module, reference, *arrays, output=lambda out: out):
    _load_from_torch(module, reference)
    f_out = output(module(*[fuel.tensor(a) for a in arrays]))
    t_out = output(reference(*[torch.tensor(a) for a in arrays]))
    np.testing.assert_allclose(f_out.numpy(), t_out.detach().numpy(), **RTOL)
    cotangent = np.random.default_rng(3).standard_normal(tuple(t_out.shape)).astype(np.float32)
    (f_out * fuel.tensor(cotangent)).sum().backward()
    (t_out * torch.tensor(cotangent)).sum().backward()
    t_params = dict(reference.named_parameters())
    names = [name for name, _ in module.named_parameters()]
    assert names == list(t_params), (names, list(t_params))
    for name, param in module.named_parameters():
        np.testing.assert_allclose(param.grad.numpy(), t_params[name].grad.numpy(), **RTOL,
                                   err_msg=name)


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_linear_mlp_sequential():
    torch.manual_seed(0)
    f = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 8), nn.SiLU(), nn.Linear(8, 3),
                      nn.Tanh())
    t = TNN.Sequential(TNN.Linear(6, 8), TNN.GELU(), TNN.Linear(8, 8), TNN.SiLU(),
                       TNN.Linear(8, 3), TNN.Tanh())
    _compare(f, t, _x(4, 6))


def test_conv_layers_and_batch_norm():
    torch.manual_seed(1)
    f = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                      nn.Conv2d(4, 3, 2, stride=2), nn.Flatten())
    t = TNN.Sequential(TNN.Conv2d(2, 4, 3, padding=1), TNN.BatchNorm2d(4), TNN.ReLU(),
                       TNN.Conv2d(4, 3, 2, stride=2), TNN.Flatten())
    _compare(f, t, _x(2, 2, 6, 6))
    np.testing.assert_allclose(f[1].running_var.numpy(), t[1].running_var.numpy(), **RTOL)
    f.eval()
    t.eval()
    x = _x(2, 2, 6, 6, seed=4)
    np.testing.assert_allclose(f(fuel.tensor(x)).numpy(), t(torch.tensor(x)).detach().numpy(),
                               **RTOL)
    torch.manual_seed(2)
    _compare(nn.Conv1d(3, 5, 3, dilation=2, groups=1), TNN.Conv1d(3, 5, 3, dilation=2),
             _x(2, 3, 10))


def test_embedding_norms():
    def net(lib):
        return lib.Sequential(lib.Embedding(10, 8), lib.LayerNorm(8), lib.RMSNorm(8, eps=1e-6))

    torch.manual_seed(3)
    f, t = net(nn), net(TNN)
    _load_from_torch(f, t)
    ids = np.array([[1, 4, 4], [9, 0, 1]])
    f_out, t_out = f(fuel.tensor(ids)), t(torch.tensor(ids))
    np.testing.assert_allclose(f_out.numpy(), t_out.detach().numpy(), **RTOL)
    f_out.sum().backward()
    t_out.sum().backward()
    for name, param in f.named_parameters():
        np.testing.assert_allclose(param.grad.numpy(),
                                   dict(t.named_parameters())[name].grad.numpy(), **RTOL)


@pytest.mark.parametrize("padding_idx", [0, -1])
def test_embedding_padding_idx_gets_no_gradient(padding_idx):
    torch.manual_seed(5)
    f, t = nn.Embedding(6, 4, padding_idx=padding_idx), TNN.Embedding(6, 4,
                                                                       padding_idx=padding_idx)
    with torch.no_grad():
        t.weight[padding_idx] = 0.5  # a padding row with a value: still read, never updated
    _compare(f, t, np.array([[0, 2, 5, 5], [1, 0, 0, 3]]))
    assert not np.any(f.weight.grad.numpy()[padding_idx])
    with pytest.raises(fuel.FuelError, match="padding_idx 6"):
        F.embedding(fuel.tensor(np.array([1])), f.weight, padding_idx=6)


def test_embedding_read_twice_accumulates_in_one_scatter():
    """Two lookups of one table (MiniLM's anchors and positives): the same gradient as torch,
    built as one scatter-add of both (one table-sized buffer, not two plus their sum)."""
    torch.manual_seed(6)
    f, t = nn.Embedding(9, 3), TNN.Embedding(9, 3)
    _load_from_torch(f, t)
    first, second = np.array([[1, 4, 4]]), np.array([[4, 0, 8, 1]])
    f_loss = (f(fuel.tensor(first)) * 2.0).sum() + f(fuel.tensor(second)).sum()
    t_loss = (t(torch.tensor(first)) * 2.0).sum() + t(torch.tensor(second)).sum()
    grads = fuel.autograd.grad(f_loss, [f.weight])
    assert grads[0]._node.op is fuel.OpKind.SCATTER_ELEMENTS
    t_loss.backward()
    np.testing.assert_allclose(grads[0].numpy(), t.weight.grad.numpy(), **RTOL)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention(batch_first):
    torch.manual_seed(4)
    f = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    t = TNN.MultiheadAttention(8, 2, batch_first=batch_first)
    shape = (2, 5, 8) if batch_first else (5, 2, 8)
    q, kv = _x(*shape, seed=1), _x(*shape, seed=2)
    _compare(f, t, q, kv, kv, output=lambda out: out[0])
    mask = np.triu(np.ones((5, 5), bool), 1)
    f_out, f_w = f(fuel.tensor(q), fuel.tensor(kv), fuel.tensor(kv),
                   attn_mask=fuel.tensor(mask))
    t_out, t_w = t(torch.tensor(q), torch.tensor(kv), torch.tensor(kv),
                   attn_mask=torch.tensor(mask))
    np.testing.assert_allclose(f_out.numpy(), t_out.detach().numpy(), **RTOL)
    np.testing.assert_allclose(f_w.numpy(), t_w.detach().numpy(), **RTOL)


def _loss_case(f_fn, t_fn, arrays, ints=()):
    f_in = [fuel.tensor(a, requires_grad=i not in ints) for i, a in enumerate(arrays)]
    t_in = [torch.tensor(a, requires_grad=i not in ints) for i, a in enumerate(arrays)]
    f_loss, t_loss = f_fn(*f_in), t_fn(*t_in)
    np.testing.assert_allclose(f_loss.numpy(), t_loss.detach().numpy(), **RTOL)
    f_loss.sum().backward()
    t_loss.sum().backward()
    for i in range(len(arrays)):
        if i not in ints:
            np.testing.assert_allclose(f_in[i].grad.numpy(), t_in[i].grad.numpy(), **RTOL)


@pytest.mark.parametrize("kwargs", [{}, {"label_smoothing": 0.1}, {"ignore_index": 2},
                                    {"reduction": "sum", "label_smoothing": 0.2},
                                    {"reduction": "none"}, {"weight": "w"},
                                    {"weight": "w", "label_smoothing": 0.3}])
def test_cross_entropy(kwargs):
    logits, target = _x(6, 4), np.array([0, 2, 3, 2, 1, 0])
    extra = {}
    if kwargs.get("weight"):
        weight = np.array([0.5, 1.0, 2.0, 1.5], np.float32)
        kwargs = dict(kwargs)
        del kwargs["weight"]
        extra = {"weight": weight}
    _loss_case(lambda x, y: F.cross_entropy(x, y, **kwargs, **{
        k: fuel.tensor(v) for k, v in extra.items()}),
        lambda x, y: TF.cross_entropy(x, y, **kwargs, **{
            k: torch.tensor(v) for k, v in extra.items()}), [logits, target], ints=(1,))


def test_other_losses():
    a, b = _x(5, 3), _x(5, 3, seed=1)
    _loss_case(F.mse_loss, TF.mse_loss, [a, b])
    _loss_case(F.l1_loss, TF.l1_loss, [a, b])
    probabilities = np.random.default_rng(2).random((5, 3)).astype(np.float32)
    _loss_case(F.binary_cross_entropy_with_logits, TF.binary_cross_entropy_with_logits,
               [a * 4, probabilities])
    pos = np.array([1.0, 2.0, 0.5], np.float32)
    _loss_case(lambda x, y: F.binary_cross_entropy_with_logits(x, y,
                                                                pos_weight=fuel.tensor(pos)),
               lambda x, y: TF.binary_cross_entropy_with_logits(x, y,
                                                                pos_weight=torch.tensor(pos)),
               [a, probabilities])
    logp = np.log(np.random.default_rng(5).dirichlet(np.ones(3), 5)).astype(np.float32)
    _loss_case(lambda x, y: F.nll_loss(x, y, ignore_index=1),
               lambda x, y: TF.nll_loss(x, y, ignore_index=1),
               [logp, np.array([0, 1, 2, 2, 1])], ints=(1,))
    labels = np.array([1, -1, 1, -1, -1])
    _loss_case(lambda x, y, z: F.cosine_embedding_loss(x, y, z, margin=0.1),
               lambda x, y, z: TF.cosine_embedding_loss(x, y, z, margin=0.1),
               [a, b, labels], ints=(2,))
    _loss_case(lambda x, y: F.cosine_similarity(x, y), lambda x, y: TF.cosine_similarity(x, y),
               [a, b])
    scores = lambda x, y: TF.cross_entropy(  # noqa: E731 - InfoNCE written out in torch
        20.0 * TF.normalize(x, dim=1) @ TF.normalize(y, dim=1).T, torch.arange(5))
    _loss_case(F.contrastive_loss, scores, [a, b])


def test_state_dict_safetensors_round_trip_and_modes(tmp_path):
    pytest.importorskip("safetensors")
    fuel.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.LayerNorm(4))
    path = tmp_path / "model.safetensors"
    model.save_safetensors(path)
    fuel.manual_seed(1)
    other = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.LayerNorm(4))
    assert not np.allclose(other[0].weight.numpy(), model[0].weight.numpy())
    other.load_safetensors(path)
    for (name, p), (_, q) in zip(model.state_dict().items(), other.state_dict().items()):
        np.testing.assert_array_equal(p.numpy(), q.numpy(), err_msg=name)
    assert other[0].weight.requires_grad and other[0].weight.is_leaf
    x = fuel.randn(8, 3)
    other.eval()
    assert not other[1].training
    np.testing.assert_array_equal(other(x).numpy(), model.eval()(x).numpy())
    with pytest.raises(fuel.InvalidArgument, match="missing keys"):
        other.load_state_dict({})
    with pytest.raises(fuel.ShapeError, match="0.weight"):
        other.load_state_dict({**other.state_dict(), "0.weight": np.zeros((2, 2))})


def test_nodes_carry_the_user_line_through_modules():
    """A layer of fuel's own builds its nodes with its caller's line; a user's module inside
    one of fuel's containers builds them with the lines of its own forward."""
    import sys

    class Scale(nn.Module):
        def forward(self, x):
            self.line = sys._getframe().f_lineno + 1
            return x * 2.0

    scale = Scale()
    stack = nn.Sequential(nn.Linear(3, 3), scale)
    x = fuel.tensor(np.ones((2, 3), np.float32))
    line = sys._getframe().f_lineno + 1
    y = nn.Linear(3, 2)(x)
    assert y._node.site == (__file__, line)
    z = stack(x)
    assert z._node.site == (__file__, scale.line)
    line = sys._getframe().f_lineno + 1
    w = stack[0](x)
    assert w._node.site == (__file__, line)
