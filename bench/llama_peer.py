"""llama.cpp (llama-cpp-python) as a bench peer: opening a model in a worker process, and a
probe of whether its extra weight buffer types run on this machine.

llama.cpp re-lays weights out at load in "extra" buffer types (AMX tiles where the CPU has
AMX-INT8, else its repacked CPU layouts). On the shared Xeon VM its AMX matmul dies on its
first prompt (SIGILL at ``tilezero``, though the kernel grants the tile permission and a plain
AMX program runs), so a bench first runs a short prompt in a child (``peer_mode``): as built
(``native``); where that dies, with llama.cpp's AMX buffer type refused (``no-amx``: a
seccomp filter fails its request for the tile permission, ``arch_prctl(ARCH_REQ_XCOMP_PERM)``,
so ggml registers no AMX buffer type and keeps its repacked layouts); where that dies too,
with ``use_extra_bufts`` off (``no-extra``: its plain per-type kernels). Every later llama.cpp
worker of the run opens its model so (MODE in the environment), and the bench prints which.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

MODE = "FUEL_BENCH_LLAMA_MODE"  # native, no-amx or no-extra (see above)
MODES = ("native", "no-amx", "no-extra")
ARCH_REQ_XCOMP_PERM = 0x1023


def last_logits(model, vocab: int):
    """The ``vocab`` logits of the context's last evaluated row, as a NumPy view
    (``Llama.scores`` is only filled with ``logits_all=True``, which would make llama.cpp
    compute every prompt position's logits)."""
    import llama_cpp
    import numpy as np

    pointer = llama_cpp.llama_get_logits_ith(model._ctx.ctx, -1)
    return np.ctypeslib.as_array(pointer, shape=(vocab,))


def greedy_ids(model, ids: list, count: int, stop: bool = True) -> tuple[list[int], float]:
    """llama.cpp's greedy continuation of ``ids``: up to ``count`` tokens, ending after an
    end-of-generation token where ``stop`` (as fuel's generations do); and the seconds the
    tokens after the first took."""
    import time

    import llama_cpp

    vocab = model.n_vocab()
    model.reset()
    model.eval(ids)
    produced = [int(last_logits(model, vocab).argmax())]
    started = time.perf_counter()
    while len(produced) < count:
        if stop and llama_cpp.llama_vocab_is_eog(model._model.vocab, produced[-1]):
            break
        model.eval([produced[-1]])
        produced.append(int(last_logits(model, vocab).argmax()))
    return produced, time.perf_counter() - started


def agreeing(ours: list[int], reference: list[int]) -> int:
    """Tokens of two greedy continuations that agree before the first difference."""
    count = 0
    for a, b in zip(ours, reference):
        if a != b:
            break
        count += 1
    return count


def refuse_amx_permission() -> None:
    """From now on this process's arch_prctl(ARCH_REQ_XCOMP_PERM, ...) fails with EPERM (a
    seccomp filter: x86-64 syscall 158 with that first argument); every other call passes."""
    import ctypes

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("length", ctypes.c_uint16), ("filter", ctypes.POINTER(Instruction))]

    load, equal, give = 0x20, 0x15, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
    allow, refuse = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    code = [(load, 0, 0, 4), (equal, 0, 5, 0xC000003E),  # arch: x86-64, else allow
            (load, 0, 0, 0), (equal, 0, 3, 158),  # syscall number: arch_prctl
            (load, 0, 0, 16), (equal, 0, 1, ARCH_REQ_XCOMP_PERM),  # first argument
            (give, 0, 0, refuse), (give, 0, 0, allow)]
    instructions = (Instruction * len(code))(*[Instruction(*step) for step in code])
    program = Program(len(code), instructions)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                           ctypes.c_ulong]
    if libc.prctl(38, 1, None, 0, 0) != 0 or \
            libc.prctl(22, 2, ctypes.cast(ctypes.pointer(program), ctypes.c_void_p), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")  # PR_SET_SECCOMP, FILTER


def open_llama(path: str, threads: int, **options):
    """A llama_cpp.Llama on ``path`` with ``threads`` threads (prompt and decode), 512 positions
    and batch, in the run's MODE (call it once per process: no-amx installs a filter)."""
    import llama_cpp
    from llama_cpp import Llama

    mode = os.environ.get(MODE, "native")
    if mode == "no-amx":
        refuse_amx_permission()
    if mode == "no-extra":
        defaults = llama_cpp.llama_cpp.llama_model_default_params

        def without_extra_buffers():
            params = defaults()
            params.use_extra_bufts = False
            return params

        llama_cpp.llama_cpp.llama_model_default_params = without_extra_buffers
    return Llama(model_path=str(path), n_ctx=512, n_batch=512, n_threads=threads,
                 n_threads_batch=threads, verbose=False, **options)


def peer_mode(path, threads: int) -> str:
    """The first of MODES in which llama.cpp runs a 16-token prompt on ``path`` (each tried in
    a child process), set as MODE in this process's environment (inherited by the workers
    started after it; kept where already set) and, where not ``native``, said."""
    if os.environ.get(MODE) in MODES:
        return os.environ[MODE]
    request = json.dumps({"path": str(path), "threads": threads})
    failed = []
    for mode in MODES:
        done = subprocess.run([sys.executable, __file__, request], capture_output=True,
                              text=True, env=dict(os.environ, **{MODE: mode}))
        if done.returncode == 0:
            break
        failed.append(f"{mode} (exit status {done.returncode})")
    else:
        raise SystemExit(f"llama.cpp failed a 16-token prompt on {path} in every mode: "
                         f"{', '.join(failed)}")
    os.environ[MODE] = mode
    if failed:
        meaning = ("AMX permission refused, repacked weights kept" if mode == "no-amx" else
                   "use_extra_bufts off: no AMX, no repacked weights")
        print(f"note: llama.cpp failed as {', then '.join(failed)} on this machine; its "
              f"workers run {mode} ({meaning})")
    return mode


if __name__ == "__main__":
    probe = json.loads(sys.argv[1])
    model = open_llama(probe["path"], probe["threads"])
    model.eval(list(range(100, 116)))
