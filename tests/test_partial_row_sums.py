"""convert-tile-to-sm90 keeps the online softmax's running sum as each thread's partial sum and adds the quad
once, after the loop (passes/convert_tile_to_sm90/row_sums.py)."""

from __future__ import annotations

import pytest
from xdsl.dialects import scf

import tessera
from tessera.dialects import sm90, tile
from tessera.kernel_abi import is_target_kernel, kernels
from tessera.passes import apply_pipeline
from tessera.passes.convert_tile_to_sm90.row_sums import partial_row_sums, reduced_after_loop

LOWER = "assign-swizzle,convert-tile-to-sm90,canonicalize,cse"


def _names(values) -> set[str]:
    return {v.name_hint for v in values}


def test_the_running_sum_is_partial_and_reduced_after_the_loop():
    fn = kernels(tessera.kernels.flash_attention(head_dim=64, causal=True))[0]
    partial = partial_row_sums(fn)
    assert _names(partial) == {"p_sum", "l_new", "l"}  # l_final is divided by: summed after the loop
    (loop,) = [op for op in fn.walk() if isinstance(op, scf.ForOp)]
    assert [loop.results[i].name_hint for i in reduced_after_loop(loop, partial)] == ["l_final"]


@pytest.mark.parametrize("builder, options", [
    ("flash_attention", dict(head_dim=64, return_lse=True)),
    ("flash_attention", dict(head_dim=128, num_splits=2)),
    ("two_pass_attention", dict(head_dim=64)),
    ("three_pass_attention", dict(head_dim=64)),
    ("attention_backward", dict(head_dim=64)),
    ("flash_attention", dict(head_dim=64, mask_mod=lambda b, h, q, k: q >= k, block_sparse=True)),
])
def test_every_use_of_a_partial_sum_is_in_the_chain(builder, options):
    """Whatever the kernel: a partial value is read only by an fma (as b or c) whose result is partial, or
    carried through a loop whose iter_arg is partial; an fma never scales by a partial value."""
    built = getattr(tessera.kernels, builder)(**options)
    if not hasattr(built, "modules"):  # as convert-tile-to-sm90 sees it: pipelined, overlapped, peeled
        apply_pipeline(built, "assign-swizzle,pipeline-loops{stages=2},overlap-softmax,peel-masked-iterations")
    modules = built.modules if hasattr(built, "modules") else (built,)  # the backward: three kernels
    for fn in (fn for module in modules for fn in kernels(module)):
        partial = partial_row_sums(fn)
        for value in partial:
            for use in value.uses:
                user = use.operation
                if isinstance(user, tile.FmaOp):
                    assert use.index in (1, 2) and user.result in partial
                elif isinstance(user, scf.YieldOp) and isinstance(user.parent_op(), scf.IfOp):
                    assert user.parent_op().results[use.index] in partial
                elif isinstance(user, scf.YieldOp):
                    assert user.parent_op().body.block.args[1 + use.index] in partial
                else:
                    assert isinstance(user, scf.ForOp)
                    first = len(user.operands) - len(user.iter_args)
                    assert user.body.block.args[1 + use.index - first] in partial
            if isinstance(value.owner, tile.FmaOp):
                assert value.owner.a not in partial


def test_a_row_sum_read_otherwise_is_reduced_where_it_is_made():
    """Two-pass attention's statistics pass reads its row sums into the output's normaliser: no partials."""
    fn = kernels(tessera.kernels.two_pass_attention(head_dim=64))[0]
    for value in partial_row_sums(fn):
        assert not isinstance(value.owner, tile.RowSumOp) or all(
            isinstance(u.operation, tile.FmaOp) for u in value.uses)


def test_the_loop_shuffles_only_for_the_maximum():
    """Per key block two butterfly shuffles (the row maximum over the quad), not four; the sum's two come
    after the loop."""
    module = tessera.kernels.flash_attention(head_dim=64)
    apply_pipeline(module, LOWER)
    kernel = next(op for op in module.walk() if is_target_kernel(op))
    (loop,) = [op for op in kernel.walk() if isinstance(op, scf.ForOp)]
    in_loop = [op for op in loop.walk() if isinstance(op, sm90.ShflSyncOp) and op.mode.data == "bfly"]
    after = [op for op in kernel.walk() if isinstance(op, sm90.ShflSyncOp) and op.mode.data == "bfly"
             and not loop.is_ancestor(op)]
    assert len(in_loop) == 2 and len(after) == 2
