"""The front-end differential suite runs twice: on the CPU backend and on the primitive-only
test backend, whose every non-primitive op goes through a decomposition."""

import pytest

from fuel.frontend import factories
from fuel.ir.device import parse_device


@pytest.fixture(scope="package", autouse=True, params=["cpu", "primitive"])
def default_device(request):
    """Factories without an explicit device create tensors on this backend's device."""
    if request.param == "cpu":
        yield "cpu"
        return
    from tests.backends.primitive_backend import (
        DEVICE,
        primitive_backend,
    )

    primitive_backend()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(factories, "parse_device",
                      lambda spec: DEVICE if spec is None else parse_device(spec))
        yield str(DEVICE)
