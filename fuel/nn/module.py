"""Module and Parameter: torch.nn's containers of trainable state, over fuel tensors.

A ``Parameter`` is a leaf tensor that requires grad; a ``Module`` registers the Parameters,
buffers and sub-modules assigned to its attributes, and walks them for ``parameters()``,
``state_dict()``, ``train()``/``eval()`` and saving as safetensors.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from sys import _getframe

import numpy as np

from fuel.extras import install_command
from fuel.frontend.backward import detached
from fuel.frontend.base import TensorBase
from fuel.frontend.build import frame_site
from fuel.graph.node import current_user_site, is_runtime_file, set_user_site
from fuel.ir.errors import FuelError, InvalidArgument, ShapeError
from fuel.tensor import Tensor


class Parameter(Tensor):
    """A tensor a Module trains: a leaf that requires grad (unless ``requires_grad=False``)."""

    def __init__(self, data: TensorBase | None = None, requires_grad: bool = True) -> None:
        if data is None:
            from fuel.frontend.factories import empty

            data = empty(0)
        if not isinstance(data, TensorBase):
            from fuel.frontend.factories import tensor

            data = tensor(data)
        super().__init__(detached(data._node))
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class Module:
    """Base class of layers: assign Parameters, buffers and Modules as attributes; write
    ``forward``; call the module."""

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------------ registration
    def __setattr__(self, name: str, value) -> None:
        if "_parameters" not in self.__dict__:
            raise FuelError(f"{type(self).__name__}: call super().__init__() before assigning "
                            f"{name!r}")
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        elif name in self.__dict__.get("_buffer_names", ()):
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)
            return
        self.__dict__.pop(name, None)

    def __getattr__(self, name: str):
        for table in ("_parameters", "_buffers", "_modules"):
            found = self.__dict__.get(table)
            if found is not None and name in found:
                return found[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is None:
            self._parameters.pop(name, None)
            object.__setattr__(self, name, None)
        else:
            setattr(self, name, param)

    def register_buffer(self, name: str, tensor: TensorBase | None,
                        persistent: bool = True) -> None:
        """State saved with the module but not trained (BatchNorm's running statistics)."""
        names = self.__dict__.setdefault("_buffer_names", set())
        names.add(name)
        if not persistent:
            self.__dict__.setdefault("_transient", set()).add(name)
        self._buffers[name] = tensor

    def add_module(self, name: str, module: Module | None) -> None:
        self._modules[name] = module

    # ------------------------------------------------------------------ walking
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop(0)
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            for child_name, child in module._modules.items():
                if child is not None:
                    stack.append((f"{name}.{child_name}" if name else child_name, child))

    def modules(self) -> Iterator[Module]:
        for _, module in self.named_modules():
            yield module

    def children(self) -> Iterator[Module]:
        yield from (m for m in self._modules.values() if m is not None)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        yield from ((n, m) for n, m in self._modules.items() if m is not None)

    def named_parameters(self, prefix: str = "", recurse: bool = True
                         ) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, Parameter) pairs, each Parameter once, in registration order."""
        seen: set[int] = set()
        modules = self.named_modules(prefix) if recurse else [(prefix, self)]
        for module_name, module in modules:
            for name, param in module._parameters.items():
                if param is None or id(param) in seen:
                    continue
                seen.add(id(param))
                yield (f"{module_name}.{name}" if module_name else name), param

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, TensorBase]]:
        for module_name, module in self.named_modules(prefix):
            for name, buffer in module._buffers.items():
                if buffer is not None:
                    yield (f"{module_name}.{name}" if module_name else name), buffer

    def buffers(self) -> Iterator[TensorBase]:
        for _, buffer in self.named_buffers():
            yield buffer

    def apply(self, function) -> Module:
        for module in self.children():
            module.apply(function)
        function(self)
        return self

    # ------------------------------------------------------------------ modes and grads
    def train(self, mode: bool = True) -> Module:
        """Training mode (dropout drops, batch norm uses batch statistics) for every module."""
        for module in self.modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.parameters():
            _zero_grad(param, set_to_none)

    # ------------------------------------------------------------------ state
    def state_dict(self, prefix: str = "") -> OrderedDict:
        """Every parameter and persistent buffer by dotted name (the tensors themselves)."""
        state: OrderedDict = OrderedDict()
        for module_name, module in self.named_modules(prefix):
            transient = module.__dict__.get("_transient", set())
            for table in (module._parameters, module._buffers):
                for name, value in table.items():
                    if value is not None and name not in transient:
                        state[f"{module_name}.{name}" if module_name else name] = value
        return state

    def load_state_dict(self, state_dict, strict: bool = True):
        """Copy values into the parameters and buffers by name (shapes must match); with
        ``strict``, a missing or unexpected name is an error. Returns (missing, unexpected)."""
        own = self.state_dict()
        missing = [name for name in own if name not in state_dict]
        unexpected = [name for name in state_dict if name not in own]
        if strict and (missing or unexpected):
            raise InvalidArgument(f"load_state_dict: missing keys {missing}, unexpected keys "
                                  f"{unexpected}")
        from fuel.frontend.factories import tensor

        for name, target in own.items():
            if name not in state_dict:
                continue
            value = state_dict[name]
            array = value.numpy() if isinstance(value, TensorBase) else np.asarray(value)
            if tuple(array.shape) != target.shape:
                raise ShapeError(f"load_state_dict: {name} has shape {tuple(array.shape)}, the "
                                 f"module's has {target.shape}")
            fresh = tensor(array.astype(target.dtype.numpy), device=target.device)
            _assign(target, fresh)
        return missing, unexpected

    def save_safetensors(self, path: str | os.PathLike) -> None:
        """Write ``state_dict()`` to a safetensors file."""
        numpy_io = _safetensors("saving a module as safetensors")
        arrays = {name: np.ascontiguousarray(value.numpy())
                  for name, value in self.state_dict().items()}
        numpy_io.save_file(arrays, str(path))

    def load_safetensors(self, path: str | os.PathLike, strict: bool = True):
        """Load a safetensors file written by ``save_safetensors`` (or torch's, same names)."""
        numpy_io = _safetensors("loading a module from safetensors")
        return self.load_state_dict(numpy_io.load_file(str(path)), strict=strict)

    def to(self, *args, **kwargs) -> Module:
        """Move or cast every parameter and buffer (the same Parameter objects)."""
        for _, module in self.named_modules():
            for table in (module._parameters, module._buffers):
                for value in table.values():
                    if value is None:
                        continue
                    moved = value.to(*args, **kwargs)
                    if moved is not value:
                        _assign(value, moved.realize())
        return self

    # ------------------------------------------------------------------ calling
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        """``forward``. A layer of fuel's own builds its nodes with its caller's line (the
        first user frame, found once per call rather than by a frame walk per node); a user's
        module builds them with the lines of its own ``forward``, as a plain call would."""
        builtin = _BUILTIN_FORWARD.get(type(self))
        if builtin is None:
            builtin = _BUILTIN_FORWARD[type(self)] = is_runtime_file(
                type(self).forward.__code__.co_filename)
        outer = current_user_site()
        if builtin is (outer is not None):  # fuel's inside a site, a user's outside one
            return self.forward(*args, **kwargs)
        set_user_site(frame_site(_getframe(1)) if builtin else None)
        try:
            return self.forward(*args, **kwargs)
        finally:
            set_user_site(outer)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self.named_children():
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


_BUILTIN_FORWARD: dict[type, bool] = {}  # per Module class: whether fuel defines its forward


def _assign(target: TensorBase, value: TensorBase) -> None:
    """Point ``target`` at ``value``'s values in place, keeping its autograd leaf."""
    from fuel.frontend import tape

    with tape.no_grad():
        tape.rebind(target, detached(value._node))


def _zero_grad(param: TensorBase, set_to_none: bool) -> None:
    if param.grad is None:
        return
    if set_to_none:
        param.grad = None
    else:
        from fuel.frontend.factories import zeros

        param.grad = zeros(*param.shape, dtype=param.dtype, device=param.device)


def _safetensors(feature: str):
    try:
        import safetensors.numpy as numpy_io
    except ImportError:
        raise FuelError(f"{feature} needs the safetensors package: "
                        f"{install_command('models')}") from None
    return numpy_io
