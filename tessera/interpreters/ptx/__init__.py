"""PTX as data, and a CPU executor for it.

- `syntax`: the data model (`Module`, `Entry`, `Instruction`, operands); `parse.parse_ptx(text)` builds it.
- `launch(ptx, kernel, grid, block, args, shared_bytes=..., max_steps=..., memory_budget=...)`: run an entry
  over a grid on NumPy arguments (global arrays, scalars, `TensorMapArg` tensor maps, also of strided views)
  and return the updated arrays (`launch`); launches past the driver's limits or the memory budget are
  refused before anything is allocated, and a batch of CTAs past `max_steps` stops naming where each warp is;
  `ParamStruct` passes a by-value Params struct (CUTLASS, FA3) with pointers and tensor maps inside (`params`).

The executor: `state` (lanes, registers, memories), `decode` (each instruction to a pre-bound closure), `alu`
(integer arithmetic, carry chains, mov), `logic` (logic, shifts, bit fields), `simd` (dp4a, SIMD video), `compare`
(setp, set, selp), `floats` (float arithmetic, comparisons, with PTX rounding in `numerics`), `conversions`
(cvt), `memory` (ld/st/cvta/cp.async), `atomics` (atom/red), `cluster` (clusters: mapa, barrier.cluster, remote
mbarriers, hazards), `sync` (barriers), `mbarrier` (mbarriers), `warp_collectives` (shfl, vote, match, redux,
elect), `bulk_copy` (TMA, bulk copies, st.async/red.async), `wgmma` (its operands read by `wgmma_operands`, their byte layouts in
`shared_chunks`), `ldmatrix` (ldmatrix/stmatrix), `warp_mma` (mma.sync), `asynchrony` (TMA, bulk copies, wgmma and
cp.async complete late: reads before their wait, writes over bytes still read, missing proxy fences and expect_tx
mismatches are `PtxHazardError`s, deadlocks `PtxDeadlockError`s), `reductions` (cp.reduce.async.bulk, the bulk
groups' `.read` rule, races between CTAs that add into one address; `launch(..., cta_order=...)` runs the CTAs in
any order), `schedule` (per-thread pcs, min-pc reconvergence, blocking, deadlock), `control_flow` (branches,
exits, calls and returns), `link` (an entry with the `.func`s it calls, as one instruction list), `cli`
(`tessera-run kernel.ptx`). Registers are NumPy arrays over the threads of a batch of CTAs; an instruction runs
once for all threads at the same pc. What the executor does not implement is refused, before running, with
`PtxExecutionError` naming the instruction and line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tessera.interpreters.ptx.launcher import ParamStruct, TensorMapArg, launch
    from tessera.interpreters.ptx.asynchrony import PtxDeadlockError, PtxHazardError
    from tessera.interpreters.ptx.state import PtxExecutionError


def __getattr__(name: str):
    # The executor is imported on first use: importing the data model stays light for the parser.
    if name in ("launch", "TensorMapArg", "ParamStruct"):
        from tessera.interpreters.ptx import launcher as module

        return getattr(module, name)
    if name == "PtxExecutionError":
        from tessera.interpreters.ptx.state import PtxExecutionError

        return PtxExecutionError
    if name in ("PtxHazardError", "PtxDeadlockError"):
        from tessera.interpreters.ptx import asynchrony

        return getattr(asynchrony, name)
    raise AttributeError(f"module 'tessera.interpreters.ptx' has no attribute {name!r}")


__all__ = ["ParamStruct", "PtxDeadlockError", "PtxExecutionError", "PtxHazardError", "TensorMapArg", "launch"]
