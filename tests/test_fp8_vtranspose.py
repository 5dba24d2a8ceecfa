"""The FP8 kernel's in-kernel V transpose (passes/convert_tile_to_sm90/transpose.py, issue 27): V [keys, head_dim]
as it is in memory, TMA-loaded by the producer warpgroup into a staging slot and transposed there with prmt into
V^T in P8 key order. The byte transpose's facts against the ISA's prmt; the producer's refill as Target IR (the
order of its waits, loads, release, stores, fence and arrive; the barriers' counts); the three hazards of the
transpose seeded into it and reported by both the CTA simulator and the PTX executor; what the transpose does
not take, refused by name. Numerics on ragged lengths at every level: tests/test_fp8_lowering.py (the full
matrix: `pytest -m slow tests/test_fp8_vtranspose.py`)."""

from __future__ import annotations

import warnings
from functools import lru_cache

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import scf
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr

import tessera
from tessera import reference as R
from tessera.dialects import sm90
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx import PtxHazardError
from tessera.interpreters.ptx.printed import run_ptx
from tessera.interpreters.sm90 import run_target_kernel
from tessera.kernel_abi import KEY_ORDER_ATTR
from tessera.kernels import flash_attention
from tessera.passes import PIPELINED_PIPELINE, SPECIALIZED_PIPELINE, allocated
from tessera.passes.convert_tile_to_sm90 import LoweringError
from tessera.passes.overlap_softmax import OverlapSoftmaxError
from tessera.sm90 import facts
from text_edits import checked

E4M3 = ml_dtypes.float8_e4m3fn


# region facts


def test_the_eight_prmt_transpose_a_4x4_byte_matrix():
    """Byte j of word i is element [i, j]; the ISA's prmt (facts.prmt_b32, tested against its text in
    tests/test_fp8.py) with TRANSPOSE_4X4_PRMT gives the transposed matrix, for any bytes."""
    rng = np.random.default_rng(0)
    m = rng.integers(0, 256, (50, 4, 4), dtype=np.uint8)           # 50 matrices
    words = [m[:, i, :].copy().view(np.uint32).reshape(50) for i in range(4)]
    y = facts.transpose_4x4_words(*words)
    got = np.stack([np.asarray(w, np.uint32).view(np.uint8).reshape(50, 4) for w in y], axis=1)
    np.testing.assert_array_equal(got, np.swapaxes(m, 1, 2))


def test_p8_quad_keys_are_the_keys_of_one_v_transpose_word():
    """k-positions 4c .. 4c + 3 of each group of 16 hold keys 2c + (0, 1, 8, 9): P8_KEY_ORDER four at a time."""
    assert facts.P8_QUAD_KEYS == (0, 1, 8, 9)
    for c in range(4):
        for g in range(2):
            assert facts.P8_KEY_ORDER[16 * g + 4 * c: 16 * g + 4 * c + 4] == tuple(16 * g + 2 * c + k for k in facts.P8_QUAD_KEYS)


# endregion
# region the producer's refill in Target IR


@lru_cache(maxsize=None)
def _lowered(head_dim: int = 64):
    module = flash_attention(head_dim=head_dim, dtype="e4m3")
    sig = tessera.find_kernel(module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sig, tessera.lower_to_target(module, sig.name, SPECIALIZED_PIPELINE)


def _kernel(module):
    return next(op for op in module.walk() if op.name == "func.func")


def _refills(module):
    """Each transposing refill of the producer branch: the ops of the block its fence.proxy.async is in."""
    split = [op for op in _kernel(module).body.block.ops if isinstance(op, scf.IfOp)][-1]
    return [list(op.parent_block().ops) for op in split.true_region.walk() if isinstance(op, sm90.FenceProxyAsyncOp)]


def _buffer(value) -> str:
    """The name of the shared buffer an address is in (through its slot offset)."""
    while not isinstance(value.owner, sm90.SharedBufferOp):
        value = value.owner.operands[0]
    return value.owner.sym.data


def test_the_producer_refill_waits_transposes_releases_fences_and_arrives_in_order():
    _, module = _lowered()
    refills = _refills(module)
    # the prologue's fill of slot 0 and the loop's refill (one loop: its masks are branched over; the first trip is
    # folded into it by overlap-softmax's default, so no peeled trip's fill of slot 1 stands before it)
    assert len(refills) == 2
    for ops in refills:
        kinds = [type(op).__name__ for op in ops if isinstance(op, sm90.LdSharedOp | sm90.StSharedOp | sm90.PrmtOp
                 | sm90.MBarrierArriveOp | sm90.FenceProxyAsyncOp | scf.IfOp | scf.WhileOp)]
        # the leader's K refill and lane 0's TMA of V into the staging slot; then all wait for the V^T slot's
        # release and the copy's landing
        assert kinds[:4] == ["IfOp", "IfOp", "WhileOp", "WhileOp"]
        tma = [[_buffer(t.dest) for t in op.walk() if isinstance(t, sm90.TmaLoadOp)] for op in ops if isinstance(op, scf.IfOp)]
        assert tma == [["k_ring"], ["v_ring_staging"]]
        body = kinds[4:]
        # 64 x 128 bytes over 128 threads: four 4 x 4 blocks each, two at a time
        assert body == (["LdSharedOp"] + ["PrmtOp"] * 8 + ["StSharedOp"]
                        + ["LdSharedOp", "MBarrierArriveOp"] + ["PrmtOp"] * 8 + ["StSharedOp"]
                        + ["FenceProxyAsyncOp", "MBarrierArriveOp"])
        arrives = [op for op in ops if isinstance(op, sm90.MBarrierArriveOp)]
        assert [_buffer(a.mbarrier) for a in arrives] == ["v_ring_staging_empty", "v_ring_full"]


def test_the_barriers_count_the_transposing_warpgroup():
    _, module = _lowered()
    counts = {}
    for op in _kernel(module).walk():
        if isinstance(op, sm90.MBarrierInitOp):
            counts.setdefault(_buffer(op.mbarrier), set()).add(op.count.value.data)
    assert counts["v_ring_full"] == {128}            # the producer warpgroup's arrivals after its fence
    assert counts["v_ring_staging_full"] == {1}      # lane 0's expect_tx; the TMA's bytes complete it
    assert counts["v_ring_staging_empty"] == {128}   # every transposing thread read the slot
    assert counts["v_ring_empty"] == {256}           # every consumer thread released V^T


# endregion
# region seeded hazards, reported by both simulators

SEEDS = ("V^T arrive before the transpose's stores", "staging released before the transpose's loads",
         "fence.proxy.async deleted")


def _seeded(name: str):
    sig, module = _lowered()
    module = module.clone()
    for ops in _refills(module):
        loads = [op for op in ops if isinstance(op, sm90.LdSharedOp)]
        stores = [op for op in ops if isinstance(op, sm90.StSharedOp)]
        fence = next(op for op in ops if isinstance(op, sm90.FenceProxyAsyncOp))
        staging, full = [op for op in ops if isinstance(op, sm90.MBarrierArriveOp)]
        if name == SEEDS[0]:
            moved, before = full, stores[0]
        elif name == SEEDS[1]:
            moved, before = staging, loads[0]
        else:
            fence.detach()
            fence.erase()
            continue
        moved.detach()
        before.parent_block().insert_op_before(moved, before)
    return sig, module


def _arguments(sig, seq_k: int = 300):
    """Three key blocks: the first staging slot is refilled, after the transpose of block 0 read it."""
    rng = np.random.default_rng(3)
    q = (rng.standard_normal((1, 1, 8, 64)) * 3).astype(E4M3)
    k, v = ((rng.standard_normal((1, 1, seq_k, 64)) * 3).astype(E4M3) for _ in range(2))
    descales = [np.full((1, 1), 0.5, np.float32) for _ in range(3)]
    return (q, k, v, *descales), prepare_arguments(sig, [q, k, v, *descales])


_TARGET = {
    SEEDS[0]: r"reads wgmma operand B at shared address 0x[0-9a-f]+ \(buffer 'v_ring_vtrans' \+ \d+\), which thread "
              r"2\d\d stored and fenced with no bar_sync since then ordering it",
    SEEDS[1]: r"the TMA copy writes shared address 0x[0-9a-f]+ \(buffer 'v_ring_staging' \+ \d+\), which `%\d+ = "
              r"sm90.ld_shared .*` \(thread 2\d\d .*\) read, and no synchronisation orders the two",
    SEEDS[2]: r"reads wgmma operand B at shared address 0x[0-9a-f]+ \(buffer 'v_ring_vtrans' \+ \d+\), which thread "
              r"2\d\d stored with st_shared and has not made visible to the async proxy \(missing fence_proxy_async",
}
_PTX = {
    SEEDS[0]: r"wgmma operand B reads shared address 0x[0-9a-f]+, which thread \(2\d\d, 0, 0\) .* stored through the "
              r"generic proxy .*no synchronisation orders the store before this read",
    SEEDS[1]: r"the TMA load writes shared address 0x[0-9a-f]+, which the instruction at line \d+ \(thread \(2\d\d, 0, "
              r"0\).*\) read, and no synchronisation orders the two",
    SEEDS[2]: r"wgmma operand B reads shared address 0x[0-9a-f]+, which thread \(2\d\d, 0, 0\) .* stored through the "
              r"generic proxy and has not made visible to the async proxy \(missing fence.proxy.async",
}


def test_the_unseeded_transpose_runs_clean_and_right_in_the_cta_simulator_under_both_schedules():
    sig, module = _lowered()
    (q, k, v, *ds), (arguments, sizes) = _arguments(sig)
    run_target_kernel(_kernel(module), arguments, sizes)
    assert R.check_attention_fp8(arguments[6].reshape(q.shape), q, k, v, *ds).ok
    _, (again, sizes) = _arguments(sig)
    run_target_kernel(_kernel(module), again, sizes, schedule="adversarial", seed=1)
    np.testing.assert_array_equal(again[6], arguments[6])


@pytest.mark.parametrize("name", SEEDS)
def test_a_seeded_transpose_hazard_is_reported_by_the_cta_simulator(name):
    sig, module = _seeded(name)
    _, (arguments, sizes) = _arguments(sig)
    with pytest.raises(KernelHazardError, match=_TARGET[name]):
        run_target_kernel(_kernel(module), arguments, sizes)


@pytest.mark.parametrize("name", [SEEDS[1], pytest.param(SEEDS[0], marks=pytest.mark.slow),
                                  pytest.param(SEEDS[2], marks=pytest.mark.slow)])
def test_a_seeded_transpose_hazard_is_reported_by_the_ptx_executor(name):
    sig, module = _seeded(name)
    _, (arguments, sizes) = _arguments(sig)
    with pytest.raises(PtxHazardError, match=_PTX[name]):
        run_ptx(module, sig, arguments, sizes)


@pytest.mark.slow
def test_the_unseeded_transpose_runs_clean_in_the_ptx_executor():
    sig, module = _lowered()
    (q, k, v, *ds), (arguments, sizes) = _arguments(sig)
    run_ptx(module, sig, arguments, sizes)
    assert R.check_attention_fp8(arguments[6].reshape(q.shape), q, k, v, *ds).ok


@pytest.mark.slow
@pytest.mark.parametrize("pipeline, block_n", [
    (allocated(checked(SPECIALIZED_PIPELINE).replace("stages=2", "stages=3")), None),  # three staging and V^T slots
    (allocated(PIPELINED_PIPELINE + ",warp-specialize{pingpong=true}"), None),  # ping-pong consumers
    (allocated(PIPELINED_PIPELINE), None),  # no producer warpgroup: the first consumer warpgroup transposes
    (None, 64),                             # 64-key blocks at head_dim 128: four row groups per warp
])
def test_the_transpose_under_other_pipelines_and_key_blocks(pipeline, block_n):
    rng = np.random.default_rng(1)
    q = (rng.standard_normal((1, 2, 50, 128)) * 3).astype(E4M3)
    k, v = ((rng.standard_normal((1, 1, 457, 128)) * 3).astype(E4M3) for _ in range(2))
    ds = [(rng.random((1, 1)) * 2).astype(np.float32) for _ in range(3)]
    module = flash_attention(head_dim=128, dtype="e4m3", grouped=True, causal=True, block_n=block_n)
    o = tessera.launch(module, q, k, v, *ds, level="target", **({"pipeline": pipeline} if pipeline else {}))
    assert R.check_attention_fp8(o, q, k, v, *ds, causal=True).ok


@pytest.mark.slow
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_the_transposing_kernel_is_ptxas_clean_without_spill_at_every_head_dim(head_dim):
    from tessera import toolchain

    ptxases = toolchain.find_all_ptxas()
    if not ptxases:
        pytest.skip("no ptxas installed")
    text = tessera.compile(flash_attention(head_dim=head_dim, dtype="e4m3", causal=True))
    assert "prmt.b32" in text and "fence.proxy.async" in text
    for ptxas in ptxases:  # 12.x and 13.x where installed
        result = toolchain.compile_ptx(text, ptxas=ptxas.path)
        entry = result.entry()
        assert not result.log.diagnostics and entry.spill_store_bytes == entry.spill_load_bytes == 0, ptxas.release


# endregion
# region refusals


def test_a_natural_order_v_transpose_is_refused_with_the_reason_pipeline_loops_left():
    """A kernel author's V^T with its keys in their own order and no seq_k promise (what v_transposed=True built
    before flash_attention refused it): pipeline-loops leaves its loop single-stage (V^T's rows may start on any
    byte) and overlap-softmax's refusal quotes why."""
    module = flash_attention(head_dim=64, dtype="e4m3", v_transposed="p8")
    fn = module.body.block.first_op
    del fn.attributes["tile.divisible"]
    fn.arg_attrs = ArrayAttr([DictionaryAttr({k: v for k, v in a.data.items() if k != KEY_ORDER_ATTR})
                              for a in fn.arg_attrs.data])
    with pytest.raises(OverlapSoftmaxError, match=r"reads %vt_smem, which this loop refills every trip; .* with N >= 2 "
                                                  r"first; kernel @flash_attention_d64_e4m3_vtp8: pipeline-loops left "
                                                  r"the loop over %j single-stage: its copy into %vt_smem reads "
                                                  r"argument %V, whose rows may start anywhere"):
        tessera.lower_to_target(module, tessera.find_kernel(module).name)


def test_what_the_transpose_does_not_take_is_refused_by_name():
    with pytest.raises(LoweringError, match=r"an 8-bit B given as V \[keys, head_dim\] \(not V\^T\) is transposed in "
                                            r"shared memory by the producer of a pipelined ring"):
        tessera.compile(flash_attention(head_dim=64, dtype="e4m3"), pipeline=allocated("assign-swizzle,convert-tile-to-sm90"))
    with pytest.raises(LoweringError, match=r"the in-kernel V transpose takes key blocks of 32/64/128 keys .* got "
                                            r"\[96, 64\]"):
        tessera.compile(flash_attention(head_dim=64, dtype="e4m3", block_n=96), pipeline=allocated(PIPELINED_PIPELINE))


# endregion
