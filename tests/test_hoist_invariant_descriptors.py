"""hoist-invariant-descriptors on the flash kernels: the Q operand's k-step descriptors leave the K/V loops as far
as the consumers' budget allows, the allocation stays within it, and ptxas' steady loop gets shorter."""

from __future__ import annotations

import functools

import pytest
from xdsl.dialects import scf

import tessera
import tessera.kernels
from tessera.dialects import sm90
from tessera.kernel_abi import is_target_kernel
from tessera.passes import SPECIALIZED_PIPELINE, apply_pipeline
from tessera.passes.hoist_invariant_descriptors import invariant_advances, spare_registers
from tessera.regalloc.uniform import uniform_descriptors
from tessera.toolchain import find_nvdisasm, find_ptxas
from text_edits import checked

WITHOUT = checked(SPECIALIZED_PIPELINE).replace(",hoist-invariant-descriptors", "")
PEELED_WITHOUT = checked(WITHOUT).replace("overlap-softmax", "overlap-softmax{fold=false}")
"""WITHOUT with the first trip peeled before the loop: that trip makes Q's slot descriptor, so the loop's Q
k-step advances are loop-invariant before the pass runs (the folded default's are not: see the last test)."""
PEELED = PEELED_WITHOUT + ",hoist-invariant-descriptors"


def _kernel(spec: str, **options):
    module = _lowered(spec, tuple(sorted(options.items()))).clone()  # each test may change its own copy
    return module, next(op for op in module.walk() if is_target_kernel(op))


@functools.cache
def _lowered(spec: str, options: tuple):
    module = tessera.kernels.flash_attention(**dict(options))
    apply_pipeline(module, spec)
    return module


def _in_loop(op) -> bool:
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, scf.ForOp):
        parent = parent.parent_op()
    return parent is not None


@pytest.mark.parametrize("options", [dict(head_dim=128), pytest.param(dict(head_dim=64, causal=True), marks=pytest.mark.slow)])
def test_q_descriptors_leave_the_loops_within_the_budget(options):
    """Before: every loop-invariant advance sits in a loop. After: all of them (Q's: warp-uniform, so uniform
    descriptors that cost no per-thread registers) are computed once outside any loop, each (base, bytes) once,
    and the consumers still fit, with more spare registers than the count of 2 each would have left. The K and
    V rings' descriptors (uniform too) are made once, and the loops reach each trip's slot by an offset."""
    _, before = _kernel(PEELED_WITHOUT, **options)
    candidates, spare = len(invariant_advances(before)), spare_registers(before)
    assert candidates and spare is not None and spare >= 0
    _, after = _kernel(PEELED, **options)
    hoisted = [op for op in after.walk() if isinstance(op, sm90.DescriptorAdvanceOp) and not _in_loop(op)
               and any(_in_loop(use.operation) for use in op.result.uses)]
    assert len(hoisted) == candidates
    if options["head_dim"] == 128:  # Q's 7 k-steps, more than the 2-register count would have left room for
        assert candidates == 7 > spare // 2
    assert len({(op.descriptor, op.bytes.value.data) for op in hoisted}) == len(hoisted)
    assert not invariant_advances(after)
    assert {op.result for op in hoisted} <= uniform_descriptors(after)
    assert spare_registers(after) >= spare
    # The K and V rings' descriptors are made once, outside the loops; each trip moves them to its slot. (The
    # bias tile's, mask-by-mma's, is made on the masked trips only, in their branch.)
    assert not [op for op in after.walk() if isinstance(op, sm90.MakeDescriptorOp) and _in_loop(op)
                and not isinstance(op.parent_op(), scf.IfOp)]
    slots = [op for op in after.walk() if isinstance(op, sm90.DescriptorOffsetOp)]
    assert slots and all(_in_loop(op) for op in slots)
    rings = {op.descriptor for op in slots}
    assert len(rings) == 2 and rings <= uniform_descriptors(after)


@pytest.mark.slow
@pytest.mark.skipif(find_ptxas() is None or find_nvdisasm() is None, reason="needs ptxas and nvdisasm")
def test_steady_loop_is_shorter_without_spill():
    """The d128 128 x 176 steady trip (`loop_trip`, the path through the main loop) loses uniform-datapath work, no
    spill, no R2UR in it (slow: two compiles to cubin; bench/pipeline.py --ptxas-all measures every ptxas)."""
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers
    from tessera.sass import disassemble, loop_trip, opcode_counts, parse_sass
    from tessera.toolchain import compile_ptx

    sizes = []
    for spec in (WITHOUT, SPECIALIZED_PIPELINE):
        module, _ = _kernel(spec + ",allocate-registers", head_dim=128)
        result = compile_ptx(print_ptx(module, registers=allocated_registers, comments=False))
        entry = result.entry()
        assert not result.log.diagnostics and entry.spill_store_bytes == entry.stack_frame_bytes == 0
        trip = loop_trip(parse_sass(disassemble(result.cubin)))
        sizes.append((len(trip), opcode_counts(trip)["R2UR"]))
    (before, _), (after, r2ur) = sizes
    assert after < before and r2ur == 0, sizes


def test_a_refused_hoist_is_undone_exactly():
    """The pass tries each count of hoisted advances in place and undoes it where the budgets refuse it: undone,
    the kernel is exactly as before (the same ops in the same order, each reading the same values: every
    advance back in its loop), and a kept hoist leaves no advance of those keys in a loop."""
    from tessera.passes.hoist_invariant_descriptors import hoist_descriptors

    _, kernel = _kernel(PEELED_WITHOUT, head_dim=128)  # the lowering the test above makes

    def body():
        return [(op, op.parent, tuple(op.operands), tuple(op.results)) for op in kernel.walk()]

    before = body()
    keys = invariant_advances(kernel)
    assert len(keys) >= 2
    for count in (len(keys), 1):
        hoist_descriptors(kernel, keys[:count]).undo()
        assert body() == before
    hoist_descriptors(kernel, keys[:1]).keep()
    assert invariant_advances(kernel) == keys[1:]
    assert len(body()) == len(before) + 1 - sum(
        1 for op, *_ in before if isinstance(op, sm90.DescriptorAdvanceOp) and (op.descriptor, op.bytes.value.data) == keys[0])


def test_a_folded_loop_makes_q_slot_descriptor_once():
    """overlap-softmax (fold=true, the default) runs trip 0 in the loop, so no peeled trip makes Q's descriptor
    before it: the pass makes Q's slot descriptor (the warpgroup's rows, the same on every trip) once before the
    loop, so that Q's k-step advances leave the loop as they do in the peeled form; the K and V slots stay per
    trip."""
    folded = WITHOUT
    _, before = _kernel(folded, head_dim=64)
    assert not invariant_advances(before)  # Q's descriptor is made in the loop: nothing is invariant yet
    _, after = _kernel(folded + ",hoist-invariant-descriptors", head_dim=64)
    slots = [op for op in after.walk() if isinstance(op, sm90.DescriptorOffsetOp)]
    (q_slot,) = [op for op in slots if not _in_loop(op)]
    assert len({op.descriptor for op in slots if _in_loop(op)}) == 2 and q_slot.result in uniform_descriptors(after)
    assert not invariant_advances(after)
    assert any(isinstance(op, sm90.DescriptorAdvanceOp) and op.descriptor is q_slot.result and not _in_loop(op)
               for op in after.walk())
