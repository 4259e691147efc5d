"""Shared test configuration: the ``slow`` marker runs only with ``--runslow``."""

import pytest


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def restored_global_table():
    """Publish the kernel table as it was once the test ends: kernels a test registers at run
    time must not reach later tests (the kernel suite checks every registered alternative)."""
    from fuel.dispatch import kernel as kernel_module

    before = kernel_module.global_table()
    yield
    kernel_module.extend_global_table(lambda table: None)  # a new generation: plans re-plan
    kernel_module._global_table = before
