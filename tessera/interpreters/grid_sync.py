"""Thread blocks that wait for each other: how the Tile interpreter runs a kernel with `tile.sem_wait`.

The interpreter normally runs blocks in lockstep batches (`launch.run_grid`), which cannot express one block
waiting for another. A kernel that uses semaphores therefore runs each block alone, in its own Python thread,
every block of the grid started (in the launch's block order) before any waits, as if every block were
resident on the GPU at once. `GridSync` is the memory they share for that: one lock under which every global
atomic (`tile.atomic_add`, `tile.sem_signal`) and every semaphore test happens, and the deadlock check. A wait
that no running block can satisfy any more (every block is waiting or finished, and no waiting block's
condition holds) is a deadlock: each waiting block fails with a KernelHazardError naming its wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class GridDeadlock(Exception):
    """Raised in a waiting block when no block can make progress (converted to a KernelHazardError).
    `secondary` marks a wait given up because another block failed first (that block's error is the one
    to report)."""

    def __init__(self, message: str, secondary: bool = False):
        super().__init__(message)
        self.secondary = secondary


class GridSync:
    """The lock, running count and waiting conditions of a grid of blocks run as threads."""

    def __init__(self, blocks: int):
        self.lock = threading.RLock()
        self._changed = threading.Condition(self.lock)
        self._running = blocks
        self._waiting: dict[int, Callable[[], bool]] = {}
        self.failed = False

    def wait_until(self, condition: Callable[[], bool]) -> None:
        """Block the calling thread until `condition()` (evaluated under the lock) holds; GridDeadlock when
        every other block is waiting or finished and no waiting condition holds, or another block failed."""
        me = threading.get_ident()
        with self._changed:
            self._running -= 1
            self._waiting[me] = condition
            try:
                while not condition():
                    if self.failed:
                        raise GridDeadlock("another block failed while this one waited", secondary=True)
                    if self._running == 0 and not any(c() for c in self._waiting.values()):
                        self.failed = True
                        self._changed.notify_all()
                        raise GridDeadlock("every other block is waiting or finished")
                    self._changed.wait(timeout=1.0)
            finally:
                del self._waiting[me]
                self._running += 1

    def changed(self) -> None:
        """Wake the waiting blocks after global memory changed (a signal or an atomic add)."""
        with self._changed:
            self._changed.notify_all()

    def finished(self, failed: bool = False) -> None:
        """The calling block has run to its end (or failed)."""
        with self._changed:
            self._running -= 1
            self.failed |= failed
            self._changed.notify_all()
