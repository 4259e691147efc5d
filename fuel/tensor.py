"""Tensor: a handle on a lazy graph Node, with torch's names and semantics.

Nothing here executes by itself: ops build Nodes, and ``realize`` (or anything that needs
values: ``numpy``, ``item``, ``tolist``, ``print`` of a realized tensor) runs the graph.
"""

from __future__ import annotations

import numpy as np

from fuel.frontend import build as _build
from fuel.frontend import shape as _shape
from fuel.frontend.backward import AutogradMethods
from fuel.frontend.base import TensorBase
from fuel.frontend.elementwise import ElementwiseMethods
from fuel.frontend.generated import GeneratedMethods
from fuel.frontend.reduce import ReduceMethods
from fuel.frontend.shape import ShapeMethods
from fuel.frontend.snapshot import NodeSnapshot
from fuel.frontend.structured import StructuredMethods
from fuel.ir import dtype as dt
from fuel.ir.errors import InvalidArgument
from fuel.ir.ops import OpKind


class Tensor(TensorBase, GeneratedMethods, ElementwiseMethods, ReduceMethods, ShapeMethods,
             StructuredMethods, AutogradMethods):
    """A lazy n-d array on a device. Build graphs with its methods; ``realize`` runs them.

    The methods are declared in the front end's mixins (``fuel/frontend/``) and, for the
    plain elementwise ops, generated from the op registry (``fuel/frontend/generated.py``).
    """

    __slots__ = ()
    __array_priority__ = 1000  # NumPy defers to our reflected operators

    # ------------------------------------------------------------------ metadata
    @property
    def shape(self) -> tuple[int, ...]:
        return self._node.shape

    @property
    def ndim(self) -> int:
        return len(self._node.shape)

    @property
    def dtype(self) -> dt.DType:
        return self._node.dtype

    @property
    def device(self) -> str:
        return str(self._node.device)

    @property
    def is_realized(self) -> bool:
        return self._node.buffer is not None

    @_build.at_user_line
    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        return self.shape[_build.normalize_dim(dim, self.ndim)]

    def numel(self) -> int:
        count = 1
        for s in self.shape:
            count *= s
        return count

    def dim(self) -> int:
        return self.ndim

    def __len__(self) -> int:
        if not self.shape:
            raise InvalidArgument("len() of a 0-d tensor")
        return self.shape[0]

    # ------------------------------------------------------------------ execution
    def realize(self, pipelined: bool = False) -> Tensor:
        """Run the graph behind this tensor; returns self (now a realized leaf)."""
        from fuel.runtime.executor import realize

        realize([self._node], pipelined=pipelined)
        return self

    def numpy(self, *, copy: bool = False) -> np.ndarray:
        """The values as a NumPy array (realizes first).

        A CPU tensor's array is a read-only view of its storage (no copy; ``np.shares_memory``
        with it is True), so it sees later in-place writes to the tensor, as torch's
        ``.numpy()`` does; fuel's storages can be shared (constants, views), so the view is
        read-only rather than a way to write them. Packed sub-byte dtypes and other devices'
        tensors come back as a read-only copy. ``copy=True``: a new, writable array.
        """
        self.realize()
        node = self._node
        values = node.buffer.backend.download(node.buffer, node.layout)
        if copy:
            return np.array(values, copy=True)
        values = values.view()  # a new array object: the storage's own stays writable
        values.flags.writeable = False
        return values

    def shares_storage(self) -> bool:
        """Whether ``numpy()`` returns a view of this tensor's storage (a realized CPU tensor
        of a dtype stored one element per byte or more) rather than a copy."""
        node = self._node
        return (node.device.backend.value == "cpu" and not self.dtype.is_packed)

    def __array__(self, dtype=None, copy: bool | None = None) -> np.ndarray:
        """NumPy's conversion (``np.asarray(t)``): the read-only view of ``numpy()``; a copy
        when ``copy=True`` or a ``dtype`` conversion needs one (``copy=False`` then raises
        ValueError, as NumPy asks)."""
        if copy:
            values = self.numpy(copy=True)
            return values if dtype is None else values.astype(dtype, copy=False)
        if copy is False and not self.shares_storage():
            raise ValueError(f"a {self.dtype.name} tensor on {self.device} cannot be viewed "
                             f"by NumPy without a copy")
        values = self.numpy()
        if dtype is None or np.dtype(dtype) == values.dtype:
            return values
        if copy is False:
            raise ValueError(f"viewing a {self.dtype.name} tensor as {np.dtype(dtype)} needs "
                             f"a copy")
        return values.astype(dtype)

    def __dlpack__(self, *, stream=None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None):
        """A DLPack capsule of the values on the host: a CPU tensor's storage without a copy
        (flagged read-only), another device's values copied to the host unless
        ``copy=False``."""
        from fuel.frontend.dlpack import K_DL_CPU, export

        if dl_device is not None and tuple(dl_device)[0] != K_DL_CPU:
            raise BufferError(f"fuel exports DLPack tensors on the host (device type "
                              f"{K_DL_CPU}), not on {tuple(dl_device)}")
        if copy is False and not self.shares_storage():
            raise BufferError(f"a {self.dtype.name} tensor on {self.device} cannot be "
                              f"exported without a copy")
        values = self.numpy(copy=bool(copy))
        if copy:
            copy = None  # already a fresh array: NumPy need not copy it again
        return export(values, self.dtype, stream=stream, max_version=max_version, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        """Where ``__dlpack__``'s memory lives: the host (DLPack's kDLCPU, device 0)."""
        from fuel.frontend.dlpack import K_DL_CPU

        return (K_DL_CPU, 0)

    def item(self):
        """The single value as a Python scalar."""
        if self.numel() != 1:
            raise InvalidArgument(f"item() needs exactly one element, this tensor has shape "
                                  f"{self.shape}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        values = self.numpy()
        if self.dtype is dt.bfloat16:
            values = values.astype(np.float32)
        return values.tolist()

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise InvalidArgument(f"the truth value of a tensor of shape {self.shape} is "
                                  "ambiguous; use .any() or .all()")
        return bool(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __index__(self) -> int:
        if self.dtype.is_floating:
            raise InvalidArgument("only integer tensors can be used as an index")
        return int(self.item())

    def __repr__(self) -> str:
        node = self._node
        head = f"shape={self.shape}, dtype={self.dtype.name}, device={self.device}"
        if node.buffer is not None and node.device.backend.value == "cpu" and self.numel() <= 64:
            values = np.array2string(self.numpy(), separator=", ", precision=4)
            return f"Tensor({values}, {head})"
        state = "realized" if node.buffer is not None else f"lazy {node.op.value}"
        return f"Tensor(<{state}>, {head})"

    def explain(self):
        """The graph a realize would run: one line per node with the kernel it dispatches to."""
        from fuel.explain import explain

        return explain([self])

    # ------------------------------------------------------------------ node snapshot
    def node_snapshot(self) -> NodeSnapshot:
        """The node this tensor refers to now; ``.restore()`` points it back there (undoing
        the rebinding of in-place ops, not their writes to a realized storage). For several
        tensors at once, ``NodeSnapshot(tensors)`` (``fuel.frontend.snapshot``)."""
        return NodeSnapshot((self,))

    # ------------------------------------------------------------------ conversion
    @_build.at_user_line
    def to(self, *args, dtype=None, device=None) -> Tensor:
        """``to(dtype)``, ``to(device)`` or both; returns self when nothing changes."""
        for arg in args:
            if isinstance(arg, (dt.DType, type)) or (isinstance(arg, np.dtype)):
                dtype = arg
            elif isinstance(arg, str) and arg.split(":")[0] in dt._BY_NAME:
                dtype = arg
            else:
                device = arg
        result = self
        if dtype is not None:
            node = _build.cast(result._node, dt.to_dtype(dtype))
            result = result if node is result._node else Tensor(node)
        if device is not None:
            result = _shape.copy_to(result, device)
        return result

    @_build.at_user_line
    def float(self) -> Tensor:
        return self.to(dt.float32)

    @_build.at_user_line
    def half(self) -> Tensor:
        return self.to(dt.float16)

    @_build.at_user_line
    def double(self) -> Tensor:
        return self.to(dt.float64)

    @_build.at_user_line
    def long(self) -> Tensor:
        return self.to(dt.int64)

    @_build.at_user_line
    def int(self) -> Tensor:
        return self.to(dt.int32)

    @_build.at_user_line
    def bool(self) -> Tensor:
        return self.to(dt.bool_)

    @_build.at_user_line
    def bfloat16(self) -> Tensor:
        return self.to(dt.bfloat16)

    @_build.at_user_line
    def type(self, dtype) -> Tensor:
        return self.to(dt.to_dtype(dtype))

    @_build.at_user_line
    def cpu(self) -> Tensor:
        return self.to("cpu")

    @_build.at_user_line
    def contiguous(self) -> Tensor:
        """A dense copy when this tensor is a strided view; the copy runs at realize."""
        return _build.make(OpKind.CONTIGUOUS, (self._node,), None)

    @_build.at_user_line
    def clone(self) -> Tensor:
        return self.contiguous()


# wrap() makes this class: results stay fuel.Tensor whatever subclasses users define.
TensorBase.concrete = Tensor
