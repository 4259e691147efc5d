"""The kernel suite, generated from the binding table.

(a) every CPU kernel against the NumPy references of ``kernel_cases``;
(b) every kernel of every other available backend against the CPU kernel of the same key;
(c) coverage: every key a built-in backend registered has cases (fails otherwise);
(d) the exact kernels (``kernel_harness.exactness``) again, their float inputs salted with
    signed zeros and NaNs with payloads, compared bit for bit where the op defines the bits.
Each case runs over strided, transposed, flipped and stride-0 broadcast inputs. Float
outputs of exact kernels are compared by their bits (the sign of zero counts), the others
within the dtype's tolerance.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fuel.dispatch.kernel import global_table
from fuel.ir.device import BackendId
from fuel.ir.ops import OpKind
from fuel.ir.params import FullParams
from tests.backends.kernel_cases import CASES
from tests.backends.kernel_cases.base import Case, Operand
from tests.backends.kernel_harness import (
    BITS,
    PAYLOAD,
    VALUES,
    assert_matches,
    available_builtin_backends,
    builtin_keys,
    copy_destinations,
    exactness,
    key_id,
    run_case,
)

BACKENDS = available_builtin_backends()
KEYS = builtin_keys()
CPU_KEYS = [key for key in KEYS if key[2] is BackendId.CPU]
DEVICE_KEYS = [key for key in KEYS if key[2] is not BackendId.CPU]
# Keys of exact kernels with a float output, for the salted cases of (d).
EXACT_FLOAT_KEYS = [key for key in KEYS if key[1][-1].is_floating and key[0] in CASES
                    and exactness(key[0]) is not None]


def _cases(key):
    op, dtypes, _ = key
    generate = CASES.get(op)
    if generate is None:  # reported once, by test_every_registered_key_has_cases
        pytest.skip(f"no kernel-suite generator for {op.value}")
    cases = generate(dtypes)
    if not cases:
        pytest.fail(f"the {op.value} generator has no case for {key_id(key)}")
    return cases


def _runs(key, case):
    """(params, destination backend) pairs to run ``case`` with: every destination for Copy."""
    if key[0] is OpKind.COPY:
        return [(params, destination) for destination, params in copy_destinations(BACKENDS)]
    return [(None, None)]


def _usable(entry, case) -> bool:
    return not entry.caps.requires_broadcast or any(
        0 in item.layout.strides for item in case.operands)


def _backend(backend_id):
    """The backend of ``backend_id``, or a skip when it is not available here."""
    backend = BACKENDS.get(backend_id)
    if backend is None:
        pytest.skip(f"{backend_id.value} is not available")
    return backend


def _check_alternatives(key, cases, label: str = "") -> None:
    """Every registered alternative of ``key`` on ``cases``: a device's against the CPU's first
    kernel where the CPU has the key, a CPU's (or one the CPU lacks) against the reference."""
    op, dtypes, backend_id = key
    backend = _backend(backend_id)
    cpu_entries = [] if backend_id is BackendId.CPU else \
        global_table().lookup_alternatives(op, dtypes, BackendId.CPU)
    for entry in global_table().lookup_alternatives(op, dtypes, backend_id):
        for case in cases:
            if not _usable(entry, case):
                continue
            if cpu_entries:
                expected = run_case(BACKENDS[BackendId.CPU], cpu_entries[0], op, dtypes, case)
                what = f"{key_id(key)}{label} ({entry.kernel_source}) vs cpu"
            else:
                expected = case.expected()
                what = f"{key_id(key)}{label} ({entry.kernel_source}) vs reference"
            for params, destination in _runs(key, case):
                actual = run_case(backend, entry, op, dtypes, case, params, destination)
                assert_matches(actual, expected, dtypes[-1], case, what,
                               exactness(op, case.params, backend_id, dtypes[-1]))


@pytest.mark.parametrize("key", CPU_KEYS, ids=key_id)
def test_cpu_kernel_matches_reference(key):
    _check_alternatives(key, _cases(key))


@pytest.mark.parametrize("key", DEVICE_KEYS, ids=key_id)
def test_device_kernel_matches_cpu(key):
    _backend(key[2])
    _check_alternatives(key, _cases(key))


def test_every_registered_key_has_cases():
    missing = []
    for key in builtin_keys():
        generate = CASES.get(key[0])
        if generate is None or not generate(key[1]):
            missing.append(key_id(key))
    assert not missing, f"{len(missing)} registered kernels have no kernel-suite case: " \
                        f"{', '.join(missing[:40])}"


def test_coverage_test_catches_an_untested_key():
    """The coverage rule itself: a key whose op has no generator is reported."""
    from fuel.dispatch.kernel import KernelBindingTable
    from fuel.ir import dtype as dt

    table = KernelBindingTable()
    table.register(OpKind.ADD, (dt.float32,) * 3, BackendId.CPU, lambda *a: None,
                   kernel_source="numpy")
    table.register(OpKind.LOAD, (dt.float32,), BackendId.CPU, lambda *a: None,
                   kernel_source="numpy")
    keys = builtin_keys(table)
    uncovered = [key for key in keys if not CASES.get(key[0]) or not CASES[key[0]](key[1])]
    assert [key[0] for key in uncovered] == [OpKind.LOAD]


def test_backends_under_test():
    assert BackendId.CPU in BACKENDS
    assert KEYS, "the binding table is empty"


# ----------------------------------------------------------------------------- (d) salted
def _salt(dtype: np.dtype, nans: bool = True) -> list[np.ndarray]:
    """One-element arrays of ``dtype``: -0.0, 0.0 and (``nans``) two NaNs of different
    payloads and signs, those the format has (float8 formats without a negative zero or a
    second NaN leave them out)."""
    found = []
    for value in (-0.0, 0.0):
        item = np.array([value]).astype(dtype)
        if item.astype(np.float64)[0] == 0.0 and \
                np.signbit(item.astype(np.float64)[0]) == np.signbit(value):
            found.append(item)
    canonical = np.array([np.nan]).astype(dtype)
    if nans and np.isnan(canonical.astype(np.float64)[0]):
        unsigned = np.dtype(f"u{canonical.itemsize}")
        sign = np.array([1 << (8 * canonical.itemsize - 1)], unsigned)
        for extra in (np.array([1], unsigned), np.array([2], unsigned) | sign):
            item = (canonical.view(unsigned) | extra).view(dtype)
            if np.isnan(item.astype(np.float64)[0]) and \
                    all(item.view(unsigned)[0] != f.view(unsigned)[0] for f in found):
                found.append(item)
    return found


def _kept(item: np.ndarray, target: np.dtype) -> bool:
    """Whether a cast of salt ``item`` to ``target`` keeps what it is (a NaN, a zero of its
    sign): casts into formats without them are not defined, nor any into a format without
    a zero (float8_e8m0fnu: the reference's rounding modes take no NaN either)."""
    with np.errstate(all="ignore"):
        wide = item.astype(np.float64)[0]
        cast = np.array([wide]).astype(target).astype(np.float64)[0]
        if np.array([0.0]).astype(target).astype(np.float64)[0] != 0.0:
            return False
    if np.isnan(wide):
        return bool(np.isnan(cast))
    return bool(cast == 0.0 and np.signbit(cast) == np.signbit(wide))


def _is_float(array: np.ndarray) -> bool:
    return array.dtype.kind == "f" or array.dtype.name.startswith(("bfloat", "float"))


# The reference pools skip NaNs (kernel_cases.references.pool): a NaN's result is undefined.
_WITHOUT_NANS = frozenset({OpKind.MAX_POOL})


def _salted(key, case: Case) -> Case | None:
    """``case`` with every 7th element of each float operand's storage from the salt (in
    turn), None when it has no float operand."""
    op, dtypes, _ = key
    operands, salted = [], False
    for item in case.operands:
        base = item.base
        if item.dtype is None and base.dtype != object and base.size and _is_float(base):
            salt = _salt(base.dtype, nans=op not in _WITHOUT_NANS)
            if op is OpKind.CAST:
                salt = [value for value in salt if _kept(value, dtypes[-1].numpy)]
            if salt:
                base = base.copy()
                flat = base.reshape(-1)
                for position, value in enumerate(salt):
                    flat[position::7] = value[0]
                salted = True
        operands.append(Operand(base, item.layout, item.kind, item.dtype))
    return dataclasses.replace(case, operands=operands, label=f"{case.label} salted") \
        if salted else None


def _salted_cases(key) -> list[Case]:
    op, dtypes, _ = key
    if op is OpKind.FULL:  # no operand: the salt is the fill value
        target = dtypes[-1]
        return [Case(FullParams((2, 3), float(value.astype(np.float64)[0]), target), [],
                     lambda a, p: np.full(p.shape, p.value).astype(p.dtype.numpy),
                     f"full {value.view(np.dtype(f'u{value.itemsize}'))[0]:#x} salted")
                for value in _salt(np.dtype(np.float64))
                if _kept(value, target.numpy)]
    cases = [_salted(key, case) for case in _cases(key)]
    return [case for case in cases if case is not None and exactness(key[0], case.params)]


@pytest.mark.parametrize("key", EXACT_FLOAT_KEYS, ids=key_id)
def test_exact_kernels_keep_signed_zeros_and_nan_payloads(key):
    _backend(key[2])
    cases = _salted_cases(key)
    if not cases:
        pytest.skip(f"no float operand to salt in the cases of {key_id(key)}")
    _check_alternatives(key, cases, " salted")


def test_exact_comparison_sees_the_sign_of_zero_and_nan_payloads():
    """The comparison itself: the tolerance cannot tell -0.0 from 0.0, the exact modes can;
    PAYLOAD tells NaNs apart, BITS and VALUES do not, VALUES lets a zero's sign go."""
    from fuel.ir import dtype as dt

    case = Case(None, [], lambda a, p: None, "meta")
    negative, positive = np.array([-0.0, 1.0], np.float32), np.array([0.0, 1.0], np.float32)
    assert_matches(negative, positive, dt.float32, case, "tolerance")
    for mode in (PAYLOAD, BITS):
        with pytest.raises(AssertionError, match="differ in their bits"):
            assert_matches(negative, positive, dt.float32, case, "exact", mode)
    assert_matches(negative, positive, dt.float32, case, "values", VALUES)
    first = np.array([0x7FC00001, 0x3F800000], np.uint32).view(np.float32)
    second = np.array([0x7FC00002, 0x3F800000], np.uint32).view(np.float32)
    with pytest.raises(AssertionError, match="differ in their bits"):
        assert_matches(first, second, dt.float32, case, "payload", PAYLOAD)
    assert_matches(first, second, dt.float32, case, "bits", BITS)
    with pytest.raises(AssertionError):
        assert_matches(first, positive, dt.float32, case, "bits", BITS)
