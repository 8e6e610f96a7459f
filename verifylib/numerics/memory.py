"""Handing freed memory back to the operating system while large encoders are processed.

Why hand-written: the problem is glibc's allocator policy, which no package adjusts. glibc
serves blocks below its mmap threshold from its heaps (one per thread that allocates), and
that threshold rises to 32 MiB in a torch process, so every activation of an encoder
(1500 x d_model floats, the feed-forward's 4x wider ones, the attention scores) comes
from a heap. Heap blocks freed out of order stay resident: for a large-v3-shaped encoder
that is gigabytes holding nothing. The two tools here are glibc's own (``malloc_trim``,
``mallopt``), called through ctypes; with any other C library (macOS, musl), which
returns large blocks by itself, they only collect garbage or do nothing.

The third is set before a process starts (:func:`allocator_environment`): glibc's own
tunable that backs its blocks with transparent huge pages where the kernel grants them on
request (``madvise`` mode, the common default). An executed encoder allocates and frees
activations of tens to hundreds of MiB op after op, and every fresh 4 KiB page of each is a
page fault; with 2 MiB pages, 512 times fewer.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
from typing import Any, Iterable, Iterator, Mapping, TypeVar

T = TypeVar("T")

_GLIBC: Any = False  # not looked up yet; None when the C library is not glibc
_M_MMAP_THRESHOLD = -3  # mallopt parameter number in glibc's malloc.h
_MMAP_THRESHOLD_UNMAPPED = 1 << 20
_MMAP_THRESHOLD_CEILING = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit hosts


def _glibc():
    """Return the process's glibc through ctypes, or None with any other C library."""
    global _GLIBC
    if _GLIBC is False:
        try:
            os.confstr("CS_GNU_LIBC_VERSION")  # ValueError off glibc (macOS, musl)
            _GLIBC = ctypes.CDLL(None)
            _GLIBC.malloc_trim.argtypes = [ctypes.c_size_t]
            _GLIBC.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        except (ValueError, OSError, AttributeError):
            _GLIBC = None
    return _GLIBC


def release_memory() -> None:
    """Collect garbage and hand the C heap's free pages back to the operating system.

    The MIL programs coremltools builds are reference cycles (ops, blocks and values point
    at each other), so a dropped program is freed only by a collection; then
    ``malloc_trim(0)`` returns every heap's free pages (glibc only).
    """
    gc.collect()
    trim_heap()


def trim_heap() -> None:
    """Hand the C heap's free pages back to the operating system, collecting nothing.

    Where only plain references held the freed values (an executed program's activations,
    a reference encoder's, the executor's own program record), reference counting has
    already freed them and a garbage collection finds no tensor: measured on stage 04 and
    the pair gate, every such collection found a few dozen small objects and cost a third
    to half a second, with torch, transformers and coremltools loaded. So those places only
    trim; :func:`release_memory` remains for the cycles coremltools builds.
    """
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


TRIM_EVERY = 16
"""Steps between two trims in :func:`trimmed` (about one encoder block's worth of ops)."""


def trimmed(steps: Iterable[T], every: int = TRIM_EVERY) -> Iterator[T]:
    """Yield ``steps``, handing the heaps' free pages back every ``every`` steps.

    Why: an op-by-op execution frees each activation after its last use, out of order and
    from several threads (torch's workers, the reference forward pass), so glibc's heaps
    fill with free blocks the next activations do not fit. Measured on a large-v3-shaped
    encoder, attribution's resident set grew 2.7 GiB above its live data and peaked at
    9.2 GiB; trimming every 16 ops held the peak at 6.8 GiB. A trim costs about a
    millisecond, so unlike :func:`freed_blocks_unmapped` (a page fault per fresh page of
    every block) it leaves small encoders' executions as fast as before.

    Parameters
    ----------
    steps : iterable
        The steps to pass through (e.g. an executor's op-by-op steps).
    every : int
        Steps between two ``malloc_trim(0)`` calls (glibc only; elsewhere none is made).

    Yields
    ------
    T
        Each item of ``steps``, unchanged and in order.
    """
    libc = _glibc()
    for i, step in enumerate(steps, 1):
        yield step
        if libc is not None and i % every == 0:
            libc.malloc_trim(0)


@contextlib.contextmanager
def freed_blocks_unmapped():
    """Make glibc map every block from 1 MiB up on its own inside, so freeing it unmaps it.

    Measured: tracing a medium-shaped encoder peaked 1.7 GiB above its resident weights,
    0.25 GiB with the threshold at 1 MiB. The cost is a page fault per fresh page of such
    a block. On leaving, the threshold is set to 32 MiB, the ceiling glibc's own
    adjustment climbs to (glibc cannot be handed that adjustment back).

    Yields
    ------
    None
        Control, with glibc's mmap threshold at 1 MiB (no change off glibc).
    """
    libc = _glibc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_UNMAPPED)
    try:
        yield
    finally:
        if libc is not None:
            libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_CEILING)


HUGE_PAGE_TUNABLE = "glibc.malloc.hugetlb=1"
"""glibc's tunable (2.35 and later) that advises the kernel to back the allocator's blocks
with transparent huge pages."""


def allocator_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """Return what to add to a child's environment so its allocator uses huge pages.

    Measured on a parity measurement of tiny.en's encoder (export and stage 04 in one
    process, 2 cores): 24.6 s user + 8.3 s system without, 22.5 s + 4.5 s with, the
    results unchanged (the tunable changes where blocks live, not what is computed).

    Parameters
    ----------
    environ : mapping
        The environment the child would get otherwise.

    Returns
    -------
    dict
        ``{"GLIBC_TUNABLES": HUGE_PAGE_TUNABLE}`` for a glibc process whose environment sets
        no tunable (a user's own ``GLIBC_TUNABLES`` is left as it is); else nothing.
    """
    if "GLIBC_TUNABLES" in environ or _glibc() is None:
        return {}
    return {"GLIBC_TUNABLES": HUGE_PAGE_TUNABLE}
