"""The PTX printer's fold of a flash forward's epilogue P.V into its loop (tessera/ptx/fold_epilogue.py): the
form compile15 measured (docs/compile-time.md), the same bits in the PTX executor as the unfolded print, and
near misses printed as without the fold.

The whole oracle (every flash forward of bench/ptx_identity.py against bench/fold_epilogue.py's hand edit, up to
names, and the executor on 16 shapes) is `python bench/fold_epilogue.py compare` and `check`; here one
configuration of each.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, StringAttr

import tessera
from tessera.dialects import sm90
from tessera.interpreters.ptx import printed
from tessera.passes import DEFAULT_PIPELINE, apply_pipeline
from tessera.ptx.fold_epilogue import EpilogueFold, fold_or_refusal
from tessera.ptx.kernel import KernelPrinter
from tessera.ptx.module import print_ptx, target_kernels
from tessera.ptx.registers import RegisterFile
from tessera.ptx.target import allocated_registers
from tessera.reference_attention import attention_operands

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from fold_epilogue import fold_epilogue, normalized  # noqa: E402


SELECT_PIPELINE = DEFAULT_PIPELINE.replace("mask-by-mma,", "")
"""The default pipeline with the bounds mask selected under the masked branch (without mask-by-mma): the form
whose else-branch opens with the exit test, and bench/fold_epilogue.py's hand edit."""


@pytest.fixture(scope="module")
def lowered():
    module = tessera.kernels.flash_attention(head_dim=64)
    apply_pipeline(module, SELECT_PIPELINE + ",allocate-registers")
    return module


def _main_loop(module) -> tuple[KernelPrinter, scf.ForOp]:
    (fn,) = target_kernels(module)
    printer = KernelPrinter(fn, None, RegisterFile(allocated_registers(fn)))
    loop = max((op for op in fn.walk() if isinstance(op, scf.ForOp)), key=lambda op: len(op.results))
    return printer, loop


def test_the_printer_makes_the_hand_edit(lowered):
    """Up to register and label names, the printed PTX is bench/fold_epilogue.py's edit of the unfolded print."""
    unfolded = print_ptx(lowered, registers=allocated_registers, fold_epilogue=False)
    folded = print_ptx(lowered, registers=allocated_registers)
    assert normalized(folded) == normalized(fold_epilogue(unfolded))
    assert (unfolded.count("wgmma.mma_async"), folded.count("wgmma.mma_async")) == (20, 13)
    lines = [line.strip() for line in folded.splitlines() if not line.strip().startswith("//")]
    ret = lines.index("ret;")
    dummy, exit_block = lines[ret + 1], lines[ret + 6]
    assert re.fullmatch(r"\$L__pv_dummy\d+:", dummy) and re.fullmatch(r"\$L__pv_exit\d+:", exit_block)
    assert lines[ret + 3].startswith("wgmma.mma_async") and lines[ret + 3].endswith(", 0, 1, 1, 0, 0;")  # scale-d 0
    assert lines[ret + 7:ret + 9] == ["wgmma.wait_group.sync.aligned 0;", lines[ret + 8]]
    assert lines[ret + 8].startswith("mbarrier.arrive.shared::cta.b64 _, [")


def test_the_fold_runs_as_the_unfolded_kernel(monkeypatch):
    """The PTX executor: the same bits with the fold as without, on one trip and on several (no hazard)."""
    rng = np.random.default_rng(3)
    module = tessera.kernels.flash_attention(head_dim=64)
    plain = printed.ptx_text

    def unfolded(mod):
        _, allocated = plain(mod)
        return print_ptx(allocated, registers=allocated_registers, fold_epilogue=False), allocated

    for seq_q, seq_k in [(64, 1), (64, 300)]:
        q, k, v = (a.astype(np.float32) for a in attention_operands(rng, seq_q, seq_k, 64, heads=1))
        folded = tessera.interpret(module, q, k, v, level="ptx")
        monkeypatch.setattr(printed, "ptx_text", unfolded)
        assert np.array_equal(folded, tessera.interpret(module, q, k, v, level="ptx"), equal_nan=True)
        monkeypatch.setattr(printed, "ptx_text", plain)


def test_the_flash_loop_is_recognised(lowered):
    printer, loop = _main_loop(lowered)
    fold = fold_or_refusal(printer, loop)
    assert isinstance(fold, EpilogueFold)
    assert [op.name for op in fold.sunk] == ["arith.muli"]  # k0 = j * block_n, read only by the masks
    assert fold.epilogue[0].name == "arith.subi" and fold.epilogue[-1].name == "sm90.mbarrier_arrive"


def test_a_loop_without_a_masked_branch_exits_after_the_update_wait(monkeypatch):
    """mask-by-mma (the default) adds the bounds mask before the update: no branch after it for the exit test,
    which then follows the update's wait_group on every trip; the same bits as unfolded in the PTX executor."""
    module = tessera.kernels.flash_attention(head_dim=64)
    lowered_default = module.clone()
    apply_pipeline(lowered_default, DEFAULT_PIPELINE + ",allocate-registers")
    printer, loop = _main_loop(lowered_default)
    fold = fold_or_refusal(printer, loop)
    assert isinstance(fold, EpilogueFold) and fold.masked is None and fold.sunk == []
    assert isinstance(fold.exit_after, sm90.WgmmaWaitGroupOp) and fold.exit_after.pending.value.data == 1
    lines = [line.strip() for line in print_ptx(lowered_default, registers=allocated_registers).splitlines()
             if not line.strip().startswith("//")]
    wait = lines.index("wgmma.wait_group.sync.aligned 1;")
    assert lines[wait + 1].startswith("setp.eq.s32") and re.fullmatch(r"@%p\d+ bra \$L__pv_exit\d+;", lines[wait + 2])
    rng = np.random.default_rng(4)
    plain = printed.ptx_text

    def unfolded(mod):
        _, allocated = plain(mod)
        return print_ptx(allocated, registers=allocated_registers, fold_epilogue=False), allocated

    q, k, v = (a.astype(np.float32) for a in attention_operands(rng, 64, 300, 64, heads=1))
    folded = tessera.interpret(module, q, k, v, level="ptx")
    monkeypatch.setattr(printed, "ptx_text", unfolded)
    assert np.array_equal(folded, tessera.interpret(module, q, k, v, level="ptx"), equal_nan=True)


def _unmasked_bound(loop: scf.ForOp) -> arith.MaxSIOp:
    masked = [op for op in loop.body.block.ops if isinstance(op, scf.IfOp)][1]
    return masked.cond.owner.rhs.owner


def test_a_masked_branch_trip_n_might_skip_is_not_folded():
    """`maxsi(x, 0)` without the `minsi(., n)`: the unmasked trips may reach n, so trip n might skip the
    masked branch and its exit test: printed as without the fold."""
    module = tessera.kernels.flash_attention(head_dim=64)
    apply_pipeline(module, SELECT_PIPELINE + ",allocate-registers")
    printer, loop = _main_loop(module)
    bound = _unmasked_bound(loop)
    minimum = bound.lhs.owner
    bound.operands = [minimum.lhs, bound.rhs]
    assert fold_or_refusal(printer, loop).startswith("the masked branch is not")
    assert print_ptx(module, registers=allocated_registers) == print_ptx(
        module, registers=allocated_registers, fold_epilogue=False)


def test_an_epilogue_value_read_after_it_is_not_folded():
    """A value of the epilogue (its V descriptor) read after it: the loop cannot stand in for the epilogue."""
    module = tessera.kernels.flash_attention(head_dim=64)
    apply_pipeline(module, DEFAULT_PIPELINE + ",allocate-registers")
    printer, loop = _main_loop(module)
    fold = fold_or_refusal(printer, loop)
    last_trip = fold.epilogue[0].result
    yielded = loop.parent_block().last_op
    user = arith.AddiOp(last_trip, last_trip)
    loop.parent_block().insert_op_before(user, yielded)
    assert "is read outside the epilogue" in fold_or_refusal(printer, loop)


def test_a_bound_ptxas_cannot_see_as_uniform_is_not_folded():
    """A key count computed from the thread index (as the paged and varlen forwards' counts loaded from global
    memory): an exit test on it inside the loop would make ptxas guard the loop's shuffles against divergence."""
    module = tessera.kernels.flash_attention(head_dim=64)
    apply_pipeline(module, DEFAULT_PIPELINE + ",allocate-registers")
    printer, loop = _main_loop(module)
    count = loop.ub.owner
    tid = sm90.SpecialRegOp.create(properties={"register": StringAttr("tid.x")}, result_types=[IndexType()])
    count.parent_block().insert_op_before(tid, count)
    count.operands = [tid.result, *count.operands[1:]]
    assert fold_or_refusal(printer, loop).startswith("the loop bound is not computed from parameters")
    assert print_ptx(module, registers=allocated_registers) == print_ptx(
        module, registers=allocated_registers, fold_epilogue=False)
