"""Write ``fuel/frontend/generated.py`` from the op registry: one Tensor method and one
function per elementwise op record that names them (``python -m fuel.frontend.generate``).

The generated module is checked in, so IDEs and type checkers see every method;
``tests/frontend/test_generated.py`` fails when it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fuel.ir.ops import OPS, OpDefinition

TARGET = Path(__file__).with_name("generated.py")

HEADER = '''"""Tensor methods and functions of the elementwise ops, generated from the op registry
(``fuel/ir/ops.py``) by ``python -m fuel.frontend.generate``. Do not edit by hand."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fuel.frontend.base import TensorBase
from fuel.frontend.build import at_user_line
from fuel.frontend.elementwise import binary, tensor_operand, unary
from fuel.ir.ops import OpKind

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11
'''


def _method(record: OpDefinition) -> str:
    member = record.kind.name
    if record.family == "unary":
        return (f"    @at_user_line\n    def {record.method}(self) -> Self:\n"
                f'        """{record.doc}"""\n'
                f"        return unary(OpKind.{member}, self)\n")
    return (f"    @at_user_line\n    def {record.method}(self, other) -> Self:\n"
            f'        """{record.doc}"""\n'
            f"        return binary(OpKind.{member}, self, other)\n")


def _function(name: str, record: OpDefinition) -> str:
    member = record.kind.name
    if record.family == "unary":
        return (f"@at_user_line\ndef {name}(x: TensorBase) -> TensorBase:\n"
                f'    """{record.doc}"""\n'
                f'    return unary(OpKind.{member}, tensor_operand(x, "{name}"))\n')
    return (f"@at_user_line\ndef {name}(a, b) -> TensorBase:\n"
            f'    """{record.doc}"""\n'
            f"    return binary(OpKind.{member}, a, b)\n")


def render() -> str:
    """The generated module's text."""
    records = [r for r in OPS.values() if r.family in ("unary", "binary")]
    methods = [r for r in records if r.method]
    functions = {r.function: r for r in records if r.function}
    functional = sorted(r.functional for r in records if r.functional)
    parts = [HEADER, "\nclass GeneratedMethods:\n"
             '    """Tensor methods of the elementwise ops, one per op record."""\n\n'
             "    __slots__ = ()\n"]
    parts += ["\n" + _method(r) for r in methods]
    parts += ["\n\n" + _function(name, r) for name, r in functions.items()]
    parts.append("\n\nFUNCTIONS = (\n" + "".join(f'    "{n}",\n' for n in functions) + ")\n")
    parts.append("__all__ = list(FUNCTIONS)\n")
    parts.append("FUNCTIONAL = (\n" + "".join(f'    "{n}",\n' for n in functional) + ")\n")
    return "".join(parts)


def main() -> int:
    """Write the module; with ``--check``, exit 1 when the checked-in one is stale."""
    text = render()
    if "--check" in sys.argv[1:]:
        return 0 if TARGET.read_text() == text else 1
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
