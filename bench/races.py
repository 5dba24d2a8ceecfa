"""The cost of the PTX executor's race detector (tessera/interpreters/ptx/happens_before.py).

    python bench/races.py [--repeats 3]

Runs kernels with generic shared-memory traffic (tests/ptx_kernels: the cp.async row pipeline, the softmax
row, the transpose, the ldmatrix reduction) and one CTA of Tessera's any-shape GEMM (st.shared, proxy fence,
wgmma) through `tessera.ptx.launch` with `races=True` and `races=False`, and prints the best CPU time (of this
process: steadier than wall time on a shared machine) of each and the ratio. Run it under an older checkout too (where `launch` has no `races`) to compare with the
executor before happens-before: the script then times one configuration.
"""

from __future__ import annotations

import argparse
import inspect
import time
from pathlib import Path

import numpy as np

from tessera.interpreters.ptx import launch

KERNELS = Path(__file__).resolve().parent.parent / "tests" / "ptx_kernels"


def _cases():
    rng = np.random.default_rng(0)
    rows, cols, ld = 16, 4000, 4004
    x = rng.standard_normal((rows, ld)).astype(np.float32)
    yield "cp_async_pipeline", lambda **kw: launch(
        (KERNELS / "cp_async_pipeline.ptx").read_text(), "row_scale_sum", (rows, 1, 1), (64, 1, 1),
        [x, np.zeros((rows, ld), np.float32), np.zeros(rows, np.float32), cols, ld, np.float32(0.75)], **kw)
    t = rng.standard_normal((256, 192)).astype(np.float32)
    yield "transpose_2d", lambda **kw: launch((KERNELS / "transpose_2d.ptx").read_text(), "transpose_2d", (6, 8, 1),
                                              (32, 8, 1), [np.zeros((192, 256), np.float32), t, 256, 192], **kw)


def _best(run, repeats: int, **kw) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run(**kw)
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    has_flag = "races" in inspect.signature(launch).parameters
    for name, run in _cases():
        if has_flag:
            on, off = _best(run, options.repeats, races=True), _best(run, options.repeats, races=False)
            print(f"{name:20s} races on {on:7.3f} s   off {off:7.3f} s   ratio {on / off:5.2f}")
        else:
            print(f"{name:20s} {_best(run, options.repeats):7.3f} s (no races flag: the executor before)")


if __name__ == "__main__":
    main()
