"""Models as users bring them: exported from torch (a dynamic batch dim, shape subgraphs,
masks), run by fuel and compared with torch itself."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import fuel.onnx

torch = pytest.importorskip("torch")


def _export(module, args, names, dynamic) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, args, buffer, dynamo=False, input_names=names,
                              output_names=["out"], dynamic_axes=dynamic, opset_version=17)
        except Exception as error:  # an exporter that is not installed or not supported
            pytest.skip(f"torch.onnx.export failed: {type(error).__name__}: {error}")
    return buffer.getvalue()


class SmallCnn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.norm = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, groups=2)
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.norm(self.conv1(x))), 2)
        y = torch.nn.functional.gelu(self.conv2(y))
        y = torch.nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return torch.softmax(self.head(y), -1)


def test_cnn_with_a_dynamic_batch():
    torch.manual_seed(0)
    net = SmallCnn().eval()
    with torch.no_grad():
        net.norm.running_mean.uniform_(-0.5, 0.5)
        net.norm.running_var.uniform_(0.5, 2.0)
    model = fuel.onnx.load(_export(net, (torch.randn(1, 3, 32, 32),), ["x"], {"x": {0: "n"}}))
    for batch in (1, 3):
        x = torch.randn(batch, 3, 32, 32)
        out = model.run({"x": x.numpy()})["out"]
        np.testing.assert_allclose(out, net(x).detach().numpy(), rtol=1e-4, atol=1e-6)


class TinyEncoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 32)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(32, 50)

    def forward(self, ids, mask):
        return self.head(self.encoder(self.embed(ids), src_key_padding_mask=mask))


def test_transformer_with_a_padding_mask():
    # The TorchScript exporter bakes the traced sequence length into the attention reshapes
    # (onnxruntime fails on other lengths too), so the model runs at the traced size.
    torch.manual_seed(1)
    net = TinyEncoder().eval()
    ids = torch.randint(0, 50, (2, 7))
    mask = torch.zeros(2, 7, dtype=torch.bool)
    model = fuel.onnx.load(_export(net, (ids, mask), ["ids", "mask"], None))
    for trial in range(2):
        ids = torch.randint(0, 50, (2, 7))
        mask = torch.zeros(2, 7, dtype=torch.bool)
        mask[1, 5 - trial:] = True
        out = model.run({"ids": ids.numpy(), "mask": mask.numpy()})["out"]
        np.testing.assert_allclose(out, net(ids, mask).detach().numpy(), rtol=1e-4, atol=1e-5)
