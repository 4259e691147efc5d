"""Run one conformance case on fuel (or onnxruntime, the reference) and classify the result."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

from fuel.conformance.cases import Case, read_data

PASS = "pass"
MISMATCH = "mismatch"
UNSUPPORTED_OP = "unsupported op"
UNSUPPORTED_DTYPE = "unsupported dtype"
ERROR = "error"
STATUSES = (PASS, MISMATCH, UNSUPPORTED_OP, UNSUPPORTED_DTYPE, ERROR)


@dataclass
class Result:
    """The outcome of one case: status (one of STATUSES), a one-line detail, seconds."""

    case: Case
    status: str
    detail: str = ""
    seconds: float = 0.0


def run_case(case: Case, device: str = "cpu", runtime: str = "fuel") -> Result:
    """Run ``case`` on ``runtime`` ("fuel" or "onnxruntime") and compare with its outputs."""
    import onnx

    start = time.perf_counter()
    try:
        model = onnx.load(case.model_path)
        inputs, expected = read_data(case, model)
    except Exception as error:  # a case the installed onnx cannot even read
        return Result(case, ERROR, f"cannot read the case: {error}", 0.0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                if runtime == "onnxruntime":
                    actual = _run_onnxruntime(model, inputs)
                else:
                    actual = _run_fuel(model, inputs, device)
    except Exception as error:
        return Result(case, classify(error), _one_line(error), time.perf_counter() - start)
    judge = random_judge(case, inputs)
    problem = (judge(inputs, expected, actual, case) if judge
               else compare(expected, actual, case.rtol, case.atol))
    seconds = time.perf_counter() - start
    return Result(case, MISMATCH if problem else PASS, problem or "", seconds)


def _run_fuel(model, inputs: list, device: str) -> list:
    import fuel.onnx

    loaded = fuel.onnx.load(model)
    feeds = {spec.name: value for spec, value in zip(loaded.inputs, inputs)}
    outputs = loaded.run(feeds, device=device)
    return list(outputs.values())


def _run_onnxruntime(model, inputs: list) -> list:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4
    session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    names = [value.name for value in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))


def classify(error: BaseException) -> str:
    """unsupported op / unsupported dtype / error, from the exception and its causes."""
    from fuel.ir.errors import NoBackendForOp
    from fuel.onnx.errors import UnsupportedDType, UnsupportedOp, UnsupportedOpset

    seen = error
    while seen is not None:
        if isinstance(seen, (UnsupportedOp, UnsupportedOpset)):
            return UNSUPPORTED_OP
        if isinstance(seen, NoBackendForOp) and ("No backend implements" in str(seen)
                                                  or "kernel at all" in str(seen)):
            return UNSUPPORTED_OP  # the device has no kernel for the op, whatever the dtype
        if isinstance(seen, (UnsupportedDType, NoBackendForOp)):
            return UNSUPPORTED_DTYPE
        seen = seen.__cause__
    text = str(error)
    if "NOT_IMPLEMENTED" in text or "Could not find an implementation" in text:
        return UNSUPPORTED_OP
    return ERROR


def compare(expected: list, actual: list, rtol: float, atol: float) -> str | None:
    """None when ``actual`` matches ``expected`` as onnx's runner checks; else why not."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for index, (want, got) in enumerate(zip(expected, actual)):
        if isinstance(want, (list, tuple)):
            if not isinstance(got, (list, tuple)) or len(got) != len(want):
                return f"output {index}: expected a sequence of {len(want)}"
            for inner_want, inner_got in zip(want, got):
                problem = compare([inner_want], [inner_got], rtol, atol)
                if problem:
                    return f"output {index}: {problem}"
            continue
        if want is None or got is None:
            if want is not got:
                return f"output {index}: expected {want!r}, got {got!r}"
            continue
        problem = _compare_arrays(np.asarray(want), np.asarray(got), rtol, atol)
        if problem:
            return f"output {index}: {problem}"
    return None


# ------------------------------------------------------------------ random outputs
# Bernoulli and Dropout in training mode draw random numbers; no runtime reproduces the
# generator the suite's expected outputs came from (NumPy's), so both runtimes are judged as
# onnxruntime's own tests judge them: shape, dtype and the values each element may take must
# match exactly, and the count of ones (kept elements) must lie within 4 standard deviations
# of its binomial expectation.
SIGMAS = 4.0


def _binomial_problem(hits: float, probabilities: np.ndarray, what: str) -> str | None:
    expected = float(np.sum(probabilities))
    spread = SIGMAS * float(np.sqrt(np.sum(probabilities * (1 - probabilities)))) + 1.0
    if abs(hits - expected) > spread:
        return f"{what}: {hits:.0f}, expected {expected:.1f} +- {spread:.1f}"
    return None


def judge_bernoulli(inputs, expected, actual, case) -> str | None:
    """Ones and zeros of the expected dtype and shape, as many ones as the probabilities
    predict."""
    if len(actual) != 1:
        return f"{len(actual)} outputs, expected 1"
    want, got = np.asarray(expected[0]), np.asarray(actual[0])
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"output 0: {got.dtype}{got.shape}, expected {want.dtype}{want.shape}"
    if not np.isin(got, (0, 1)).all():
        return "output 0: values other than 0 and 1"
    probabilities = np.clip(np.asarray(inputs[0], np.float64), 0.0, 1.0)
    return _binomial_problem(float(got.sum()), probabilities, "ones")


def judge_dropout(inputs, expected, actual, case) -> str | None:
    """Each output element is 0 or the input scaled by 1 / (1 - ratio), the mask (when asked
    for) says which, and about ``1 - ratio`` of the elements are kept."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    x = np.asarray(inputs[0])
    ratio = float(np.asarray(inputs[1])) if len(inputs) > 1 else 0.5
    got = np.asarray(actual[0])
    if got.shape != x.shape or got.dtype != np.asarray(expected[0]).dtype:
        return f"output 0: {got.dtype}{got.shape}, expected {x.dtype}{x.shape}"
    scale = 1.0 / (1.0 - ratio) if ratio < 1 else 0.0
    kept = np.asarray(actual[1]) if len(actual) > 1 else got != 0
    if kept.dtype != np.bool_ or kept.shape != x.shape:
        return f"mask: {kept.dtype}{kept.shape}, expected bool{x.shape}"
    scaled = np.where(kept, x.astype(np.float64) * scale, 0.0)
    if not np.allclose(got, scaled, rtol=case.rtol, atol=case.atol):
        return "output 0: values are neither 0 nor the scaled input where the mask says"
    return _binomial_problem(float(kept.sum()), np.full(x.shape, 1.0 - ratio), "kept")


def random_judge(case: Case, inputs: list):
    """The statistical judge of a case whose outputs are random, else None."""
    if case.op == "Bernoulli":
        return judge_bernoulli
    if case.op == "Dropout" and len(inputs) > 2 and bool(np.asarray(inputs[2])):
        return judge_dropout
    return None


def _compare_arrays(want: np.ndarray, got: np.ndarray, rtol: float, atol: float) -> str | None:
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype == object:
        return None if np.array_equal(want, got) else "string values differ"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.name == "bfloat16":
        rtol = max(rtol, 2 ** -6)
        want, got = want.astype(np.float32), got.astype(np.float32)
    if want.dtype.kind in "biu":
        if np.array_equal(want, got):
            return None
        bad = int(np.sum(want != got))
        return f"{bad} of {want.size} values differ"
    if np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        return None
    with np.errstate(all="ignore"):
        error = np.abs(got.astype(np.float64) - want.astype(np.float64))
        error = np.where(np.isnan(error), np.inf, error)
    bad = int(np.sum(~np.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True)))
    return f"{bad} of {want.size} values differ (max abs error {float(np.max(error)):.3g})"


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".replace("\n", " ")
    return text if len(text) <= 300 else text[:297] + "..."
