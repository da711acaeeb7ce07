"""glibc allocator settings for CPU torch work, in gymforge's processes and in the processes they start.

A CPU training or decoding step allocates and frees tensors of megabytes (activations, attention scores, logits).
glibc serves blocks above its mmap threshold with a fresh ``mmap``, gives them back with ``munmap`` and trims the
heap top, so every step faults its pages in again: the tiny_policy Dask worker spent about 40% of its CPU time in
the kernel (bench/RESULTS.md, "CPU training"). Keeping large blocks on the heap and never trimming it leaves the
pages mapped from one step to the next, at the cost of holding the peak heap until the process ends.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

# mallopt options (malloc.h), the value given to mallopt, and the same setting as glibc's environment variable.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8
SETTINGS: tuple[tuple[str, int, int, str], ...] = (
    ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, 1 << 30, str(1 << 30)),
    # -1: never trim; its size_t value spelled out for the variable.
    ("MALLOC_TRIM_THRESHOLD_", M_TRIM_THRESHOLD, -1, str(2**64 - 1)),
    # One arena: another thread's arena grows in 64 MiB heaps, so a Dask worker's task thread would still mmap
    # every larger tensor whatever the threshold.
    ("MALLOC_ARENA_MAX", M_ARENA_MAX, 1, "1"),
)


def tune_allocator() -> None:
    """Apply :data:`SETTINGS` to this process (``mallopt``, glibc only) and export them to the processes it starts.

    glibc reads the variables only at process start: a child started after this call (a Dask worker, a deployment
    run) gets them from its environment, this process needs ``mallopt``. Both are applied on every call, whatever
    the environment held: a Dask nanny whose environment lacks ``MALLOC_TRIM_THRESHOLD_`` exports 64 KiB to its
    workers (a cluster gymforge attaches to, ``--dask-address``), where the 64 KiB trim also pins the mmap
    threshold at 128 KiB; the torch stages running there call this again. Calling it twice changes nothing."""
    os.environ.update({name: text for name, _, _, text in SETTINGS})
    mallopt = _glibc_mallopt()
    if mallopt is not None:
        for _, option, value, _ in SETTINGS:
            mallopt(option, value)


def _glibc_mallopt() -> Callable[[int, int], int] | None:
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):  # not a glibc platform (macOS, Windows)
        return None
    if not libc or not libc.startswith("glibc"):
        return None
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return mallopt


def native_bf16(on_cpu: bool) -> bool:
    """Whether bf16 matrix products run natively where this process computes: a GPU, or a CPU whose oneDNN has a
    bf16 path (AVX512, AVX512-BF16, AMX). Elsewhere torch multiplies bf16 matrices with a reference kernel: on an
    AVX2-only CPU a bf16 product took 87 times a float32 one (bench/bench_bf16.py), so bf16 autocast there is a
    slowdown, not a saving."""
    import torch

    if not on_cpu and torch.cuda.is_available():
        return True
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
