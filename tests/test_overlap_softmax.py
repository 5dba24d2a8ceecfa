"""overlap-softmax: the rotated key loop computes exactly what the pipelined one does, in the overlapped order,
and the Tile interpreter's race checks hold (no refill of a stage before its release, no read of a copy that
has not landed).

Numerics: flash attention after pipeline-loops{stages=N} and overlap-softmax (and then
peel-masked-iterations) gives bit-identical outputs to the kernel as built (every trip runs the same ops on
the same values) and matches the NumPy reference, for trip counts 0, 1, 2, fewer than N and many."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr
from xdsl.rewriter import InsertPoint, Rewriter

import tessera
from tessera import reference
from tessera.dialects import tile
from tessera.interpreters.block_batch import KernelHazardError
from tessera.numerics import dtype_from_name
from tessera.passes import TARGET_PIPELINE, apply_pipeline
from tessera.passes.overlap_softmax import OverlapSoftmaxError
from tessera.reference_attention import attention_operands

from conftest import build_kernel
from text_edits import checked

BLOCK = 32
"""Query and key block of the numerics kernels: small blocks give many key blocks for short sequences."""

CONFIGS = [(64, False, "bf16"), (64, True, "f16"), (128, False, "f16"), (128, True, "bf16")]
"""(head_dim, causal, dtype): each head dim, causal or not, and each element type, in four kernels."""

SEQ_PAIRS = [(1, 1), (40, 40), (3, 64), (33, 70), (70, 300), (200, 45)]
"""(seq_q, seq_k) with BLOCK = 32: 1, 2 (partial), 2 (full), 3 and 10 key blocks; the last pair, causal,
gives query blocks with 0, 1 and 2 key blocks."""

FOLDED = "assign-swizzle,pipeline-loops{{stages={n}}},overlap-softmax"
"""The default form: trip 0 runs in the loop, the previous trip's P.V mma and release under `scf.if first`."""
PEELED = FOLDED + "{{fold=false}}"
"""`fold=false`: trip 0's softmax peeled before the loop."""
FULL = FOLDED + ",peel-masked-iterations"


@functools.lru_cache(maxsize=None)
def compiled(spec: str, variant: str = "flash_attention", block: int = BLOCK, **config):
    module = build_kernel(variant, block_m=block, block_n=block, **config).clone()
    if spec:
        apply_pipeline(module, spec)
    return module


def _rotated_loops(module) -> list[scf.ForOp]:
    """The loops that overlap-softmax built: those under the `scf.if n > 0` that replaced a loop."""
    return [op for op in module.walk() if isinstance(op, scf.ForOp) and isinstance(op.parent_op(), scf.IfOp)
            and op.parent_op().results]


def _body_ops(loop: scf.ForOp, op_type) -> list:
    return [op for op in loop.body.block.ops if isinstance(op, op_type)]


# region numerics


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("head_dim,causal,dtype", CONFIGS)
@pytest.mark.parametrize("spec", [PEELED, FULL], ids=["peeled", "folded+split"])
def test_rotated_flash_attention_is_bit_identical(spec, head_dim, causal, dtype, stages, rng):
    config = {"head_dim": head_dim, "causal": causal, "dtype": dtype}
    original = compiled("", **config)
    module = compiled(spec.format(n=stages), **config)
    assert _rotated_loops(module)
    for seq_q, seq_k in SEQ_PAIRS:
        q, k, v = attention_operands(rng, seq_q, seq_k, head_dim, heads=2)
        out = tessera.interpret(module, q, k, v)
        np.testing.assert_array_equal(out, tessera.interpret(original, q, k, v), err_msg=f"{seq_q}x{seq_k}")
        comparison = reference.check_attention(out, q, k, v, dtype_from_name(dtype), causal=causal)
        assert comparison.ok, f"stages={stages} seq_q={seq_q} seq_k={seq_k}: {comparison}"


def test_default_blocks(rng):
    """The builder's 128 x 128 blocks, causal, seq_q != seq_k with partial blocks: 0 to 3 key blocks."""
    module = compiled(FULL.format(n=2), block=128, head_dim=128, causal=True, dtype="bf16")
    q, k, v = attention_operands(rng, 300, 270, 128, heads=2)
    out = tessera.interpret(module, q, k, v)
    assert reference.check_attention(out, q, k, v, dtype_from_name("bf16"), causal=True).ok


def test_two_pass_output_loop_is_rotated(rng):
    """The second pass of two-pass attention has a score mma and an accumulator too."""
    config = {"head_dim": 64, "causal": True, "dtype": "bf16"}
    module = compiled(FOLDED.format(n=2), "two_pass_attention", **config)
    assert len(_rotated_loops(module)) == 1
    q, k, v = attention_operands(rng, 70, 100, 64, heads=2)
    np.testing.assert_array_equal(tessera.interpret(module, q, k, v),
                                  tessera.interpret(compiled("", "two_pass_attention", **config), q, k, v))


def _offset_and_step(module, lb: int, step: int):
    """Rewrite the key loop `for j = 0 to n step 1` as `for i = lb to lb + step * n step step` with
    j = (i - lb) / step at the top of the body: the same trips, with a first iv and a step the passes must
    take from the IR."""
    loop = next(op for op in module.walk() if isinstance(op, scf.ForOp))
    first, stride = (arith.ConstantOp(IntegerAttr(v, IndexType())) for v in (lb, step))
    span = arith.MuliOp(loop.ub, stride)
    last = arith.AddiOp(span, first)
    Rewriter.insert_op([first, stride, span, last], InsertPoint.before(loop))
    body = loop.body.block
    iv = body.args[0]
    offset = arith.SubiOp(iv, first)
    j = arith.DivSIOp(offset, stride)
    iv.replace_uses_with_if(j.result, lambda use: use.operation is not offset)
    body.insert_ops_before([offset, j], body.first_op)
    loop.operands = [first.result, last.result, stride.result, *loop.iter_args]
    module.verify()
    return module


@pytest.mark.parametrize("spec", [PEELED.format(n=3), FULL.format(n=2), FULL.format(n=4)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_loop_with_offset_and_step(spec, causal, rng):
    """Trip numbers, the previous and the last trip's iv, and the split point come from lb and step."""
    original = compiled("", head_dim=64, causal=causal, dtype="bf16")
    module = _offset_and_step(original.clone(), 3, 2)
    apply_pipeline(module, spec)
    assert _rotated_loops(module)
    for seq_q, seq_k in SEQ_PAIRS:
        q, k, v = attention_operands(rng, seq_q, seq_k, 64, heads=2)
        np.testing.assert_array_equal(tessera.interpret(module, q, k, v), tessera.interpret(original, q, k, v))


def test_target_level(rng):
    """The rotated, peeled kernel lowers (stage indices stay remui(u, N)) and runs right in the CTA simulator."""
    module = compiled(FULL.format(n=2), block=64, head_dim=64, causal=True, dtype="bf16")
    q, k, v = attention_operands(rng, 70, 130, 64, heads=2)
    # the module is pipelined already: lower it the rest of the way (not through the default pipeline again)
    out = tessera.interpret(module, q[:, :1], k[:, :1], v[:, :1], level="target", pipeline=TARGET_PIPELINE)
    assert reference.check_attention(out, q[:, :1], k[:, :1], v[:, :1], dtype_from_name("bf16"), causal=True).ok


# endregion
# region the rotated loop


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_rotated_order(stages):
    """Trip t: wait (N-2 pending), S mma, the P.V mma of trip t-1 on the V stage of use t-1 (adding to the
    accumulator scaled at the end of trip t-1), the softmax, releases, the rescale by trip t's alpha, P's
    conversion, then the copy of trip t+N-1."""
    (loop,) = _rotated_loops(compiled(PEELED.format(n=stages), head_dim=64, causal=False, dtype="bf16"))
    ops = list(loop.body.block.ops)
    (wait,) = _body_ops(loop, tile.CpWaitGroupOp)
    assert wait.pending.value.data == stages - 2
    score, update = _body_ops(loop, tile.MmaOp)
    assert score.transpose_b and ops.index(wait) < ops.index(score) < ops.index(update)
    v_stage = update.b.owner
    use = v_stage.index.owner
    assert isinstance(use, arith.RemUIOp) and use.rhs.owner.value.value.data == stages
    assert isinstance(use.lhs.owner, arith.SubiOp) and use.lhs.owner.lhs is loop.body.block.args[0]
    releases = _body_ops(loop, tile.ReleaseOp)
    assert v_stage.results[0] in [r.stage for r in releases]
    copy = next(op for op in ops if isinstance(op, scf.IfOp))
    assert max(ops.index(r) for r in releases) < ops.index(copy) < ops.index(_body_ops(loop, tile.CpCommitGroupOp)[0])
    # nothing but wgmma writes the accumulator between the two mmas: it is rescaled after the releases (once
    # the P.V mma retired) and carried scaled; P is converted last, so its registers can be the carried ones
    (scale,) = _body_ops(loop, tile.MulRowsOp)
    (cast,) = [op for op in _body_ops(loop, tile.CastOp) if op.results[0].type.element_type != update.result.type.element_type]
    assert scale.operands[0] is update.result and max(ops.index(r) for r in releases) < ops.index(scale)
    assert ops.index(scale) < ops.index(cast) < ops.index(copy)
    assert update.acc is loop.body.block.args[3]
    assert [a.name_hint for a in loop.body.block.args[1:]] == ["m", "l", "acc", "p_half_prev"]
    yielded = loop.body.block.last_op.operands
    assert yielded[2] is scale.results[0] and yielded[3] is cast.results[0]


def test_folded_order():
    """fold=true: the loop starts at lb with the initial values (P's a zero fill, never read); after the S mma,
    `scf.if first` yields the accumulator as it is on trip 0 and runs the P.V mma of trip t-1 on the others
    (the skipping branch first); the V release of trip t-1 sits under the same condition; the rescale reads
    the branch's result."""
    (loop,) = _rotated_loops(compiled(FOLDED.format(n=2), head_dim=64, causal=False, dtype="bf16"))
    body = loop.body.block
    ops = list(body.ops)
    assert loop.lb.owner.value.value.data == 0
    assert isinstance(loop.iter_args[3].owner, tile.FillOp) and loop.iter_args[3].owner.value.value.data == 0.0
    (score,) = _body_ops(loop, tile.MmaOp)
    update, release = [op for op in ops if isinstance(op, scf.IfOp) and op.cond.name_hint == "first_trip"]
    first = update.cond.owner
    assert first.predicate.value.data == 0 and first.lhs is body.args[0] and first.rhs is loop.lb
    assert ops.index(score) < ops.index(update) < ops.index(release)
    assert list(update.true_region.block.last_op.operands) == [body.args[3]]
    (mma,) = [op for op in update.false_region.block.ops if isinstance(op, tile.MmaOp)]
    assert mma.acc is body.args[3] and mma.a is body.args[4]
    assert [type(op) for op in release.false_region.block.ops] == [tile.ReleaseOp, scf.YieldOp]
    (scale,) = _body_ops(loop, tile.MulRowsOp)
    assert scale.operands[0] is update.results[0] and ops.index(release) < ops.index(scale)
    # the tail after the loop is the last trip's P.V mma, as in the peeled form
    assert sum(isinstance(op, tile.MmaOp) for op in loop.parent_block().ops) == 1


def _seeded(stages: int, seed) -> object:
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16", block_m=BLOCK, block_n=BLOCK).clone()
    apply_pipeline(module, PEELED.format(n=stages))
    (loop,) = _rotated_loops(module)
    seed(loop)
    return module


def test_refill_before_release_is_reported(rng):
    """Moving the release of V after the copy that refills its stage is a race the interpreter reports."""

    def release_late(loop):
        release = [r for r in _body_ops(loop, tile.ReleaseOp) if r.stage.owner.source.name_hint == "v_ring"][0]
        release.detach()
        loop.body.block.insert_op_before(release, loop.body.block.last_op)

    with pytest.raises(KernelHazardError, match="overwrites ring v_ring, read since its last tile.release"):
        tessera.interpret(_seeded(2, release_late), *attention_operands(rng, 40, 100, 64, heads=2))


def test_pending_count_must_drop(rng):
    """With the copy after the wait, waiting with N-1 pending leaves the current trip's K in flight."""

    def keep_pending(loop):
        (wait,) = _body_ops(loop, tile.CpWaitGroupOp)
        wait.properties["pending"] = type(wait.pending)(wait.pending.value.data + 1, 64)

    with pytest.raises(KernelHazardError, match="still in flight"):
        tessera.interpret(_seeded(3, keep_pending), *attention_operands(rng, 40, 200, 64, heads=2))


# endregion
# region what is refused or left alone


def test_one_stage_is_refused():
    module = compiled("pipeline-loops{stages=1}", head_dim=64, causal=False, dtype="bf16").clone()
    with pytest.raises(OverlapSoftmaxError, match=r"^kernel @\w+: overlap-softmax: %acc_next = tile.mma .*: reads a stage of "
                       r"%v_ring, a 1-stage ring: .* needs pipeline-loops\{stages=N\} with N >= 2$"):
        apply_pipeline(module, "overlap-softmax")


def test_unpipelined_loop_is_refused():
    module = compiled("", head_dim=64, causal=True, dtype="bf16").clone()
    before = str(module)
    with pytest.raises(OverlapSoftmaxError, match=r"^kernel @\w+: overlap-softmax: %acc_next = tile.mma .*: reads %v_smem, which "
                       r"this loop refills every trip; .* run pipeline-loops\{stages=N\} with N >= 2 first$"):
        apply_pipeline(module, "overlap-softmax")
    assert str(module) == before


@pytest.mark.parametrize("variant,config", [
    ("gemm", {}),
    ("three_pass_attention", {"head_dim": 64}),
])
@pytest.mark.parametrize("pipelined", [False, True])
def test_loops_without_a_second_mma_are_left_alone(variant, config, pipelined):
    """The GEMM K loop (an accumulator, one mma) and the three-pass loops (no accumulator in the score loops,
    one mma in the output loop) have nothing to overlap."""
    module = build_kernel(variant, **config).clone()
    if pipelined:
        apply_pipeline(module, "pipeline-loops{stages=2}")
    before = str(module)
    apply_pipeline(module, "overlap-softmax")
    assert str(module) == before


@pytest.mark.parametrize("spec", [PEELED, FOLDED], ids=["peeled", "folded"])
def test_rotating_twice_changes_nothing(spec):
    module = compiled(spec.format(n=3), head_dim=64, causal=True, dtype="bf16").clone()
    before = str(module)
    apply_pipeline(module, "overlap-softmax")
    assert str(module) == before


# endregion


# region lowered


def _folded_against_default(level: str, shapes, rng) -> None:
    from tessera.passes import DEFAULT_PIPELINE

    peeled = checked(DEFAULT_PIPELINE).replace("overlap-softmax", "overlap-softmax{fold=false}")
    module = build_kernel("flash_attention", head_dim=64, causal=True).clone()
    for seq_q, seq_k in shapes:
        q, k, v = (a.astype(np.float32) for a in attention_operands(rng, seq_q, seq_k, 64, heads=2))
        out = tessera.interpret(module, q, k, v, level=level)
        np.testing.assert_array_equal(out, tessera.interpret(module, q, k, v, level=level, pipeline=peeled),
                                      err_msg=f"{level} {seq_q}x{seq_k}")


def test_folded_kernel_is_bit_identical_lowered(rng):
    """The whole default pipeline (its first trip folded into the loop), in the CTA simulator: one key block,
    causal, with seq_q > seq_k so that the first 55 rows see no key (O = 0): the same output bits as with
    overlap-softmax{fold=false}, which peels the first trip."""
    _folded_against_default("target", [(100, 45)], rng)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_folded_kernel_is_bit_identical_lowered_matrix(level, rng):
    """Slow: one trip, fully masked rows, several trips, at target and PTX level."""
    _folded_against_default(level, [(130, 1), (200, 45), (64, 300), (256, 700)], rng)


# endregion
