"""Fill the NVRTC cache (``$FUEL_CACHE_DIR/cuda``) with every CUDA kernel the kernel suite
launches, compiled in parallel, so a GPU run of the suite loads them instead of compiling
some 3,700 sources one by one:

    python3 -m tests.backends.cuda.warm sm_90     # the H200's architecture (a cubin each)

The cache key is the source and the options the backend compiles with; the architecture must
be the one the backend picks for the device (``fuel.backends.cuda.runtime.target``).
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from fuel.compiler import nvrtc
from fuel.compiler.render_cuda import CUDA_OPTIONS
from tests.backends.cuda.renderings import renderings


def _compile(job: tuple[str, str]) -> str | None:
    source, arch = job
    try:
        nvrtc.compile_cuda(source, arch, CUDA_OPTIONS)
    except Exception as error:  # noqa: BLE001 - reported, the others go on
        return str(error)[:2000]
    return None


def main() -> None:
    arch = sys.argv[1] if len(sys.argv) > 1 else "sm_90"
    items, _ = renderings()
    started = time.perf_counter()
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        errors = [e for e in pool.map(_compile, [(i.source, arch) for i in items], chunksize=16)
                  if e]
    print(f"{len(items)} kernels compiled for {arch} in {time.perf_counter() - started:.1f} s "
          f"({len(errors)} failed)")
    for error in errors[:3]:
        print(error)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
