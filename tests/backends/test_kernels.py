"""The kernel suite, generated from the binding table.

(a) every CPU kernel against the NumPy references of ``kernel_cases``;
(b) every kernel of every other available backend against the CPU kernel of the same key;
(c) coverage: every key a built-in backend registered has cases (fails otherwise).
Each case runs over strided, transposed, flipped and stride-0 broadcast inputs.
"""

from __future__ import annotations

import pytest

from fuel.dispatch.kernel import global_table
from fuel.ir.device import BackendId
from fuel.ir.ops import OpKind
from tests.backends.kernel_cases import CASES
from tests.backends.kernel_harness import (
    assert_matches,
    available_builtin_backends,
    builtin_keys,
    copy_destinations,
    key_id,
    run_case,
)

BACKENDS = available_builtin_backends()
KEYS = builtin_keys()
CPU_KEYS = [key for key in KEYS if key[2] is BackendId.CPU]
DEVICE_KEYS = [key for key in KEYS if key[2] is not BackendId.CPU]


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


@pytest.mark.parametrize("key", CPU_KEYS, ids=key_id)
def test_cpu_kernel_matches_reference(key):
    op, dtypes, backend_id = key
    backend = BACKENDS[backend_id]
    for entry in global_table().lookup_alternatives(op, dtypes, backend_id):
        for case in _cases(key):
            if not _usable(entry, case):
                continue
            expected = case.expected()
            for params, destination in _runs(key, case):
                actual = run_case(backend, entry, op, dtypes, case, params, destination)
                assert_matches(actual, expected, dtypes[-1], case,
                               f"{key_id(key)} ({entry.kernel_source}) vs reference")


@pytest.mark.parametrize("key", DEVICE_KEYS, ids=key_id)
def test_device_kernel_matches_cpu(key):
    op, dtypes, backend_id = key
    backend = BACKENDS.get(backend_id)
    if backend is None:
        pytest.skip(f"{backend_id.value} is not available")
    cpu = BACKENDS[BackendId.CPU]
    cpu_entries = global_table().lookup_alternatives(op, dtypes, BackendId.CPU)
    for entry in global_table().lookup_alternatives(op, dtypes, backend_id):
        for case in _cases(key):
            if not _usable(entry, case):
                continue
            if cpu_entries:
                expected = run_case(cpu, cpu_entries[0], op, dtypes, case)
                what = f"{key_id(key)} vs cpu"
            else:
                expected, what = case.expected(), f"{key_id(key)} vs reference"
            for params, destination in _runs(key, case):
                actual = run_case(backend, entry, op, dtypes, case, params, destination)
                assert_matches(actual, expected, dtypes[-1], case, what)


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
