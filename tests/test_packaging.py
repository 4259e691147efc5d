"""The package's metadata: one version (``fuel.__version__``), and package data that covers
every file of ``fuel/`` that is not Python (C kernel sources, templates, ``py.typed``).
``.ci/wheel-smoke`` builds and installs the real wheel; this is the quick check."""

import fnmatch
import pathlib

import pytest

import fuel

tomllib = pytest.importorskip("tomllib")
ROOT = pathlib.Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_written_in_one_place():
    project = _pyproject()
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fuel.__version__"}
    assert fuel.__version__.count(".") == 2


def test_package_data_covers_every_file_that_is_not_python():
    patterns = _pyproject()["tool"]["setuptools"]["package-data"]["fuel"]
    data = [p.relative_to(ROOT / "fuel").as_posix() for p in (ROOT / "fuel").rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert "py.typed" in data
    for name in data:
        assert any(fnmatch.fnmatch(name, pattern.replace("**/", "*")) or name == pattern
                   for pattern in patterns), f"fuel/{name} is in no package-data pattern"
