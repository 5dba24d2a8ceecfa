"""convert-tile-to-sm90 leaves canonicalize nothing to do: the emitters fold scalar integer arithmetic as they
build it (`tessera.lowering.emitter.fold_integer_binary`) and the lowering ends by erasing what nothing reads
and moving loop bodies' constants out of their loops (`passes/convert_tile_to_sm90/tidy.py`), so canonicalize's
first round changes nothing and no second round runs. (`bench/ptx_identity.py check` shows the PTX unchanged.)"""

from __future__ import annotations

import pytest
from xdsl.dialects import arith, func
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block, Region
from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriterListener, PatternRewriteWalker
from xdsl.transforms.canonicalize import CanonicalizationRewritePattern
from xdsl.transforms.dead_code_elimination import region_dce

import tessera
from tessera.ir import make_context
from tessera.lowering.emitter import Emitter
from tessera.passes import PIPELINED_PIPELINE, apply_pipeline


def _canonicalize_round(module) -> list[str]:
    """What one round of canonicalize (xDSL's walker, folder and dead-code pass, no second round) changes."""
    events: list[str] = []
    listener = PatternRewriterListener(
        operation_removal_handler=[lambda op: events.append(f"erased {op.name}")],
        operation_replacement_handler=[lambda op, new: events.append(f"replaced {op.name}")],
        operation_insertion_handler=[lambda op: events.append(f"inserted {op.name}")])
    pattern = GreedyRewritePatternApplier([CanonicalizationRewritePattern()], ctx=make_context(), folding_enabled=True)
    PatternRewriteWalker(pattern, post_walk_func=region_dce, listener=listener,
                         apply_recursively=False).rewrite_module(module)
    return events


@pytest.mark.parametrize("build", [
    lambda: tessera.kernels.flash_attention(head_dim=64, causal=True),
    lambda: tessera.kernels.attention_backward_main(head_dim=64),
], ids=["flash-d64-causal", "backward-d64"])
def test_canonicalize_finds_nothing_after_the_lowering(build) -> None:
    module = build()
    apply_pipeline(module, PIPELINED_PIPELINE.split(",canonicalize")[0])  # up to convert-tile-to-sm90
    assert _canonicalize_round(module) == []


def _folded(make):
    """The value `make(emitter, x)` returns, and x (an index block argument)."""
    block = Block(arg_types=[IndexType()])
    return make(Emitter(block), block.args[0]), block.args[0]


def test_integer_arithmetic_is_emitted_folded() -> None:
    value, x = _folded(lambda e, x: e.addi(x, e.index(0)))
    assert value is x  # x + 0
    value, x = _folded(lambda e, x: e.addi(e.index(0), x))
    assert value is x  # 0 + x
    value, x = _folded(lambda e, x: e.muli(e.index(0), e.index(176)))
    assert isinstance(value.owner, arith.ConstantOp) and value.owner.value == IntegerAttr(0, IndexType())
    value, x = _folded(lambda e, x: e.op(arith.CeilDivSIOp(x, e.index(1))))
    assert value is x  # ceildiv(x, 1)
    value, x = _folded(lambda e, x: e.muli(x, e.index(0)))
    assert value.owner.value == IntegerAttr(0, IndexType())  # x * 0 is the zero
    value, x = _folded(lambda e, x: e.addi(e.index(1), x))
    assert isinstance(value.owner, arith.AddiOp) and value.owner.lhs is x  # the constant on the right
    value, x = _folded(lambda e, x: e.op(arith.SubiOp(e.index(1), x)))
    assert isinstance(value.owner, arith.SubiOp) and value.owner.rhs is x  # not commutative: as written


def test_folded_ops_leave_no_uses_behind() -> None:
    """An op folded away is erased, so that its operands are not read by a detached op (a dead constant
    stays dead for the lowering's tidy to erase)."""
    block = Block(arg_types=[IndexType()])
    e = Emitter(block)
    zero = e.index(0)
    assert e.addi(block.args[0], zero) is block.args[0]
    assert zero.first_use is None


def test_canonical_round_sees_a_dead_constant() -> None:
    """The check above is not vacuous: a kernel with a dead constant is a change for canonicalize."""
    block = Block()
    Emitter(block).index(7)
    block.add_op(func.ReturnOp())
    assert _canonicalize_round(ModuleOp([func.FuncOp("k", ((), ()), Region(block))])) == ["erased arith.constant"]
