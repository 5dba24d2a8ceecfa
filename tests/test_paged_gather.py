"""The paged KV cache's two copy paths (issue 15): one TMA box per key block when page_size is a multiple of the
key block, else the producer's row gather with cp.async (`tile.cp_async_gather`, `sm90.cp_async`).

Caches hold 3x the pages the sequences need, in a random permutation; lengths are no multiple of a block; GQA
with 6 query heads on 2 key heads. All configurations at Tile level, a slice at Target IR and PTX level;
seeded bugs (a page number out of range, a read before the cp.async completed) at every level that has them;
every gather kernel through ptxas without warning or spill."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import passes
from tessera.dialects import sm90, tile
from tessera.host import describe
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.serving_checks import PagedCache, checking
from tessera.kernels import flash_attention_paged
from tessera.kernels.attention_paged import GATHER_BLOCK_M, paged_copy
from tessera.runtime.kvcache import attention_with_kvcache
from tessera.toolchain import compile_ptx

from test_serving import HEADS, bf16, check_paged, paged_cache, trusting_launches

LENGTHS = [1, 339, 200]


def run_kvcache(rng, page_size, head_dim, level, seq_q=1, causal=True, heads=HEADS, heads_k=2, lengths=LENGTHS):
    k_cache, v_cache, table = paged_cache(rng, lengths, page_size, heads_k, head_dim)
    q = bf16(rng, len(lengths), seq_q, heads, head_dim)
    out = attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array(lengths, np.int32), page_table=table,
                                 causal=causal, level=level)
    check_paged(out, q, k_cache, v_cache, table, lengths, causal)


def _buffer_of(value):
    """The `sm90.shared_buffer` an address is computed from (through additions), or None."""
    op = value.owner
    while not isinstance(op, sm90.SharedBufferOp):
        if not hasattr(op, "lhs"):
            return None
        op = op.lhs.owner
    return op


# region the choice of path


@pytest.mark.parametrize("head_dim,page_size,copy", [
    (64, 16, "cp.async"), (64, 128, "tma"), (64, 256, "tma"), (64, 7, "cp.async"), (64, 1, "cp.async"),
    (128, 64, "cp.async"), (128, 256, "tma"), (256, 256, "cp.async"), (256, 48, "tma"), (256, 96, "tma"),
])
def test_tma_when_the_page_is_a_multiple_of_the_key_block_else_the_gather(head_dim, page_size, copy):
    assert paged_copy(head_dim, page_size) == copy
    module = flash_attention_paged(head_dim, page_size=page_size)
    (host,) = describe(tessera.compile(module, target="target", pipeline=passes.TARGET_PIPELINE))
    assert set(host.copies.values()) == ({"tma"} if copy == "tma" else {"tma", "cp.async"})  # Q is a TMA box
    assert {host.copies[1], host.copies[2]} == {copy}  # K and V
    assert ("gather" in host.kernel) == (copy == "cp.async")


@pytest.mark.parametrize("page_size", [0, -16, True, 2.5, "16", None])
def test_page_sizes_that_are_not_positive_integers_are_refused_by_name(page_size):
    with pytest.raises(ValueError, match=r"page_size must be a positive integer; got"):
        flash_attention_paged(64, page_size=page_size)


def test_the_gather_takes_flashattentions_cache_layout_and_one_consumer_warpgroup_from_head_dim_128():
    args = tessera.find_kernel(flash_attention_paged(128, page_size=16)).args
    assert [str(d) for d in args[1].dims] == ["num_pages", "page_size", "heads_k", "128"]
    assert GATHER_BLOCK_M == {64: 128, 96: 128, 128: 64, 192: 64, 256: 64}


# endregion
# region numerics at every level


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("page_size", [16, 128, 256])
def test_paged_attention_at_tile_level(page_size, head_dim, rng):
    run_kvcache(rng, page_size, head_dim, "tile", seq_q=3, causal=page_size != 128)


@pytest.mark.parametrize("page_size", [1, 7, 100])
def test_any_positive_page_size_gathers(page_size, rng):
    run_kvcache(rng, page_size, 64, "tile", seq_q=2, causal=False)


def test_the_pipelined_tile_ir_of_the_gather_runs(rng):
    """pipeline-loops, overlap-softmax and peel-masked-iterations treat the gather as a ring refill."""
    module = flash_attention_paged(64, causal=True, page_size=16)
    pipelined = module.clone()
    passes.apply_pipeline(pipelined, "assign-swizzle,pipeline-loops{stages=2},overlap-softmax,peel-masked-iterations")
    assert any(isinstance(op, tile.CpAsyncGatherOp) and isinstance(op.dest.owner, tile.StageOp)
               for op in pipelined.walk())
    k_cache, v_cache, table = paged_cache(rng, [5, 300], 16, 1, 64)
    q = bf16(rng, 2, 64)[None]
    starts = np.array([0, 1], np.int32)
    lengths = np.array([5, 300], np.int32)
    inputs = (q, k_cache, v_cache, starts, starts + 1, table, lengths)
    np.testing.assert_array_equal(tessera.interpret(pipelined, *inputs, max_seqlen_q=1),
                                  tessera.interpret(module, *inputs, max_seqlen_q=1))


@pytest.mark.parametrize("level,page_size,head_dim,heads,heads_k", [
    ("target", 16, 64, HEADS, 2),
    ("target", 16, 128, 2, 1),
    ("ptx", 16, 64, 2, 1),
    ("ptx", 7, 256, 2, 1),
    ("ptx", 256, 64, 2, 1),  # the TMA path
])
def test_paged_gather_at_target_and_ptx_level(level, page_size, head_dim, heads, heads_k, rng):
    run_kvcache(rng, page_size, head_dim, level, heads=heads, heads_k=heads_k, lengths=[1, 150])


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_the_single_stage_gather_waits_with_cp_async_wait_group(level, rng):
    """PTX_PIPELINE: every thread gathers into the plain tiles, then cp.async.wait_group and fence.proxy.async."""
    module = flash_attention_paged(64, causal=True, page_size=16)
    lowered = tessera.compile(module, target="target", pipeline=passes.PTX_PIPELINE)
    assert any(isinstance(op, sm90.CpAsyncWaitGroupOp) for op in lowered.walk())
    q, k_cache, v_cache, table, lengths = _decode_inputs(rng, 16)
    out = tessera.interpret(module, *_kernel_inputs(q, k_cache, v_cache, table, lengths), level=level, max_seqlen_q=1,
                            pipeline=passes.PTX_PIPELINE)
    _check_kernel_output(out, q, k_cache, v_cache, table, lengths)


def test_the_warp_specialized_gather_signals_the_ring_from_the_producer_warpgroup():
    """The full barriers of the gathered rings count the producer warpgroup's 128 noinc arrivals; the consumers
    fence the proxies after waiting on them (cp.async writes through the generic proxy, wgmma reads through
    the async one); the producer gets what the consumers leave."""
    lowered = tessera.compile(flash_attention_paged(64, page_size=16), target="target", pipeline=passes.DEFAULT_PIPELINE)
    inits = {}
    for op in lowered.walk():
        if isinstance(op, sm90.MBarrierInitOp):
            buffer = _buffer_of(op.mbarrier)
            inits.setdefault(buffer.sym.data, set()).add(op.count.value.data)
    assert inits["k_ring_full"] == inits["v_ring_full"] == {128}
    assert inits["k_ring_empty"] == {256}
    budgets = {op.action.data: op.count.value.data for op in lowered.walk() if isinstance(op, sm90.SetMaxNRegOp)}
    assert budgets["dec"] >= 40 and 128 * budgets["dec"] + 256 * budgets["inc"] <= 65536
    waits = [op for op in lowered.walk() if isinstance(op, sm90.MBarrierTryWaitParityOp)
             and _buffer_of(op.mbarrier).sym.data in ("k_ring_full", "v_ring_full")]
    assert waits and all(isinstance(w.parent_op().next_op, sm90.FenceProxyAsyncOp) for w in waits)


def test_a_gather_of_part_of_a_row_is_refused_by_name():
    from xdsl.utils.exceptions import DiagnosticException

    module = flash_attention_paged(64, page_size=16)
    gather = next(op for op in module.walk() if isinstance(op, tile.CpAsyncGatherOp))
    gather.operands[2] = gather.operands[1]  # the column start becomes the key head
    with pytest.raises(DiagnosticException, match=r"a gather copies whole rows: the window must start at column 0"):
        tessera.compile(module, target="target", pipeline=passes.TARGET_PIPELINE)


# endregion
# region seeded bugs


def _decode_inputs(rng, page_size, lengths=(5, 150), table=None, pages=None):
    if table is None:
        k_cache, v_cache, table = paged_cache(rng, list(lengths), page_size, 1, 64)
    else:
        k_cache, v_cache = (bf16(rng, pages, page_size, 1, 64) for _ in range(2))
        table = np.array(table, np.int32)
    q = bf16(rng, len(lengths), 1, 1, 64)
    return q, k_cache, v_cache, table, np.array(lengths, np.int32)


def _kernel_inputs(q, k_cache, v_cache, table, lengths):
    """The gather kernel's arguments for one query per sequence and one head."""
    batch = len(lengths)
    starts = np.arange(batch, dtype=np.int32)
    return q.reshape(batch, 64)[None], k_cache, v_cache, starts, starts + 1, table, lengths


def _check_kernel_output(out, q, k_cache, v_cache, table, lengths):
    check_paged(out[0][:, None, None], q, k_cache, v_cache, table, list(lengths), True)


@pytest.mark.parametrize("level", ["tile", "target", "ptx"])
def test_a_page_table_entry_out_of_range_is_reported_on_the_gather_path(level, rng):
    module = trusting_launches(flash_attention_paged(64, causal=True, page_size=16))
    inputs = _kernel_inputs(*_decode_inputs(rng, 16, lengths=(20,), table=[[1, 9]], pages=4))
    with checking(PagedCache("K", row_axis=1, pages=4), PagedCache("V", row_axis=1, pages=4)):
        with pytest.raises(Exception, match=r"page-table entry 9 of %[KV] is out of range \[0, 4\)"):
            tessera.interpret(module, *inputs, level=level, max_seqlen_q=1)


def test_the_tile_interpreter_reports_a_page_out_of_range_without_serving_checks(rng):
    """A page number out of range is an error of the kernel (the op's contract), checked or not."""
    module = trusting_launches(flash_attention_paged(64, causal=True, page_size=16))
    inputs = _kernel_inputs(*_decode_inputs(rng, 16, lengths=(20,), table=[[1, -2]], pages=4))
    with pytest.raises(KernelHazardError, match=r"tile.cp_async_gather.*page-table entry -2 of %K is out of "
                                                r"range \[0, 4\) \(key row 16\)"):
        tessera.interpret(module, *inputs, max_seqlen_q=1)


def _without(op_type):
    """A `tessera.api._lower` that erases every `op_type` op from the lowered kernel (a seeded bug)."""
    lower = tessera.api._lower

    def lowered(where, module, pipeline):
        out = lower(where, module, pipeline)
        for op in [o for o in out.walk() if isinstance(o, op_type)]:
            op.detach()
            op.erase()
        return out
    return lowered


@pytest.mark.parametrize("level", ["target", "ptx"])
def test_a_read_before_the_cp_async_completed_is_a_hazard(level, rng, monkeypatch):
    """The single-stage gather without its cp.async.wait_group: the wgmma reads bytes still in flight."""
    monkeypatch.setattr(tessera.api, "_lower", _without(sm90.CpAsyncWaitGroupOp))
    module = flash_attention_paged(64, causal=True, page_size=16)
    inputs = _kernel_inputs(*_decode_inputs(rng, 16))
    message = (r"before its cp.async completed: thread \d+'s copy into it is still in flight" if level == "target"
               else r"the cp.async at line \d+ into it has not landed")
    with pytest.raises(Exception, match=message):
        tessera.interpret(module, *inputs, level=level, pipeline=passes.PTX_PIPELINE, max_seqlen_q=1)


def test_a_consumer_that_skips_the_full_barrier_of_a_gathered_stage_is_a_hazard(rng, monkeypatch):
    """The warp-specialized gather: consumers that never wait on the K slot's full barrier (which the producers'
    cp.async.mbarrier.arrive.noinc completes) read the stage before they could know it landed."""
    lower = tessera.api._lower

    def lowered(where, module, pipeline):
        out = lower(where, module, pipeline)
        for wait in [o for o in out.walk() if isinstance(o, sm90.MBarrierTryWaitParityOp)]:
            buffer = _buffer_of(wait.mbarrier)
            if buffer is not None and buffer.sym.data == "k_ring_full":
                spin = wait.parent_op()
                spin.detach()
                spin.erase()
        return out
    monkeypatch.setattr(tessera.api, "_lower", lowered)
    module = flash_attention_paged(64, causal=True, page_size=16)
    with pytest.raises(KernelHazardError, match=r"reads wgmma operand B .*'k_ring' .* before the cp.async of thread "
                                                r"\d+ signalled: this thread has not observed phase \d+ .* of the "
                                                r"mbarrier at .*'k_ring_full'"):
        tessera.interpret(module, *_kernel_inputs(*_decode_inputs(rng, 16)), level="target", max_seqlen_q=1)


@pytest.mark.slow
@pytest.mark.parametrize("level", ["target", "ptx"])
def test_the_gathered_stage_reaches_wgmma_through_its_full_barrier_without_the_fence(level, rng, monkeypatch):
    """[memory_model.CP_ASYNC_PROXY] The warp-specialized gather with the consumers' fence_proxy_async after the full
    wait deleted: the producers' cp.async completed through cp.async.mbarrier.arrive.noinc, which both simulators
    accept by default (as CUTLASS's and FlashAttention-3's cp.async mainloops rely on: clean and right), and report
    with `strict_proxy`, the PTX ISA's letter (cp.async writes through the generic proxy)."""
    lower = tessera.api._lower

    def lowered(where, module, pipeline):
        out = lower(where, module, pipeline)
        for wait in [o for o in out.walk() if isinstance(o, sm90.MBarrierTryWaitParityOp)
                     and _buffer_of(o.mbarrier) is not None
                     and _buffer_of(o.mbarrier).sym.data in ("k_ring_full", "v_ring_full")]:
            fence = wait.parent_op().next_op
            assert isinstance(fence, sm90.FenceProxyAsyncOp)
            fence.detach()
            fence.erase()
        return out
    monkeypatch.setattr(tessera.api, "_lower", lowered)
    module = flash_attention_paged(64, causal=True, page_size=16)
    q, k_cache, v_cache, table, lengths = _decode_inputs(rng, 16)
    inputs = _kernel_inputs(q, k_cache, v_cache, table, lengths)
    _check_kernel_output(tessera.interpret(module, *inputs, level=level, max_seqlen_q=1), q, k_cache, v_cache, table,
                         lengths)
    if level == "target":
        from tessera.interpreters.sm90 import launch as target_launch

        options = target_launch.simulator_options
        monkeypatch.setattr(target_launch, "simulator_options", lambda *a: options(*a[:4], True))
        message = r"stored with a cp.async and has not made visible to the async proxy"
    else:
        from functools import partial

        from tessera.interpreters.ptx import launcher

        monkeypatch.setattr(launcher, "launch_described", partial(launcher.launch_described, strict_proxy=True))
        message = r"stored through the generic proxy and has not made visible to the async proxy"
    with pytest.raises(Exception, match=message):  # KernelHazardError, PtxHazardError
        tessera.interpret(module, *inputs, level=level, max_seqlen_q=1)


# endregion
# region ptxas and the launch


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("pipeline", ["default", "ptx"])
def test_ptxas_assembles_the_gather_kernels_without_warning_or_spill(head_dim, pipeline):
    module = flash_attention_paged(head_dim, causal=True, page_size=16)
    ptx = tessera.compile(module, pipeline=None if pipeline == "default" else passes.PTX_PIPELINE)
    result = compile_ptx(ptx)
    entry = result.entry()
    assert not result.warnings and not result.log.diagnostics
    assert entry.spill_store_bytes == entry.spill_load_bytes == entry.stack_frame_bytes == 0
    assert "cp.async.cg.shared.global" in ptx
    assert ("cp.async.mbarrier.arrive.noinc.shared::cta.b64" in ptx) == (pipeline == "default")
    assert ("cp.async.wait_group" in ptx) == (pipeline == "ptx")


def test_the_gpu_launch_takes_the_gather_kernels_pointers():
    """The runtime's host-side checks accept the gather kernel's inputs as attention_with_kvcache passes them:
    FlashAttention's cache layout, contiguous, through pointers (`copies` says "cp.async")."""
    from tessera.runtime.compiler import KernelConfig, compile_kernel
    from tessera.runtime.launch import check_inputs

    kernel = compile_kernel(KernelConfig.of("flash_attention_paged", head_dim=64, causal=False, dtype="bf16",
                                            scale=0.125, page_size=16))
    assert kernel.host.copies[1] == kernel.host.copies[2] == "cp.async"
    cache = np.zeros((6, 16, 2, 64), bf16(np.random.default_rng(0), 1).dtype)
    inputs = [np.zeros((2, 3, 64), cache.dtype), cache, cache.copy(), np.array([0, 1], np.int32),
              np.array([1, 3], np.int32), np.array([[0, 1], [2, 3]], np.int32), np.array([3, 20], np.int32)]
    sizes, _ = check_inputs(kernel.host, inputs, {"max_seqlen_q": 2})
    assert sizes == {"heads": 2, "total_q": 3, "num_pages": 6, "heads_k": 2, "page_size": 16, "batch": 2,
                     "max_pages": 2, "max_seqlen_q": 2}


# endregion


def test_a_cache_the_gathers_chunk_numbers_cannot_address_is_refused_by_name(rng, monkeypatch):
    """The gather numbers a cache's 16-byte chunks in 32 bits (GATHER_CHUNK_LIMIT, 32 GiB); here the limit is
    lowered so that a small cache passes it."""
    from tessera.passes.convert_tile_to_sm90 import serving

    monkeypatch.setattr(serving, "GATHER_CHUNK_LIMIT", 1000)
    k_cache, v_cache, table = paged_cache(rng, [40], 16, 1, 64)
    q = bf16(rng, 1, 1, 1, 64)
    with pytest.raises(ValueError, match=r"k_cache holds \d+ 16-byte chunks; the gather of pages of 16 rows numbers "
                                         r"them in 32 bits \(at most 1000\)"):
        attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=np.array([40], np.int32), page_table=table,
                               level="tile")
