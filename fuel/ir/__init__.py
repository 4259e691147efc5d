"""fuel's pure metadata layer: dtypes, layouts, devices, errors and the op registry.

Nothing here executes or imports the layers above it. Kernel authors key their kernels on
``OpKind``, ``DType`` and ``BackendId``; ``definition(kind)`` gives an op's record.
"""

from fuel.ir.device import BackendId, Device, parse_device
from fuel.ir.dtype import DType
from fuel.ir.layout import Layout
from fuel.ir.ops import OPS, OpDefinition, OpKind, definition

__all__ = ["OPS", "BackendId", "DType", "Device", "Layout", "OpDefinition", "OpKind",
           "definition", "parse_device"]
