"""peel-masked-iterations: the first loop runs exactly the trips whose masks are identities, without them.

Numerics: flash attention, peeled alone and after pipeline-loops, gives bit-identical outputs to the kernel as
built (the removed masks were identities) and matches the NumPy reference. The split point is checked
against brute force: the masks' operands are evaluated trip by trip in the original loop, and the peeled
loop must run exactly the leading trips where every mask is an identity (never one more, the numerics tests'
job; never one less, this one's)."""

from __future__ import annotations

import functools
import operator

import numpy as np
import pytest
from xdsl.dialects import arith, scf
from xdsl.ir import Block, SSAValue

import tessera
from tessera import reference
from tessera.dialects import tile
from tessera.numerics import dtype_from_name
from tessera.passes import apply_pipeline
from tessera.reference_attention import attention_operands

from conftest import build_kernel
from text_edits import checked, filled

BLOCK = 32
"""Query and key block of the numerics kernels: small blocks give many key blocks for short sequences."""

CONFIGS = [(64, False, "bf16"), (64, True, "f16"), (128, False, "f16"), (128, True, "bf16")]
"""(head_dim, causal, dtype): each head dim, causal or not, and each element type, in four kernels."""

SEQ_PAIRS = [(1, 1), (40, 40), (3, 64), (33, 70), (70, 300), (200, 45)]
"""(seq_q, seq_k) with BLOCK = 32: 1, 2 (partial), 2 (full), 3 and 10 key blocks; the last pair, causal,
gives query blocks with 0, 1 and 2 key blocks."""


@functools.lru_cache(maxsize=None)
def compiled(spec: str, head_dim: int, causal: bool, dtype: str, block: int = BLOCK):
    module = build_kernel("flash_attention", head_dim=head_dim, causal=causal, dtype=dtype, block_m=block, block_n=block).clone()
    if spec:
        apply_pipeline(module, spec)
    return module


def _masks(op) -> list:
    return [o for o in op.walk() if isinstance(o, tile.MaskBoundsOp | tile.MaskCausalOp)]


def _loops(op) -> list[scf.ForOp]:
    return [o for o in op.walk() if isinstance(o, scf.ForOp)]


# region numerics


@pytest.mark.parametrize("spec", ["peel-masked-iterations",
                                  "pipeline-loops{stages=2},peel-masked-iterations",
                                  "pipeline-loops{stages=3},peel-masked-iterations",
                                  "pipeline-loops{stages=4},peel-masked-iterations"])
@pytest.mark.parametrize("head_dim,causal,dtype", CONFIGS)
def test_peeled_flash_attention_is_bit_identical(spec, head_dim, causal, dtype, rng):
    original = compiled("", head_dim, causal, dtype)
    peeled = compiled(spec, head_dim, causal, dtype)
    assert len(_loops(peeled)) == 2 * len(_loops(original))
    for seq_q, seq_k in SEQ_PAIRS:
        q, k, v = attention_operands(rng, seq_q, seq_k, head_dim, heads=2)
        out = tessera.interpret(peeled, q, k, v)
        np.testing.assert_array_equal(out, tessera.interpret(original, q, k, v), err_msg=f"{spec} {seq_q}x{seq_k}")
        comparison = reference.check_attention(out, q, k, v, dtype_from_name(dtype), causal=causal)
        assert comparison.ok, f"{spec} seq_q={seq_q} seq_k={seq_k}: {comparison}"


def test_default_blocks(rng):
    """The builder's 128 x 128 blocks, causal, seq_q != seq_k with partial blocks: 0 to 3 key blocks."""
    module = compiled("pipeline-loops{stages=2},peel-masked-iterations", 128, True, "bf16", block=128)
    q, k, v = attention_operands(rng, 300, 270, 128, heads=2)
    out = tessera.interpret(module, q, k, v)
    assert reference.check_attention(out, q, k, v, dtype_from_name("bf16"), causal=True).ok


# endregion
# region the split point against brute force

_INDEX_OPS = {
    arith.AddiOp: operator.add,
    arith.SubiOp: operator.sub,
    arith.MuliOp: operator.mul,
    arith.FloorDivSIOp: operator.floordiv,
    arith.DivUIOp: operator.floordiv,
    arith.DivSIOp: lambda a, b: int(a / b),
    arith.CeilDivSIOp: lambda a, b: -(-a // b),
    arith.CeilDivUIOp: lambda a, b: -(-a // b),
    arith.RemUIOp: operator.mod,
    arith.MinSIOp: min,
    arith.MaxSIOp: max,
}
_PREDICATES = {0: operator.eq, 1: operator.ne, 2: operator.lt, 3: operator.le, 4: operator.gt, 5: operator.ge}


def _evaluate(block: Block, env: dict[SSAValue, int], names: dict[str, int]) -> scf.ForOp | None:
    """Evaluate the index ops of `block` in order into `env` up to its first scf.for (returned); values named
    in `names` (program ids, dims, arguments) take those values."""
    for arg in block.args:
        if arg.name_hint in names:
            env[arg] = names[arg.name_hint]
    for op in block.ops:
        if isinstance(op, scf.ForOp):
            return op
        result = op.results[0] if len(op.results) == 1 else None
        if result is None:
            continue
        if result.name_hint in names and not isinstance(op, arith.ConstantOp):
            env[result] = names[result.name_hint]
        elif isinstance(op, arith.ConstantOp):
            env[result] = op.value.value.data
        elif type(op) in _INDEX_OPS:
            env[result] = _INDEX_OPS[type(op)](env[op.lhs], env[op.rhs])
        elif isinstance(op, arith.CmpiOp):
            env[result] = _PREDICATES[op.predicate.value.data](env[op.lhs], env[op.rhs])
        elif isinstance(op, arith.SelectOp):
            env[result] = env[op.lhs] if env[op.cond] else env[op.rhs]
    return None


def _identity_prefix(loop: scf.ForOp, env: dict[SSAValue, int], names: dict[str, int]) -> int:
    """The number of leading trips of `loop` on which every mask of its body is the identity."""
    lb, ub, step = (env[v] for v in (loop.lb, loop.ub, loop.step))
    trips = max(0, -(-(ub - lb) // step))
    for k in range(trips):
        trip_env = dict(env)
        trip_env[loop.body.block.args[0]] = lb + k * step
        _evaluate(loop.body.block, trip_env, names)
        for mask in _masks(loop):
            width = mask.source.type.get_shape()[1]
            limit = trip_env[mask.seq_k]
            if isinstance(mask, tile.MaskCausalOp):
                limit = trip_env[mask.q_start] + 1 + trip_env[mask.seq_k] - trip_env[mask.seq_q]
            if trip_env[mask.k_start] + width > limit:
                return k
    return trips


def _peeled_trips(module, names: dict[str, int]) -> int:
    env: dict[SSAValue, int] = {}
    first = _evaluate(next(iter(_loops(module))).parent_block(), env, names)
    assert not _masks(first), "the first loop keeps no mask"
    lb, mid, step = (env[v] for v in (first.lb, first.ub, first.step))
    assert (mid - lb) % step == 0, "the split point is a trip boundary"
    return max(0, (mid - lb) // step)


def _expected_trips(module, names: dict[str, int]) -> int:
    env: dict[SSAValue, int] = {}
    loop = _evaluate(next(iter(_loops(module))).parent_block(), env, names)
    return _identity_prefix(loop, env, names)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_split_point_is_exact(causal):
    original = compiled("", 64, causal, "bf16")
    peeled = compiled("peel-masked-iterations", 64, causal, "bf16")
    for seq_q in (1, 31, 32, 33, 64, 100):
        for seq_k in (1, 31, 32, 33, 64, 95, 96, 130):
            for q_block in range(-(-seq_q // BLOCK)):
                names = {"seq_q": seq_q, "seq_k": seq_k, "q_block": q_block}
                assert _peeled_trips(peeled, names) == _expected_trips(original, names), names


LOOP = """
func.func @loop(%x: !tile.tile<64x32xf32, register>, %ub: index, %q0: index, %seq_q: index, %seq_k: index) -> !tile.tile<64x32xf32, register> {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c98 = arith.constant 98 : index
  %lb = arith.constant LB : index
  %step = arith.constant STEP : index
  %r = scf.for %j = %lb to %ub step %step iter_args(%acc = %x) -> (!tile.tile<64x32xf32, register>) {
    K0
    %b = tile.mask_bounds %x, %k0, %seq_k : !tile.tile<64x32xf32, register>
    %m = tile.mask_causal %b, %q0, %k0, %seq_q, %seq_k : !tile.tile<64x32xf32, register>
    %next = tile.add %acc, %m : !tile.tile<64x32xf32, register>
    scf.yield %next : !tile.tile<64x32xf32, register>
  }
  func.return %r : !tile.tile<64x32xf32, register>
}
"""

K0_FORMS = {
    # the use index (iv - lb) / step of pipeline-loops, in signed division
    "use_index": (3, 2, "%o = arith.subi %j, %c3 : index\n %t = arith.divsi %o, %c2 : index\n %k0 = arith.muli %t, %c32 : index"),
    # negative k0 on the first trips, three-index steps
    "offset": (5, 3, "%jk = arith.muli %j, %c32 : index\n %k0 = arith.subi %jk, %c98 : index"),
    # floor division of a dividend that starts negative: still affine
    "floordiv": (0, 1, "%x64 = arith.muli %j, %c64 : index\n %o = arith.subi %x64, %c98 : index\n %k0 = arith.floordivsi %o, %c4 : index"),
    # truncating division of a dividend that starts negative: not affine on those trips, nothing is peeled
    "divsi_negative": (0, 1, "%x64 = arith.muli %j, %c64 : index\n %o = arith.subi %x64, %c98 : index\n %k0 = arith.divsi %o, %c4 : index"),
    # the same with a dividend known only at run time: peeled when it starts at 0 or more (q0 <= 0)
    "divsi_runtime": (0, 1, "%x64 = arith.muli %j, %c64 : index\n %o = arith.subi %x64, %q0 : index\n %k0 = arith.divsi %o, %c4 : index"),
}


@pytest.mark.parametrize("form", K0_FORMS)
def test_split_point_of_affine_key_starts(form):
    lb, step, k0 = K0_FORMS[form]
    text = filled(LOOP, LB=str(lb), STEP=str(step), K0=k0)
    original = tessera.parse_module(text)
    peeled = tessera.parse_module(text)
    apply_pipeline(peeled, "peel-masked-iterations")
    assert len(_loops(peeled)) == 2
    peeled_any = False
    for ub in (-4, lb, lb + 1, lb + 5, lb + 40):
        for seq_k in (0, 1, 40, 100, 200):
            for q0, seq_q in ((0, 1), (0, 300), (64, 100), (200, 100)):
                names = {"ub": ub, "seq_k": seq_k, "q0": q0, "seq_q": seq_q}
                peeled_trips, expected = _peeled_trips(peeled, names), _expected_trips(original, names)
                truncation_is_floor = form != "divsi_negative" and (form != "divsi_runtime" or q0 <= 0)
                assert peeled_trips == (expected if truncation_is_floor else 0), names
                peeled_any |= peeled_trips > 0
    assert peeled_any == (form != "divsi_negative")


@pytest.mark.parametrize("k0", [
    "%w = arith.remui %j, %c4 : index\n %k0 = arith.muli %w, %c32 : index",  # wraps around
    "%k0 = arith.muli %j, %j : index",  # quadratic
    "%r = arith.subi %c98, %j : index\n %k0 = arith.muli %r, %c32 : index",  # decreasing
    "%k0 = arith.divsi %j, %c3 : index",  # slope 1/3
])
def test_loops_whose_key_start_is_not_affine_are_left_alone(k0):
    text = filled(LOOP, LB="0", STEP="1", K0=k0)
    module = tessera.parse_module(text)
    before = str(module)
    apply_pipeline(module, "peel-masked-iterations")
    assert str(module) == before


def test_loops_without_masks_are_left_alone():
    for variant, config in (("gemm", {}), ("flash_attention", {"head_dim": 64})):
        module = build_kernel(variant, **config).clone()
        if variant == "flash_attention":
            for mask in _masks(module):
                mask.result.replace_all_uses_with(mask.source)
                mask.detach()
                mask.erase()
        before = str(module)
        apply_pipeline(module, "peel-masked-iterations")
        assert str(module) == before


# endregion
# region branch=true: one loop, its masks under a warp-uniform branch

BRANCHED = "pipeline-loops{stages=2},overlap-softmax,peel-masked-iterations{branch=true}"


@pytest.mark.parametrize("head_dim,causal,dtype", CONFIGS[1:3])
def test_branched_flash_attention_is_bit_identical(head_dim, causal, dtype, rng):
    """No second loop: every mask of the rotated loop runs under `scf.if %iv < %mid`, masking the same trips as
    the split form, so the outputs are the kernel's bits."""
    original = compiled("", head_dim, causal, dtype)
    branched = compiled(BRANCHED, head_dim, causal, dtype)
    assert len(_loops(branched)) == len(_loops(compiled("pipeline-loops{stages=2},overlap-softmax", head_dim,
                                                             causal, dtype)))
    in_loop = [m for m in _masks(branched) if any(loop.is_ancestor(m) for loop in _loops(branched))]
    assert in_loop and all(isinstance(m.parent_op(), scf.IfOp) for m in in_loop)
    for seq_q, seq_k in SEQ_PAIRS:
        q, k, v = attention_operands(rng, seq_q, seq_k, head_dim, heads=2)
        out = tessera.interpret(branched, q, k, v)
        np.testing.assert_array_equal(out, tessera.interpret(original, q, k, v), err_msg=f"{seq_q}x{seq_k}")


def test_branch_keeps_the_pv_mma_in_flight_and_moves_nothing():
    """Lowered (two stages, registers allocated): the previous trip's P.V wgmma group is still in flight at the
    branch (no wait_group 0 before it), and the branch's result has the registers both branches yield (the
    masks select in place), so neither branch moves a register."""
    from tessera.kernel_abi import is_target_kernel
    from tessera.passes import PIPELINED_PIPELINE, allocated
    from tessera.dialects import sm90
    from tessera.regalloc import allocate_registers

    module = build_kernel("flash_attention", head_dim=64, causal=True).clone()
    # the causal masks selected (mask-causal-by-mma, which adds them with the tensor core, left out)
    apply_pipeline(module, allocated(PIPELINED_PIPELINE.replace("mask-causal-by-mma,", "")))
    kernel = next(op for op in module.walk() if is_target_kernel(op))
    (branch,) = [op for op in kernel.walk() if isinstance(op, scf.IfOp) and op.results
                 and isinstance(op.parent_op(), scf.ForOp) and op.cond.name_hint == "unmasked"]
    pending = 0
    for op in branch.parent_block().ops:
        if op is branch:
            break
        if isinstance(op, sm90.WgmmaCommitGroupOp):
            pending += 1
        elif isinstance(op, sm90.WgmmaWaitGroupOp):
            pending = min(pending, op.pending.value.data)
    assert pending == 1
    names = allocate_registers(kernel).names
    yielded = [region.block.last_op.operands[0] for region in branch.regions]
    assert names[branch.results[0]] == names[yielded[0]] == names[yielded[1]]


def test_folded_update_branch_keeps_both_groups_in_flight_in_place():
    """overlap-softmax{fold=true} (lowered with the masks' branch, registers allocated): the previous trip's P.V
    update runs under `scf.if first`, after the score mma's group is committed and with it still in flight;
    the skipping path retires it (wait_group 0), so the first wait after the join, wait_group 1, completes the
    score mma's group on both paths; the accumulator, the wgmma's result and the branch's result share
    registers, so no path copies an accumulator the tensor core still writes."""
    from tessera.kernel_abi import is_target_kernel
    from tessera.passes import PIPELINED_PIPELINE, allocated
    from tessera.dialects import sm90
    from tessera.regalloc import allocate_registers

    module = build_kernel("flash_attention", head_dim=64, causal=True).clone()
    apply_pipeline(module, allocated(checked(PIPELINED_PIPELINE).replace("overlap-softmax",
                                                                         "overlap-softmax{fold=true}")))
    kernel = next(op for op in module.walk() if is_target_kernel(op))
    (update,) = [op for op in kernel.walk() if isinstance(op, scf.IfOp) and op.results
                 and isinstance(op.parent_op(), scf.ForOp) and op.cond.name_hint == "first_trip"]
    ops = list(update.parent_block().ops)
    before = ops[: ops.index(update)]
    assert not any(isinstance(op, sm90.WgmmaWaitGroupOp) for op in before[[type(o) for o in before].index(
        sm90.WgmmaCommitGroupOp):])
    skip, issue = ([type(op) for op in region.block.ops] for region in update.regions)
    assert skip == [sm90.WgmmaWaitGroupOp, scf.YieldOp]
    assert update.true_region.block.first_op.pending.value.data == 0
    assert issue.count(sm90.WgmmaCommitGroupOp) == 1 and sm90.WgmmaWaitGroupOp not in issue
    after = next(op for op in ops[ops.index(update):] if isinstance(op, sm90.WgmmaWaitGroupOp))
    assert after.pending.value.data == 1
    names = allocate_registers(kernel).names
    yielded = [region.block.last_op.operands[0] for region in update.regions]
    assert names[update.results[0]] == names[yielded[0]] == names[yielded[1]]


# endregion
