"""Pipelined and warp-specialized kernels at Target IR level: their structure (roles, barriers, register
budgets from the allocator), the CTA simulator's verdict on them (numerics against NumPy, and seeded
pipeline bugs: a slot released too early, a parity not flipped, a missing expect_tx), and diagnostics."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import arith, scf

import tessera
from tessera import reference
from tessera.dialects import sm90
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90 import run_target_kernel
from tessera.kernel_abi import TARGET_KERNEL_ATTR
from tessera.numerics import dtype_from_name
from tessera.passes.convert_tile_to_sm90 import PRODUCER_ATTR
from tessera.reference_attention import attention_operands
from tessera.sm90 import facts

from conftest import build_kernel

LOWER = "convert-tile-to-sm90,canonicalize,cse,rematerialize-constants"


def pipeline(stages: int, *, overlap: bool = False, peel: bool = False, specialize: bool = True,
             pingpong: bool = False) -> str:
    tile = [f"assign-swizzle,pipeline-loops{{stages={stages}}}"] + (["overlap-softmax"] if overlap else []) + (
        ["peel-masked-iterations"] if peel else [])
    target = [LOWER] + ([f"warp-specialize{{pingpong={'true' if pingpong else 'false'}}}"] if specialize else [])
    return ",".join(tile + target)


def _lower(module, spec: str):
    sig = tessera.find_kernel(module)
    return sig, tessera.lower_to_target(module, sig.name, spec)


def _run(sig, kernel, inputs):
    arguments, sizes = prepare_arguments(sig, inputs)
    run_target_kernel(kernel, arguments, sizes)


# -- structure -------------------------------------------------------------------------------------------------


def test_specialized_kernel_has_a_producer_warpgroup_and_budgets_from_pressure():
    from tessera.regalloc import region_pressure

    module = build_kernel("flash_attention", head_dim=128, causal=False, dtype="bf16")
    _, kernel = _lower(module, pipeline(2))
    assert kernel.attributes[TARGET_KERNEL_ATTR].data["threads"].value.data == 384
    inits = [op for op in kernel.body.block.ops if isinstance(op, sm90.BarSyncOp)]
    assert [op.threads.value.data for op in inits] == [384]  # every thread waits for the mbarrier init once
    split = [op for op in kernel.body.block.ops if isinstance(op, scf.IfOp)][-1]
    producer, consumer = split.regions
    dec = next(op for op in producer.walk() if isinstance(op, sm90.SetMaxNRegOp))
    inc = next(op for op in consumer.walk() if isinstance(op, sm90.SetMaxNRegOp))
    assert (dec.action.data, inc.action.data) == ("dec", "inc")
    assert any(isinstance(op, sm90.TmaLoadOp) for op in producer.walk())
    assert not any(isinstance(op, sm90.WgmmaMmaAsyncOp) for op in producer.walk())
    assert not any(PRODUCER_ATTR in op.attributes for op in consumer.walk())
    assert any(isinstance(op, sm90.WgmmaMmaAsyncOp) for op in consumer.walk())
    # The budgets follow from the allocator's pressure of each branch and the registers the CTA owns (384 x 168
    # at entry: setmaxnreg moves registers within the CTA, not the SM's 65536).
    need_producer, need_consumer = region_pressure(kernel, split)
    p, c = dec.count.value.data, inc.count.value.data
    assert p == max(facts.SETMAXNREG_MIN, -(-need_producer // 8) * 8)
    assert c == min(facts.SETMAXNREG_MAX, (384 * 168 - 128 * p) // 256 // 8 * 8)
    assert need_consumer <= c and 128 * p + 256 * c <= 384 * 168


def test_kernels_without_rings_are_left_alone():
    """... and say so: a warning names the kernel and what it lacks."""
    from tessera.ir.diagnostics import TesseraWarning

    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    with pytest.warns(TesseraWarning, match=r"kernel @flash_attention_d64_bf16: warp-specialize: no ring refills"):
        _, kernel = _lower(module, f"assign-swizzle,{LOWER},warp-specialize")
    assert kernel.attributes[TARGET_KERNEL_ATTR].data["threads"].value.data == 256
    assert not any(isinstance(op, sm90.SetMaxNRegOp) for op in kernel.walk())


def test_pingpong_refuses_one_consumer_warpgroup():
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16", block_m=64)
    with pytest.raises(Exception, match="ping-pong needs two consumer warpgroups"):
        _lower(module, pipeline(2, pingpong=True))


# -- numerics in the simulator ------------------------------------------------------------------------------

SEQ_PAIRS = [(1, 1), (130, 200), (200, 17), (64, 700)]
"""One key block, partial blocks both ways, and more trips than any ring has slots."""


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_specialized_flash_matches_numpy(stages, causal, rng):
    module = build_kernel("flash_attention", head_dim=64, causal=causal, dtype="bf16")
    sig, kernel = _lower(module, pipeline(stages, overlap=stages > 1, peel=True, pingpong=stages > 1))
    for seq_q, seq_k in SEQ_PAIRS:
        q, k, v = attention_operands(rng, seq_q, seq_k, 64)
        arguments, sizes = prepare_arguments(sig, (q, k, v))
        run_target_kernel(kernel, arguments, sizes)
        out = arguments[-1]
        check = reference.check_attention(out, q, k, v, dtype_from_name("bf16"), causal=causal)
        assert check.ok, f"stages={stages} seq_q={seq_q} seq_k={seq_k}: {check}"


@pytest.mark.parametrize("option", ["plain", "overlap", "peel", "pingpong", "all"])
def test_each_option_alone_matches_numpy(option, rng):
    flags = {"plain": {}, "overlap": dict(overlap=True), "peel": dict(peel=True), "pingpong": dict(pingpong=True),
             "all": dict(overlap=True, peel=True, pingpong=True)}[option]
    module = build_kernel("flash_attention", head_dim=128, causal=True, dtype="f16")
    spec = pipeline(2, **flags)
    q, k, v = attention_operands(rng, 200, 300, 128, heads=2)
    out = tessera.interpret(module, q, k, v, level="target", pipeline=spec)
    check = reference.check_attention(out, q, k, v, dtype_from_name("f16"), causal=True)
    assert check.ok, f"{option}: {check}"


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_specialized_gemm_matches_numpy(stages, rng):
    module = build_kernel("gemm", dtype="bf16")
    a, b = rng.standard_normal((130, 328)), rng.standard_normal((328, 136))
    out = tessera.interpret(module, a, b, level="target", pipeline=pipeline(stages))
    check = reference.check_gemm(out, a, b, dtype_from_name("bf16"))
    assert check.ok, f"stages={stages}: {check}"


# -- seeded pipeline bugs ---------------------------------------------------------------------------------------


def _seeded(rng):
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    sig, kernel = _lower(module, pipeline(2))
    return sig, kernel, attention_operands(rng, 64, 700, 64)


def _producer(kernel):
    split = [op for op in kernel.body.block.ops if isinstance(op, scf.IfOp)][-1]
    return split.regions[0], split.regions[1]


def test_the_unseeded_pipeline_runs(rng):
    sig, kernel, inputs = _seeded(rng)
    _run(sig, kernel, inputs)


def test_slot_released_too_early_is_reported(rng):
    # The consumers release each K/V slot before they read it: the producer refills the slot (and re-arms
    # its full barrier) while the previous fill is still unconsumed, which the simulator reports.
    sig, kernel, inputs = _seeded(rng)
    _, consumer = _producer(kernel)
    loop = next(op for op in consumer.walk() if isinstance(op, scf.ForOp))
    releases = [op for op in loop.body.block.ops if isinstance(op, sm90.MBarrierArriveOp)]
    first_wgmma = next(op for op in loop.body.block.ops if isinstance(op, sm90.WgmmaFenceOp))
    block = loop.body.block
    order = {op: i for i, op in enumerate(block.ops)}
    for release in releases:
        # with the ops that make its barrier's address, after the first wgmma (rematerialize-constants puts them
        # right before the release)
        moved, pending = {release}, list(release.operands)
        while pending:
            owner = pending.pop().owner
            if owner in order and order[owner] > order[first_wgmma] and owner not in moved:
                moved.add(owner)
                pending += owner.operands
        for op in sorted(moved, key=order.__getitem__):
            op.detach()
            block.insert_op_before(op, first_wgmma)
    with pytest.raises(KernelHazardError, match=r"overwrit|still read|exceeds the 0 pending arrivals"):
        _run(sig, kernel, inputs)


def test_parity_not_flipped_is_reported(rng):
    # The producer waits on the empty barrier with the full barrier's parity: on its first trip it waits
    # for a release that only comes after the consumers read data it has not loaded yet.
    sig, kernel, inputs = _seeded(rng)
    producer, _ = _producer(kernel)
    flips = [op for op in producer.walk() if isinstance(op, arith.XOrIOp)]
    assert flips, "the producer computes the empty barrier's parity with an xor"
    for flip in flips:
        flip.result.replace_all_uses_with(flip.lhs)
    with pytest.raises(KernelHazardError, match=r"deadlock|overwrit|parity"):
        _run(sig, kernel, inputs)


def test_missing_expect_tx_is_reported(rng):
    sig, kernel, inputs = _seeded(rng)
    producer, _ = _producer(kernel)
    expect = [op for op in producer.walk() if isinstance(op, sm90.MBarrierArriveExpectTxOp)]
    for op in expect:
        op.detach()
        op.erase()
    with pytest.raises(KernelHazardError, match=r"deadlock|expect|transaction|tx"):
        _run(sig, kernel, inputs)


# -- the FlashAttention-3 tile: 128 x 176 at head_dim 128 --------------------------------------------------------


def test_flash_128x176_tile_fits_warp_specialization(rng):
    """FA3's forward tile at head_dim 128 (block_n = 176: eleven 16-key steps of P.V) fits the consumers' 240
    registers: the default pipeline keeps its producer warpgroup (no fallback warning, setmaxnreg 24/240), and
    the target and PTX levels agree bit for bit and with NumPy (causal: key blocks full, partial, masked)."""
    import warnings

    from tessera.host import describe
    from tessera.interpreters.ptx.launcher import launch_described
    from tessera.ir.diagnostics import TesseraWarning
    from tessera.kernel_abi import is_target_kernel
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers

    module = tessera.kernels.flash_attention(head_dim=128, block_n=176, causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TesseraWarning)  # a fallback would warn
        lowered = tessera.compile(module, target="target")
    assert [op.count.value.data for op in lowered.walk() if isinstance(op, sm90.SetMaxNRegOp)] == [24, 240]
    sig = tessera.find_kernel(module)
    q, k, v = attention_operands(rng, 70, 400, 128)  # two whole key blocks and one of 48 keys
    arguments, sizes = prepare_arguments(sig, (q, k, v))
    run_target_kernel(next(op for op in lowered.walk() if is_target_kernel(op)), arguments, sizes)
    arrays, sizes = prepare_arguments(sig, (q, k, v))
    launch_described(print_ptx(lowered, registers=allocated_registers), describe(lowered)[0], arrays, sizes)
    assert np.array_equal(arguments[-1], arrays[-1])
    check = reference.check_attention(arrays[-1], q, k, v, dtype_from_name("bf16"), causal=True)
    assert check.ok, str(check)


@pytest.mark.usefixtures("ptxas", "nvdisasm")
def test_flash_128x176_tile_main_loop_costs_less_per_key():
    """ptxas assembles the 128 x 176 kernel without spill or advisory, and a steady trip of its main loop
    (`loop_trip`: a path through the loop around the fold's re-entry) costs fewer SASS instructions per key than
    the 128 x 128 one's: the fixed work of an iteration (descriptors, barriers, the O rescale) is spread over 176
    keys."""
    import warnings

    from tessera.ir.diagnostics import TesseraWarning
    from tessera.sass import disassemble, loop_trip, opcode_counts, parse_sass

    per_key = {}
    for block_n in (128, 176):
        with warnings.catch_warnings():
            warnings.simplefilter("error", TesseraWarning)  # warp-specialized: no fallback
            result = tessera.compile(tessera.kernels.flash_attention(head_dim=128, block_n=block_n), target="cubin")
        (function,) = result.log.functions.values()
        assert not result.log.diagnostics and function.spill_store_bytes == function.stack_frame_bytes == 0
        trip = loop_trip(parse_sass(disassemble(result.cubin)))  # a steady trip: the masks branched over
        assert opcode_counts(trip)["MUFU.EX2"] >= block_n // 2  # 64 rows x block_n scores over 128 threads
        per_key[block_n] = len(trip) / block_n
    # 563/176 against 443/128 keys: 0.92 under ptxas 12.9-13.0, 0.91 under 13.5 (556 against 442), with the ring
    # descriptors made once: the less fixed work a trip has, the less the wider tile saves per key.
    assert per_key[176] < 0.94 * per_key[128], per_key
