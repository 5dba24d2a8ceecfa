"""Thread-block clusters (issue 16): Tile IR's cluster shape and shared copies, the multicast lowering, the CTA
simulator running a cluster's CTAs together, its hazards, and the traffic counter.

Sizes are the smallest that give every CTA of a cluster of two a peer (two query blocks, two M blocks); the
full matrix of the issue (batch 2, heads 4, seq 1024, head_dim 64/128, bf16/f16, a ragged seq) is
`bench/clusters.py`."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import IntegerAttr
from xdsl.utils.exceptions import DiagnosticException

import tessera
from tessera import passes
from tessera.dialects import sm90, tile
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90.launch import run_target_kernel
from tessera.kernel_abi import is_target_kernel, kernels, signature
from tessera.passes.multicast_cluster_copies import buffer_of


def _target(module, pipeline=passes.SPECIALIZED_PIPELINE):
    lowered = tessera.compile(module, target="target", pipeline=pipeline)
    return lowered, next(op for op in lowered.walk() if is_target_kernel(op))


def _run(module, fn, *inputs):
    """Run the Target IR kernel `fn` of the Tile kernel `module`: (its output, the traffic by CTA)."""
    sig = signature(kernels(module)[0])
    arguments, sizes = prepare_arguments(sig, list(inputs), {})
    traffic: dict = {}
    run_target_kernel(fn, arguments, sizes, traffic=traffic)
    out = next(a for a, arg in zip(arguments, sig.args) if arg.role == "out")
    return out.astype(np.float32), traffic


def _qkv(rng, seq, head_dim=64, batch=1, heads=1):
    return [rng.standard_normal((batch, heads, seq, head_dim)).astype(np.float32) for _ in range(3)]


# region Tile IR ---------------------------------------------------------------------------------------------


def test_flash_cluster_marks_k_and_v_copies_shared_not_q():
    module = tessera.kernels.flash_attention(head_dim=64, cluster=2)
    fn = kernels(module)[0]
    assert signature(fn).cluster == (2, 1, 1)
    shared = [op.source.owner.source.name_hint for op in fn.walk()
              if isinstance(op, tile.CpAsyncOp) and op.cluster_shared is not None]
    assert shared == ["K", "V"]


def test_gemm_cluster_2x1_shares_b_and_1x2_shares_a():
    for shape, operand in (((2, 1), "B"), ((1, 2), "A")):
        fn = kernels(tessera.kernels.gemm(cluster=shape))[0]
        assert [op.source.owner.source.name_hint for op in fn.walk()
                if isinstance(op, tile.CpAsyncOp) and op.cluster_shared is not None] == [operand]


def test_causal_flash_and_2x2_gemm_are_refused_by_name():
    with pytest.raises(ValueError, match="depends on the program id along x .*causal attention's key ranges"):
        tessera.kernels.flash_attention(head_dim=64, causal=True, cluster=2)
    with pytest.raises(ValueError, match="no copy of the kernel is the same for the blocks of a cluster along x, y"):
        tessera.kernels.gemm(cluster=(2, 2))
    with pytest.raises(ValueError, match="cluster sizes must be >= 1"):
        tessera.kernels.flash_attention(cluster=0)


def test_cluster_sizes_multicast_cannot_slice_are_refused_at_tile_level_by_name(rng):
    """A cluster whose K/V boxes do not split into a slice of whole swizzle periods per block (3 of 128 rows; 8 of
    32 rows: 4-row slices of 512 bytes, not 1024-byte periods) or of more than 8 blocks is refused where the
    kernel is built, naming the sizes that fit, by the builder, tessera.attention at every level and the pass."""
    with pytest.raises(ValueError, match=r"its 128 rows do not split among the cluster's 3 blocks; clusters of 1, "
                                         r"2, 4, 8 blocks share this kernel's copies"):
        tessera.kernels.flash_attention(head_dim=64, cluster=3)
    with pytest.raises(ValueError, match=r"a slice of 4 rows \(512 bytes\) is not a whole number of 1024-byte "
                                         r"swizzle periods.*clusters of 1, 2, 4 blocks"):
        tessera.kernels.flash_attention(head_dim=64, block_n=32, cluster=8)
    with pytest.raises(ValueError, match="more than the 8 a cluster may hold"):
        tessera.kernels.flash_attention(head_dim=128, cluster=16)
    q, k, v = (x.astype(ml_dtypes.bfloat16) for x in _qkv(rng, 256))
    with pytest.raises(ValueError, match="clusters of 1, 2, 4, 8 blocks"):
        tessera.attention(q, k, v, level="tile", cluster=3)
    module = tessera.kernels.flash_attention(head_dim=64)
    with pytest.raises(DiagnosticException, match="form-clusters: .*cannot multicast this copy's TMA box"):
        passes.apply_pipeline(module, "form-clusters{x=6}")


def test_tile_interpreter_checks_that_members_copy_the_same_window(rng):
    module = tessera.kernels.flash_attention(head_dim=64, cluster=2)
    q, k, v = _qkv(rng, 256)
    plain = tessera.interpret(tessera.kernels.flash_attention(head_dim=64), q, k, v)
    assert np.array_equal(tessera.interpret(module, q, k, v), plain)
    # Mark the Q copy shared as well: its window starts at each block's own query rows.
    q_copy = next(op for op in kernels(module)[0].walk() if isinstance(op, tile.CpAsyncOp))
    q_copy.cluster_shared = tile.UnitAttr()
    with pytest.raises(KernelHazardError, match="members of a cluster copy different windows.*block \\(1, 0, 0\\)"):
        tessera.interpret(module, q, k, v)


# endregion
# region the multicast lowering and the simulator ------------------------------------------------------------


@pytest.mark.parametrize("head_dim, dtype, seq", [(64, "bf16", 256), (128, "f16", 200)])
def test_flash_cluster_2_is_bitwise_equal_to_cluster_1_with_half_the_kv_traffic(rng, head_dim, dtype, seq):
    q, k, v = _qkv(rng, seq, head_dim)
    one = tessera.kernels.flash_attention(head_dim=head_dim, dtype=dtype)
    two = tessera.kernels.flash_attention(head_dim=head_dim, dtype=dtype, cluster=2)
    out1, traffic1 = _run(one, _target(one)[1], q, k, v)
    out2, traffic2 = _run(two, _target(two)[1], q, k, v)
    assert np.array_equal(out1, out2)
    for cta in traffic1:
        assert traffic2[cta]["Q_map128"] == traffic1[cta]["Q_map128"]
        kv_maps = [name for name in traffic1[cta] if name.startswith(("K_map", "V_map"))]  # K_map176 at d128
        assert len(kv_maps) == 2
        for kv in kv_maps:
            assert 2 * traffic2[cta][kv] == traffic1[cta][kv]


def test_gemm_cluster_2x1_is_bitwise_equal_with_half_the_b_traffic(rng):
    a = rng.standard_normal((256, 200)).astype(np.float32)
    b = rng.standard_normal((200, 192)).astype(np.float32)
    one, two = tessera.kernels.gemm(), tessera.kernels.gemm(cluster=(2, 1))
    out1, traffic1 = _run(one, _target(one)[1], a, b)
    out2, traffic2 = _run(two, _target(two)[1], a, b)
    assert np.array_equal(out1, out2)
    (a_map, b_map) = sorted(traffic1[(0, 0, 0)])
    for cta in traffic1:
        assert traffic2[cta][a_map] == traffic1[cta][a_map] and 2 * traffic2[cta][b_map] == traffic1[cta][b_map]


def test_odd_number_of_query_blocks_falls_back_to_clusters_of_one(rng):
    q, k, v = _qkv(rng, 300)  # three query blocks
    one = tessera.kernels.flash_attention(head_dim=64)
    two = tessera.kernels.flash_attention(head_dim=64, cluster=2)
    out1, traffic1 = _run(one, _target(one)[1], q, k, v)
    out2, traffic2 = _run(two, _target(two)[1], q, k, v)
    assert np.array_equal(out1, out2) and traffic1 == traffic2


def test_cluster_members_run_atomic_adds_and_16_bit_casts(rng):
    """tests/user_kernels/batchnorm_stats.mlir in clusters of two along y: each member casts bf16 to f32
    (sm90.cvt_unpack) and adds column sums with red.global.add. The members ran without the reduction ops'
    implementations (an InterpretationError at the first of them); they run them now, as a lone CTA does."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent / "user_kernels" / "batchnorm_stats.mlir").read_text()
    grid = "tile.grid = #tile.dims<ceildiv(N, 16), ceildiv(M, 64)>"
    clustered = tessera.parse_module(text.replace(grid, grid + ", tile.cluster = array<i64: 1, 2, 1>"), "k.mlir")
    x = rng.standard_normal((256, 32)).astype(ml_dtypes.bfloat16)
    target, ptx = (tessera.launch(clustered, x, level=level) for level in ("target", "ptx"))
    xd = x.astype(np.float64)
    for got, exact, terms in zip(target, (xd.sum(0), (xd**2).sum(0)), (xd, xd**2)):
        assert np.all(np.abs(got - exact) <= (256 + 5) * 2.0**-24 * np.abs(terms).sum(0))
    for a, b in zip(target, ptx):
        np.testing.assert_array_equal(a, b)


# endregion
# region hazards, each seeded in the lowered flash kernel ----------------------------------------------------


def _seeded(mutate):
    module = tessera.kernels.flash_attention(head_dim=64, cluster=2)
    lowered, fn = _target(module)
    mutate(fn)
    return module, fn


def _cluster_barriers(fn):
    entry = fn.body.block
    return [op for op in entry.ops if isinstance(op, sm90.ClusterArriveOp | sm90.ClusterWaitOp)]


def _expect_hazard(rng, mutate, pattern):
    """Two query blocks (one cluster) and four key blocks, so that each slot of the two-slot rings is refilled."""
    module, fn = _seeded(mutate)
    q, _, _ = _qkv(rng, 256)
    _, k, v = _qkv(rng, 512)
    with pytest.raises(KernelHazardError, match=pattern):
        _run(module, fn, q, k, v)


def test_hazard_multicast_into_a_slot_the_peer_has_not_released(rng):
    def own_barrier_only(fn):  # every consumer arrives twice on its own empty barrier, never on the peer's
        for mapa in [op for op in fn.walk() if isinstance(op, sm90.MapaOp)]:
            rank = sm90.SpecialRegOp("cluster_ctarank")
            mapa.parent_block().insert_op_before(rank, mapa)
            mapa.operands = [mapa.address, rank.result]
    _expect_hazard(rng, own_barrier_only, "multicasts into .* of CTA rank [01], which its thread .* read and has not "
                                          "released")


def test_hazard_remote_arrive_before_the_cluster_barrier_after_init(rng):
    def no_init_barrier(fn):
        for op in _cluster_barriers(fn)[:2]:
            op.detach()
            op.erase()
    _expect_hazard(rng, no_init_barrier, "CTA rank [01] before a cluster barrier .* ordered its mbarrier_init")


def test_hazard_exit_while_peers_may_still_arrive(rng):
    def no_exit_barrier(fn):
        for op in _cluster_barriers(fn)[2:]:
            op.detach()
            op.erase()
    _expect_hazard(rng, no_exit_barrier, "exits while|which has exited")


def test_hazard_mask_bit_outside_the_cluster(rng):
    def wide_mask(fn):
        for op in fn.walk():
            if isinstance(op, sm90.TmaLoadMulticastOp):
                op.mask = IntegerAttr(0b101, 64)
    _expect_hazard(rng, wide_mask, "the CTA mask 0x5 sets bit 2, outside the cluster of 2 CTAs")


def test_hazard_expect_tx_differs_from_the_bytes_delivered(rng):
    def own_slice_only(fn):  # each producer expects only the half it issues itself
        for op in fn.walk():
            if isinstance(op, sm90.MBarrierArriveExpectTxOp) and "_ring_full" in str(buffer_of(op.mbarrier)):
                op.bytes = IntegerAttr(op.bytes.value.data // 2, 64)
    _expect_hazard(rng, own_slice_only, "expect_tx bytes are fewer than the bytes delivered|more than expect_tx")


# endregion
# region host description, PTX and SASS -----------------------------------------------------------------------


def test_clustered_target_ir_reads_back_to_the_same_text():
    from tessera.ir import parse_module, print_module

    text = print_module(_target(tessera.kernels.flash_attention(head_dim=64, cluster=2))[0])
    assert print_module(parse_module(text)) == text


def test_simulator_refuses_a_cluster_the_driver_refuses(rng):
    module = tessera.kernels.flash_attention(head_dim=64, cluster=2)
    q, k, v = _qkv(rng, 256)
    sig = signature(kernels(module)[0])
    arguments, sizes = prepare_arguments(sig, [q, k, v], {})
    fn = _target(module)[1]
    with pytest.raises(ValueError, match="does not divide grid"):
        run_target_kernel(fn, arguments, sizes, cluster=(3, 1, 1))
    arguments, sizes = prepare_arguments(sig, _qkv(rng, 256, batch=8), {})
    with pytest.raises(ValueError, match="has 16 thread blocks, more than the 8 a cluster may hold"):
        run_target_kernel(fn, arguments, sizes, cluster=(2, 1, 8))  # refused before any CTA runs


def test_host_description_gives_the_cluster_and_says_when_it_falls_back():
    from tessera.host import describe

    host = describe(tessera.compile(tessera.kernels.flash_attention(head_dim=64, cluster=2), target="target"))[0]
    even = {"batch": 2, "heads": 4, "seq_q": 1024, "seq_k": 1024}
    odd = dict(even, seq_q=300)
    assert host.cluster(even) == (2, 1, 1) and host.cluster_note(even) is None
    assert host.cluster(odd) == (1, 1, 1)
    assert "axis x: 3 blocks are not a multiple of 2" in host.as_dict(odd)["cluster_note"]
    plain = describe(tessera.compile(tessera.kernels.flash_attention(head_dim=64), target="target"))[0]
    assert plain.cluster(even) is None and "cluster" not in plain.as_dict(even)


def test_ptx_level_runs_the_cluster_together_bitwise_equal_to_cluster_1(rng):
    q, k, v = _qkv(rng, 256)
    one = tessera.interpret(tessera.kernels.flash_attention(head_dim=64), q, k, v, level="ptx")
    two = tessera.interpret(tessera.kernels.flash_attention(head_dim=64, cluster=2), q, k, v, level="ptx")
    assert np.array_equal(np.asarray(one, np.float32), np.asarray(two, np.float32))


@pytest.mark.parametrize("build, multicasts", [
    (lambda: tessera.kernels.flash_attention(head_dim=128, cluster=2), "UTMALDG.4D.MULTICAST"),
    (lambda: tessera.kernels.gemm(cluster=(2, 1)), "UTMALDG.2D.MULTICAST"),
])
def test_ptxas_clean_without_spills_and_sass_multicasts_and_syncs_the_cluster(ptxas, nvdisasm, build, multicasts):
    from tessera.sass import sass_opcode_counts

    result = tessera.compile(build(), target="cubin")
    entry = result.entry()
    assert not result.warnings and not entry.spills and entry.stack_frame_bytes == 0
    counts = sass_opcode_counts(result.cubin, nvdisasm=nvdisasm)
    assert counts[multicasts] > 0  # each CTA's slice of K/V (B) into both CTAs' shared memory
    assert counts["UCGABAR_ARV"] == 2 and counts["UCGABAR_WAIT"] == 2  # after the init and before the exit
    assert counts["SYNCS.ARRIVE.TRANS64.RED.A1T0"] > 0  # the remote arrives on the peer's empty barriers


# endregion


def test_runtime_launch_shape_carries_the_cluster_and_its_fallback():
    from tessera.runtime.attention import attention_config
    from tessera.runtime.compiler import compile_kernel
    from tessera.runtime.launch import launch_shape

    kernel = compile_kernel(attention_config(64, False, "bf16", None, cluster=2))
    assert kernel.host.clustered and ".explicitcluster" in kernel.ptx
    assert launch_shape(kernel.host, dict(batch=2, heads=4, seq_q=1024, seq_k=1024))[2] == (2, 1, 1)
    assert launch_shape(kernel.host, dict(batch=2, heads=4, seq_q=300, seq_k=1024))[2] == (1, 1, 1)
    with pytest.raises(ValueError, match="causal attention's key ranges"):
        tessera.attention(*(x.astype(ml_dtypes.bfloat16) for x in _qkv(np.random.default_rng(0), 8)), causal=True,
                          cluster=2)  # refused before looking for a GPU
