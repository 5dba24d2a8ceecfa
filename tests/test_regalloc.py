"""Register allocation of Target IR: pressure under the budget for every configuration, a diagnostic naming
the values live at the peak when over budget, allocation bugs caught by the simulator's register file, the
registers of an in-flight wgmma (A fragment, accumulator) kept until the wait_group that retires its group,
and the register pressure of each region (the branches of a warp-specialized kernel)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func, scf

import tessera
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90 import run_target_kernel
from tessera.kernel_abi import is_target_kernel
from tessera.passes import PTX_PIPELINE, TARGET_PIPELINE, apply_pipeline
from tessera.ir import parse_module
from tessera.regalloc import RegisterBudgetError, allocate_registers, region_pressure
from tessera.sm90 import facts

from conftest import build_kernel
from text_edits import checked

CONFIGS = [("flash_attention", dict(head_dim=d, causal=c, dtype=t)) for d in (64, 128) for c in (False, True)
           for t in ("bf16", "f16")] + [
    ("two_pass_attention", dict(head_dim=128)), ("three_pass_attention", dict(head_dim=128)), ("gemm", dict(dtype="bf16"))]


def _target(variant, config):
    module = build_kernel(variant, **config)
    sig = tessera.find_kernel(module)
    return sig, tessera.lower_to_target(module, sig.name, TARGET_PIPELINE)  # single-stage: the simplest kernel


@pytest.mark.parametrize("variant,config", CONFIGS)
def test_every_configuration_fits_the_budget(variant, config):
    _, kernel = _target(variant, config)
    allocation = allocate_registers(kernel)
    assert allocation.peak <= facts.MAX_REGISTERS_PER_THREAD
    # Linear scan on intervals is optimal: the f32 class declares no more registers than the peak needs
    # (accumulator blocks, class acc, are not reused across chains on purpose).
    assert allocation.counts.get("f32", 0) <= allocation.peak
    # Every value has one name per element; registers of one class share a prefix.
    for value, names in allocation.names.items():
        assert all(n.startswith(("%", "0f", "-")) or n.lstrip("-").isdigit() for n in names)


@pytest.mark.parametrize("block_n, low, high", [(128, 150, 200), (176, 175, 240)])
def test_flash_attention_head_dim_128_pressure_is_close_to_the_accumulators(block_n, low, high):
    """S/P (block_n / 2 f32) and O (64 f32) accumulators plus P packed (up to block_n / 4: packed a slab at a
    time as P dies) and bookkeeping: 128 keys under 200 registers; the default 176 keys (FlashAttention-3's
    tile) within the consumers' 240."""
    _, kernel = _target("flash_attention", dict(head_dim=128, block_n=block_n))
    allocation = allocate_registers(kernel)
    assert low <= allocation.peak <= high
    assert sum(n for _, n in allocation.live_at_peak) == allocation.peak
    assert allocation.live_at_peak[0][1] >= 64  # the accumulators lead


def test_over_budget_is_a_diagnostic_naming_the_live_values():
    _, kernel = _target("flash_attention", dict(head_dim=128, block_n=128))
    with pytest.raises(RegisterBudgetError, match=r"registers per thread are live at once, over the budget of 100; "
                                                  r"the peak is at [\w.]+, live: %acc\w* \(64 registers, "):
        allocate_registers(kernel, budget=100)


def test_the_pass_annotates_the_kernel_and_refuses_over_budget():
    module = build_kernel("gemm", dtype="bf16").clone()
    apply_pipeline(module, PTX_PIPELINE)
    kernel = next(op for op in module.walk() if is_target_kernel(op))
    summary = {k: v.value.data for k, v in kernel.attributes["sm90.registers"].data.items()}
    assert summary["peak"] <= 255 and summary["acc"] >= 64  # the accumulators: a block of their own
    module = build_kernel("gemm", dtype="bf16").clone()
    with pytest.raises(RegisterBudgetError):
        apply_pipeline(module, TARGET_PIPELINE + ",allocate-registers{budget=64}")


def test_a_seeded_allocation_bug_is_caught_by_the_register_file(rng):
    """Give the running max m the registers of the running sum l: both are live across the loop, so the
    simulator finds a register that no longer holds the value read from it."""
    sig, kernel = _target("flash_attention", dict(head_dim=64, causal=False, dtype="bf16"))
    allocation = allocate_registers(kernel)
    loop = next(op for op in kernel.walk() if isinstance(op, scf.ForOp))
    m_new = next(op.results[0] for op in loop.body.walk() if op.results and op.results[0].name_hint == "m_new")
    l_new = next(op.results[0] for op in loop.body.walk() if op.results and op.results[0].name_hint == "l_new")
    allocation.names[m_new] = list(allocation.names[l_new])
    inputs = [rng.standard_normal((1, 1, 200, 64)) for _ in range(3)]
    arguments, sizes = prepare_arguments(sig, inputs)
    with pytest.raises(KernelHazardError, match=r"register %f\d+ no longer holds %"):
        run_target_kernel(kernel, arguments, sizes, allocation)


def test_the_unseeded_allocation_passes_the_register_file_check(rng):
    sig, kernel = _target("flash_attention", dict(head_dim=64, causal=True, dtype="f16"))
    inputs = [rng.standard_normal((1, 1, 200, 64)) for _ in range(3)]
    arguments, sizes = prepare_arguments(sig, inputs)
    run_target_kernel(kernel, arguments, sizes, allocate_registers(kernel))
    out = arguments[3].astype(np.float32)
    from tessera import reference_attention

    ref = reference_attention.attention(*[a.astype(np.float32) for a in arguments[:3]], causal=True)
    assert np.abs(out - ref).max() < 0.05


# region wgmma operands stay allocated until the wait_group that retires their group


def _function(body: str, args: str = "%out: i64, %n: index") -> func.FuncOp:
    """A Target IR function around `body`, which may use: %tv (the thread index broadcast to vector<4xi32>,
    one register), %seq and %seven (operands that print as immediates), a B descriptor %db, a zero
    accumulator %acc0, and offsets and masks for stores of 32 (%off, %all) and 4 registers (%off4, %all4)."""
    text = f"""builtin.module {{
  func.func @k({args}) {{
    %tid = sm90.special "tid.x" : index
    %t = arith.index_cast %tid : index to i32
    %tv = vector.broadcast %t : i32 to vector<4xi32>
    %sb = sm90.shared_buffer "b" offset 0 size 2048 align 1024 swizzle 128 : i32
    %db = sm90.make_descriptor %sb lbo 8192 sbo 1024 swizzle 128 : i64
    %acc0 = arith.constant dense<0.0> : vector<32xf32>
    %all = arith.constant dense<true> : vector<32xi1>
    %all4 = arith.constant dense<true> : vector<4xi1>
    %off = arith.constant dense<4> : vector<32xi64>
    %off4 = arith.constant dense<4> : vector<4xi64>
    %seq = arith.constant dense<[0, 1, 2, 3]> : vector<4xi32>
    %seven = arith.constant dense<7> : vector<4xi32>
{body}
    func.return
  }}
}}"""
    return next(op for op in parse_module(text).walk() if isinstance(op, func.FuncOp))


def _registers(fn: func.FuncOp, allocation, name: str) -> set[str]:
    return set(allocation.names[next(r for op in fn.walk() for r in op.results if r.name_hint == name)])


RS_COMMIT_THEN_VALUE = """\
    %a = arith.addi %tv, %seq : vector<4xi32>
    sm90.wgmma_fence
    %d = sm90.wgmma_mma_async %acc0, %a, %db n 64 type "bf16" trans 0, 1 : vector<32xf32>, vector<4xi32>
    sm90.wgmma_commit_group
    %x = arith.muli %tv, %seven : vector<4xi32>
    sm90.wgmma_wait_group 0
    sm90.st_global %out[%off], %d, %all : vector<32xi64>, vector<32xf32>, vector<32xi1>
    sm90.st_global %out[%off4], %x, %all4 : vector<4xi64>, vector<4xi32>, vector<4xi1>"""


def test_a_value_made_between_commit_and_wait_does_not_take_the_a_fragment():
    """The tensor core reads %a until the wait_group: %x, computed meanwhile, needs registers of its own."""
    fn = _function(RS_COMMIT_THEN_VALUE)
    allocation = allocate_registers(fn)
    assert not _registers(fn, allocation, "x") & _registers(fn, allocation, "a")


def test_after_the_wait_the_a_fragment_registers_are_free_again():
    """The same kernel waiting before %x: %x takes %a's registers (so the test above shows the hold)."""
    eager = checked(RS_COMMIT_THEN_VALUE).replace("    sm90.wgmma_wait_group 0\n", "").replace(
        "    %x = arith.muli", "    sm90.wgmma_wait_group 0\n    %x = arith.muli")
    fn = _function(eager)
    allocation = allocate_registers(fn)
    assert _registers(fn, allocation, "x") == _registers(fn, allocation, "a")


def test_wait_group_1_retires_all_but_the_newest_group():
    """Two groups: `wait_group 1` retires the first (its A registers may be reused: %y takes them) but not the
    second; a value made before it (%x) avoids both fragments."""
    fn = _function("""\
    %nine = arith.constant dense<9> : vector<4xi32>
    %seq2 = arith.constant dense<[4, 5, 6, 7]> : vector<4xi32>
    %a1 = arith.addi %tv, %seq : vector<4xi32>
    %a2 = arith.addi %tv, %seq2 : vector<4xi32>
    sm90.wgmma_fence
    %d1 = sm90.wgmma_mma_async %acc0, %a1, %db n 64 type "bf16" trans 0, 1 : vector<32xf32>, vector<4xi32>
    sm90.wgmma_commit_group
    %d2 = sm90.wgmma_mma_async %acc0, %a2, %db n 64 type "bf16" trans 0, 1 : vector<32xf32>, vector<4xi32>
    sm90.wgmma_commit_group
    %x = arith.muli %tv, %seven : vector<4xi32>
    sm90.wgmma_wait_group 1
    %y = arith.muli %tv, %nine : vector<4xi32>
    sm90.wgmma_wait_group 0
    sm90.st_global %out[%off], %d1, %all : vector<32xi64>, vector<32xf32>, vector<32xi1>
    sm90.st_global %out[%off], %d2, %all : vector<32xi64>, vector<32xf32>, vector<32xi1>
    sm90.st_global %out[%off4], %x, %all4 : vector<4xi64>, vector<4xi32>, vector<4xi1>
    sm90.st_global %out[%off4], %y, %all4 : vector<4xi64>, vector<4xi32>, vector<4xi1>""")
    allocation = allocate_registers(fn)
    a1, a2 = _registers(fn, allocation, "a1"), _registers(fn, allocation, "a2")
    assert not _registers(fn, allocation, "x") & (a1 | a2)
    assert _registers(fn, allocation, "y") == a1


def test_wait_group_1_right_after_the_only_commit_does_not_retire_it():
    fn = _function(checked(RS_COMMIT_THEN_VALUE).replace("    %x = arith.muli",
                                                         "    sm90.wgmma_wait_group 1\n    %x = arith.muli"))
    allocation = allocate_registers(fn)
    assert not _registers(fn, allocation, "x") & _registers(fn, allocation, "a")


LAZY_LOOP = """\
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %acc0) -> (vector<32xf32>) {
      %early = arith.muli %tv, %seven : vector<4xi32>
      sm90.st_global %out[%off4], %early, %all4 : vector<4xi64>, vector<4xi32>, vector<4xi1>
      sm90.wgmma_wait_group 0
      %mid = arith.addi %tv, %seven : vector<4xi32>
      sm90.st_global %out[%off4], %mid, %all4 : vector<4xi64>, vector<4xi32>, vector<4xi1>
      %a = arith.addi %tv, %seq : vector<4xi32>
      sm90.wgmma_fence
      %d = sm90.wgmma_mma_async %acc, %a, %db n 64 type "bf16" trans 0, 1 : vector<32xf32>, vector<4xi32>
      sm90.wgmma_commit_group
      scf.yield %d : vector<32xf32>
    }
    sm90.wgmma_wait_group 0
    sm90.st_global %out[%off], %r, %all : vector<32xi64>, vector<32xf32>, vector<32xi1>"""


def test_a_group_waited_for_in_the_next_trip_holds_its_fragment_across_the_latch():
    """The group committed at the end of a trip is retired by the wait at the top of the next one: %early
    (written before that wait) must avoid %a; %mid, between the wait and %a, may use the hole."""
    fn = _function(LAZY_LOOP)
    allocation = allocate_registers(fn)
    a = _registers(fn, allocation, "a")
    assert not _registers(fn, allocation, "early") & a
    assert _registers(fn, allocation, "mid") & a


# endregion
# region Register pressure per region


WARP_SPECIALIZED = """\
builtin.module {
  func.func @ws(%out: i64) {
    %tid = sm90.special "tid.x" : index
    %c128 = arith.constant 128 : index
    %producer = arith.cmpi uge, %tid, %c128 : index
    %off = arith.constant dense<[0, 4]> : vector<2xi32>
    %mask = arith.constant dense<true> : vector<2xi1>
    %w = arith.constant dense<[1.0, 2.0]> : vector<2xf32>
    %big = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0]> : vector<16xf32>
    scf.if %producer {
      %p = arith.addf %w, %w : vector<2xf32>
      sm90.st_global %out[%off], %p, %mask : vector<2xi32>, vector<2xf32>, vector<2xi1>
    } else {
      %c = arith.mulf %big, %big : vector<16xf32>
      %lo = vector.shuffle %c, %c [0, 1] : vector<16xf32>, vector<16xf32>
      %hi = vector.shuffle %c, %c [2, 3] : vector<16xf32>, vector<16xf32>
      %s = arith.addf %lo, %hi : vector<2xf32>
      sm90.st_global %out[%off], %s, %mask : vector<2xi32>, vector<2xf32>, vector<2xi1>
    }
    sm90.st_global %out[%off], %w, %mask : vector<2xi32>, vector<2xf32>, vector<2xi1>
    func.return
  }
}"""


def test_region_pressure_counts_what_each_branch_keeps_live():
    """Producer branch: %off (2), %w (2, read after the if) and %p (2) = 6 (the kernel parameter %out costs
    none: ptxas reads it from the constant bank); %big (16) is read only by the consumer branch, so the
    producer's threads do not hold it. Consumer branch: %big, then %c in its registers (16) + %off, %w = 20.
    Program order puts the producer branch while %big is live, so the kernel's peak (22) is neither."""
    fn = next(op for op in parse_module(WARP_SPECIALIZED).walk() if isinstance(op, func.FuncOp))
    allocation = allocate_registers(fn)
    branch = next(op for op in fn.walk() if isinstance(op, scf.IfOp))
    assert allocation.region_pressure(branch) == [6, 20]
    assert region_pressure(fn, branch) == [6, 20]
    assert allocation.peak == 22


def test_region_pressure_in_a_loop_counts_reads_of_the_next_trip():
    """Inside a loop that %big is defined outside of, a thread of the producer branch may take the consumer
    branch on the next trip: %big stays live in both (16 more than above), and in the consumer branch %c can
    no longer take its registers (16 more again)."""
    looped = checked(WARP_SPECIALIZED).replace("func.func @ws(%out: i64) {",
                                               "func.func @ws(%out: i64, %n: index) {").replace(
        "    scf.if %producer {", "    %c0 = arith.constant 0 : index\n    %c1 = arith.constant 1 : index\n"
                                "    scf.for %i = %c0 to %n step %c1 {\n    scf.if %producer {").replace(
        "    sm90.st_global %out[%off], %w, %mask", "    }\n    sm90.st_global %out[%off], %w, %mask")
    fn = next(op for op in parse_module(looped).walk() if isinstance(op, func.FuncOp))
    branch = next(op for op in fn.walk() if isinstance(op, scf.IfOp))
    # the loop's bound %n is a kernel parameter (no register) and its step %c1 the latch's immediate
    assert allocate_registers(fn).region_pressure(branch) == [6 + 16, 20 + 16]


def test_region_pressure_of_a_loop_counts_held_wgmma_operands():
    """In the lazily waited loop the fragment of the previous trip is held from the top of the body to its
    wait: the body's pressure is the kernel's peak less what lives only outside the loop."""
    fn = _function(LAZY_LOOP)
    allocation = allocate_registers(fn)
    loop = next(op for op in fn.walk() if isinstance(op, scf.ForOp))
    (body,) = allocation.region_pressure(loop)
    assert body <= allocation.peak
    eager = _function(checked(LAZY_LOOP).replace("      sm90.wgmma_wait_group 0\n      %mid", "      %mid").replace(
        "      sm90.wgmma_commit_group\n      scf.yield", "      sm90.wgmma_commit_group\n      sm90.wgmma_wait_group 0\n      scf.yield"))
    eager_loop = next(op for op in eager.walk() if isinstance(op, scf.ForOp))
    (eager_body,) = allocate_registers(eager).region_pressure(eager_loop)
    assert body == eager_body + 4  # %early overlaps the previous trip's %a


def test_region_pressure_of_the_flash_attention_loop_is_within_the_peak():
    _, kernel = _target("flash_attention", dict(head_dim=64, causal=False, dtype="bf16"))
    allocation = allocate_registers(kernel)
    loop = next(op for op in kernel.walk() if isinstance(op, scf.ForOp))
    (body,) = allocation.region_pressure(loop)
    assert 0 < body <= allocation.peak


# endregion


def test_the_full_pipeline_allocates_each_kernel_once(monkeypatch):
    """warp-specialize sizes its setmaxnreg budgets with one allocation; hoist-invariant-descriptors, which moves
    the rings' descriptors out of the loops (a kernel that then differs from the one warp-specialize allocated),
    costs at most one more, which allocate-registers and the PTX printer find in the memo; what the allocator
    reads (here a wait_group's count) still makes it allocate again, a setmaxnreg budget (which it never reads)
    does not."""
    from xdsl.dialects.builtin import IntegerAttr

    from tessera.regalloc import allocate as regalloc
    from tessera.dialects import sm90
    from tessera.passes import SPECIALIZED_PIPELINE
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers

    fresh = []
    allocate_fresh = regalloc._allocate_fresh
    monkeypatch.setattr(regalloc, "_allocate_fresh", lambda fn, *rest: fresh.append(fn) or allocate_fresh(fn, *rest))
    module = tessera.kernels.gemm()
    apply_pipeline(module, SPECIALIZED_PIPELINE + ",allocate-registers")
    (kernel,) = [op for op in module.walk() if is_target_kernel(op)]
    assert len(fresh) <= 2 and fresh[-1] is kernel
    fresh.clear()
    print_ptx(module, registers=allocated_registers)
    assert fresh == []
    fresh.append(kernel)

    budgets = [op for op in kernel.walk() if isinstance(op, sm90.SetMaxNRegOp)]
    assert [op.action.data for op in budgets] == ["dec", "inc"] and budgets[0].count.value.data < facts.SETMAXNREG_MAX
    budgets[0].count = IntegerAttr(facts.SETMAXNREG_MIN, 64)
    allocate_registers(kernel)
    assert fresh == [kernel]
    wait = next(op for op in kernel.walk() if isinstance(op, sm90.WgmmaWaitGroupOp))
    wait.pending = IntegerAttr(wait.pending.value.data + 1, 64)
    allocate_registers(kernel)
    assert fresh == [kernel, kernel]


# region register spaces: the branches of a warp-specialized kernel


def _names_defined_in(region, allocation) -> set[str]:
    values = [r for op in region.walk() for r in op.results] + [a for op in region.walk() for r in op.regions
                                                                  for b in r.blocks for a in b.args]
    return {n for v in values for n in allocation.names.get(v, ()) if n.startswith("%")}


@pytest.mark.parametrize("variant,config", [("flash_attention", dict(head_dim=128, causal=False, dtype="bf16")),
                                            ("three_pass_attention", dict(head_dim=64, causal=True))])
def test_producer_and_consumer_branches_write_disjoint_registers(variant, config):
    """ptxas 13.3+ makes a PTX register that both branches write fit the smaller budget (the producer's 24):
    no register is written in both, and every register both branches read was written before the split."""
    from tessera.passes import SPECIALIZED_PIPELINE
    from tessera.regalloc import budget_regions

    module = tessera.compile(build_kernel(variant, **config), target="target", pipeline=SPECIALIZED_PIPELINE)
    kernel = next(op for op in module.walk() if is_target_kernel(op))
    allocation = allocate_registers(kernel)
    producer, consumer = budget_regions(kernel)
    assert producer.parent is consumer.parent  # the two branches of the warp-role scf.if
    written = [_names_defined_in(region, allocation) for region in (producer, consumer)]
    assert written[0] and written[1] and not written[0] & written[1]
    inside = set(producer.parent.walk())
    values = list(kernel.body.block.args) + [r for op in kernel.walk() if op not in inside for r in op.results]
    outside = {n for v in values for n in allocation.names.get(v, ()) if n.startswith("%")}
    read = [{n for op in region.walk() for v in op.operands for n in allocation.names.get(v, ()) if n.startswith("%")}
            for region in (producer, consumer)]
    assert read[0] & read[1] <= outside


# endregion


def test_a_single_register_takes_the_lowest_usable_free_index(rng):
    """The linear scan's single-register search (no sort of the free set) picks what the run search picks: the
    lowest free index below the registers used so far that no later range reserves, else the first usable
    index from there on."""
    import itertools

    from tessera.regalloc.allocate import _lowest_free_run

    def by_runs(free, count, usable):  # the general search, for runs of one
        return next(b for b in itertools.chain(sorted(i for i in free if i < count), itertools.count(count))
                    if (b in free or b >= count) and usable(b))

    for _ in range(300):
        count = int(rng.integers(0, 40))
        free = {int(i) for i in rng.integers(0, 48, size=int(rng.integers(0, 20)))}
        reserved = {int(i) for i in rng.integers(0, 48, size=int(rng.integers(0, 12)))}
        usable = lambda index: index not in reserved  # noqa: E731
        assert _lowest_free_run(free, count, 1, usable) == by_runs(free, count, usable)


def test_names_are_worked_out_when_first_asked_for():
    """A pass that asks only for pressure (warp-specialize's budgets, on a kernel hoist-invariant-descriptors then
    changes) pays for no naming; the names, asked for later, equal those of an allocation named at once, and a
    copy carries them."""
    import copy

    from tessera.regalloc import region_peaks
    from tessera.regalloc.allocate import _allocate_fresh

    _, kernel = _target("gemm", dict(dtype="bf16"))
    loop = next(op for op in kernel.walk() if isinstance(op, scf.ForOp))
    region_peaks(kernel, loop)
    lazy = _allocate_fresh(kernel)
    assert lazy._assign is not None  # pressure only, so far
    eager = _allocate_fresh(kernel)
    names, counts = eager.names, eager.counts
    assert lazy.region_pressure(loop) == eager.region_pressure(loop) and lazy.peak == eager.peak
    assert lazy.names == names and lazy.counts == counts and lazy._assign is None
    copied = copy.copy(_allocate_fresh(kernel))
    assert copied._assign is None and copied.names == names
