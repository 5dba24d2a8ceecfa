"""The CTA simulator: an interpreter for Target IR (the `sm90` dialect over upstream arith/math/vector/scf).

One CTA at a time, every SSA value held for all its threads at once (`registers`); divergent branches as
cooperatively scheduled strands (`strands`, `control`); shared memory as bytes at absolute addresses with
per-byte visibility tags (`shared_memory`); mbarriers, TMA copies, cp.async copies and wgmma groups as
asynchronous units whose misuse is reported with the op and the thread (`mbarrier`, `tma`, `cp_async`,
`wgmma`); the sm90 ops themselves in
`machine`, the backward's atomic and bulk reductions between CTAs and stmatrix in `reductions` (with the races
`global_memory` reports whatever order `run_target_kernel(..., cta_order=...)` runs the CTAs in). The kernel runs as
closures compiled once and shared by its CTAs (`program`), not through xDSL's interpreter. Every hardware fact
comes from `tessera.sm90.facts`. Entry point: `launch.run_target_kernel` (the kernel it reads: `target_abi`).
"""

from tessera.interpreters.sm90.launch import run_target_kernel
from tessera.interpreters.sm90.target_abi import target_kernel
from tessera.interpreters.sm90.strands import DeadlockError

__all__ = ["run_target_kernel", "target_kernel", "DeadlockError"]
