"""NumPy's reference time, independent of what ran before it in the process (bench/interpret.py,
bench/ptx_exec.py).

glibc serves an allocation above its mmap threshold (128 KB at start) with a fresh mmap, whose pages fault in
on first touch, and raises the threshold to the size of a freed mmapped chunk (up to 32 MB). NumPy attention's
temporaries at 512 x 1024 fp32 are 2 MB each: in a fresh process every one of them is mapped, touched and
unmapped, and the reference runs 1.7x slower (6.3-6.5 ms against 3.6-3.9 ms on the 2-core machine) than after
any earlier 2 MB+ chunk was freed, which whatever ran before (a simulator launch) may or may not have done.
Freeing one 24 MB array first puts every later temporary on the heap, so the reference is timed in its fast
state every time and a ratio against it does not move with the state the process happens to be in.
"""

from __future__ import annotations

import numpy as np


def settle_heap() -> None:
    """Allocate, touch and free one 24 MB array, raising glibc's mmap threshold above NumPy's temporaries."""
    np.empty(24 << 20, np.uint8).fill(0)
