"""Which arithmetic the PTX executor's wgmma uses: "exact" (the default: exact products, the instruction's sum
in float64 rounded once to the accumulator type) or "hopper" (`tessera.sm90.wgmma_numerics`: the measured
block FMA of H100/H200 tensor cores, each term truncated at the block's largest exponent and the sum rounded
toward zero; bit for bit what [KM25]'s test vectors and the recorded GEMM fidelity cases show).

Chosen by the environment variable TESSERA_PTX_WGMMA_NUMERICS (so worker processes of a parallel launch
inherit it), or for a block of code with `wgmma_numerics("hopper")`; read when a launch is set up (its
machine's `wgmma_numerics`), so one launch sees one choice. Under "hopper" a combination the model does not cover (.e4m3/.e5m2 into .f16) stops the run
naming it; integer wgmma is exact either way.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np

from tessera.interpreters.ptx import wgmma_accumulators
from tessera.interpreters.truth import any_set, equal_arrays
from tessera.sm90 import facts
from tessera.sm90.wgmma_numerics import block_fma, block_model

ENVIRONMENT = "TESSERA_PTX_WGMMA_NUMERICS"
NUMERICS = ("exact", "hopper")


def current() -> str:
    """The numerics wgmma uses now ("exact" unless the environment says otherwise); ValueError for a name
    outside `NUMERICS`."""
    name = os.environ.get(ENVIRONMENT, "exact") or "exact"
    if name not in NUMERICS:
        raise ValueError(f"{ENVIRONMENT}={name!r}: the wgmma numerics are one of {', '.join(NUMERICS)}")
    return name


@contextmanager
def wgmma_numerics(name: str):
    """Run the enclosed launches with wgmma numerics `name` ("exact" or "hopper"); the previous choice is
    restored on exit."""
    if name not in NUMERICS:
        raise ValueError(f"the wgmma numerics are one of {', '.join(NUMERICS)}, got {name!r}")
    before = os.environ.get(ENVIRONMENT)
    os.environ[ENVIRONMENT] = name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENVIRONMENT, None)
        else:
            os.environ[ENVIRONMENT] = before


def _accumulators(m, d_block, d_regs, lanes, n: int, dtype_name: str, groups: int) -> np.ndarray:
    """The accumulators of `lanes` in product order [groups, 64, N] float64: a chain's kept values
    (`wgmma_accumulators`) where it has them, the registers otherwise."""
    entry = m.deferred.get(id(d_block)) if d_block is not None else None
    if entry is not None and len(entry.lanes) == len(lanes) and equal_arrays(entry.lanes, lanes):
        return entry.values.astype(np.float64)
    if m.deferred:
        wgmma_accumulators.write_back(m)
    words = d_block[lanes] if d_block is not None else np.stack([r[lanes] for r in d_regs], axis=1)
    if dtype_name == "f16":
        halves = np.stack([words & 0xFFFF, words >> 16], axis=2).astype(np.uint16)
        values = halves.view(np.float16).reshape(len(lanes), -1)
    else:
        values = words.astype(np.uint32).view(np.float32)
    return wgmma_accumulators.product_order(values.astype(np.float64), n).reshape(groups, facts.WGMMA_M, n)


def modelled_product(m, inst, a_stack, b_stack, accumulate, lanes, d_block, d_regs, n: int,
                     a_name: str, b_name: str, dtype_name: str) -> np.ndarray:
    """D' [warpgroups, 64, N] float64 = the Hopper block FMA of each warpgroup's A, B (`a_stack` [Gb, 64 r, K],
    `b_stack` [Gb, N, K], r warpgroups sharing a B) and its accumulators where `accumulate` (per warpgroup),
    already rounded to the accumulator type: the caller writes it with scale-d = 0."""
    try:
        block_model(a_name, dtype_name)
        block_model(b_name, dtype_name)
    except ValueError as error:
        raise m.error(inst, f"{ENVIRONMENT}=hopper: {error}", int(lanes[0])) from None
    groups = len(accumulate)
    c = None
    if any_set(accumulate):
        c = _accumulators(m, d_block, d_regs, lanes, n, dtype_name, groups)
        c[~accumulate] = 0.0
        c = c.reshape(len(b_stack), -1, n)
    d = block_fma(a_stack, b_stack, c, a_name, dtype_name, b_name)
    return d.reshape(groups, facts.WGMMA_M, n)
