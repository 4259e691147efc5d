"""The backward pass: reverse-mode autodiff over the recorded lazy graph, and Tensor's
autograd methods (``requires_grad``, ``grad``, ``backward``, ``detach``, hooks).

``run_backward`` walks the nodes recorded by the tape (``fuel.frontend.tape``) from the
outputs back to the leaves in reverse topological order, applying each op's gradient rule
(``fuel.frontend.gradients.vjp``). The rules build ordinary lazy nodes, so the gradients are a
graph like any other: ``Tensor.backward`` realizes the outputs and the leaves' new ``.grad``
together in one plan (the forward's activations are computed once and freed by liveness),
while ``fuel.autograd.grad`` returns the gradients lazy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from fuel.frontend import (
    backward_plans,
    tape,
    window_gradients,  # noqa: F401 - registers conv and pooling rules
)
from fuel.frontend.base import TensorBase, wrap
from fuel.frontend.build import at_user_line, constant
from fuel.frontend.gradients import Through, accumulate, vjp
from fuel.frontend.tape import Leaf, Record
from fuel.graph.node import Node
from fuel.ir.errors import FuelError, InvalidArgument
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind, ShapeParams

if TYPE_CHECKING:
    from typing_extensions import Self

_SECOND_PASS = ("trying to backward through the graph a second time (its saved inputs were "
                "freed by the first backward); pass retain_graph=True to the first one")


class _Defer:
    """While set (fuel.jit traces a function), ``backward`` leaves the gradients lazy and
    ``assign`` records its state updates in ``effects`` instead of realizing them."""

    depth = 0
    effects: list = []


def defer_realize():
    """Context manager yielding the list of state updates (tensor, node before, node after)
    made inside it: ``backward`` builds the gradients without realizing them and ``assign``
    rebinds lazily (fuel.jit traces a training step so, as one captured graph)."""
    import contextlib

    @contextlib.contextmanager
    def deferred():
        saved = _Defer.effects
        _Defer.effects = []
        _Defer.depth += 1
        try:
            yield _Defer.effects
        finally:
            _Defer.depth -= 1
            _Defer.effects = saved

    return deferred()


def assign(pairs: Sequence[tuple[TensorBase, TensorBase]]) -> None:
    """Point each tensor at its new value (an optimizer's parameters and state, running
    statistics), all realized together in one plan; a leaf that requires grad stays one.
    While fuel.jit traces, the values stay lazy and the updates are the capture's effects."""
    if _Defer.depth:
        for tensor, value in pairs:
            _Defer.effects.append((tensor, tensor._node, value._node))
            tape.move_leaf(tensor, value._node)
        return
    roots = [value._node for _, value in pairs if value._node.buffer is None]
    if roots:
        from fuel.runtime.executor import realize

        realize(roots)
    for tensor, value in pairs:
        tape.move_leaf(tensor, value._node)


def _order(outputs: Sequence[Node]) -> list[Node]:
    """The recorded nodes reachable from ``outputs``, inputs before their users."""
    order: list[Node] = []
    seen: set[int] = set()
    stack = [(node, False) for node in outputs]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        found = tape.record_of(node)
        if found.__class__ is Record:
            if found.inputs is None:
                raise FuelError(_SECOND_PASS)
            stack.extend((source, False) for source in found.inputs
                         if tape.record_of(source) is not None and id(source) not in seen)
    return order


def run_backward(outputs: Sequence[Node], grads: Sequence[TensorBase],
                 targets: Sequence[Node] | None = None, retain_graph: bool = False,
                 create_graph: bool = False) -> list:
    """Propagate ``grads`` (one per output) back through the recorded graph. Without
    ``targets``: accumulate into the leaves' ``.grad`` and return the leaf records that
    changed; with them: return their gradients (None where one is unreachable), touching no
    ``.grad``."""
    order = _order(outputs)
    pending: dict[int, TensorBase] = {}
    for node, grad in zip(outputs, grads):
        key = id(node)
        pending[key] = grad if key not in pending else pending[key] + grad
    wanted = None if targets is None else {id(t): None for t in targets}
    touched: list = []
    with tape.GradMode(create_graph):
        for position in range(len(order) - 1, -1, -1):
            node = order[position]
            grad = pending.pop(id(node), None)
            if grad is None:
                continue
            found = tape.record_of(node)
            for hook in found.hooks or ():
                replaced = hook(wrap(grad._node))
                if replaced is not None:
                    grad = replaced
            if wanted is not None and id(node) in wanted:
                wanted[id(node)] = grad
            if found.__class__ is Leaf:
                if wanted is None:
                    found.grad = grad if found.grad is None else found.grad + grad
                    touched.append((position, found))
                continue
            if found.retain and wanted is None:
                found.grad = grad if found.grad is None else found.grad + grad
                touched.append((position, found))
            inputs = found.inputs
            for source, part in zip(inputs, vjp(node, inputs, grad)):
                if part.__class__ is Through:
                    source, part = part.node, part.grad
                if part is None or tape.record_of(source) is None:
                    continue
                key = id(source)
                pending[key] = part if key not in pending else accumulate(pending[key], part)
            if not retain_graph:
                found.inputs = None
    if wanted is not None:
        return [wanted[id(t)] for t in targets]
    # The last layer's first: ``order`` is a post-order that takes a node's last input first,
    # so a later layer's weight and bias (the later inputs of its matmul, conv and add) come
    # before the earlier layers below its first input. Realized as roots in this order, the
    # plan computes each layer's gradient pieces (a ReLU's mask, a max pool's indices, a
    # bias's sum) next to their use, not all ahead of the first layer's, and frees each
    # layer's gradient before the next one down is built.
    touched.sort(key=lambda pair: pair[0])
    return [record for _, record in touched]


def _seed(output: TensorBase, gradient) -> TensorBase:
    if gradient is None:
        if output.numel() != 1:
            raise InvalidArgument(f"grad can be created implicitly only for a scalar output; "
                                  f"pass gradient= for this output of shape {output.shape}")
        node = output._node
        return wrap(constant(1.0, node.dtype, node.device, node.shape))
    if not isinstance(gradient, TensorBase):
        node = output._node
        return wrap(constant(float(gradient), node.dtype, node.device, node.shape))
    if gradient.shape != output.shape:
        raise InvalidArgument(f"gradient of shape {gradient.shape} does not match the output's "
                              f"shape {output.shape}")
    return gradient if gradient.dtype is output.dtype else gradient.to(output.dtype)


def _checked_outputs(outputs) -> list[TensorBase]:
    outputs = [outputs] if isinstance(outputs, TensorBase) else list(outputs)
    for output in outputs:
        if not isinstance(output, TensorBase):
            raise InvalidArgument(f"autograd outputs must be Tensors, got {type(output).__name__}")
        if tape.record_of(output._node) is None:
            raise FuelError("element 0 of tensors does not require grad and does not have a "
                            "grad_fn: nothing it was computed from requires grad")
    return outputs


@at_user_line
def backward(tensors, grad_tensors=None, retain_graph: bool | None = None,
             create_graph: bool = False, inputs=None) -> None:
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of the leaves they were
    computed from, then realize the outputs and those gradients in one plan."""
    outputs = _checked_outputs(tensors)
    retain = create_graph if retain_graph is None else retain_graph
    walk = None
    if len(outputs) == 1 and not _Defer.depth and backward_plans.eligible(
            grad_tensors if not isinstance(grad_tensors, (list, tuple)) or len(grad_tensors) != 1
            else grad_tensors[0], inputs, create_graph) and outputs[0]._node.shape == ():
        loss = outputs[0]._node
        if backward_plans.replay(loss, retain):
            return
        loss_key = loss.key
        if not retain and loss_key not in backward_plans.REFUSED:
            # Walked before the general pass drops the records' inputs.
            walk = backward_plans.Walk(loss)
    seeds = grad_tensors if isinstance(grad_tensors, (list, tuple)) else [grad_tensors] * len(
        outputs)
    grads = [_seed(o, s) for o, s in zip(outputs, seeds)]
    nodes = [o._node for o in outputs]
    if inputs is not None:
        chosen = [inputs] if isinstance(inputs, TensorBase) else list(inputs)
        found = run_backward(nodes, grads, [t._node for t in chosen], retain, create_graph)
        touched = []
        for tensor, grad in zip(chosen, found):
            if grad is not None:
                record = tape.record_of(tensor._node)
                record.grad = grad if record.grad is None else record.grad + grad
                touched.append(record)
    else:
        touched = run_backward(nodes, grads, None, retain, create_graph)
    if _Defer.depth or create_graph:
        return
    from fuel.runtime.executor import realize

    roots = [n for n in nodes if n.buffer is None]
    seen = set()
    for record in touched:
        node = record.grad._node
        if node.buffer is None and id(node) not in seen:
            seen.add(id(node))
            roots.append(node)
    if roots:
        if walk is not None and walk.nodes is not None:
            backward_plans.remember(walk, loss_key, roots, touched)
        realize(roots)


@at_user_line
def grad(outputs, inputs, grad_outputs=None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool = False) -> tuple:
    """The gradients of ``outputs`` with respect to ``inputs``, as lazy tensors (torch's
    ``torch.autograd.grad``); with ``create_graph`` they are differentiable again."""
    outs = _checked_outputs(outputs)
    single = isinstance(inputs, TensorBase)
    chosen = [inputs] if single else list(inputs)
    for tensor in chosen:
        if tape.record_of(tensor._node) is None:
            raise FuelError("one of the inputs does not require grad")
    seeds = grad_outputs if isinstance(grad_outputs, (list, tuple)) else [grad_outputs] * len(
        outs)
    grads = [_seed(o, s) for o, s in zip(outs, seeds)]
    retain = create_graph if retain_graph is None else retain_graph
    found = run_backward([o._node for o in outs], grads, [t._node for t in chosen], retain,
                         create_graph)
    for tensor, value in zip(chosen, found):
        if value is None and not allow_unused:
            raise FuelError(f"an input of shape {tensor.shape} was not used to compute the "
                            f"outputs; pass allow_unused=True")
    return tuple(found)


class RemovableHandle:
    """``register_hook``'s handle: ``remove()`` takes the hook off."""

    def __init__(self, hooks: list, hook: Callable) -> None:
        self.hooks, self.hook = hooks, hook

    def remove(self) -> None:
        if self.hook in self.hooks:
            self.hooks.remove(self.hook)


def detached(node: Node) -> Node:
    """A node with ``node``'s values and no autograd record: a new leaf over its storage, or
    a same-shape view of a lazy node."""
    if node.buffer is not None:
        leaf = Node(OpKind.LOAD, (), None, node.dtype, node.shape, node.device, node.site)
        leaf.attach(node.buffer, node.layout or Layout.contiguous(node.shape))
        return leaf
    return Node(OpKind.RESHAPE, (node,), ShapeParams(node.shape), node.dtype, node.shape,
                node.device, node.site)


class AutogradMethods:
    """Tensor's autograd surface, torch's names."""

    __slots__ = ()

    @property
    def requires_grad(self) -> bool:
        """Whether gradients flow to (a leaf) or through (a computed tensor) this tensor."""
        return tape.record_of(self._node) is not None

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad: bool = True) -> Self:
        """Make this tensor a leaf that collects ``.grad`` (floating point only)."""
        node = self._node
        found = tape.record_of(node)
        if found.__class__ is Record:
            if not requires_grad:
                raise FuelError("requires_grad_(False) on a computed tensor; use .detach()")
            return self
        if requires_grad:
            if not node.dtype.is_floating:
                raise FuelError(f"only floating-point tensors can require grad, this one is "
                                f"{node.dtype.name}")
            if found is None:
                node.grad_record = Leaf()
                tape.activate()
        elif found is not None:
            node.grad_record = None
        return self

    @property
    def is_leaf(self) -> bool:
        """True unless computed from a tensor that requires grad."""
        return tape.record_of(self._node).__class__ is not Record

    @property
    def grad_fn(self):
        """The op that computed this tensor, when gradients flow through it (else None)."""
        return self._node.op if tape.record_of(self._node).__class__ is Record else None

    @property
    def grad(self):
        """The accumulated gradient (leaves; computed tensors after ``retain_grad``)."""
        found = tape.record_of(self._node)
        return None if found is None else found.grad

    @grad.setter
    def grad(self, value) -> None:
        found = tape.record_of(self._node)
        if found is None:
            if value is None:
                return
            raise FuelError("cannot set .grad of a tensor that does not require grad")
        if value is not None and value.shape != self.shape:
            raise InvalidArgument(f"assigned grad of shape {value.shape} to a tensor of shape "
                                  f"{self.shape}")
        found.grad = value

    @at_user_line
    def backward(self, gradient=None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs=None) -> None:
        """Accumulate d self / d leaf into every leaf's ``.grad`` (torch's semantics)."""
        backward([self], [gradient], retain_graph, create_graph, inputs)

    def retain_grad(self) -> None:
        """Keep this computed tensor's gradient in ``.grad`` at the next backward."""
        found = tape.record_of(self._node)
        if found is None:
            raise FuelError("retain_grad() on a tensor that does not require grad")
        if found.__class__ is Record:
            found.retain = True

    def register_hook(self, hook: Callable) -> RemovableHandle:
        """Call ``hook(grad)`` when this tensor's gradient is computed; a returned tensor
        replaces the gradient."""
        found = tape.record_of(self._node)
        if found is None:
            raise FuelError("cannot register a hook on a tensor that does not require grad")
        if found.hooks is None:
            found.hooks = []
        found.hooks.append(hook)
        return RemovableHandle(found.hooks, hook)

    def detach(self) -> Self:
        """The same values, cut from the autograd graph (no copy)."""
        return wrap(detached(self._node))

    def detach_(self) -> Self:
        """Cut this tensor from the autograd graph in place."""
        if tape.record_of(self._node) is not None:
            self._node = detached(self._node)
        return self
