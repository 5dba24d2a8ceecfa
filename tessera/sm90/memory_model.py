"""The PTX memory model's rules the simulators check, each cited from the PTX ISA (section, anchor and the sentence
quoted as the ISA states it). tests/test_memory_model.py compares every quote with the ISA text as retrieved.

"[P#anchor]" = https://docs.nvidia.com/cuda/parallel-thread-execution/#anchor.

A rule names where it is enforced (`checked_by`: "module:function" of a simulator). The CTA simulator's rules
(`CTA_SIMULATOR_RULES`) are listed in their own table; other simulators add theirs beside it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryModelRule:
    """One rule: its `name`, the ISA `section` (number and title) and `anchor`, the `quote` it rests on, what the
    simulator reports when it is broken (`violation`), and where that is checked (`checked_by`)."""

    name: str
    section: str
    anchor: str
    quote: str
    violation: str
    checked_by: str


# region the CTA simulator (tessera/interpreters/sm90)

WGMMA_FENCE = MemoryModelRule(
    "wgmma-fence",
    "9.7.15.7.1 Asynchronous Multiply-and-Accumulate Instruction: wgmma.fence",
    "asynchronous-warpgroup-level-matrix-instructions-wgmma-fence",
    "The wgmma.fence instruction must be issued by all warps of the warpgroup at the following locations: "
    "Before the first wgmma.mma_async operation in a warpgroup. Between a register access by a thread in the "
    "warpgroup and any wgmma.mma_async instruction that accesses the same registers, either as accumulator or "
    "input register containing fragments of matrix A, except when these are accumulator register accesses across "
    "multiple wgmma.mma_async instructions of the same shape.",
    "a warpgroup's first wgmma with no wgmma_fence before it, or a wgmma whose accumulator or A fragment was "
    "written after the warpgroup's latest wgmma_fence (a chained accumulator excepted)",
    "tessera.interpreters.sm90.wgmma:WgmmaUnit._check_fenced",
)

ASYNC_PROXY_FENCE = MemoryModelRule(
    "async-proxy-fence",
    "9.7.15.4 Async Proxy",
    "asynchronous-warpgroup-level-matrix-async-proxy",
    "Accessing the same memory location across multiple proxies needs a cross-proxy fence. For the async proxy, "
    "fence.proxy.async should be used to synchronize memory between generic proxy and the async proxy.",
    "shared memory written through the generic proxy (st_shared) and read through the async proxy (a wgmma "
    "operand, a bulk copy's source) with no fence_proxy_async on a happens-before path from the store to the "
    "issuing thread",
    "tessera.interpreters.sm90.shared_memory:SharedMemory._check_proxy_fenced",
)

WGMMA_COMPLETION = MemoryModelRule(
    "wgmma-completion",
    "9.7.15.4 Async Proxy",
    "asynchronous-warpgroup-level-matrix-async-proxy",
    "The completion of a wgmma.mma_async operation is followed by an implicit generic-async proxy fence. So the "
    "result of the asynchronous operation is made visible to the generic proxy as soon as its completion is "
    "observed. wgmma.commit_group and wgmma.wait_group operations must be used to wait for the completion of the "
    "wgmma.mma_async instructions.",
    "shared memory a wgmma read, written (a TMA refill, st_shared, cp.async) by a thread that the "
    "wgmma_wait_group completing that read does not happen before (a slot released before the wgmma reading it "
    "completed)",
    "tessera.interpreters.sm90.happens_before:HappensBefore._after_wgmma_reads",
)

MBARRIER_INIT_FENCE = MemoryModelRule(
    "mbarrier-init-fence",
    "9.7.13.4 Parallel Synchronization and Communication Instructions: membar/fence",
    "parallel-synchronization-and-communication-instructions-membar",
    "Qualifiers .op_restrict and .sync_restrict restrict the class of memory operations for which the fence "
    "instruction provides the memory ordering guarantees.",
    "a TMA copy completing on an mbarrier whose init no fence_mbarrier_init (fence.mbarrier_init.release.cluster, "
    "the fence whose .op_restrict is .mbarrier_init) made visible, or whose fence no synchronisation orders "
    "before the issuing thread",
    "tessera.interpreters.sm90.mbarrier:MBarriers.check_init_fenced",
)

WRITE_ORDER = MemoryModelRule(
    "causality-coherence",
    "8.10.1 Axioms: Coherence",
    "memory-consistency-model-coherence",
    "If a write W precedes an overlapping write W' in causality order, then W must precede W' in coherence order.",
    "two overlapping accesses of shared memory by different threads, one of them a write, not ordered by "
    "happens-before (named barriers, mbarrier arrive/wait, cluster barriers): which one a read sees, or which "
    "write lands last, is not decided",
    "tessera.interpreters.sm90.happens_before:HappensBefore.check_write",
)

CTA_SIMULATOR_RULES: tuple[MemoryModelRule, ...] = (WGMMA_FENCE, ASYNC_PROXY_FENCE, WGMMA_COMPLETION,
                                                    MBARRIER_INIT_FENCE, WRITE_ORDER)
"""The rules the CTA simulator checks by happens-before (`tessera.interpreters.sm90.happens_before`)."""

# endregion

__all__ = ["MemoryModelRule", "CTA_SIMULATOR_RULES", "WGMMA_FENCE", "ASYNC_PROXY_FENCE", "WGMMA_COMPLETION",
           "MBARRIER_INIT_FENCE", "WRITE_ORDER"]
