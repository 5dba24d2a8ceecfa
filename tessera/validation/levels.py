"""Running one kernel at whatever level a module is at, on given Tile-level argument arrays.

- "tile": the Tile IR interpreter over the whole grid (`run_grid`);
- "target": the CTA simulator over every CTA (`run_target_kernel`), checked against the register file when
  `allocate-registers` has annotated the kernel;
- "ptx": the PTX text printed from register-allocated Target IR (allocated on a copy if the module is not),
  run by the PTX executor as `tessera.host` describes the launch.

Inputs are generated once (seeded, standard normal, like `tessera-run`) and rounded to the kernel's element
types by `prepare_arguments`, so every level reads exactly the same bits.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from tessera.interpreters.launch import prepare_arguments, run_grid
from tessera.interpreters.ptx.printed import PtxExecutorMissing, ptx_launcher, ptx_text, run_ptx  # noqa: F401 (moved down:
# tessera.interpret runs PTX without climbing into validation; the names stay here for validation's callers)
from tessera.kernel_abi import KernelSignature, is_target_kernel

TILE, TARGET, PTX = "tile", "target", "ptx"

DEFAULT_SIZES = {
    "attention": {"batch": 1, "heads": 1, "seq_q": 150, "seq_k": 150},
    "gemm": {"M": 130, "N": 136, "K": 200},
}
"""Small sizes that still reach partial blocks and more than one K/V (or K) tile. GEMM's N is a multiple of 8:
a TMA tensor map needs row strides that are multiples of 16 bytes."""


def target_function(module: ModuleOp, name: str) -> func.FuncOp | None:
    return next((op for op in module.walk() if is_target_kernel(op) and op.sym_name.data == name), None)


def level_of(module: ModuleOp, name: str) -> str:
    """"target" once the kernel has been converted to Target IR, else "tile"."""
    return TARGET if target_function(module, name) is not None else TILE


def default_sizes(sig: KernelSignature, sizes: Mapping[str, int] | None) -> dict[str, int]:
    chosen = dict(DEFAULT_SIZES.get(sig.kind, {}))
    chosen.update(sizes or {})
    needed = sig.size_names()
    missing = [n for n in needed if n not in chosen]
    if missing:
        raise ValueError(f"kernel @{sig.name} needs sizes for {', '.join(missing)} (sizes=dict(...) or -d NAME=SIZE)")
    return {n: chosen[n] for n in needed}


KEY_RAMP = (0.5, 2.0)
"""Attention keys are scaled from 0.5 (first key) to 2 (last): later K/V tiles then raise the running max of
many rows, so the rescale path (alpha < 1) is exercised; with i.i.d. keys, a tile of 22 keys after one of 128
often raises no row's max at all, and a dropped rescale would go unseen."""


def generate_inputs(sig: KernelSignature, sizes: Mapping[str, int], seed: int) -> list[np.ndarray]:
    """Standard normal inputs (seeded), one per input of the kernel in its order (Q, K, V and, for a kernel with
    an additive bias, Bias in its own shape, size 1 where broadcast); attention keys get the `KEY_RAMP`."""
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(arg.shape(sizes)).astype(np.float32) for arg in sig.inputs]
    if sig.kind == "attention" and len(inputs) == 3 + sig.bias and inputs[1].ndim == 4:
        seq_k = inputs[1].shape[2]
        inputs[1] *= np.linspace(*KEY_RAMP, seq_k, dtype=np.float32)[:, None]
    return inputs


def outputs_of(sig: KernelSignature, arguments: list[np.ndarray]) -> list[np.ndarray]:
    return [a for a, arg in zip(arguments, sig.args) if arg.role == "out"]


def _allocation(fn: func.FuncOp):
    from tessera import regalloc
    from tessera.passes.allocate_registers import REGISTERS_ATTR

    # looked up at call time, so that a test can stand in for the allocator
    return regalloc.allocate_registers(fn) if REGISTERS_ATTR in fn.attributes else None


def run_level(module: ModuleOp, level: str, sig: KernelSignature, inputs, sizes: Mapping[str, int],
              listeners=None) -> list[np.ndarray]:
    """Run the kernel `sig.name` of `module` at `level` and return its outputs. `listeners` is a factory of
    interpreter listeners (per batch of blocks for "tile", per CTA for "target"; see `recording`)."""
    arguments, bound = prepare_arguments(sig, inputs, sizes)
    if level == TILE:
        from tessera import find_kernel

        run_grid(find_kernel(module, sig.name), module, arguments, bound, listeners)
    elif level == TARGET:
        from tessera.interpreters.sm90.launch import run_target_kernel

        fn = target_function(module, sig.name)
        run_target_kernel(fn, arguments, bound, _allocation(fn), listeners)
    elif level == PTX:
        run_ptx(module, sig, arguments, bound)
    else:
        raise ValueError(f"unknown level '{level}'")
    return outputs_of(sig, arguments)


def writer_block(sig: KernelSignature, module: ModuleOp, inputs, sizes: Mapping[str, int], output: int,
                 index: tuple[int, ...]) -> tuple[int, int, int]:
    """The block (program id x, y, z) that writes element `index` of output number `output`, found by running
    the kernel's Tile IR in `module` over its grid (`GridWrites`); `block_of`'s guess for a builder's kind,
    (0, 0, 0) where no block stores the element (an atomic add, a kernel with semaphores)."""
    from tessera import find_kernel
    from tessera.interpreters.grid_writes import GridWrites

    if sig.kind in ("attention", "gemm"):
        return block_of(sig, module, index)
    arguments, bound = prepare_arguments(sig, inputs, sizes)
    writes = GridWrites(sig.grid_size(bound))
    run_grid(find_kernel(module, sig.name), module, arguments, bound, writes=writes)
    writer = writes.writers.get(id(outputs_of(sig, arguments)[output]))
    block = -1 if writer is None else int(writer[index])
    gx, gy, _ = writes.grid
    return (0, 0, 0) if block < 0 else (block % gx, block // gx % gy, block // (gx * gy))


def block_of(sig: KernelSignature, module: ModuleOp, index: tuple[int, ...]) -> tuple[int, int, int]:
    """The block (program id x, y, z) that writes output element `index`, for the kernels `tessera.kernels`
    builds: attention [b, h, q, d] -> (q // BM, h, b); GEMM [z,] m, n -> (m // BM, n // BN, z), with BM, BN the
    shape of the tile the kernel stores. (0, 0, 0) for other kinds."""
    from tessera.dialects import tile

    store = next((op for op in module.walk() if isinstance(op, tile.StoreGlobalOp)), None)
    if store is None:
        return (0, 0, 0)
    rows, cols = (store.value.type.get_shape() + (1, 1))[:2]
    if sig.kind == "attention" and len(index) == 4:
        b, h, q, _ = index
        return (q // rows, h, b)
    if sig.kind == "gemm" and len(index) in (2, 3):  # [batch,] m, n
        *batch, m, n = index
        return (m // rows, n // cols, batch[0] if batch else 0)
    return (0, 0, 0)
