"""tessera/sm90/memory_model.py against the PTX ISA: every rule's quoted sentence appears, word for word, in the
ISA text of the section it cites, transcribed below from the PTX ISA 9.x instruction pages (whitespace as
printed there); nothing here is produced by the module under test. The behaviour each rule asks for is tested
on kernels in tests/test_ptx_races.py, tests/test_ptx_race_matrix.py (PTX executor) and
tests/test_target_races.py (CTA simulator)."""

from __future__ import annotations

import importlib
import re

import pytest

from tessera.sm90 import memory_model

ISA = {
    # [P#memory-consistency-model-coherence], 8.10.1 Axioms: Coherence
    "memory-consistency-model-coherence": """
If a write W precedes an overlapping write W' in causality order, then W must precede W' in coherence order.
""",
    # [P#memory-consistency-model-conflict-and-data-races], 8.7.1 Conflict and Data-races
    "memory-consistency-model-conflict-and-data-races": """
Two overlapping memory operations are said to conflict when at least one of them is a write.
Two conflicting memory operations are said to be in a data-race if they are not related in causality order and
they are not morally strong.
""",
    # [P#parallel-synchronization-and-communication-instructions-atom], atom: Description
    "parallel-synchronization-and-communication-instructions-atom": """
Atomically loads the original value at location a into destination register d, performs a
reduction operation with operand b and the value in location a, and stores the result of the
specified operation at location a, overwriting the original value.
""",
    "parallel-synchronization-and-communication-instructions-bar": """
barrier{.cta} instruction causes executing thread to wait for all non-exited threads from its
warp and marks warps' arrival at barrier. In addition to signaling its arrival at the barrier, the
barrier{.cta}.red and barrier{.cta}.sync instructions causes executing thread to wait for
non-exited threads of all other warps participating in the barrier to
arrive. barrier{.cta}.arrive does not cause executing thread to wait for threads of other
participating warps.
When a barrier completes, the waiting threads are restarted without delay, and the barrier is
reinitialized so that it can be immediately reused.
The barrier{.cta}.sync or barrier{.cta}.red or barrier{.cta}.arrive instruction
guarantees that when the barrier completes, prior memory accesses requested by this thread are
performed relative to all threads participating in the barrier. The barrier{.cta}.sync and
barrier{.cta}.red instruction further guarantees that no new memory access is requested by this
thread before the barrier completes.
""",
    "parallel-synchronization-and-communication-instructions-membar": """
Qualifiers .op_restrict and .sync_restrict restrict the class of memory operations
for which the fence instruction provides the memory ordering guarantees. When .op_restrict
is .mbarrier_init, the synchronizing effect of the fence only applies to the prior
mbarrier.init operations executed by the same thread on mbarrier objects in .shared::cta
state space. When .sync_restrict is .sync_restrict::shared::cta, .sem must be .release, and the
effect of the fence only applies to operations performed on objects in .shared::cta state space.
Likewise, when .sync_restrict is .sync_restrict::shared::cluster, .sem must be .acquire, and the
effect of the fence only applies to operations performed on objects in .shared::cluster state space.
When either .sync_restrict::shared::cta or .sync_restrict::shared::cluster is present, the .scope
must be specified as .cluster.
[...]
The .proxykind qualifier indicates the bi-directional proxy ordering that is established between the memory
accesses done between the generic proxy and the proxy specified by .proxykind.
Value .alias of the .proxykind qualifier refers to memory accesses performed using virtually
aliased addresses to the same memory location. Value .async of the .proxykind qualifier specifies
that the memory ordering is established between the async proxy and the generic proxy. The memory
ordering is limited only to operations performed on objects in the state space specified.
""",
    # [P#parallel-synchronization-and-communication-instructions-mbarrier-arrive], mbarrier.arrive: Description
    "parallel-synchronization-and-communication-instructions-mbarrier-arrive": """
The optional .sem qualifier specifies a memory synchronizing effect as described in the Memory
Consistency Model. If the .sem qualifier is absent, .release is assumed by default.
The .relaxed qualifier does not provide any memory ordering semantics and visibility guarantees.
The optional .scope qualifier indicates the set of threads that directly observe the memory
synchronizing effect of this operation, as described in the Memory Consistency Model. If the .scope
qualifier is not specified then it defaults to .cta. In contrast, the .shared::<scope> indicates the
state space where the mbarrier resides.
""",
    "parallel-synchronization-and-communication-instructions-mbarrier-init": """
mbarrier.init.shared::cta.b64 [shMem], 12;
bar.sync                 0;
// ... other mbarrier operations on shMem
""",
    "asynchronous-warpgroup-level-matrix-instructions-wgmma-mma-async": """
Instruction wgmma.mma_async issues a MxNxK matrix multiply and accumulate operation, D =
A*B+D, where the A matrix is MxK, the B matrix is KxN, and the D matrix is MxN.
The operation of the form D = A*B is issued when the input predicate argument scale-d is
false.
wgmma.fence instruction must be used to fence the register accesses of wgmma.mma_async
instruction from their prior accesses. Otherwise, the behavior is undefined.
wgmma.commit_group and wgmma.wait_group operations must be used to wait for the completion
of the asynchronous matrix multiply and accumulate operations before the results are accessed.
""",
    # [P#asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n16], Matrix Fragments for
    # wgmma.mma_async.m64nNk16
    "asynchronous-warpgroup-level-matrix-register-fragment-wgmma-64n16": """
A warpgroup executing wgmma.mma_async.m64nNk16 will compute an MMA operation of shape
.m64nNk16 where N is a valid n dimension as listed in Matrix Shape.
Elements of the matrix are distributed across the threads in a warpgroup so each thread of the
warpgroup holds a fragment of the matrix.
""",
    # [P#asynchronous-warpgroup-level-matrix-instructions-wgmma-fence], wgmma.fence: Description
    "asynchronous-warpgroup-level-matrix-instructions-wgmma-fence": """
wgmma.fence instruction establishes an ordering between prior accesses to any warpgroup
registers and subsequent accesses to the same registers by a wgmma.mma_async instruction. Only
the accumulator register and the input registers containing the fragments of matrix A require this
ordering.
The wgmma.fence instruction must be issued by all warps of the warpgroup at the following
locations:
Before the first wgmma.mma_async operation in a warpgroup.
Between a register access by a thread in the warpgroup and any wgmma.mma_async instruction
that accesses the same registers, either as accumulator or input register containing fragments of
matrix A, except when these are accumulator register accesses across multiple wgmma.mma_async
instructions of the same shape. In the latter case, an ordering guarantee is provided by default.
Otherwise, the behavior is undefined.
""",
    # [P#asynchronous-warpgroup-level-matrix-instructions-wgmma-wait-group], wgmma.wait_group: Description
    "asynchronous-warpgroup-level-matrix-instructions-wgmma-wait-group": """
wgmma.wait_group instruction will cause the executing thread to wait until only N or fewer of
the most recent wgmma-groups are pending and all the prior wgmma-groups committed by the executing
threads are complete. For example, when N is 0, the executing thread waits on all the prior
wgmma-groups to complete. Operand N is an integer constant.
Accessing the accumulator register or the input register containing the fragments of matrix A of a
wgmma.mma_async instruction without first performing a wgmma.wait_group instruction that
waits on a wgmma-group including that wgmma.mma_async instruction is undefined behavior.
""",
    # [P#asynchronous-warpgroup-level-matrix-instructions-wgmma-commit-group], wgmma.commit_group: Description
    "asynchronous-warpgroup-level-matrix-instructions-wgmma-commit-group": """
wgmma.commit_group instruction creates a new wgmma-group per warpgroup and batches all prior
wgmma.mma_async instructions initiated by the executing warp but not committed to any
wgmma-group into the new wgmma-group. If there are no uncommitted wgmma.mma_async instructions
then wgmma.commit_group results in an empty wgmma-group.
An executing thread can wait for the completion of all wgmma.mma_async operations in a
wgmma-group by using wgmma.wait_group.
""",
    # [P#memory-consistency-model-morally-strong-operations], 8.7 Morally strong operations
    "memory-consistency-model-morally-strong-operations": """
Two operations are said to be morally strong relative to each other if they satisfy all of the following
conditions:
The operations are related in program order (i.e, they are both executed by the same thread), or each
operation is strong and specifies a scope that includes the thread executing the other operation.
Both operations are performed via the same proxy.
If both are memory operations, then they overlap completely.
""",
    # [P#memory-consistency-model-memory-synchronization], 8.9.4 Memory synchronization
    "memory-consistency-model-memory-synchronization": """
A release pattern X synchronizes with an acquire pattern Y, if a write operation in X precedes a read operation
in Y in observation order, and the first operation in X and the last operation in Y are morally strong.
""",
    # [P#control-flow-instructions-exit], exit: Description
    "control-flow-instructions-exit": """
Ends execution of a thread.
As threads exit, barriers waiting on all threads are checked to see if the exiting threads are the
only threads that have not yet made it to a barrier{.cta} for all threads in the CTA or to a
barrier.cluster for all threads in the cluster. If the exiting threads are holding up the
barrier, the barrier is released.
""",
    # [P#parallel-synchronization-and-communication-instructions-barrier-cluster], barrier.cluster: Description
    "parallel-synchronization-and-communication-instructions-barrier-cluster": """
The optional .relaxed qualifier on barrier.cluster.arrive specifies that there are no memory
ordering and visibility guarantees provided for the memory accesses performed prior to
barrier.cluster.arrive.
""",
    # [P#data-movement-and-conversion-instructions-cp-async-bulk-wait-group], cp.async.bulk.wait_group: Description
    "data-movement-and-conversion-instructions-cp-async-bulk-wait-group": """
The optional .read modifier indicates that the waiting has to be done until all the bulk async operations in the
specified bulk async-group have completed reading from their source locations.
""",
    # [P#data-movement-and-conversion-instructions-cp-async-bulk-tensor], cp.async.bulk.tensor: Description
    "data-movement-and-conversion-instructions-cp-async-bulk-tensor": """
The copy operation in cp.async.bulk.tensor is treated as a weak memory operation and the complete-tx
operation on the mbarrier has .release semantics at the .cluster scope as described in the Memory
Consistency Model.
""",
    # [P#parallel-synchronization-and-communication-instructions-mbarrier-test-wait-try-wait], Description
    "parallel-synchronization-and-communication-instructions-mbarrier-test-wait-try-wait": """
When mbarrier.test_wait and mbarrier.try_wait operations with .acquire qualifier returns True, they
form the acquire pattern as described in the Memory Consistency Model.
The optional .scope qualifier indicates the set of threads that the mbarrier.test_wait and
mbarrier.try_wait instructions can directly synchronize. If the .scope qualifier is not specified
then it defaults to .cta. In contrast, the .shared::<scope> indicates the state space where the
mbarrier resides.
All cp.async operations requested prior, in program order, to cp.async.mbarrier.arrive during the completed
phase by the participating threads of the CTA are performed and made visible to the executing thread.
""",
    "data-movement-and-conversion-instructions-cp-async": """
No other synchronization mechanism guarantees the completion of the asynchronous
copy operations.
There is no ordering guarantee between two cp.async operations if they are not explicitly
synchronized using cp.async.wait_all or cp.async.wait_group or mbarrier instructions.
cp.async is treated as a weak memory operation performed in the generic proxy in the
Memory Consistency Model.
""",
}


def _words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


ALL_RULES = tuple(dict.fromkeys(memory_model.PTX_EXECUTOR_RULES + memory_model.CTA_SIMULATOR_RULES
                                 + memory_model.LOWERING_RULES))


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.name)
def test_each_rule_quotes_the_section_it_cites(rule):
    assert rule.section in ISA, f"{rule.name}: no transcription of [P#{rule.section}]"
    assert _words(rule.quote) in _words(ISA[rule.section]), rule.name


def test_the_rules_are_distinct_and_say_what_is_checked():
    rules = ALL_RULES
    assert len({r.name for r in rules}) == len(rules)
    assert all(r.check and r.quote for r in rules)


def test_the_executor_names_the_rules_it_applies():
    """Each rule is cited where the executor applies it (module docstrings and functions name it)."""
    from pathlib import Path

    from tessera.interpreters import ptx

    source = " ".join(p.read_text() for p in Path(ptx.__file__).parent.glob("*.py"))
    for name in ("BARRIER_COUNT", "MBARRIER_INIT_FENCE", "DATA_RACE", "MORALLY_STRONG", "RELEASE_ACQUIRE",
                 "PROXY_FENCE", "PROXY_FENCE_STATE_SPACE", "WGMMA_FENCE_SCALE_D", "WGMMA_WAIT_PER_THREAD",
                 "WGMMA_A_ROWS_PER_WARP",
                 "WGMMA_GROUP_PER_WARPGROUP",
                 "BULK_READ_BEFORE_EXIT", "BULK_WRITE_COMPLETION", "CP_ASYNC_ORDER", "CLUSTER_EXIT_WAIT", "CLUSTER_BARRIER_ORDERING", "TMA_READ_UNTIL_COMPLETE",
                 "CP_ASYNC_PROXY"):
        assert f"memory_model.{name}" in source, name


@pytest.mark.parametrize("rule", memory_model.CTA_SIMULATOR_RULES, ids=lambda r: r.name)
def test_each_cta_simulator_rule_names_its_checker(rule):
    module, _, path = rule.checked_by.partition(":")
    target = importlib.import_module(module)
    for name in path.split("."):
        target = getattr(target, name)
    assert callable(target)
