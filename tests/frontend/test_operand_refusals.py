"""torch's refusals: index operands are integers (int32/int64), masks and conditions are bool.

Each call runs on torch and on fuel with the operand in every dtype below; where torch refuses,
fuel refuses with a DTypeError naming the call and the user's line; where torch accepts, fuel
gives torch's values (but for the documented differences in ``FUEL_DIFFERS``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fuel
import fuel.nn.functional as F
from fuel.ir.ops import OPS, OpKind

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"]

X = np.arange(12, dtype=np.float32).reshape(3, 4)
INDEX_2D = np.array([[0, 1], [2, 1], [1, 0]])
INDEX_1D = np.array([2, 0])
MASK = np.array([[1, 0, 1, 0], [0, 1, 1, 0], [1, 1, 0, 0]])
SRC = np.full((3, 2), -1.0, np.float32)

# name -> (operand data, torch call, fuel call); ``t`` is torch or fuel's namespace adapter.
CALLS = {
    "gather": (INDEX_2D, lambda x, i: x.gather(1, i), lambda x, i: x.gather(1, i)),
    "index_select": (INDEX_1D, lambda x, i: x.index_select(1, i),
                     lambda x, i: x.index_select(1, i)),
    "scatter": (INDEX_2D, lambda x, i: x.scatter(1, i, torch.tensor(SRC)),
                lambda x, i: F.scatter(x, 1, i, fuel.tensor(SRC))),
    "scatter_reduce": (INDEX_2D, lambda x, i: x.scatter_reduce(1, i, torch.tensor(SRC), "sum"),
                       lambda x, i: F.scatter_reduce(x, 1, i, fuel.tensor(SRC), "sum")),
    "index_copy": (INDEX_1D, lambda x, i: x.index_copy(1, i, torch.tensor(SRC[:, :2])),
                   lambda x, i: x.index_copy(1, i, fuel.tensor(SRC[:, :2]))),
    "embedding": (INDEX_1D, lambda x, i: torch.nn.functional.embedding(i, x),
                  lambda x, i: F.embedding(i, x)),
    "getitem": (INDEX_1D, lambda x, i: x[i], lambda x, i: x[i]),
    "masked_fill": (MASK, lambda x, m: x.masked_fill(m, 0.5), lambda x, m: x.masked_fill(m, 0.5)),
    "where": (MASK, lambda x, m: torch.where(m, x, -x), lambda x, m: fuel.where(m, x, -x)),
    "Tensor.where": (MASK, lambda x, m: x.where(m, -x), lambda x, m: x.where(m, -x)),
}

# Deliberate differences from torch, each with its reason.
FUEL_DIFFERS = {
    # torch takes only int64 for index_copy; fuel's kernels take int32 too (a superset).
    ("index_copy", "int32"): "accepts",
    # torch accepts a uint8 condition with a deprecation warning ("will be removed"); fuel
    # already refuses it, as torch's masked_fill does.
    ("where", "uint8"): "refuses",
    ("Tensor.where", "uint8"): "refuses",
    # torch reads a bool (or uint8) index tensor as a mask; that result's shape depends on the
    # data, which a lazy graph cannot build: fuel refuses it (InvalidArgument / DTypeError).
    ("getitem", "bool"): "refuses",
    ("getitem", "uint8"): "refuses",
}


def _torch_outcome(call, data, dtype):
    operand = torch.tensor(data.astype(dtype))
    try:
        with warnings.catch_warnings():  # torch's deprecation warnings for uint8 masks
            warnings.simplefilter("ignore")
            return call(torch.tensor(X), operand).numpy()
    except (RuntimeError, IndexError, TypeError):
        return None


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_operand_dtype_refused_where_torch_refuses(name, dtype):
    data, torch_call, fuel_call = CALLS[name]
    expected = _torch_outcome(torch_call, data, dtype)
    differs = FUEL_DIFFERS.get((name, dtype))
    refuses = expected is None if differs is None else differs == "refuses"
    operand = fuel.tensor(data.astype(dtype))
    if refuses:
        with pytest.raises((fuel.DTypeError, fuel.InvalidArgument)) as info:
            fuel_call(fuel.tensor(X), operand)
        message = str(info.value)
        assert "test_operand_refusals.py" in message, message  # the user's line
        assert dtype in message or "mask" in message, message
        return
    got = fuel_call(fuel.tensor(X), operand).numpy()
    if expected is not None:
        np.testing.assert_array_equal(got, expected)


def test_refusal_names_the_call_and_the_operand():
    x = fuel.tensor(X)
    with pytest.raises(fuel.DTypeError, match=r"^gather: index must be int32 or int64, got "
                                              r"float32 \(at .*test_operand_refusals.py:\d+\)"):
        x.gather(1, fuel.tensor(INDEX_2D.astype(np.float32)))
    with pytest.raises(fuel.DTypeError, match=r"^masked_fill: the mask must be bool, got "
                                              r"float32 \(at .*test_operand_refusals.py:\d+\)"):
        x.masked_fill(fuel.tensor(MASK.astype(np.float32)), 0)
    with pytest.raises(fuel.DTypeError, match=r"scatter_nd: index must be int32 or int64"):
        F.scatter_nd(x, fuel.tensor(np.zeros((1, 2), np.float32)), fuel.tensor(np.zeros(1)))


def test_attention_mask_must_be_bool_or_float_as_torch():
    q = fuel.tensor(np.ones((1, 2, 4), np.float32))
    with pytest.raises(fuel.DTypeError, match="attn_mask must be bool or floating, got int64"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=fuel.tensor(np.ones((2, 2), np.int64)))
    with pytest.raises(RuntimeError):
        tq = torch.ones(1, 2, 4)
        torch.nn.functional.scaled_dot_product_attention(tq, tq, tq,
                                                         attn_mask=torch.ones(2, 2).long())


# Every op of the registry that reads positions or a selection from an operand declares it.
DECLARED = {
    OpKind.GATHER: ("any", "index"),
    OpKind.INDEX_SELECT: ("any", "index"),
    OpKind.INDEX_COPY: ("any", "index"),
    OpKind.SCATTER_ELEMENTS: ("any", "index"),
    OpKind.SCATTER_ND: ("any", "index"),
    OpKind.QUANTIZED_EMBEDDING: ("quantized", "index"),
    OpKind.WHERE: ("mask",),
}


@pytest.mark.parametrize("kind", sorted(DECLARED, key=lambda k: k.value))
def test_registry_declares_index_and_mask_operands(kind):
    assert OPS[kind].operands == DECLARED[kind]


def test_registry_refuses_a_float_index_when_an_op_is_built_directly():
    from fuel.frontend.build import make
    from fuel.ir.ops import AxisParams

    x, index = fuel.tensor(X), fuel.tensor(INDEX_2D.astype(np.float32))
    with pytest.raises(fuel.DTypeError, match=r"gather: operand 1 \(index\) must be int32 or "
                                              r"int64, got float32"):
        make(OpKind.GATHER, (x._node, index._node), AxisParams(1))
