"""``fuel kernels`` and ``fuel backends``: the binding table, the generated kernels and the
backends with their devices."""

from __future__ import annotations

import argparse

from fuel.ir.errors import FuelError


def add_commands(subparsers) -> None:
    """Register ``kernels`` and ``backends`` on the ``fuel`` command's sub-parsers."""
    kernels = subparsers.add_parser("kernels", help="list the kernel binding table")
    kernels.add_argument("--op", help="only this op (e.g. add, matmul)")
    kernels.add_argument("--backend", help="only this backend (cpu, opencl, ...)")
    kernels.add_argument("--generated", action="store_true",
                         help="list the generated (fused) kernels and their source paths")
    kernels.set_defaults(handler=_kernels)
    backends = subparsers.add_parser("backends", help="list backends and devices")
    backends.set_defaults(handler=_backends)


def _kernels(args: argparse.Namespace) -> int:
    from fuel.dispatch.kernel import global_table
    from fuel.ir.device import BackendId
    from fuel.ir.ops import OpKind

    _load_all_backends()
    if args.generated:
        return _generated_kernels()
    op = None
    backend = None
    if args.op:
        names = {kind.value: kind for kind in OpKind}
        op = names.get(args.op.lower())
        if op is None:
            raise FuelError(f"unknown op '{args.op}'; `fuel kernels` lists the ops that have "
                            "kernels")
    if args.backend:
        names = {backend_id.value: backend_id for backend_id in BackendId.registered()}
        backend = names.get(args.backend.lower())
        if backend is None:
            raise FuelError(f"unknown backend '{args.backend}'; the backends are "
                            f"{', '.join(names)} (`fuel backends` shows which are available)")
    rows = global_table().coverage(op, backend)
    lines = []
    for kind, dtypes, backend_id, siblings in rows:
        names = (", ".join(d.name for d in dtypes[:-1]) + " -> " + dtypes[-1].name
                 if dtypes else "generated per fused node")
        for entry in siblings:
            caps = "strided" if entry.caps.strided_input else "dense"
            if entry.caps.requires_broadcast:
                caps += "+bcast"
            lines.append((kind.value, backend_id.value, names, entry.kernel_source, caps,
                          f"{entry.kernel_revision_hash:016x}"))
    header = ("op", "backend", "dtypes", "source", "caps", "revision")
    widths = [max([len(header[i])] + [len(line[i]) for line in lines]) + 2 for i in range(5)]
    for line in [header, *lines]:
        print("".join(f"{cell:<{width}}" for cell, width in zip(line, widths)) + line[5])
    print(f"{len(rows)} bindings")
    return 0


def _generated_kernels() -> int:
    """The generated kernels: those this process built, then the on-disk cache's entries."""
    import json

    from fuel.compiler import toolchain

    built = {kernel.key for kernel in toolchain.built_kernels()}
    folder = toolchain.cache_folder()
    entries = sorted(folder.glob("*.json")) if folder.is_dir() else []
    print(f"kernel cache {folder}: {len(entries)} kernels, {len(built)} built or loaded by "
          "this process")
    for index_path in entries:
        key = index_path.stem
        try:
            library = json.loads(index_path.read_text()).get("library", "?")
        except (OSError, ValueError):
            library = "(unreadable index)"
        mark = "*" if key in built else " "
        print(f"{mark} {key}  source {folder / (key + '.c')}  library {library}")
    return 0


def _load_all_backends() -> None:
    from fuel.backends import load_builtin_backends

    load_builtin_backends()


def _backends(args: argparse.Namespace) -> int:
    from fuel.backends import backend_rows

    rows = backend_rows()
    name_width = max([len(row[0]) + 2 for row in rows] + [8])
    device_width = max([len(device) + 2 for row in rows for device, _ in row[3]] + [12])
    for name, available, reason, devices in rows:
        state = "available" if available else f"unavailable ({reason})"
        print(f"{name:<{name_width}}{state}")
        for device, description in devices:
            print(f"  {device:<{device_width}}{description}")
    from fuel.compiler.fusion import fusion_enabled
    from fuel.ir.device import BackendId
    from fuel.runtime.resolve import fusion_unavailable_reason

    languages = {BackendId.CPU: "generated C", BackendId.OPENCL: "generated OpenCL C"}
    for name, available, _, _ in rows:
        backend_id = BackendId(name)
        if backend_id is not BackendId.CPU and not available:
            continue
        reason = fusion_unavailable_reason(backend_id)
        if reason is not None:
            print(f"kernel fusion on {name}: off ({reason}); its kernels run unfused")
        else:
            state = "on" if fusion_enabled() else "off (FUEL_FUSION=0)"
            print(f"kernel fusion on {name}: {state} "
                  f"({languages.get(backend_id, 'a registered renderer')})")
    return 0
