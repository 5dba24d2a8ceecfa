"""One BLAS thread while an interpreter runs.

The interpreters issue many small matrix products: the Tile interpreter one 128x128x128-sized product per
block and tile op, the CTA simulator and the PTX executor one 64xNx16 product per warpgroup and wgmma.
NumPy's OpenBLAS splits every product over one thread per core and waits for all of them, so a product
whose work is a few tens of microseconds takes milliseconds as soon as another process holds one of the
cores (measured in bench/interpret.py, the rows with a busy neighbour core). On one thread the same product
never waits. `single_threaded_blas` limits BLAS to one thread (through `threadpoolctl`, for whichever BLAS
NumPy loaded) for the duration of an interpreter run and restores the caller's setting afterwards; the
interpreters' entry points (`run_grid`, `run_target_kernel`, `tessera.ptx.launch`) are decorated with it.

The limit is process-wide (BLAS has no per-thread setting): while any interpreter runs, NumPy products in
other Python threads are single-threaded too. Nested and concurrent uses are counted; the first entry sets
the limit and the last exit restores it.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from threadpoolctl import ThreadpoolController

_lock = threading.Lock()
_depth = 0
_restore = None  # the threadpoolctl limiter of the outermost entry, whose restore_original_limits undoes it


@functools.cache
def _controller() -> ThreadpoolController:
    # Finding the loaded BLAS libraries walks the process's shared objects (milliseconds): done once.
    return ThreadpoolController()


@contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Limit every BLAS library NumPy uses to one thread inside the `with` block, restoring the previous
    limits when the outermost such block (in any thread) exits."""
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = _controller().limit(limits=1, user_api="blas")
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _restore.restore_original_limits()
                _restore = None

