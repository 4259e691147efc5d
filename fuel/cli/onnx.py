"""``fuel run MODEL.onnx``: run an ONNX model on random (or given) inputs.

Imports without the onnx package; the command explains how to install it.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from fuel.cli.jobs import add_run_arguments, run_onnx_job
from fuel.ir.errors import FuelError


def add_commands(subparsers) -> None:
    """Add ``fuel run`` to the ``fuel`` command."""
    run = subparsers.add_parser(
        "run", help="run an ONNX model on random or given inputs",
        description="Run an ONNX model. Inputs are random values of the declared shapes and "
                    "dtypes unless given with --input; free dims default to 1 (--dim).")
    run.add_argument("model", help="path to a .onnx file")
    run.add_argument("--device", default="cpu", help="fuel device (default cpu)")
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                     help="an input from a .npy file (repeatable)")
    run.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                     help="size of a named free dimension (repeatable)")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    run.add_argument("--profile", action="store_true", help="print the per-op table")
    run.add_argument("--trace", metavar="OUT.json", help="write a Chrome trace of the run")
    run.add_argument("--save", metavar="OUT.npz", help="save the outputs to an .npz file")
    run.add_argument("--repeat", type=int, default=1, metavar="N",
                     help="run N times and report the per-run time (later runs replay)")
    add_run_arguments(run)  # --inputs DIR_OR_NPZ --output FILE [--ray]: the batch job
    run.set_defaults(handler=run_command)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise FuelError(f"{what} must look like NAME=VALUE, got {item!r}")
        pairs[name] = value
    return pairs


def _dims(items: list[str]) -> dict[str, int]:
    dims = {}
    for name, value in _pairs(items, "--dim").items():
        try:
            dims[name] = int(value)
        except ValueError:
            raise FuelError(f"--dim {name}={value}: the size must be an integer") from None
        if dims[name] < 0:
            raise FuelError(f"--dim {name}={value}: the size must be non-negative")
    return dims


def random_input(spec, dims: dict[str, int], rng: np.random.Generator) -> np.ndarray:
    """Random values for a tensor input: normal floats, small non-negative integers."""
    shape = []
    for dim in spec.shape or ():
        if isinstance(dim, int) and dim > 0:
            shape.append(dim)
        elif isinstance(dim, str) and dim in dims:
            shape.append(dims[dim])
        else:
            shape.append(1)
    dtype = spec.dtype
    if dtype.is_floating:
        return rng.standard_normal(shape).astype(dtype.numpy)
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    return rng.integers(0, 10, size=shape).astype(dtype.numpy)


def _feeds(model, args) -> dict[str, np.ndarray]:
    given = _pairs(args.input, "--input")
    names = {spec.name for spec in model.inputs}
    unknown = sorted(set(given) - names)
    if unknown:
        raise FuelError(f"--input names unknown inputs {unknown}; the model's inputs are "
                        f"{sorted(names)}")
    dims = _dims(args.dim)
    rng = np.random.default_rng(args.seed)
    feeds = {}
    for spec in model.inputs:
        if spec.name in given:
            try:
                feeds[spec.name] = np.load(given[spec.name], allow_pickle=False)
            except (OSError, ValueError) as error:
                raise FuelError(f"--input {spec.name}: cannot read {given[spec.name]!r}: "
                                f"{error}") from None
        elif spec.kind == "tensor":
            feeds[spec.name] = random_input(spec, dims, rng)
        else:
            raise FuelError(f"input {spec.name!r} is a {spec.kind}; give it with --input")
    return feeds


def summary(array) -> str:
    """A one-line description of an output's values."""
    if array is None:
        return "(empty optional)"
    if isinstance(array, list):
        return f"sequence of {len(array)}: " + ", ".join(
            f"{a.dtype}{list(a.shape)}" for a in array[:4])
    array = np.asarray(array)
    if array.size == 0:
        return "(no elements)"
    if array.dtype.kind in "biuf" or array.dtype.name == "bfloat16":
        values = array.astype(np.float64)
        head = np.array2string(array.reshape(-1)[:4], precision=4, separator=", ")
        return (f"min {values.min():.6g}  max {values.max():.6g}  mean {values.mean():.6g}  "
                f"first {head}")
    return str(array.reshape(-1)[:4])


def run_command(args: argparse.Namespace) -> int:
    """Load, feed, run, print: the handler of ``fuel run``."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        from fuel.extras import install_command

        raise FuelError(f"fuel run needs the onnx package: {install_command('onnx')}") from None
    if args.inputs or args.output:
        return run_onnx_job(args)
    import fuel
    import fuel.onnx

    model = fuel.onnx.load(args.model)
    feeds = _feeds(model, args)
    for name, value in feeds.items():
        value = np.asarray(value)
        print(f"input  {name}: {value.dtype}{list(value.shape)}")
    start = time.perf_counter()
    if args.profile or args.trace:
        with fuel.profile() as profile:
            outputs = model.run(feeds, device=args.device)
    else:
        profile = None
        outputs = model.run(feeds, device=args.device)
    seconds = time.perf_counter() - start
    repeat = max(int(getattr(args, "repeat", 1) or 1), 1)
    if repeat > 1:
        times = []
        for _ in range(repeat - 1):
            begin = time.perf_counter()
            outputs = model.run(feeds, device=args.device)
            times.append(time.perf_counter() - begin)
        times.sort()
        print(f"repeated {repeat - 1} more runs: median {times[len(times) // 2] * 1e3:.3f} ms, "
              f"best {times[0] * 1e3:.3f} ms per run")
    for name, value in outputs.items():
        kind = f"{np.asarray(value).dtype}{list(np.asarray(value).shape)}" \
            if not isinstance(value, list) and value is not None else ""
        print(f"output {name}: {kind}  {summary(value)}")
    print(f"ran in {seconds * 1e3:.1f} ms on {args.device}")
    if profile is not None and args.profile:
        print()
        profile.table(limit=30)
    if profile is not None and args.trace:
        profile.export_chrome_trace(args.trace)
        print(f"trace written to {args.trace}")
    if args.save:
        np.savez(args.save, **{k: v for k, v in outputs.items() if not isinstance(v, list)
                               and v is not None})
        print(f"outputs saved to {args.save}")
    sys.stdout.flush()
    return 0
