"""The PTX memory model's ordering rules the simulators check, and those the lowering's choice of synchronisation
rests on (`LOWERING_RULES`: the remote mbarrier arrive's semantics and scope), each cited from the PTX ISA with the
sentence it rests on ([P#anchor] = https://docs.nvidia.com/cuda/parallel-thread-execution/#anchor, PTX ISA 9.x).

A `Rule` names the rule, its section anchor, the quoted sentence (verbatim, whitespace aside;
tests/test_memory_model.py compares it with the ISA text transcribed there), what a simulator does with it, and
where the CTA simulator enforces it (`checked_by`, "module:qualified.name"; empty where only the PTX executor
applies it). One rule, one constant: both simulators apply the same rule objects. The tables are data: the checks
live in the simulators (the PTX executor: tessera/interpreters/ptx/happens_before.py, sync_edges.py,
async_records.py, peer_accesses.py, proxy_fences.py, asynchrony.py, wgmma_tracking.py, wgmma_read_tracking.py,
sync.py, mbarrier.py, cluster.py;
the CTA simulator: tessera/interpreters/sm90/happens_before.py, wgmma.py, wgmma_groups.py, mbarrier.py,
shared_memory.py, shared_reads.py, global_races.py, register_check.py, cluster.py) and name the rule they apply.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    """One ordering rule: `section` is the PTX ISA anchor, `quote` the sentence it rests on, `check` what a
    simulator reports or orders because of it, `checked_by` the CTA simulator's function that enforces it."""

    name: str
    section: str
    quote: str
    check: str
    checked_by: str = ""


# region the rules (the PTX executor applies all but WRITE_ORDER's end-of-kernel checks; the CTA simulator those in
# CTA_SIMULATOR_RULES)
BARRIER_ORDERING = Rule(
    "barrier orders memory", "parallel-synchronization-and-communication-instructions-bar",
    "guarantees that when the barrier completes, prior memory accesses requested by this thread are performed "
    "relative to all threads participating in the barrier",
    "a completed named or CTA barrier is a release by every participant and an acquire by every waiter "
    "(vector clocks joined); generic accesses to one byte, one a write, need such an order or are a race",
    "tessera.interpreters.sm90.happens_before:HappensBefore.check_write")

BARRIER_COUNT = Rule(
    "barrier thread count", "parallel-synchronization-and-communication-instructions-bar",
    "When a barrier completes, the waiting threads are restarted without delay, and the barrier is reinitialized "
    "so that it can be immediately reused.",
    "more threads arriving at once than the barrier's thread count is reported: the barrier completes with as many "
    "as the count and the others wait for its next phase, which ones depending on timing")

MBARRIER_INIT_BEFORE_USE = Rule(
    "mbarrier.init before its uses", "parallel-synchronization-and-communication-instructions-mbarrier-init",
    "mbarrier.init.shared::cta.b64 [shMem], 12; bar.sync 0; // ... other mbarrier operations on shMem",
    "mbarrier.init is a write of the barrier object: an arrive or wait of another thread that the init does not "
    "happen before is a race (the bar.sync after the inits is missing)")

MBARRIER_INIT_FENCE = Rule(
    "fence.mbarrier_init releases inits to the cluster", "parallel-synchronization-and-communication-instructions-membar",
    "When .op_restrict is .mbarrier_init, the synchronizing effect of the fence only applies to the prior "
    "mbarrier.init operations executed by the same thread on mbarrier objects in .shared::cta state space.",
    "fence.mbarrier_init exists only as .release.cluster: a release, at cluster scope, of the thread's own inits. "
    "One rule for both simulators: a peer CTA's remote arrive, multicast or copy completing on an mbarrier needs "
    "its init released at cluster scope (a fence.mbarrier_init of the initialising thread, or its "
    "barrier.cluster.arrive with .release; .relaxed does not release) and a cluster barrier after it; inside one "
    "CTA, TMA copies the CTA's own threads issue included, the bar.sync after the inits orders them "
    "(MBARRIER_INIT_BEFORE_USE) and no fence is asked for. CUTLASS's pipelines and FlashAttention-3 issue the "
    "fence in every kernel and pass either way; Triton's single-CTA TMA kernels and Tessera's kernels without the "
    "fence are correct and accepted. The CTA simulator needs no check of its own: a Target IR cluster_arrive is "
    ".release")

PROXY_FENCE = Rule(
    "generic writes read by the async proxy", "parallel-synchronization-and-communication-instructions-membar",
    "Value .async of the .proxykind qualifier specifies that the memory ordering is established between the async "
    "proxy and the generic proxy.",
    "a generic store read by a TMA or bulk store or a wgmma operand needs a fence.proxy.async on a happens-before "
    "path from the store to the read (in any thread: a barrier carries other threads' stores to the fence); in the "
    "PTX executor so does a generic store that an async-proxy copy overwrites (a TMA or bulk store in global memory, "
    "a TMA or bulk load in the issuing CTA's shared memory)",
    "tessera.interpreters.sm90.shared_memory:SharedMemory._check_proxy_fenced")

WGMMA_FENCE = Rule(
    "wgmma.fence before register operands", "asynchronous-warpgroup-level-matrix-instructions-wgmma-mma-async",
    "wgmma.fence instruction must be used to fence the register accesses of wgmma.mma_async instruction from their "
    "prior accesses. Otherwise, the behavior is undefined.",
    "a wgmma.mma_async whose accumulator or A registers another instruction of the thread accessed since its last "
    "wgmma.fence is reported. The CTA simulator with a register allocation judges the allocated registers, as the "
    "PTX executor judges the printed ones (a zero accumulator under scale-d 0 that no instruction writes needs no "
    "fence; registers the softmax read since the fence do: WGMMA_FENCE_SCALE_D); without one, SSA values (a value "
    "feeding the wgmma that an instruction computed after the fence, `wgmma.WgmmaUnit._check_fenced`; a constant "
    "accumulator under scale-d 0 is none: an immediate the wgmma does not read, which the printer folds)",
    "tessera.interpreters.sm90.register_check:RegisterFileChecker._check_fenced")

PROXY_FENCE_STATE_SPACE = Rule(
    "a proxy fence orders the state space it names", "parallel-synchronization-and-communication-instructions-membar",
    "The memory ordering is limited only to operations performed on objects in the state space specified.",
    "global memory too: a generic global store (st.global, atom/red) read by the async proxy (a TMA load, a bulk "
    "copy or reduction reading global memory) needs a fence.proxy.async or fence.proxy.async.global on a "
    "happens-before path from the store to the read; fence.proxy.async.shared::cta orders shared memory only. "
    "Another CTA's store is ordered by a release and an acquire: the fence may precede the release or follow "
    "the acquire. Target IR has only the .shared::cta fence, so the CTA simulator reports every TMA load of bytes "
    "a generic store wrote in the launch (an unordered one as a data race first, DATA_RACE)",
    "tessera.interpreters.sm90.global_races:GlobalAccesses._check_proxy")

WGMMA_FENCE_SCALE_D = Rule(
    "wgmma.fence before a wgmma that writes its accumulator",
    "asynchronous-warpgroup-level-matrix-instructions-wgmma-fence",
    "Between a register access by a thread in the warpgroup and any wgmma.mma_async instruction that accesses the "
    "same registers, either as accumulator or input register containing fragments of matrix A, except when these "
    "are accumulator register accesses across multiple wgmma.mma_async instructions of the same shape.",
    "a wgmma.mma_async with scale-d false (D = A*B) reads no accumulator but still accesses (writes) those "
    "registers: a wgmma.fence must separate it from the thread's earlier accesses of them (storing or rescaling "
    "the previous result, zeroing), exactly as for scale-d true. The exemption covers only wgmma.mma_async "
    "instructions of the same shape; a wgmma of another shape (or type) on the same accumulator registers needs "
    "the fence too. The CTA simulator applies it to the allocated registers (a chained accumulator has one shape "
    "in Target IR); without an allocation, to the chain's registers: the chained wgmmas' accumulator is one set of "
    "registers, which an SSA value keeps in every loop trip, so an instruction reading the chain's previous result "
    "after the warpgroup's latest fence is reported (`wgmma_checks.wgmma_accumulator_chains`)",
    "tessera.interpreters.sm90.register_check:RegisterFileChecker._check_fenced")

WGMMA_A_ROWS_PER_WARP = Rule(
    "each warp's part of a wgmma reads its own rows of A",
    "asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n16",
    "Elements of the matrix are distributed across the threads in a warpgroup so each thread of the warpgroup "
    "holds a fragment of the matrix.",
    "warp w of the warpgroup holds rows 16w..16w+15 of A and of D (Figures 148 and 149, "
    "sm90.wgmma.WGMMA_ROWS_PER_WARP): the part of a wgmma each warp issues (.sync.aligned across itself) computes "
    "its D rows from those A rows and the whole of B. So a generic store into shared-memory A rows needs a "
    "fence.proxy.async on a path into the warp that owns them, not into every warp of the warpgroup (FA3's "
    "forward with P through shared memory: each warp stores and fences its own P rows, then only __syncwarp); "
    "B, read by every warp, needs the path into all four")

WGMMA_WAIT_PER_THREAD = Rule(
    "each thread waits for its own wgmma groups", "asynchronous-warpgroup-level-matrix-instructions-wgmma-wait-group",
    "wgmma.wait_group instruction will cause the executing thread to wait until only N or fewer of the most recent "
    "wgmma-groups are pending and all the prior wgmma-groups committed by the executing threads are complete.",
    "the registers of a wgmma are released to a thread by that thread's own wgmma.wait_group (counting the groups "
    "its warp committed): a wait executed by some threads of the warpgroup (a predicated or divergent wait, "
    "undefined under .aligned) covers none of the others, whose accumulator and A registers stay pending. The CTA "
    "simulator refuses a wait_group that only part of a warpgroup executes. Shared memory: "
    "WGMMA_GROUP_PER_WARPGROUP",
    "tessera.interpreters.sm90.wgmma_groups:WgmmaGroups.wait")

WGMMA_GROUP_PER_WARPGROUP = Rule(
    "one wgmma-group per warpgroup", "asynchronous-warpgroup-level-matrix-instructions-wgmma-commit-group",
    "wgmma.commit_group instruction creates a new wgmma-group per warpgroup and batches all prior "
    "wgmma.mma_async instructions initiated by the executing warp but not committed to any wgmma-group into the "
    "new wgmma-group.",
    "the wgmma-group is the warpgroup's, and a wait completes it whole (\"wait for the completion of all "
    "wgmma.mma_async operations in a wgmma-group\"): any thread's wgmma.wait_group that covers the group "
    "completes the shared-memory reads of all four warps' wgmmas in it, so a write of those bytes that happens "
    "after such a wait of any thread of the warpgroup (the writing thread's own wait by program order, another "
    "thread's through a barrier or an mbarrier arrive) is ordered after the reads. CUTLASS's PipelineTmaAsync and "
    "FlashAttention-3 release a slot from one thread per warpgroup after its own wait, and a one-warpgroup loop may "
    "refill its operands right after its wait. Reads by another warpgroup are that warpgroup's group: a write "
    "after warpgroup 0's wait still races warpgroup 1's reads of the same bytes (B, which both read) until one of "
    "warpgroup 1's waits is ordered before it. Registers stay per thread (WGMMA_WAIT_PER_THREAD). The Tile "
    "interpreter applies it to a tile.mma's row groups of 64 rows (one warpgroup each once lowered): a store of a "
    "row another group read, before a tile.barrier, is a race; the group's own rows are not",
    "tessera.interpreters.sm90.happens_before:HappensBefore._after_wgmma_reads")

WGMMA_WAIT = Rule(
    "wgmma results and operands after wait_group", "asynchronous-warpgroup-level-matrix-instructions-wgmma-mma-async",
    "wgmma.commit_group and wgmma.wait_group operations must be used to wait for the completion of the "
    "asynchronous matrix multiply and accumulate operations before the results are accessed.",
    "registers of a wgmma whose group no wgmma.wait_group covers are reported when touched; shared bytes it reads "
    "may be overwritten only after a wait_group that happens before the write (a slot released before its wgmma "
    "completed is a race)",
    "tessera.interpreters.sm90.happens_before:HappensBefore._after_wgmma_reads")

CP_ASYNC_ORDER = Rule(
    "cp.async completes only at its wait", "data-movement-and-conversion-instructions-cp-async",
    "There is no ordering guarantee between two cp.async operations if they are not explicitly synchronized using "
    "cp.async.wait_all or cp.async.wait_group or mbarrier instructions.",
    "bytes of a cp.async are in flight until the issuing thread's cp.async.wait_group/wait_all or "
    "cp.async.mbarrier.arrive covers them: a read or write of them before is reported, and so is a write of its "
    "global source not ordered after that point (the PTX executor)")

CP_ASYNC_COMPLETION = Rule(
    "asynchronous copies complete only through their mechanism", "data-movement-and-conversion-instructions-cp-async",
    "No other synchronization mechanism guarantees the completion of the asynchronous copy operations.",
    "a barrier does not land a copy: a thread that did not wait on the copy's group or mbarrier, and was not "
    "ordered after one that did, reads bytes still in flight")

CP_ASYNC_MBARRIER = Rule(
    "an mbarrier phase publishes the cp.async copies requested before its arrivals",
    "parallel-synchronization-and-communication-instructions-mbarrier-test-wait-try-wait",
    "All cp.async operations requested prior, in program order, to cp.async.mbarrier.arrive during the completed "
    "phase by the participating threads of the CTA are performed and made visible to the executing thread.",
    "a thread's cp.async copies complete before the arrive-on of each later cp.async.mbarrier.arrive of that "
    "thread: a thread that observed the phase of any such arrive (or is ordered after one that did, or after a "
    "later release of the copying thread) may read them, not only the observers of the barrier the copies "
    "counted on. So a consumer's wait for a ring slot's copies may be covered by its wait for the next slot, "
    "whose arrivals the producer made after requesting them",
    "tessera.interpreters.sm90.shared_reads:SharedReadChecks._copied_before")

CP_ASYNC_PROXY = Rule(
    "cp.async writes are generic-proxy writes", "data-movement-and-conversion-instructions-cp-async",
    "cp.async is treated as a weak memory operation performed in the generic proxy in the Memory Consistency Model.",
    "by the ISA's letter a wgmma (async proxy) reading bytes a cp.async wrote needs a fence.proxy.async on a path "
    "from the copy's completion to the read, as a generic store does (PROXY_FENCE); `launch(..., strict_proxy=True)` "
    "(`tessera-run --strict-proxy`) checks that. NVIDIA's kernels rely on the mbarrier instead, and the executor "
    "follows them by default: bytes a cp.async.mbarrier.arrive completed are visible to the async proxy of every "
    "thread the completion happens before (the phase's waiters, and paths on from them), as a bulk copy's completion "
    "is followed by an implicit generic-async proxy fence. The evidence (CUTLASS and flash-attention at the commits "
    "docs/races-seeded-library.md names): CUTLASS's sm90_mma_multistage_gmma_{ss,rs}_warpspecialized.hpp (the mainloop "
    "KernelScheduleAuto picks when A or B is not aligned for TMA) and its sm100 cp.async UMMA mainloops complete each "
    "stage with cpasync_barrier_arrive and issue the MMA after the consumer's wait with no fence_view_async_shared; "
    "FlashAttention-3's forward (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp) loads packed-GQA Q and non-TMA paged K/V "
    "the same way with no fence, while it fences every st.shared a wgmma reads (rotary Q, P, the transposed V before "
    "its mbarrier arrive). So generic stores stay under PROXY_FENCE even when an mbarrier orders them (CUTLASS's "
    "cp.async mainloop zero-fills a partial first k-tile with st.shared and no fence: reported), and copies completed "
    "by cp.async.wait_group need the fence: no NVIDIA kernel relies on that path. The CTA simulator applies the same "
    "default to the bytes a cp_async_mbarrier_arrive_noinc landed (`CtaState.strict_proxy` the letter)",
    "tessera.interpreters.sm90.shared_reads:SharedReadChecks.check_async_read")

BULK_READ_BEFORE_EXIT = Rule(
    "a bulk store reads shared memory until wait_group.read",
    "data-movement-and-conversion-instructions-cp-async-bulk-wait-group",
    "have completed reading from their source locations",
    "a bulk or TMA store (cp.async.bulk{.tensor}.global.shared::cta.bulk_group) and a bulk reduction read their "
    "shared source until a cp.async.bulk.wait_group{.read} of the issuing thread covers their bulk group: a write "
    "into those bytes before it, or the CTA exiting before it (its shared memory is freed), is reported")

BULK_WRITE_COMPLETION = Rule(
    "a bulk store writes global memory until a wait_group without .read",
    "data-movement-and-conversion-instructions-cp-async-bulk-wait-group",
    "The optional .read modifier indicates that the waiting has to be done until all the bulk async operations in "
    "the specified bulk async-group have completed reading from their source locations",
    "a .read wait ends the reads only: a bulk or TMA store's (or bulk reduction's) writes of global memory are in "
    "flight until a cp.async.bulk.wait_group without .read of the issuing thread covers its bulk group, and an access "
    "of those bytes not ordered after that wait (after a .read wait and a barrier, or after none) is reported naming "
    "the store (`global_order.GlobalOrder.writes_completed`)")

TMA_READ_UNTIL_COMPLETE = Rule(
    "a TMA load reads global memory until its complete-tx",
    "data-movement-and-conversion-instructions-cp-async-bulk-tensor",
    "The copy operation in cp.async.bulk.tensor is treated as a weak memory operation and the complete-tx "
    "operation on the mbarrier has .release semantics at the .cluster scope",
    "a TMA load's read of global memory is a weak access of the async proxy that ends at its complete-tx, a "
    "release into the mbarrier phase it counts towards: a thread that observed that phase complete (a successful "
    "wait, or any causality path from one: a barrier after it, or an mbarrier arrive after it whose phase this "
    "thread waited on) is ordered after the read and may overwrite the source; a thread of the CTA "
    "ordered only after the issue (a bar.sync after it) is not: its generic write of those bytes is reported, "
    "naming the copy and the phase",
    "tessera.interpreters.sm90.global_races:GlobalAccesses._check_until")

CLUSTER_EXIT_WAIT = Rule(
    "an exited CTA does not hold up the cluster barrier", "control-flow-instructions-exit",
    "If the exiting threads are holding up the barrier, the barrier is released.",
    "a cluster barrier phase completes without the threads that exited, so it orders a peer's remote operation on "
    "a CTA's mbarrier (a remote arrive, a multicast's complete_tx) before that CTA's exit only if a thread of the "
    "CTA waited for the phase (barrier.cluster.wait) and the peer arrived at it after the operation; otherwise the "
    "CTA may exit, and its shared memory be freed, while the operation is pending: reported at the exit",
    "tessera.interpreters.sm90.cluster:Cluster.exit")

CLUSTER_BARRIER_ORDERING = Rule(
    "a cluster barrier orders what its .release arrivals did before arriving",
    "parallel-synchronization-and-communication-instructions-barrier-cluster",
    "The optional .relaxed qualifier on barrier.cluster.arrive specifies that there are no memory ordering and "
    "visibility guarantees provided for the memory accesses performed prior to barrier.cluster.arrive.",
    "a barrier.cluster.arrive (.release by default) releases the accesses its thread made before it, and each "
    "barrier.cluster.wait (.acquire by default) acquires what the phase's arrivals released, in every CTA of the "
    "cluster: what a thread does between its arrive and its wait is not ordered before the other threads' accesses "
    "after their waits, whenever the phase completes, and a .relaxed arrival orders nothing (its thread's earlier "
    "accesses, a distributed shared memory store into a peer included, race the peer's reads after the barrier) "
    "but what a release fence before it released (fence.acq_rel, fence.sc, membar; fence.mbarrier_init for the "
    "thread's own inits, as CUTLASS's cluster kernels start: fence_barrier_init, cluster_arrive_relaxed). "
    "The CTA simulator needs no check of its own: a Target IR cluster_arrive is .release and its wait follows it")

WRITE_ORDER = Rule(
    "causality orders overlapping writes", "memory-consistency-model-coherence",
    "If a write W precedes an overlapping write W' in causality order, then W must precede W' in coherence order.",
    "two overlapping accesses of shared memory by different threads, one of them a write, not ordered by "
    "happens-before (named barriers, mbarrier arrive/wait, cluster barriers): which one a read sees, or which "
    "write lands last, is not decided, and it is reported with both sides. Across a cluster too: a multicast or "
    "bulk copy into a peer CTA's shared memory must follow that peer's reads of the bytes in causality order "
    "(the peer's threads released them on an mbarrier the issuing thread waited on, remotely or through a "
    "barrier of their own CTA, or a cluster barrier), so a slot released to the wrong CTA is a race; and any write "
    "into a CTA's shared memory (a store, a TMA, bulk, multicast, st.async or red.async copy landing) must follow "
    "the reads of those bytes that peer CTAs made through shared::cluster addresses",
    "tessera.interpreters.sm90.happens_before:HappensBefore.check_write")

DATA_RACE = Rule(
    "conflicting accesses need causality order", "memory-consistency-model-conflict-and-data-races",
    "Two conflicting memory operations are said to be in a data-race if they are not related in causality order "
    "and they are not morally strong.",
    "global memory (ld/st.global, a cp.async's source, a TMA copy's source, red/atom and bulk reductions, "
    "semaphores): two accesses of "
    "the same bytes by different threads or CTAs, at least one a write (they conflict), neither ordered before the "
    "other (inside a CTA by barriers and mbarrier phases; between CTAs by a semaphore release and acquire) are a "
    "race, reported with both sides. The PTX executor (global_order) also names the proxy (generic or async: TMA, "
    "bulk copies and reductions) and orders CTAs by release/acquire patterns only (RELEASE_ACQUIRE)",
    "tessera.interpreters.sm90.global_races:GlobalAccesses.access")

ATOMICS_ARE_INDIVISIBLE = Rule(
    "atomics do not race each other", "parallel-synchronization-and-communication-instructions-atom",
    "Atomically loads the original value at location a into destination register d, performs a reduction "
    "operation with operand b and the value in location a, and stores the result of the specified operation at "
    "location a, overwriting the original value.",
    "two atomic read-modify-writes of the same bytes (atom, red, bulk reductions, semaphore signals and waits) "
    "are morally strong and never a race, whatever their order (which decides only the rounding of f32 sums); an "
    "atomic and a plain access of the same bytes conflict like two plain ones",
    "tessera.interpreters.sm90.global_races:GlobalAccesses.access")

MORALLY_STRONG = Rule(
    "strong accesses never race with each other", "memory-consistency-model-morally-strong-operations",
    "each operation is strong and specifies a scope that includes the thread executing the other operation",
    "the PTX executor's general form of ATOMICS_ARE_INDIVISIBLE: atom, red, bulk reductions and ld/st with "
    ".relaxed/.acquire/.release/.volatile are strong; two strong accesses through the same proxy whose scopes "
    "include each other's thread (.cta: the same CTA only; .cluster: the launch's cluster, each CTA its own "
    "without a cluster launch) are not a race; so two red.async updates of one word "
    "(.relaxed.cluster) in flight at once are not either, while a plain access of it racing one is")

RELEASE_ACQUIRE = Rule(
    "release and acquire patterns synchronise", "memory-consistency-model-memory-synchronization",
    "A release pattern X synchronizes with an acquire pattern Y, if a write operation in X precedes a read "
    "operation in Y in observation order, and the first operation in X and the last operation in Y are morally "
    "strong.",
    "st.release, red/atom.release (or .acq_rel), or a release fence then a strong write, publish the thread's clock "
    "at the location; ld.acquire, atom.acquire (or .acq_rel), or a strong read then an acquire fence, take in what "
    "was published there by threads whose scope and their own include each other (red's read forms no acquire)")

MBARRIER_ARRIVE_SCOPE = Rule(
    "an mbarrier arrive releases only to the threads of its scope",
    "parallel-synchronization-and-communication-instructions-mbarrier-arrive",
    "The optional .scope qualifier indicates the set of threads that directly observe the memory synchronizing "
    "effect of this operation, as described in the Memory Consistency Model. If the .scope qualifier is not "
    "specified then it defaults to .cta.",
    "a consumer's release of a multicast-filled slot is an arrive on each producer's empty barrier, a peer CTA's "
    "included; what it must order is the consumer's reads of its own CTA's slot (ld.shared, and wgmma reads a "
    "wgmma.wait_group completed: WGMMA_GROUP_PER_WARPGROUP) before the peer producer's multicast writes into it "
    "(WRITE_ORDER). That order exists only if the arrive (the release pattern's first operation) synchronizes "
    "with the producer's successful try_wait (RELEASE_ACQUIRE), which needs the two morally strong: each "
    "specifies a scope that includes the other's thread (MORALLY_STRONG). The default .cta scope names the "
    "consumer's CTA, which does not hold the peer's producer, so CUTLASS's `mbarrier.arrive.shared::cluster.b64` "
    "(ClusterBarrier::arrive(cta_id, pred), PipelineTmaAsync::consumer_release, which FlashAttention-3 uses) "
    "orders nothing for the peer by the letter and leaves the reads and the refill in a data race (DATA_RACE); "
    ".relaxed orders nothing at any scope. Tessera prints `mbarrier.arrive.release.cluster.shared::cluster.b64` "
    "(ptxas: MEMBAR.ALL.GPU + ERRBAR + CGAERRBAR per arrive); the one cheaper form the ISA documents for it is "
    "MBARRIER_RELEASE_FENCE's, which needs PTX ISA 8.6. The simulators follow NVIDIA's kernels instead of the "
    "letter here, as CP_ASYNC_PROXY does: a .release arrive of either scope on a peer's barrier is a release "
    "to its waiters (CUTLASS's 2 x 1 cluster GEMM runs clean, docs/races-seeded-library.md), so neither reports "
    "the .cta form; the PTX executor refuses a .relaxed arrive or wait by name (the fence that would make it a "
    "release or acquire pattern is not modelled); the CTA simulator's `sm90.mbarrier_arrive_cluster` is "
    ".release.cluster by definition")

MBARRIER_WAIT_SCOPE = Rule(
    "an mbarrier wait acquires only from the threads of its scope",
    "parallel-synchronization-and-communication-instructions-mbarrier-test-wait-try-wait",
    "The optional .scope qualifier indicates the set of threads that the mbarrier.test_wait and mbarrier.try_wait "
    "instructions can directly synchronize. If the .scope qualifier is not specified then it defaults to .cta.",
    "the other half of MBARRIER_ARRIVE_SCOPE's moral strength: the producer's wait on an empty barrier that a "
    "peer's consumers release must name .cluster as well (`mbarrier.try_wait.parity.acquire.cluster`: ptxas adds "
    "a CCTL.IVALL after each successful poll; or .relaxed.cluster then `fence.acquire.sync_restrict::shared::"
    "cluster.cluster`, PTX ISA 8.6, no instruction). Tessera's producers, CUTLASS's and FlashAttention-3's wait "
    "at the default .cta, so by the letter not even a .release.cluster arrive of a peer synchronizes with them; "
    "neither simulator checks a wait's scope (docs/performance.md, GEMM)")

MBARRIER_RELEASE_FENCE = Rule(
    "a release fence restricted to shared::cta before a relaxed cluster arrive",
    "parallel-synchronization-and-communication-instructions-membar",
    "When .sync_restrict is .sync_restrict::shared::cta, .sem must be .release, and the effect of the fence only "
    "applies to operations performed on objects in .shared::cta state space.",
    "`fence.release.sync_restrict::shared::cta.cluster` then `mbarrier.arrive.relaxed.cluster.shared::cluster.b64` "
    "(the ISA's own example, \"Release local shared memory\") is a release pattern at cluster scope (a release "
    "fence followed by a strong write, RELEASE_ACQUIRE) whose fence orders exactly the consumer's accesses of its "
    "own CTA's shared memory, the slot's reads included: what MBARRIER_ARRIVE_SCOPE asks for (the wgmma's "
    "async-proxy reads reach either release through their wgmma.wait_group alike). ptxas 12.9, 13.0 and "
    "13.5 make it MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC.S instead of MEMBAR.ALL.CTA + MEMBAR.ALL.GPU + ERRBAR + "
    "CGAERRBAR. Both qualifiers need PTX ISA 8.6 (ptxas 12.8 or newer), and Tessera's kernels are .version 8.0 "
    "for every ptxas from 12.1 (docs/passes.md), so it is not printed; neither simulator models the fence")

PTX_EXECUTOR_RULES = (BARRIER_ORDERING, BARRIER_COUNT, MBARRIER_INIT_BEFORE_USE, MBARRIER_INIT_FENCE, PROXY_FENCE,
                      PROXY_FENCE_STATE_SPACE, WGMMA_FENCE, WGMMA_FENCE_SCALE_D, WGMMA_WAIT, WGMMA_WAIT_PER_THREAD,
                      WGMMA_A_ROWS_PER_WARP, WGMMA_GROUP_PER_WARPGROUP,
                      CP_ASYNC_ORDER, CP_ASYNC_COMPLETION, CP_ASYNC_MBARRIER, CP_ASYNC_PROXY, BULK_READ_BEFORE_EXIT,
                      BULK_WRITE_COMPLETION, TMA_READ_UNTIL_COMPLETE, CLUSTER_EXIT_WAIT, CLUSTER_BARRIER_ORDERING,
                      DATA_RACE, MORALLY_STRONG, RELEASE_ACQUIRE)
"""The rules the PTX executor's race detector applies, in the order of the sections."""

CTA_SIMULATOR_RULES = (BARRIER_ORDERING, PROXY_FENCE, PROXY_FENCE_STATE_SPACE, WGMMA_FENCE, WGMMA_FENCE_SCALE_D,
                       WGMMA_WAIT, WGMMA_WAIT_PER_THREAD, WGMMA_GROUP_PER_WARPGROUP, WRITE_ORDER, DATA_RACE, ATOMICS_ARE_INDIVISIBLE,
                       TMA_READ_UNTIL_COMPLETE, CP_ASYNC_MBARRIER, CP_ASYNC_PROXY)
"""The rules the CTA simulator checks by happens-before (`tessera.interpreters.sm90.happens_before`), each naming
its checker."""

LOWERING_RULES = (MBARRIER_ARRIVE_SCOPE, MBARRIER_WAIT_SCOPE, MBARRIER_RELEASE_FENCE)
"""The rules that decide which synchronisation the lowering prints (the remote arrive's semantics and scope), which
the simulators do not check (a .relaxed arrive or wait aside: the PTX executor refuses it), each saying why."""

# endregion

__all__ = ["CTA_SIMULATOR_RULES", "LOWERING_RULES", "PTX_EXECUTOR_RULES", "Rule", "WRITE_ORDER", "BARRIER_COUNT",
           "DATA_RACE",
           "ATOMICS_ARE_INDIVISIBLE", "BARRIER_ORDERING", "BULK_READ_BEFORE_EXIT", "BULK_WRITE_COMPLETION",
           "CLUSTER_BARRIER_ORDERING", "CLUSTER_EXIT_WAIT", "CP_ASYNC_COMPLETION", "CP_ASYNC_MBARRIER",
           "CP_ASYNC_ORDER", "CP_ASYNC_PROXY",
           "MBARRIER_ARRIVE_SCOPE", "MBARRIER_INIT_BEFORE_USE", "MBARRIER_INIT_FENCE", "MBARRIER_RELEASE_FENCE",
           "MBARRIER_WAIT_SCOPE", "PROXY_FENCE", "PROXY_FENCE_STATE_SPACE", "WGMMA_FENCE",
           "WGMMA_FENCE_SCALE_D", "WGMMA_WAIT", "WGMMA_WAIT_PER_THREAD", "WGMMA_A_ROWS_PER_WARP",
           "WGMMA_GROUP_PER_WARPGROUP",
           "MORALLY_STRONG", "RELEASE_ACQUIRE", "TMA_READ_UNTIL_COMPLETE"]
