"""SmolLM2's quantized path against its float32 path: teacher-forced top-1 agreement and the
maximum |logit difference| over 64 tokens of 3 natural-text passages, as one 64-row prompt and
one token at a time; with ``--llama-cpp``, llama.cpp's own agreement with the same float32
logits (llama-cpp-python, the same GGUF, its own process). Each position whose top-1 differs is
listed with the float32 path's top-2 margin there (a near-tie flips under any perturbation).
``--more-texts`` adds rows for 3 further passages (other registers: dialogue, code comments,
instructions), so the agreement is not an artifact of the first 192 tokens.
``--greedy`` compares greedy continuations (8 prompts, 32 tokens, ending at an
end-of-generation token) of fuel's quantized path and llama.cpp's on the same file with
llama.cpp's on that file de-quantized to float32 (its float reference), and fuel's float32 path
with that reference: how many tokens agree before the first difference, per prompt.

    python bench/agreement.py [--llama-cpp] [--more-texts] [--greedy] [--gguf FORMAT]

The quantized kernels round the activations to 16-bit blocks (``round_int16_blocks``; llama.cpp
rounds them to 8 bits); both paths read the same weight blocks, so every difference is that
rounding.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

TOKENS = 64
TEXTS = (
    "The history of the printing press begins in the fifteenth century, when Johannes "
    "Gutenberg, a goldsmith from Mainz, combined movable metal type, oil-based ink and a wooden "
    "press adapted from those used to make wine. His workshop printed a Bible around 1455, and "
    "within fifty years presses were running in more than two hundred cities across Europe, "
    "spreading books, pamphlets and news faster than ever before.",
    "To make a simple loaf of bread, mix five hundred grams of flour with a teaspoon of salt and "
    "a packet of dried yeast. Add about three hundred millilitres of warm water and stir until a "
    "rough dough forms. Knead it on a floured surface for ten minutes, until it is smooth and "
    "elastic, then leave it covered in a warm place for an hour, or until it has doubled in "
    "size.",
    "Photosynthesis is the process by which green plants, algae and some bacteria turn light "
    "energy into chemical energy. In the chloroplasts, chlorophyll absorbs sunlight, which "
    "drives the splitting of water molecules and releases oxygen as a by-product. The energy "
    "captured is stored in molecules of glucose, built from carbon dioxide taken from the air, "
    "and this sugar feeds the plant's growth.",
)
MORE_TEXTS = (
    "\"Are you coming to the market tomorrow?\" asked Maria, leaning over the fence. Her "
    "neighbour shook his head and pointed at the sky. \"They say it will rain all morning, and "
    "my knee already aches. Bring me back some apples if you go, the small green ones, and I "
    "will make a pie for both of us on Sunday.\" She laughed and promised she would.",
    "When the server receives a request, it first checks the session token against the cache. "
    "If the token has expired, the client is redirected to the login page; otherwise the "
    "handler reads the user's preferences from the database, renders the template with them "
    "and writes the response. Errors are logged with the request identifier so that they can "
    "be traced later across services.",
    "Before replacing a bicycle tyre, shift the chain onto the smallest rear cog and open the "
    "brake so the wheel can pass. Loosen the axle nuts or the quick release, lift the frame "
    "and pull the wheel free. Use two tyre levers to lift one side of the tyre over the rim, "
    "remove the old tube, and check the inside of the tyre for glass or thorns.",
)


GREEDY_PROMPTS = ("Once upon a time", "The capital of France is", "def fibonacci(n):\n",
                  "The quick brown fox", "In 1492,", "import numpy as np\n",
                  "My favourite food is", "The three laws of robotics are")
GREEDY_TOKENS = 32


def llama_cpp_worker(request: dict) -> None:
    """In its own process: llama.cpp's logits for each id list, saved to one .npz (or, for a
    ``greedy`` request, its greedy continuations printed as JSON)."""
    from llama_peer import greedy_ids, open_llama

    if request.get("greedy"):
        model = open_llama(request["path"], request["threads"])
        print(json.dumps([greedy_ids(model, ids, GREEDY_TOKENS)[0] for ids in request["ids"]]))
        return
    model = open_llama(request["path"], request["threads"], logits_all=True)
    logits = {}
    for index, ids in enumerate(request["ids"]):
        model.reset()
        model.eval(ids)
        logits[f"text{index}"] = np.array(model.scores[:len(ids)], np.float32)
    np.savez(request["output"], **logits)


def compare(name: str, ours: list, references: list) -> None:
    """One row: top-1 agreement, max |logit difference|, per text; then each disagreeing
    position with the reference's top-2 margin."""
    matches = [int(np.sum(a.argmax(-1) == r.argmax(-1))) for a, r in zip(ours, references)]
    differences = [float(np.abs(a - r).max()) for a, r in zip(ours, references)]
    total = sum(a.shape[0] for a in ours)
    per_text = " ".join(f"{m}/{a.shape[0]}" for m, a in zip(matches, ours))
    print(f"{name:<34}{sum(matches) / total:>10.4f}{f'{sum(matches)}/{total}':>9}"
          f"{max(differences):>11.3f}   {per_text}")
    for text, (a, r) in enumerate(zip(ours, references)):
        for position in np.flatnonzero(a.argmax(-1) != r.argmax(-1)):
            top = np.sort(r[position])
            print(f"{'':<4}text {text} position {position}: float32 top-2 margin "
                  f"{top[-1] - top[-2]:.4f}")


def greedy_rows(path: Path, threads: int) -> None:
    """The greedy agreement table of ``--greedy`` (see the module's text)."""
    from llama_peer import agreeing, peer_mode
    from requantize import float32_copy

    from fuel.models.llama import load_gguf

    quantized, float32 = load_gguf(path), load_gguf(path, dtype="float32")
    prompts = [quantized.encode(text) for text in GREEDY_PROMPTS]
    peer_mode(path, threads)

    def llama_cpp(file: Path) -> list:
        request = {"path": str(file), "threads": threads, "greedy": True,
                   "ids": [list(map(int, i)) for i in prompts]}
        done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(request)],
                              check=True, capture_output=True, text=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    reference = llama_cpp(float32_copy(path))
    theirs = llama_cpp(path)
    ours = [list(quantized.generate_ids(i, GREEDY_TOKENS)) for i in prompts]
    floats = [list(float32.generate_ids(i, GREEDY_TOKENS)) for i in prompts]
    print(f"greedy continuations, {len(prompts)} prompts x up to {GREEDY_TOKENS} tokens: tokens "
          f"that agree before the first difference, per prompt (reference lengths "
          f"{[len(r) for r in reference]})")
    rows = (("fuel quantized vs llama.cpp float32", ours, reference),
            ("llama.cpp quantized vs llama.cpp float32", theirs, reference),
            ("fuel quantized vs llama.cpp quantized", ours, theirs),
            ("fuel float32 vs llama.cpp float32", floats, reference))
    for name, found, against in rows:
        counts = [agreeing(a, b) for a, b in zip(found, against)]
        print(f"{name:<42}{sum(counts):>5}  {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", action="store_true",
                        help="also llama.cpp's agreement with the float32 path")
    parser.add_argument("--more-texts", action="store_true",
                        help="also rows for 3 further passages")
    parser.add_argument("--greedy", action="store_true",
                        help="also greedy continuations against llama.cpp's float32 run")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gguf", default=None,
                        help="SmolLM2 requantized to this llama.cpp format first (Q4_K_M, ...)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        llama_cpp_worker(json.loads(args.worker))
        return
    from requantize import smollm_path

    from fuel.models.llama import load_gguf

    path = smollm_path(args.gguf)
    print(f"file: {path.name}")
    quantized, reference = load_gguf(path), load_gguf(path, dtype="float32")
    groups = [("", TEXTS)] + ([(", more texts", MORE_TEXTS)] if args.more_texts else [])
    for suffix, texts in groups:
        ids = [quantized.encode(text)[:TOKENS] for text in texts]
        floats = [reference.forward(i, reference.new_cache(TOKENS), all_logits=True)
                  for i in ids]
        prompt = [quantized.forward(i, quantized.new_cache(TOKENS), all_logits=True)
                  for i in ids]
        decoded = []
        for row in ids:
            cache = quantized.new_cache(TOKENS)
            decoded.append(np.concatenate([quantized.forward([token], cache) for token in row]))
        span = max(float(np.ptp(f)) for f in floats)
        print(f"teacher-forced over {TOKENS} tokens x {len(texts)} texts{suffix} against fuel's "
              f"float32 path (logits span up to {span:.1f})")
        print(f"{'system':<34}{'top-1':>10}{'tokens':>9}{'max |diff|':>11}   per text")
        compare("fuel quantized, one prompt", prompt, floats)
        compare("fuel quantized, token by token", decoded, floats)
        if args.llama_cpp:
            compare("llama.cpp (its q8 activations)", llama_cpp_logits(path, ids, args.threads),
                    floats)
    if args.greedy:
        greedy_rows(path, args.threads)


def llama_cpp_logits(path, ids: list, threads: int) -> list:
    """llama.cpp's logits for each id list, from a worker process."""
    from llama_peer import peer_mode

    peer_mode(path, threads)
    with tempfile.TemporaryDirectory() as folder:
        output = str(Path(folder) / "logits.npz")
        request = {"path": str(path), "threads": threads, "output": output,
                   "ids": [list(map(int, i)) for i in ids]}
        subprocess.run([sys.executable, __file__, "--worker", json.dumps(request)], check=True)
        saved = np.load(output)
        return [saved[f"text{index}"] for index in range(len(ids))]


if __name__ == "__main__":
    main()
