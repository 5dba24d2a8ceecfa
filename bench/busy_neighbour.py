"""A busy neighbour core for the CPU benchmarks (bench/interpret.py, bench/ptx_exec.py).

A machine that runs something else beside the interpreters is the common case (a test suite on every core, a
second user). A BLAS library that starts one thread per core for every product then waits, in every small
product, for the thread whose core is taken; `busy_neighbour()` reproduces that on purpose so the figure
measured with it stays honest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def busy_neighbour() -> Iterator[int | None]:
    """Run a process spinning on one CPU core for the duration of the `with` block; yields that core (None
    where the platform cannot pin a process). The core is the last one this process may use, so with two
    cores the other one stays free for the benchmark. The spinner is killed on exit, also on an error."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    core = cores[-1] if len(cores) > 1 else None
    spin = "while True: pass"
    if core is not None:
        spin = f"import os; os.sched_setaffinity(0, {{{core}}})\n{spin}"
    spinner = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.2)  # let the spinner start and pin itself before the timing does
        yield core
    finally:
        spinner.kill()
        spinner.wait()
