"""Every CUDA C source the CUDA backend's kernels would launch on the kernel suite's cases
(``tests.backends.kernel_cases``), found without a GPU: each registered kernel's ``sources``
for each case's operand layouts; and their NVRTC compilation in batches (one translation unit
of many kernels, each in a namespace of its own, its ``fuel_kernel`` numbered)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from fuel.compiler import nvrtc
from fuel.compiler.render_cuda import CUDA_OPTIONS, helpers
from fuel.ir.errors import KernelError
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind, infer
from tests.backends.kernel_cases import CASES
from tests.backends.kernel_harness import key_id


@dataclass(frozen=True)
class Rendering:
    source: str
    what: str  # the first key and case that launch it


def kernel_rows():
    """(op, dtypes, kernel) of every CUDA binding (the backend's kernel lists)."""
    from fuel.backends.cuda import matmul, ops

    return [(op, dtypes, kernel) for module in (ops, matmul)
            for op, dtypes, kernel, _ in module.KERNELS.rows]


def _storage(dtype):
    return SimpleNamespace(dtype=dtype, buffer=object())


def renderings() -> tuple[list[Rendering], list[str]]:
    """(the distinct sources, in order of first use; keys without a case generator)."""
    found: dict[str, Rendering] = {}
    missing = []
    for op, dtypes, kernel in kernel_rows():
        generate = CASES.get(op)
        if generate is None:
            missing.append(key_id((op, dtypes, None)))
            continue
        for case in generate(dtypes):
            count = len(case.operands)
            in_dtypes = (dtypes[0],) * count if op is OpKind.CAT else tuple(dtypes[:-1])
            inputs = [_storage(d) for d in in_dtypes]
            out_shape, _ = infer(op, case.params, tuple(o.layout.shape for o in case.operands),
                                 in_dtypes)
            output = inputs[0] if case.inplace else _storage(dtypes[-1])
            layouts = [o.layout for o in case.operands] + [Layout.contiguous(out_shape)]
            for source in kernel.sources(inputs, [output], layouts, case.params):
                if source not in found:
                    what = f"{op.value}-{','.join(d.name for d in dtypes)}: {case.description}"
                    found[source] = Rendering(source, what)
    return list(found.values()), missing


def translation_unit(sources: list[str]) -> str:
    """One source compiling every kernel of ``sources`` (the shared helpers once)."""
    prelude = helpers(False)
    parts = [prelude]
    for n, source in enumerate(sources):
        body = source[len(prelude):] if source.startswith(prelude) else source
        body = body.replace("void fuel_kernel(", f"void fuel_kernel_{n}(")
        parts.append(f"namespace fuel_{n} {{\n{body}\n}}")
    return "\n".join(parts)


def compile_batch(sources: list[str], arch: str) -> list[int]:
    """Compile ``sources`` as one unit; on an error, each alone: the indices that fail."""
    try:
        nvrtc.compile_cuda(translation_unit(sources), arch, CUDA_OPTIONS, disk=False)
        return []
    except KernelError:
        pass
    failed = []
    for n, source in enumerate(sources):
        try:
            nvrtc.compile_cuda(source, arch, CUDA_OPTIONS, disk=False)
        except KernelError:
            failed.append(n)
    return failed


def compile_all(items: list[Rendering], arch: str, batch: int = 400, workers: int = 1
                ) -> list[tuple[Rendering, str]]:
    """(rendering, NVRTC's message) for each of ``items`` that fails to compile for ``arch``."""
    chunks = [items[i:i + batch] for i in range(0, len(items), batch)]
    sources = [[item.source for item in chunk] for chunk in chunks]
    if workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            results = list(pool.map(compile_batch, sources, [arch] * len(sources)))
    else:
        results = [compile_batch(chunk, arch) for chunk in sources]
    failures = []
    for chunk, failed in zip(chunks, results):
        for n in failed:
            try:
                nvrtc.compile_cuda(chunk[n].source, arch, CUDA_OPTIONS, disk=False)
            except KernelError as error:
                failures.append((chunk[n], str(error)))
    return failures
