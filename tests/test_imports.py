"""Import structure: what ``import fuel`` loads, public names, and the layers: the import-linter
contracts of ``pyproject.toml`` hold (every import counted, deferred and type-only ones too),
and docs/ARCHITECTURE.md lists the same layers."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import fuel

PACKAGE = Path(fuel.__file__).parent
ROOT = PACKAGE.parent
PYPROJECT = ROOT / "pyproject.toml"


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


def _config() -> dict:
    if not PYPROJECT.is_file():
        pytest.skip("fuel is not imported from a source checkout (no pyproject.toml)")
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]


def _contract(config: dict, kind: str) -> dict:
    (found,) = [c for c in config["contracts"] if c["type"] == kind]
    return found


def test_the_contracts_count_every_import_and_cover_every_module():
    config = _config()
    assert config["root_package"] == "fuel"
    # Type-only imports are dependencies: the option that drops them stays unset.
    assert "exclude_type_checking_imports" not in config
    layers = _contract(config, "layers")
    assert layers["containers"] == ["fuel"] and layers["exhaustive"] is True
    assert _contract(config, "acyclic_siblings")["ancestors"] == ["fuel"]


def test_lint_imports_keeps_the_contracts():
    pytest.importorskip("importlinter")
    _config()  # skips outside a checkout
    # lint-imports run on the checkout (its folder first on the path, as the command does).
    done = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command as command; "
         "command()", "--config", str(PYPROJECT), "--no-cache"],
        capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def _architecture_layers() -> list[str]:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text[text.index("## Layers"):]
    block = section[section.index("```\n") + 4:]
    block = block[:block.index("```")]
    # A layer's line starts at column 0; its description follows after two spaces or more.
    return [re.split(r"\s{2,}", line)[0] for line in block.splitlines()
            if line and not line[0].isspace()]


def test_architecture_lists_the_contract_layers():
    if not (ROOT / "docs" / "ARCHITECTURE.md").is_file():
        pytest.skip("fuel is not imported from a source checkout")
    contract = [layer for layer in _contract(_config(), "layers")["layers"]
                if layer != "__main__"]
    assert _architecture_layers() == contract
