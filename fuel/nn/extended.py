"""The front-end functions of the ops added for ONNX, re-exported by ``fuel.nn.functional``."""

from fuel.nn.conv import *  # noqa: F401, F403
from fuel.nn.conv import __all__ as _conv_all
from fuel.nn.sampling import *  # noqa: F401, F403
from fuel.nn.sampling import __all__ as _sampling_all
from fuel.nn.tensor_ops import *  # noqa: F401, F403
from fuel.nn.tensor_ops import __all__ as _tensor_ops_all

__all__ = list(_conv_all) + list(_sampling_all) + list(_tensor_ops_all)
