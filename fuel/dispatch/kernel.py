"""The kernel contract and the KernelBindingTable that maps (op, dtypes, backend) to kernels."""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from fuel.ir.device import BackendId
from fuel.ir.dtype import DType
from fuel.ir.errors import NoBackendForOp
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

if TYPE_CHECKING:
    from fuel.compiler.fusion import FusionTarget
    from fuel.graph.decompositions.registry import Decomposition

# A kernel bound to its operands: calling it launches the kernel once more on them.
Launcher = Callable[[], None]


class Kernel(Protocol):
    """The kernel contract: ``kernel(inputs, outputs, layouts, params)`` writes the outputs
    (``layouts``: the inputs' then the outputs'). ``prepare`` binds the operands once and returns
    a Launcher; a kernel may declare its own (views built once), else it binds a call."""

    def __call__(self, inputs: Sequence[object], outputs: Sequence[object],
                 layouts: Sequence[Layout], params: object, /) -> None: ...

    def prepare(self, inputs: Sequence[object], outputs: Sequence[object],
                layouts: Sequence[Layout], params: object, /) -> Launcher:
        """Default: a bound call of the kernel."""
        return functools.partial(self, inputs, outputs, layouts, params)


def prepare_launcher(kernel: Kernel, inputs: Sequence[object], outputs: Sequence[object],
                     layouts: Sequence[Layout], params: object) -> Launcher:
    """``kernel.prepare(...)`` for every kernel: plain functions get the contract's default."""
    prepare = getattr(kernel, "prepare", None)
    if prepare is None:
        return Kernel.prepare(kernel, inputs, outputs, layouts, params)
    return prepare(inputs, outputs, layouts, params)


@dataclass(frozen=True, slots=True)
class Variant:
    """One way a tunable kernel can run a launch: ``name`` (``openblas``, ``c-dot/1t``) and
    ``prepare(inputs, outputs, layouts, params) -> Launcher``. A kernel offers its variants
    with an optional ``variants(layouts, params, device)`` method, the first being the one its own
    measured rule picks; the judge (fuel.runtime.judge) times them on the real operands and
    dispatches the winner. Every variant computes the same result within the conformance
    tolerance: the kernel suite runs each one. A kernel whose variants already cover what its
    siblings in the key do sets ``covers_siblings = True``: the siblings are then not timed."""

    name: str
    prepare: Callable[[Sequence[object], Sequence[object], Sequence[Layout], object], Launcher]

KernelDTypes = tuple[DType, ...]
BindingKey = tuple[OpKind, KernelDTypes, BackendId]


@dataclass(frozen=True, slots=True)
class KernelCaps:
    """``strided_input``: the kernel walks strides itself (no auto-contiguize).
    ``requires_broadcast``: the kernel bakes a stride-0 pattern; never give it dense operands."""

    strided_input: bool = False
    requires_broadcast: bool = False


@dataclass(frozen=True, slots=True)
class BindingEntry:
    """One registered kernel: the callable, its caps, a source tag and a revision hash."""

    kernel: Kernel
    caps: KernelCaps
    kernel_source: str
    kernel_revision_hash: int


def revision_hash(kernel: Kernel, extra: str = "") -> int:
    """A stable 64-bit identity of a kernel's code and of the values a template closed over:
    the same in every process, different when the code or a closed-over value changes (a
    kernel object's ``revision_source`` text, e.g. its C source, and its methods count)."""
    parts: list[str] = [extra]
    _fingerprint(kernel, parts, depth=0)
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _fingerprint(value, parts: list[str], depth: int) -> None:
    if depth > 4:
        parts.append(type(value).__name__)
        return
    code = getattr(value, "__code__", None)
    if isinstance(value, type(_fingerprint.__code__)):
        code = value
    if code is None:
        source = getattr(value, "revision_source", None)
        if isinstance(source, str):  # a kernel object built from generated or foreign code
            parts.append(getattr(value, "__qualname__", None) or type(value).__qualname__)
            parts.append(source)
            for method in ("prepare", "__call__"):
                function = getattr(type(value), method, None)
                if function is not None:
                    _fingerprint(function, parts, depth + 1)
            return
        # Not Python code (a ufunc, a number, a dtype, ...): its repr is stable.
        parts.append(getattr(value, "__qualname__", None) or repr(value))
        return
    parts.append(getattr(value, "__module__", "") or "")
    parts.append(getattr(value, "__qualname__", "") or code.co_name)
    parts.append(code.co_code.hex())
    parts.append(" ".join(sorted(code.co_names)))
    source = getattr(value, "revision_source", None)
    if isinstance(source, str):  # a Python kernel with a C path: the C source counts too
        parts.append(source)
    for constant in code.co_consts:
        if isinstance(constant, type(code)):
            _fingerprint(constant, parts, depth + 1)
        else:
            parts.append(repr(constant))
    for cell in getattr(value, "__closure__", None) or ():
        try:
            contents = cell.cell_contents
        except ValueError:
            continue
        _fingerprint(contents, parts, depth + 1)


@dataclass(frozen=True, slots=True)
class BackendRecord:
    """What a backend publishes besides its kernels, in the same versioned table: ``fusion``,
    the renderer its fused groups go through (with its kernel generator registered at
    ``(OpKind.FUSED, (), backend)``; None: it runs its kernels unfused), and
    ``decompositions``, the decomposition table it selects (None: the core table,
    ``fuel.graph.decompositions.DECOMPOSITIONS``)."""

    fusion: FusionTarget | None = None
    decompositions: Mapping[OpKind, Decomposition] | None = None


NO_RECORD = BackendRecord()


def _describe_dtypes(dtypes: Iterable[DType]) -> str:
    names = [d.name for d in dtypes]
    return "(" + ", ".join(names[:-1]) + " -> " + names[-1] + ")" if names else "()"


class KernelBindingTable:
    """(OpKind, dtypes, BackendId) -> ordered sibling BindingEntries. Append-only."""

    def __init__(self) -> None:
        self._entries: dict[BindingKey, tuple[BindingEntry, ...]] = {}
        self._by_op: dict[OpKind, list[BindingKey]] = {}
        self._dtype_notes: dict[tuple[BackendId, DType], str] = {}
        self._records: dict[BackendId, BackendRecord] = {}

    def copy(self) -> KernelBindingTable:
        clone = KernelBindingTable()
        clone._entries = dict(self._entries)
        clone._by_op = {op: list(keys) for op, keys in self._by_op.items()}
        clone._dtype_notes = dict(self._dtype_notes)
        clone._records = dict(self._records)
        return clone

    def declare_backend(self, backend: BackendId, record: BackendRecord) -> None:
        """Publish ``backend``'s record (its fusion target, its decomposition table) with its
        kernels: a backend's ``register`` calls it; the last declaration wins."""
        self._records[backend] = record

    def backend_record(self, backend: BackendId) -> BackendRecord:
        """``backend``'s declared record (``NO_RECORD``: no fusion, the core decompositions)."""
        return self._records.get(backend, NO_RECORD)

    def backend_records(self) -> dict[BackendId, BackendRecord]:
        """Every declared record, by backend."""
        return dict(self._records)

    def note_missing_dtype(self, backend: BackendId, dtype: DType, reason: str) -> None:
        """Say why ``backend`` has no kernels for ``dtype`` (e.g. an adapter feature it lacks);
        a miss on that dtype there quotes ``reason``."""
        self._dtype_notes[(backend, dtype)] = reason

    def register(
        self,
        op: OpKind,
        dtypes: Sequence[DType],
        backend: BackendId,
        kernel: Kernel,
        caps: KernelCaps = KernelCaps(),
        kernel_source: str = "custom",
        kernel_revision_hash: int | None = None,
    ) -> BindingEntry:
        """Append a sibling kernel for (op, dtypes, backend); the first one registered wins."""
        key = (op, tuple(dtypes), backend)
        if kernel_revision_hash is None:
            kernel_revision_hash = revision_hash(kernel, kernel_source)
        entry = BindingEntry(kernel, caps, kernel_source, kernel_revision_hash)
        siblings = self._entries.get(key)
        if siblings is None:
            self._entries[key] = (entry,)
            self._by_op.setdefault(op, []).append(key)
        else:
            self._entries[key] = siblings + (entry,)
        return entry

    def lookup_alternatives(
        self, op: OpKind, dtypes: Sequence[DType], backend: BackendId
    ) -> tuple[BindingEntry, ...]:
        """Every sibling at the key, in registration order (empty when none)."""
        return self._entries.get((op, tuple(dtypes), backend), ())

    def lookup_entry(self, op: OpKind, dtypes: Sequence[DType], backend: BackendId) -> BindingEntry:
        """The first sibling without ``requires_broadcast``; raises NoBackendForOp on a miss."""
        for entry in self._entries.get((op, tuple(dtypes), backend), ()):
            if not entry.caps.requires_broadcast:
                return entry
        raise self.miss_error(op, tuple(dtypes), backend)

    def lookup_with_caps(self, op: OpKind, dtypes: Sequence[DType], backend: BackendId):
        """(kernel, caps) of the entry ``lookup_entry`` picks."""
        entry = self.lookup_entry(op, dtypes, backend)
        return entry.kernel, entry.caps

    def miss_error(self, op: OpKind, dtypes: KernelDTypes, backend: BackendId) -> NoBackendForOp:
        """A NoBackendForOp the user can act on: where the op exists and for which dtypes."""
        keys = self._by_op.get(op, [])
        backends = sorted({key[2].value for key in keys})
        here = sorted({_describe_dtypes(key[1]) for key in keys if key[2] is backend})
        message = (
            f"no kernel for {op.value}{_describe_dtypes(dtypes)} on backend {backend.value}. "
        )
        if not keys:
            message += f"No backend implements {op.value}."
        else:
            message += f"Backends with {op.value}: {', '.join(backends)}. "
            if here:
                message += f"dtype combinations on {backend.value}: {', '.join(here)}."
            else:
                message += f"{backend.value} has no {op.value} kernel at all."
        notes = {self._dtype_notes.get((backend, dtype)) for dtype in dtypes} - {None}
        if notes:
            message += " " + " ".join(sorted(notes))
        return NoBackendForOp(message)

    def finalize(self) -> list[str]:
        """Problems in the table: the same kernel registered twice under one key."""
        problems = []
        for (op, dtypes, backend), siblings in self._entries.items():
            seen = set()
            for entry in siblings:
                if entry.kernel in seen:
                    problems.append(
                        f"{op.value}{_describe_dtypes(dtypes)} on {backend.value}: "
                        f"{getattr(entry.kernel, '__qualname__', entry.kernel)} registered twice"
                    )
                seen.add(entry.kernel)
        return problems

    def coverage(
        self, op: OpKind | None = None, backend: BackendId | None = None
    ) -> list[tuple[OpKind, KernelDTypes, BackendId, tuple[BindingEntry, ...]]]:
        """Every key (optionally of one op or backend) with its siblings, sorted for listing."""
        rows = [
            (key[0], key[1], key[2], siblings)
            for key, siblings in self._entries.items()
            if (op is None or key[0] is op) and (backend is None or key[2] is backend)
        ]
        rows.sort(key=lambda row: (row[0].value, row[2].value, [d.name for d in row[1]]))
        return rows

    def __len__(self) -> int:
        return sum(len(s) for s in self._entries.values())


class KernelList:
    """The bindings of one kernel module, kept next to its kernels (the ``@KERNELS.kernel(...)``
    decorator or ``KERNELS.add``); ``register_into(table)`` adds them with the source tag."""

    def __init__(self, backend: BackendId, kernel_source: str) -> None:
        self.backend = backend
        self.kernel_source = kernel_source
        self.rows: list[tuple[OpKind, KernelDTypes, Kernel, KernelCaps]] = []

    def kernel(self, op: OpKind, dtypes: Iterable[Sequence[DType]],
               caps: KernelCaps = KernelCaps()):
        """Decorator: register the function for ``op`` under every dtype tuple in ``dtypes``."""

        def decorate(function: Kernel) -> Kernel:
            self.add(op, dtypes, function, caps)
            return function

        return decorate

    def add(self, op: OpKind, dtypes: Iterable[Sequence[DType]], function: Kernel,
            caps: KernelCaps = KernelCaps()) -> None:
        for combo in dtypes:
            self.rows.append((op, tuple(combo), function, caps))

    def register_into(self, table: KernelBindingTable,
                      keep: Callable[[KernelDTypes], bool] | None = None) -> None:
        """Add every row (only those whose dtypes ``keep`` accepts, when given) to ``table``."""
        for op, dtypes, function, caps in self.rows:
            if keep is None or keep(dtypes):
                table.register(op, dtypes, self.backend, function, caps, self.kernel_source)


# ----------------------------------------------------------------------------- global table

_global_table = KernelBindingTable()
_global_generation = 0
_writer_lock = threading.Lock()


def global_table() -> KernelBindingTable:
    """The process-wide table (a published snapshot: readers never lock)."""
    return _global_table


def table_generation() -> int:
    """Bumped on every run-time extension; cached plans compare it to stay valid."""
    return _global_generation


def extend_global_table(extend: Callable[[KernelBindingTable], None]) -> KernelBindingTable:
    """Copy the table, let ``extend`` register into the copy, then publish it (copy-on-write)."""
    global _global_table, _global_generation
    with _writer_lock:
        fresh = _global_table.copy()
        extend(fresh)
        _global_table = fresh
        _global_generation += 1
        return fresh


def register_kernel(
    op: OpKind,
    dtypes: Sequence[DType],
    backend: BackendId,
    kernel: Kernel,
    caps: KernelCaps = KernelCaps(),
    kernel_source: str = "custom",
) -> BindingEntry:
    """Add one kernel to the process-wide table at run time."""
    created: list[BindingEntry] = []
    extend_global_table(
        lambda table: created.append(
            table.register(op, dtypes, backend, kernel, caps, kernel_source)
        )
    )
    return created[0]
