"""Import structure: what ``import fuel`` loads, public names, and one-way imports between
the layers (no cycles)."""

import ast
import subprocess
import sys
from pathlib import Path

import fuel

PACKAGE = Path(fuel.__file__).parent


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=PACKAGE.parent).stdout


def test_import_fuel_loads_no_optional_dependency():
    loaded = _run("import sys, fuel; print(sorted(sys.modules))").split("'")
    for name in ("onnx", "tokenizers", "gguf", "safetensors", "pyopencl", "torch", "fuel.onnx",
                 "fuel.models"):
        assert name not in loaded, name


def test_subpackages_are_reachable_after_import_fuel():
    out = _run("import fuel; print(callable(fuel.onnx.load), "
               "callable(fuel.models.llama.load_gguf), callable(fuel.nn.functional.gelu))")
    assert out.split() == ["True", "True", "True"]


def test_public_names():
    from fuel import BackendId, OpKind  # noqa: F401
    from fuel.ir import BackendId as IrBackendId
    from fuel.ir import DType, Layout  # noqa: F401
    from fuel.ir import OpKind as IrOpKind

    assert IrOpKind is OpKind and IrBackendId is BackendId


def _module_imports(path: Path) -> set[str]:
    """Modules imported at module level, outside ``if TYPE_CHECKING:`` blocks."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _package_imports(folder: str) -> dict[str, set[str]]:
    return {str(p.relative_to(PACKAGE)): _module_imports(p)
            for p in (PACKAGE / folder).rglob("*.py")}


def test_ir_imports_only_ir():
    for name, imports in _package_imports("ir").items():
        outside = {m for m in imports if m.startswith("fuel.") and not m.startswith("fuel.ir")}
        assert not outside, (name, outside)


def test_front_end_never_imports_the_tensor_module():
    for name, imports in _package_imports("frontend").items():
        assert "fuel.tensor" not in imports, name
        assert not any(m.startswith(("fuel.nn", "fuel.onnx", "fuel.models")) for m in imports)
