"""Convolutional networks: fuel against onnxruntime on real architectures exported with torch.

Models: torchvision's resnet18, resnet50, mobilenet_v2, mobilenet_v3_small, efficientnet_b0 and
squeezenet1_1 (random weights: speed does not depend on them), a small YOLO-style detector
(conv + BatchNorm + SiLU blocks, a nearest Resize and Concat, three heads) and a UNet/DBNet-style
segmenter (conv + BatchNorm + ReLU, MaxPool, ConvTranspose, a bilinear Resize), defined here.
Each is exported once with ``torch.onnx.export`` (a dynamic batch dim) into the cache folder
(``fuel.extras.cache_root() / "bench_cnn"``) and run at batch 1 and 8.

Every system runs with its default threads in its own process; rounds alternate the systems
(fuel, onnxruntime, fuel, ...), each round a fresh process timing at least ``--calls`` calls
and at least ``--seconds`` of calls (a 1 ms model: hundreds) after the first call and two more
untimed ones, and a system's time is the median over its rounds' medians. Outputs are checked:
the largest difference from onnxruntime's, over the span of onnxruntime's output, must be at
most 1e-4. Prints one row per model and batch (ms per call, fuel / onnxruntime) and the
geometric mean of the ratios.

Beside it, each row's ratio of the two systems' fastest rounds ("best"), and their geometric
mean: on a shared host the cores a process gets change speed for seconds at a time (on the
2-vCPU cloud machine fuel is developed on, a two-thread OpenBLAS loop runs 557 us a call or
760 us for seconds together, while a one-thread loop holds 1067 us: the two vCPUs then share
one core), so a round's median is either speed, and a system whose rounds fell in more slow
spells reads slower by up to a third. The fastest round is each system on the host's cores
undisturbed; the median stays the headline.

    python bench/cnn.py [--models resnet18,yolo] [--batches 1,8] [--rounds 3] [--calls 5]
                        [--seconds 0.5]
    python bench/cnn.py --light      # the 9 light CNNs of onnx's backend test data, batch 1
    python bench/cnn.py --quant dynamic,qdq,qop   # their quantized versions (bench/cnn_quant.py)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import types
from pathlib import Path

import cnn_quant
import numpy as np
from child import child_result, median_seconds

MODELS = ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
          "squeezenet1_1", "yolo", "unet")
SIZES = {"yolo": 320, "unet": 256}  # input height and width (others: 224)
LIGHT = ("light_bvlc_alexnet", "light_densenet121", "light_inception_v1", "light_inception_v2",
         "light_resnet50", "light_shufflenet", "light_squeezenet", "light_vgg19",
         "light_zfnet512")
TOLERANCE = 1e-4
WARMUP = 2  # untimed calls after the first


def _torchvision():
    """torchvision's model definitions. A CUDA build of torchvision beside a CPU torch fails to
    register its detection ops' fake kernels at import; the models need none of them."""
    try:
        import torchvision
    except RuntimeError:
        for name in [n for n in sys.modules if n.startswith("torchvision")]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType(
            "torchvision._meta_registrations")
        import torchvision
    return torchvision


def _detector():
    """A small YOLO-style detector: a strided conv/BN/SiLU backbone, an upsampling neck (nearest
    Resize, Concat) and three 1x1 heads."""
    import torch
    from torch import nn

    def block(cin, cout, stride=1):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                             nn.BatchNorm2d(cout), nn.SiLU())

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(block(3, 16, 2), block(16, 32, 2), block(32, 32))
            self.down3 = nn.Sequential(block(32, 64, 2), block(64, 64))
            self.down4 = nn.Sequential(block(64, 128, 2), block(128, 128))
            self.down5 = nn.Sequential(block(128, 256, 2), nn.Conv2d(256, 128, 1),
                                       nn.BatchNorm2d(128), nn.SiLU())
            self.up4 = block(256, 128)
            self.up3 = block(192, 64)
            self.heads = nn.ModuleList(nn.Conv2d(c, 3 * 85, 1) for c in (64, 128, 128))

        def forward(self, x):
            x3 = self.down3(self.stem(x))
            x4 = self.down4(x3)
            x5 = self.down5(x4)
            p4 = self.up4(torch.cat([nn.functional.interpolate(x5, scale_factor=2.0), x4], 1))
            p3 = self.up3(torch.cat([nn.functional.interpolate(p4, scale_factor=2.0), x3], 1))
            return tuple(head(p) for head, p in zip(self.heads, (p3, p4, x5)))

    return Detector()


def _segmenter():
    """A UNet/DBNet-style segmenter: conv/BN/ReLU encoder with MaxPool, a decoder of
    ConvTranspose upsampling and skip Concats, a bilinear Resize to the input size and a
    sigmoid probability map."""
    import torch
    from torch import nn

    def double(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU(), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU())

    class Segmenter(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = nn.ModuleList([double(3, 16), double(16, 32), double(32, 64),
                                      double(64, 128)])
            self.up = nn.ModuleList(nn.ConvTranspose2d(c, c // 2, 2, 2) for c in (128, 64, 32))
            self.dec = nn.ModuleList([double(128, 64), double(64, 32), double(32, 16)])
            self.head = nn.Conv2d(16, 1, 1)

        def forward(self, x):
            size = x.shape[2:]
            skips = []
            for index, stage in enumerate(self.enc):
                x = stage(x if index == 0 else nn.functional.max_pool2d(x, 2))
                skips.append(x)
            x = skips.pop()
            for up, dec in zip(self.up, self.dec):
                x = dec(torch.cat([up(x), skips.pop()], 1))
            x = nn.functional.interpolate(self.head(x), scale_factor=0.5, mode="bilinear",
                                          align_corners=False)
            return torch.sigmoid(nn.functional.interpolate(x, size=size, mode="bilinear",
                                                           align_corners=False))

    return Segmenter()


def model_path(name: str) -> Path:
    """The exported model of ``name`` (exported into the cache folder the first time)."""
    from fuel.extras import cache_root

    base, kind = cnn_quant.split(name)
    if kind:
        return cnn_quant.quantized_path(model_path(base), kind, SIZES.get(base, 224))
    if name in LIGHT:
        import onnx

        return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"{name}.onnx"
    folder = cache_root() / "bench_cnn"
    path = folder / f"{name}.onnx"
    if path.exists():
        return path
    import torch

    torch.manual_seed(0)
    if name == "yolo":
        module = _detector()
    elif name == "unet":
        module = _segmenter()
    else:
        module = getattr(_torchvision().models, name)()
    module.eval()
    size = SIZES.get(name, 224)
    folder.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    with torch.no_grad():
        torch.onnx.export(module, torch.randn(1, 3, size, size), str(partial), dynamo=False,
                          input_names=["input"], dynamic_axes={"input": {0: "batch"}},
                          opset_version=17)
    partial.replace(path)
    return path


def feeds(name: str, batch: int) -> dict:
    name = cnn_quant.split(name)[0]
    if name in LIGHT:  # fixed shapes: the declared ones
        import onnx

        model = onnx.load(str(model_path(name)), load_external_data=False)
        initializers = {t.name for t in model.graph.initializer}
        rng = np.random.default_rng(0)
        return {v.name: rng.standard_normal([d.dim_value or 1 for d in
                                             v.type.tensor_type.shape.dim]).astype(np.float32)
                for v in model.graph.input if v.name not in initializers}
    size = SIZES.get(name, 224)
    rng = np.random.default_rng(batch)
    return {"input": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}


def measure(system: str, name: str, batch: int, calls: int, save: str,
            seconds: float = 0.0) -> dict:
    """Median seconds per call of ``system`` in this process; its outputs saved to ``save``."""
    path = str(model_path(name))
    inputs = feeds(name, batch)
    if system == "onnxruntime":
        import onnxruntime

        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])

        def run():
            return session.run(None, inputs)
    else:
        import fuel.onnx

        model = fuel.onnx.load(path)

        def run():
            return list(model.run(inputs).values())

    outputs = run()
    median = median_seconds(run, calls, WARMUP, seconds)  # the first replays fault in buffers
    np.savez(save, *[np.asarray(o) for o in outputs])
    return {"seconds": median}


def _difference(save_fuel: str, save_peer: str) -> float:
    ours, theirs = np.load(save_fuel), np.load(save_peer)
    worst = 0.0
    for key in theirs.files:
        expected, actual = theirs[key].astype(np.float64), ours[key].astype(np.float64)
        span = float(expected.max() - expected.min()) or 1.0
        worst = max(worst, float(np.abs(actual - expected).max()) / span)
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--light", action="store_true",
                        help="the 9 light CNNs of onnx's test data (batch 1) instead")
    parser.add_argument("--quant", help="the models' quantized versions instead: any of "
                        "dynamic,qdq,qop (bench/cnn_quant.py; agreement within "
                        f"{cnn_quant.STEPS} quantization steps, or else within onnxruntime's "
                        "own distance from the float model)")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.5,
                        help="each round times calls for at least this long")
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--save", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.system:
        print(json.dumps(measure(args.system, args.model, args.batch, args.calls, args.save,
                                 args.seconds)))
        return
    if args.light:
        args.models, args.batches = ",".join(LIGHT), "1"
    tolerance = cnn_quant.STEPS if args.quant else TOLERANCE
    if args.quant:
        args.models = ",".join(f"{name}@{kind}" for name in args.models.split(",")
                               for kind in args.quant.split(","))
    print(f"machine load (1/5/15 min): {' '.join(f'{v:.2f}' for v in os.getloadavg())}, "
          f"{os.cpu_count()} cpus")
    print(f"{'model':<28} {'batch':>5} {'fuel ms':>10} {'ort ms':>10} {'ratio':>7} "
          f"{'steps apart' if args.quant else 'max diff/span':>14} {'best':>6}")
    ratios, bests, failures = [], [], []
    with tempfile.TemporaryDirectory(prefix="fuel-cnn-") as folder:
        for name in args.models.split(","):
            model_path(name)  # export once, outside the timed workers
            for batch in (int(b) for b in args.batches.split(",")):
                times: dict[str, list[float]] = {"fuel": [], "onnxruntime": []}
                saves = {s: os.path.join(folder, f"{name}-{batch}-{s}.npz") for s in times}
                for _ in range(args.rounds):
                    for system in times:
                        result = child_result(__file__, [
                            "--system", system, "--model", name, "--batch", str(batch),
                            "--calls", str(args.calls), "--seconds", str(args.seconds),
                            "--save", saves[system]])
                        times[system].append(result["seconds"])
                ours, peer = (statistics.median(times[s]) for s in ("fuel", "onnxruntime"))
                difference = (cnn_quant.steps_apart if args.quant else _difference)(
                    saves["fuel"], saves["onnxruntime"])
                ratio = ours / peer
                ratios.append(ratio)
                best = min(times["fuel"]) / min(times["onnxruntime"])
                bests.append(best)
                note, agrees = "", difference <= tolerance
                if not agrees and args.quant:  # within the quantization's own error?
                    floating = os.path.join(folder, f"{name}-{batch}-float.npz")
                    child_result(__file__, ["--system", "onnxruntime", "--model",
                                            cnn_quant.split(name)[0], "--batch", str(batch),
                                            "--calls", "1", "--seconds", "0",
                                            "--save", floating])
                    ours_apart = cnn_quant.farthest(saves["fuel"], saves["onnxruntime"])
                    own_error = cnn_quant.farthest(saves["onnxruntime"], floating)
                    agrees = ours_apart <= own_error
                    note = (f"  ({ours_apart:.1e} apart, onnxruntime {own_error:.1e} from the "
                            f"float model: {'within' if agrees else 'NOT within'} it)")
                if not agrees:
                    failures.append(f"{name} batch {batch}")
                print(f"{name:<28} {batch:>5} {ours * 1e3:>10.2f} {peer * 1e3:>10.2f} "
                      f"{ratio:>6.2f}x {difference:>14.2e} {best:>5.2f}x{note}", flush=True)
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    best_mean = math.exp(sum(math.log(r) for r in bests) / len(bests))
    print(f"geometric mean of fuel / onnxruntime: {mean:.2f}x over {len(ratios)} runs "
          f"(fastest rounds: {best_mean:.2f}x); machine load now {os.getloadavg()[0]:.2f}")
    if failures:
        limit = f"{tolerance} steps" if args.quant else f"{tolerance} of their span"
        raise SystemExit(f"outputs differ from onnxruntime by more than {limit}: "
                         f"{', '.join(failures)}")


if __name__ == "__main__":
    main()
