"""The fuel command: inspect kernels and backends, run and serve models."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from fuel.ir.errors import FuelError

# The modules that add sub-commands, in the order ``fuel --help`` lists them; each defines
# ``add_commands(subparsers)`` and imports its optional dependencies only when a command runs.
COMMAND_MODULES = ("fuel.cli.kernels", "fuel.cli.models", "fuel.cli.serve", "fuel.cli.onnx",
                   "fuel.cli.tune")


def build_parser() -> argparse.ArgumentParser:
    """The ``fuel`` argument parser with every sub-command."""
    import fuel

    parser = argparse.ArgumentParser(prog="fuel", description=__doc__)
    parser.add_argument("--version", action="version", version=f"fuel {fuel.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the fuel command with ``argv`` (default: the process's arguments)."""
    args = build_parser().parse_args(argv)
    _show_notes()
    try:
        return int(args.handler(args) or 0)
    except FuelError as error:
        print(f"fuel: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (fuel kernels | head): stop quietly
        _silence_stdout()
        return 141


def _show_notes() -> None:
    """Print fuel's INFO notes (the first kernel compile's) on standard error, once."""
    logger = logging.getLogger("fuel")
    if not any(getattr(h, "fuel_notes", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        handler.fuel_notes = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
