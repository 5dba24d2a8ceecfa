"""`pipeline-loops{stages=N}` and the ring rules of the Tile IR interpreter.

- The interpreter's ring rules, on the smallest kernels that show them: a ring stage is published by the wait
  that covers its copy, `tile.release` hands it back, reading it after that or refilling it before that is
  reported.
- Every builder, pipelined with N = 1..4 stages, computes what the reference computes, and bit for bit what
  the unpipelined kernel computes, for trip counts 0, 1, 2, fewer than N and more than N (causal loops run a
  different number of trips in each block).
- Seeded pipeline bugs are reported by the interpreter, not computed.
- Loops that copy but are not canonical are refused with a diagnostic, and the module is left as it was.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from xdsl.dialects import scf
from xdsl.utils.exceptions import VerifyException

import tessera
from tessera import reference
from tessera.dialects import tile
from tessera.interpreters.block_batch import KernelHazardError
from tessera.ir.diagnostics import TesseraWarning
from tessera.ir.remarks import UNPIPELINED_ATTR, unpipelined_remark
from tessera.kernel_abi import specialized
from tessera.kernels.attention import FLASH_BLOCK_N
from tessera.numerics import BF16, dtype_from_name
from tessera.passes import apply_pipeline
from tessera.passes.pipeline_loops import PipelineLoopsError, PipelineLoopsPass

from conftest import build_kernel

STAGES = (1, 2, 3, 4)


def pipelined(variant: str, stages: int, **config):
    """A fresh copy of the builder's kernel after `assign-swizzle,pipeline-loops{stages=N}`."""
    module = build_kernel(variant, **config).clone()
    apply_pipeline(module, f"assign-swizzle,pipeline-loops{{stages={stages}}}")
    module.verify()
    return module


@functools.lru_cache(maxsize=None)
def _pipelined_cached(variant: str, stages: int, config: tuple) -> object:
    return pipelined(variant, stages, **dict(config))


def _loops(module) -> list[scf.ForOp]:
    return [op for op in module.walk() if isinstance(op, scf.ForOp)]


def _ops(op, op_type) -> list:
    return [o for o in op.walk() if isinstance(o, op_type)]


# region The interpreter's ring rules

RING_KERNEL = """
func.func @ring(%A: !tile.tile<?x64xbf16, global> {{tile.dims = #tile.dims<n, 64>}},
                %C: !tile.tile<?x64xf32, global> {{tile.dims = #tile.dims<n, 64>, tile.role = "out"}})
    attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<1>}} {{
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %kv_ring = tile.alloc_shared : !tile.tile<2x16x64xbf16, shared, swizzle 128>
  %s0 = tile.stage %kv_ring[%c0] : !tile.tile<2x16x64xbf16, shared, swizzle 128> -> !tile.tile<16x64xbf16, shared, swizzle 128>
  %w0 = tile.view %A[%c0, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<16x64xbf16, global>
  %w1 = tile.view %A[%c16, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<16x64xbf16, global>
  {body}
  %f = tile.cast %r : !tile.tile<16x64xbf16, register> -> !tile.tile<16x64xf32, register>
  %o = tile.view %C[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<16x64xf32, global>
  tile.store_global %f, %o : !tile.tile<16x64xf32, register>, !tile.tile<16x64xf32, global>
  func.return
}}
"""

STAGE = "!tile.tile<16x64xbf16, shared, swizzle 128>"
COPY0 = f"tile.cp_async %w0, %s0 : !tile.tile<16x64xbf16, global>, {STAGE}"
COPY1 = f"tile.cp_async %w1, %s0 : !tile.tile<16x64xbf16, global>, {STAGE}"
WAIT = "tile.cp_commit_group\n  tile.cp_wait_group 0"
RELEASE = f"tile.release %s0 : {STAGE}"


def _read(name: str) -> str:
    return f"%{name} = tile.load %s0 : {STAGE} -> !tile.tile<16x64xbf16, register>"


def _run_ring(*lines: str, rows: int = 40) -> tuple[np.ndarray, np.ndarray]:
    a = np.random.default_rng(7).standard_normal((rows, 64)).astype(np.float32)
    module = tessera.parse_module(RING_KERNEL.format(body="\n  ".join(lines)))
    return tessera.interpret(module, a), a.astype(BF16).astype(np.float32)


def test_the_wait_publishes_a_ring_stage_without_a_barrier():
    out, a = _run_ring(COPY0, WAIT, _read("r"))
    np.testing.assert_array_equal(out[:16], a[:16])


def test_a_released_stage_is_refilled_and_read_again():
    out, a = _run_ring(COPY0, WAIT, _read("x"), RELEASE, COPY1, WAIT, _read("r"))
    np.testing.assert_array_equal(out[:16], a[16:32])


def _read_again(name: str) -> str:
    """A read of slot 0 through a second `tile.stage` of it: the same bytes, a value the verifier does not
    follow (it refuses a use of the released value itself), so the interpreter's ring rules are what see it."""
    return (f"%again = tile.stage %kv_ring[%c0] : !tile.tile<2x16x64xbf16, shared, swizzle 128> -> {STAGE}\n  "
            f"%{name} = tile.load %again : {STAGE} -> !tile.tile<16x64xbf16, register>")


def test_reading_a_released_stage_is_reported():
    with pytest.raises(KernelHazardError, match=r"^%r = tile.load %again .*: reads the source \(ring kv_ring\) whose "
                                                r"contents are released by tile.release and not refilled since"):
        _run_ring(COPY0, WAIT, _read("x"), RELEASE, _read_again("r"))


def test_reading_the_released_stage_value_is_refused_where_it_is_written():
    """The same read through the released value itself is refused by tile.release's verifier, before any run."""
    with pytest.raises(VerifyException, match=r"'tile.release' op releases the stage that tile.load at "
                                              r"<string>:\d+:\d+ uses after it, before a copy refills it"):
        _run_ring(COPY0, WAIT, _read("x"), RELEASE, _read("r"))


def test_refilling_a_stage_read_since_its_release_is_reported_even_after_a_barrier():
    with pytest.raises(KernelHazardError, match=r"^tile.cp_async %w1, %s0 .*: overwrites ring kv_ring, read since "
                                                r"its last tile.release \(write-after-read race\) in block \(0, 0, 0\)"):
        _run_ring(COPY0, WAIT, _read("x"), "tile.barrier", COPY1, WAIT, _read("r"))


def test_releasing_a_stage_whose_copy_is_in_flight_is_reported():
    with pytest.raises(KernelHazardError, match=r"^tile.release %s0 .*: releases a stage of ring kv_ring whose copy "
                                                r"is still in flight"):
        _run_ring(COPY0, "tile.cp_commit_group", RELEASE, "tile.cp_wait_group 0", _read_again("r"))


def test_a_stage_released_then_refilled_is_in_flight_until_its_wait():
    with pytest.raises(KernelHazardError, match=r"reads the source \(ring kv_ring\) whose contents are still in flight"):
        _run_ring(COPY0, WAIT, _read("x"), RELEASE, COPY1, "tile.cp_commit_group", _read("r"))


# endregion
# region The pass: options and output shape


@pytest.mark.parametrize("stages", [0, 5, -1])
def test_stages_outside_1_to_4_are_refused(stages):
    with pytest.raises(ValueError, match=f"pipeline-loops: stages must be an integer from 1 to 4, got {stages}"):
        PipelineLoopsPass(stages=stages)
    with pytest.raises(ValueError, match="stages must be an integer from 1 to 4"):
        apply_pipeline(build_kernel("gemm").clone(), f"pipeline-loops{{stages={stages}}}")


@pytest.mark.parametrize("stages", STAGES)
def test_rings_keep_the_tiles_types(stages):
    module = _pipelined_cached("flash_attention", stages, (("head_dim", 128),))
    allocs = {op.result.name_hint: op for op in _ops(module, tile.AllocSharedOp)}
    assert set(allocs) == {"q_smem", "k_ring", "v_ring"}
    q = allocs["q_smem"].result.type
    for name in ("k_ring", "v_ring"):
        ring = allocs[name].result.type
        assert ring.get_shape() == (stages, FLASH_BLOCK_N[128], 128)  # K/V tiles of the flash default, 176
        assert (ring.element_type, ring.swizzle, ring.memory_space) == (q.element_type, q.swizzle, q.memory_space)
        assert allocs[name].alignment == allocs["q_smem"].alignment
    (loop,) = _loops(module)
    assert [w.pending.value.data for w in _ops(module, tile.CpWaitGroupOp)] == [stages - 1, stages - 1]
    assert len(_ops(loop, tile.ReleaseOp)) == 2 and not _ops(loop, tile.BarrierOp)


def test_each_loop_gets_its_own_rings_and_loops_without_copies_are_left_alone():
    original = build_kernel("two_pass_attention", head_dim=64)
    module = pipelined("two_pass_attention", 2, head_dim=64)
    rings = [op.result.type.get_shape() for op in _ops(module, tile.AllocSharedOp) if op.result.type.rank == 3]
    assert rings == [(2, 128, 64)] * 3  # K for pass 1; K and V for pass 2 (fill numbers start at 0 in each loop)
    statistics, denominator, output = _loops(module)
    assert str(denominator) == str(_loops(original)[1])
    assert len(_ops(statistics, tile.ReleaseOp)) == 1 and len(_ops(output, tile.ReleaseOp)) == 2


def test_a_second_run_leaves_pipelined_loops_alone():
    module = pipelined("gemm", 3)
    text = tessera.print_module(module)
    with pytest.warns(TesseraWarning, match="pipelined already over 3-stage rings; stages=2 changes nothing"):
        apply_pipeline(module, "pipeline-loops{stages=2}")
    assert tessera.print_module(module) == text


def test_a_loop_left_single_stage_carries_a_remark_naming_it_the_copy_and_the_reason():
    """A GEMM with K = 7 (A's rows may start on any byte) keeps its loop single-stage (convert-tile-to-sm90 copies A
    with every thread): pipeline-loops says so on the loop (`tile.unpipelined`, tessera.ir.remarks) for a later pass
    to quote; with K = 64 it pipelines the loop and leaves no remark."""
    module = build_kernel("gemm")
    sig = tessera.find_kernel(module)
    for k, remark in ((7, True), (64, False)):
        lowered = specialized(module, sig, {"M": 5, "N": 16, "K": k}).clone()
        apply_pipeline(lowered, "pipeline-loops{stages=2}")
        (loop,) = _ops(lowered, scf.ForOp)
        assert (UNPIPELINED_ATTR in loop.attributes) == remark
        if remark:
            assert unpipelined_remark(loop) == (
                "; kernel @gemm_bf16: pipeline-loops left the loop over %j single-stage: its copy into %a_smem reads "
                "argument %A, whose rows may start anywhere (no tile.divisible promise puts them on 16 bytes), and "
                "ring stages are filled by bulk copies (TMA), which need rows on that alignment")


# endregion
# region Numerics of every builder

_SEQ_NONCAUSAL = [(70, 1), (70, 200), (70, 300), (70, 600)]  # one query block; 1, 2, 3 and 5 key blocks
_SEQ_CAUSAL = [(300, 10), (640, 640)]  # per query block: 0, 0, 1 trips; 1, 2, 3, 4, 5 trips


@functools.lru_cache(maxsize=None)
def _attention_case(variant: str, causal: bool, head_dim: int, dtype: str, seq_q: int, seq_k: int):
    """Inputs and the unpipelined kernel's output for one case (shared by every stage count)."""
    rng = np.random.default_rng(seq_q * 7919 + seq_k)
    q = rng.standard_normal((1, 1, seq_q, head_dim))
    k, v = (rng.standard_normal((1, 1, seq_k, head_dim)) for _ in range(2))
    module = build_kernel(variant, head_dim=head_dim, causal=causal, dtype=dtype)
    return q, k, v, tessera.interpret(module, q, k, v)


def _check_attention(variant, stages, causal, head_dim=64, dtype="bf16", seqs=None):
    module = pipelined(variant, stages, head_dim=head_dim, causal=causal, dtype=dtype)
    for seq_q, seq_k in seqs or (_SEQ_CAUSAL if causal else _SEQ_NONCAUSAL):
        q, k, v, unpipelined = _attention_case(variant, causal, head_dim, dtype, seq_q, seq_k)
        out = tessera.interpret(module, q, k, v)
        comparison = reference.check_attention(out, q, k, v, dtype_from_name(dtype), causal=causal)
        assert comparison.ok, f"stages={stages} seq_q={seq_q} seq_k={seq_k}: {comparison}"
        np.testing.assert_array_equal(out, unpipelined, err_msg=f"stages={stages} seq_q={seq_q} seq_k={seq_k}")


@pytest.mark.parametrize("stages", STAGES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", ["flash_attention", "two_pass_attention", "three_pass_attention"])
def test_pipelined_attention_matches_reference_and_unpipelined(variant, causal, stages):
    _check_attention(variant, stages, causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_pipelined_flash_attention_head_dim_128_f16(causal):
    for stages in (2, 3):
        _check_attention("flash_attention", stages, causal, head_dim=128, dtype="f16", seqs=[(200, 300)])


@pytest.mark.parametrize("stages", STAGES)
def test_pipelined_gemm_matches_reference_and_unpipelined(stages):
    module = pipelined("gemm", stages)
    rng = np.random.default_rng(stages)
    for k in (64, 100, 300):  # 1, 2 and 5 steps along K
        a, b = rng.standard_normal((130, k)), rng.standard_normal((k, 70))
        c = tessera.interpret(module, a, b)
        assert reference.check_gemm(c, a, b, dtype_from_name("bf16")).ok
        np.testing.assert_array_equal(c, tessera.interpret(build_kernel("gemm"), a, b))


STRIDED = """
func.func @strided(%A: !tile.tile<?x64xbf16, global> {tile.dims = #tile.dims<n, 64>},
                   %C: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<64, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %n = tile.dim %A[0] : !tile.tile<?x64xbf16, global>
  %a_smem = tile.alloc_shared align 1024 : !tile.tile<64x64xbf16, shared, swizzle 128>
  %acc_init = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %acc_final = scf.for %i = %c64 to %n step %c128 iter_args(%acc = %acc_init) -> (!tile.tile<64x64xf32, register>) {
    %a_window = tile.view %A[%i, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %a_window, %a_smem : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    tile.cp_commit_group
    tile.cp_wait_group 0
    tile.barrier
    %acc_next = tile.mma %a_smem, %a_smem, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>
    tile.barrier
    scf.yield %acc_next : !tile.tile<64x64xf32, register>
  }
  %c_window = tile.view %C[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %acc_final, %c_window : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}
"""


@pytest.mark.parametrize("stages", STAGES)
def test_loops_with_any_bounds_use_absolute_fill_and_use_numbers(stages):
    """lb = 64, step = 128: trip t reads rows [64 + 128 t, 128 + 128 t) (sum of A_t A_t^T)."""
    module = tessera.parse_module(STRIDED)
    apply_pipeline(module, f"pipeline-loops{{stages={stages}}}")
    rng = np.random.default_rng(stages)
    for rows in (64, 100, 192, 300, 700):  # 0, 1, 1, 2 and 5 trips
        a = rng.standard_normal((rows, 64)).astype(BF16).astype(np.float64)
        expected = np.zeros((64, 64))
        for start in range(64, rows, 128):
            block = np.zeros((64, 64))  # a partial block is copied zero-padded
            block[: min(64, rows - start)] = a[start : start + 64]
            expected += block @ block.T
        np.testing.assert_allclose(tessera.interpret(module, a), expected, rtol=0, atol=1e-3)


# endregion
# region Seeded pipeline bugs are reported


def _flash_loop(stages: int):
    module = pipelined("flash_attention", stages, head_dim=64)
    (loop,) = _loops(module)
    return module, loop


def _flash_inputs():
    rng = np.random.default_rng(3)
    return rng.standard_normal((1, 1, 70, 64)), rng.standard_normal((1, 1, 700, 64)), rng.standard_normal((1, 1, 700, 64))


@pytest.mark.parametrize("stages", [2, 3])
def test_release_before_the_last_read_is_reported(stages):
    """A seeded pipelining bug (V's release moved above P.V, its read): tile.release's verifier refuses it before
    the interpreter runs (the interpreter's own report of it is test_reading_a_released_stage_is_reported)."""
    module, loop = _flash_loop(stages)
    release_v = _ops(loop, tile.ReleaseOp)[1]
    pv = _ops(loop, tile.MmaOp)[1]
    release_v.detach()
    pv.parent_block().insert_op_before(release_v, pv)
    with pytest.raises(VerifyException, match=r"'tile.release' op releases the stage that tile.mma uses after it, "
                                              r"before a copy refills it"):
        tessera.interpret(module, *_flash_inputs())


@pytest.mark.parametrize("stages", [2, 3])
def test_missing_release_is_reported_as_a_race(stages):
    module, loop = _flash_loop(stages)
    release_k = _ops(loop, tile.ReleaseOp)[0]
    release_k.detach()
    release_k.erase()
    with pytest.raises(KernelHazardError, match=r"^tile.cp_async %k_window\w*, %k_fill\w* .*: overwrites ring k_ring, "
                                                r"read since its last tile.release \(write-after-read race\)"):
        tessera.interpret(module, *_flash_inputs())  # 6 trips: stage 0 is refilled by load `stages`


@pytest.mark.parametrize("stages", [1, 2, 3])
def test_waiting_with_n_pending_groups_is_reported(stages):
    module, loop = _flash_loop(stages)
    (wait,) = _ops(loop, tile.CpWaitGroupOp)
    wait.parent_block().insert_op_before(tile.CpWaitGroupOp(stages), wait)
    wait.detach()
    wait.erase()
    with pytest.raises(KernelHazardError, match=r"^%s = tile.mma %q_smem, %k_stage.*: reads operand B \(ring k_ring\) "
                                                r"whose contents are still in flight"):
        tessera.interpret(module, *_flash_inputs())


# endregion
# region Refusals


def _copy_loop(body: str, after: str = "") -> str:
    return f"""
func.func @f(%A: !tile.tile<?x64xbf16, global>, %n: index) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %s = tile.alloc_shared : !tile.tile<64x64xbf16, shared, swizzle 128>
  %z = tile.fill 0.0 : !tile.tile<64x64xf32, register>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%acc = %z) -> (!tile.tile<64x64xf32, register>) {{
    %w = tile.view %A[%j, %c0] : !tile.tile<?x64xbf16, global> -> !tile.tile<64x64xbf16, global>
    tile.cp_async %w, %s : !tile.tile<64x64xbf16, global>, !tile.tile<64x64xbf16, shared, swizzle 128>
    {body}
    scf.yield %next : !tile.tile<64x64xf32, register>
  }}
  {after}
  func.return
}}
"""


_MMA = ("%next = tile.mma %s, %s, %acc transpose_b : !tile.tile<64x64xbf16, shared, swizzle 128>, "
        "!tile.tile<64x64xbf16, shared, swizzle 128>, !tile.tile<64x64xf32, register>")
_PUBLISH = "tile.cp_commit_group\n tile.cp_wait_group 0\n tile.barrier\n"


@pytest.mark.parametrize(
    "body, after, message",
    [
        (_PUBLISH + _MMA, "", r"^<string>:\d+:\d+: func @f: pipeline-loops: %r = scf.for .*: the loop body does not end with a tile.barrier"),
        (_PUBLISH + _MMA + "\n tile.barrier",
         "%x = tile.load %s : !tile.tile<64x64xbf16, shared, swizzle 128> -> !tile.tile<64x64xbf16, register>",
         r"^<string>:\d+:\d+: func @f: pipeline-loops: tile.cp_async %w, %s .*: the copy destination %s is also used outside the loop \(by "
         r"'%x = tile.load %s"),
        ("tile.cp_commit_group\n tile.cp_wait_group 1\n tile.barrier\n" + _MMA + "\n tile.barrier", "",
         r"^<string>:\d+:\d+: func @f: pipeline-loops: tile.cp_wait_group 1: expected tile.cp_wait_group 0 right after"),
    ],
    ids=["no-trailing-barrier", "tile-used-outside", "wait-not-zero"],
)
def test_non_canonical_loops_are_refused_and_left_unchanged(body, after, message):
    module = tessera.parse_module(_copy_loop(body, after))
    before = tessera.print_module(module)
    with pytest.raises(PipelineLoopsError, match=message):
        apply_pipeline(module, "pipeline-loops")
    assert tessera.print_module(module) == before


# endregion
