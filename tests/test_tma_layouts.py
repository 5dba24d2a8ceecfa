"""TMA at both simulator levels (the CTA simulator on Target IR, the PTX executor on PTX text) reads and writes
global tensors through the tensor map's strides, and lays boxes out in shared memory with the PTX ISA's swizzle.

Strides: tensors that are views of larger arrays — a transposed layout ([batch, seq, heads, d] memory read as
[batch, heads, seq, d]), a slice of a longer key cache, rows of a padded pitch — whose padding holds NaN, so
that any read outside the view poisons the result. The kernels must give bit for bit the result of the same
run on contiguous copies; a TMA store through a padded-pitch view must leave the padding untouched.

Swizzle: the bytes the simulators' TMA writes into shared memory are compared with a layout built in this file
from the PTX ISA's swizzle table (section "Tensor swizzling modes", written out as literal data in
test_sm90_facts.SWIZZLE_TABLES), never with the simulators' own swizzle function, which their wgmma reads share.
The PTX case is Triton 3.9's TMA + wgmma matmul (tests/ptx_samples/external/triton_matmul_tma.ptx).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera.host import describe
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx import TensorMapArg, launch, schedule
from tessera.interpreters.ptx.launcher import launch_described
from tessera.interpreters.sm90 import run_target_kernel
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers

from conftest import build_kernel
from test_ptx_external import descriptor_args, run as run_triton
from test_sm90_facts import SWIZZLE_TABLES
from test_sm90_simulator import SS_GEMM, _kernel

BF16 = ml_dtypes.bfloat16


# region strided views of the attention inputs


def _views(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Q, K, V (bf16, [batch, heads, seq, d]) as non-contiguous views holding the same values, NaN around."""
    q, k, v = arrays[:3]
    b, h, s, d = q.shape
    bshd = np.full((b, s, h, d), np.nan, BF16)       # the [batch, seq, heads, d] layout of PyTorch's SDPA inputs
    bshd[...] = q.transpose(0, 2, 1, 3)
    q_view = bshd.transpose(0, 2, 1, 3)
    cache = np.full((*k.shape[:2], k.shape[2] + 40, k.shape[3]), np.nan, BF16)  # a longer key cache
    cache[:, :, 7:7 + k.shape[2]] = k
    k_view = cache[:, :, 7:7 + k.shape[2]]
    padded = np.full((*v.shape[:3], v.shape[3] + 8), np.nan, BF16)             # rows of 144 bytes
    padded[..., :v.shape[3]] = v
    v_view = padded[..., :v.shape[3]]
    for view, original in zip((q_view, k_view, v_view), (q, k, v)):
        assert not view.flags.c_contiguous and np.array_equal(view, original)
    return [q_view, k_view, v_view, *arrays[3:]]


@pytest.fixture(scope="module")
def attention():
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    sig = tessera.find_kernel(module)
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal((1, 2, n, 64)) for n in (70, 90, 90)]
    return module, sig, inputs


def _output(sig, arrays):
    (out,) = [a for a, arg in zip(arrays, sig.args) if arg.role == "out"]
    return out


def test_cta_simulator_reads_strided_views_through_the_map_strides(attention):
    module, sig, inputs = attention
    target = tessera.lower_to_target(module, sig.name)
    contiguous, sizes = prepare_arguments(sig, inputs)
    run_target_kernel(target, contiguous, sizes)
    strided = _views(prepare_arguments(sig, inputs)[0])
    run_target_kernel(target, strided, sizes)
    assert not np.isnan(_output(sig, strided).astype(np.float32)).any()
    np.testing.assert_array_equal(_output(sig, strided), _output(sig, contiguous))


def test_ptx_executor_reads_strided_views_through_the_map_strides(attention):
    module, sig, inputs = attention
    lowered = module.clone()
    tessera.passes.apply_pipeline(lowered, tessera.passes.PTX_PIPELINE)
    text, host = print_ptx(lowered, registers=allocated_registers), describe(lowered)[0]
    contiguous, sizes = prepare_arguments(sig, inputs)
    launch_described(text, host, contiguous, sizes)
    strided = _views(prepare_arguments(sig, inputs)[0])
    launch_described(text, host, strided, sizes)
    assert not np.isnan(_output(sig, strided).astype(np.float32)).any()
    np.testing.assert_array_equal(_output(sig, strided), _output(sig, contiguous))


def test_a_pointer_argument_must_stay_contiguous(attention):
    module, sig, inputs = attention
    arrays, sizes = prepare_arguments(sig, inputs)
    wide = np.zeros((*arrays[3].shape[:3], 72), arrays[3].dtype)
    arrays[3] = wide[..., :64]  # the output is stored through a pointer
    with pytest.raises(ValueError, match=r"argument 3 \(%O\w*\): tensor %O\w* is passed by pointer, so it must be "
                                         "row-major contiguous"):
        run_target_kernel(tessera.lower_to_target(module, sig.name), arrays, sizes)


def test_views_tma_cannot_describe_are_refused():
    """globalStrides are unsigned and dimension 0 is contiguous by definition [DRV cuTensorMapEncodeTiled]: a
    transposed innermost dimension or a reversed axis has no tensor map."""
    from tessera.interpreters.sm90.tma import TensorMap

    x = np.zeros((64, 64), BF16)
    for view in (x.T, x[::-1]):
        with pytest.raises(ValueError, match="contiguous innermost dimension and positive strides"):
            TensorMapArg.strided(view, box=(64, 64))
        with pytest.raises(ValueError, match="innermost dimension must be contiguous and its strides positive"):
            TensorMap.encode("m", view, (64, 64), 128)
    with pytest.raises(ValueError, match="globalStrides must"):  # a pitch of 136 bytes is not a multiple of 16
        TensorMap.encode("m", np.zeros((64, 68), BF16)[:, :64], (64, 64), 128)


def test_triton_tma_matmul_loads_and_stores_through_padded_views(rng=np.random.default_rng(9)):
    """Triton's TMA matmul (A [M, K] and B [N, K] loaded, C [M, N] stored by TMA) on views: A a block of a
    larger matrix (row and column offset, padded pitch), B rows of a padded pitch, C a block of a larger
    output whose other elements must keep their sentinel value."""
    m, n, k = 128, 64, 192
    a_big = np.full((m + 3, k + 24), np.nan, np.float16)
    a_big[3:, 8:8 + k] = rng.standard_normal((m, k))
    a = a_big[3:, 8:8 + k]
    b_big = np.full((n, k + 8), np.nan, np.float16)
    b_big[:, :k] = rng.standard_normal((n, k))
    b = b_big[:, :k]
    c_big = np.full((m + 2, n + 16), -7, np.float16)
    c = c_big[2:, 8:8 + n]

    def described(view):  # the map of a view, then its shape and strides as Triton passes them
        return [TensorMapArg.strided(view, box=(64, 64), swizzle=128), *view.shape, view.strides[0] // 2, 1]

    out = run_triton("triton_matmul_tma", "matmul_tma_kernel", (m // 64, n // 64, 1),
                     [*described(a), *described(b), *described(c), k])
    c_after = out[10]  # the base array of C's map
    exact = a.astype(np.float64) @ b.astype(np.float64).T
    np.testing.assert_allclose(c_after[2:, 8:8 + n].astype(np.float64), exact, rtol=2e-3, atol=2e-3)
    untouched = np.ones(c_big.shape, bool)
    untouched[2:, 8:8 + n] = False
    assert (c_after[untouched] == -7).all()


# endregion
# region swizzled shared memory against the PTX ISA table


def swizzled_image(tile: np.ndarray, mode: int) -> np.ndarray:
    """The shared-memory bytes of a row-major box `tile` written from a 1024-byte aligned address with a
    `mode`-byte swizzle, from the PTX ISA's table: 16-byte chunk c of 128-byte line r lands at chunk
    table[r % len(table)][c] of the same line."""
    raw = np.ascontiguousarray(tile).view(np.uint8).reshape(-1)
    table = SWIZZLE_TABLES[mode]
    image = np.zeros_like(raw)
    for line in range(len(raw) // 128):
        for chunk in range(8):
            target = line * 128 + table[line % len(table)][chunk] * 16
            image[target:target + 16] = raw[line * 128 + chunk * 16:line * 128 + chunk * 16 + 16]
    return image


def test_swizzled_image_is_not_the_plain_layout():
    tile = np.arange(64 * 64, dtype=np.uint16).reshape(64, 64)
    assert not np.array_equal(swizzled_image(tile, 128), tile.view(np.uint8).reshape(-1))
    assert np.array_equal(swizzled_image(tile, 0), tile.view(np.uint8).reshape(-1))


def test_cta_simulator_tma_writes_the_isa_swizzle():
    """The CTA simulator's SS GEMM tile (A and B 64 x 64 bf16, 128B swizzle, at shared offsets 0 and 8192),
    with A read through a padded-pitch view: after the run shared memory holds both boxes as the table says."""
    rng = np.random.default_rng(3)
    a_big = np.full((64, 80), np.nan, BF16)
    a_big[:, :64] = rng.standard_normal((64, 64))
    a = a_big[:, :64]
    b = rng.standard_normal((64, 64)).astype(BF16)
    c = np.zeros((64, 64), np.float32)
    ctas = []
    run_target_kernel(_kernel(SS_GEMM), [a, b, c], {}, listeners=lambda cta: (ctas.append(cta), ())[1])
    smem = ctas[0].smem.data
    np.testing.assert_array_equal(smem[:8192], swizzled_image(a, 128))
    np.testing.assert_array_equal(smem[8192:16384], swizzled_image(b, 128))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64).T, rtol=1e-5, atol=1e-5)


def test_ptx_executor_tma_writes_the_isa_swizzle_for_tritons_matmul(monkeypatch):
    """Triton's TMA + wgmma matmul, one CTA, K = 192 in three 64-wide steps through a 3-slot ring: after the run
    the slots of steps 1 and 2 still hold their A and B boxes (step 0's A slot is reused to stage C), each at a
    1024-byte aligned offset, laid out as the PTX ISA table says."""
    images = []
    original = schedule.Scheduler.run

    def run_and_keep_shared_memory(self):
        original(self)
        images.append(self.m.shared[:self.m.shared_bytes].copy())

    monkeypatch.setattr(schedule.Scheduler, "run", run_and_keep_shared_memory)
    rng = np.random.default_rng(4)
    m, n, k = 64, 64, 192
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    c = np.zeros((m, n), np.float16)
    out = run_triton("triton_matmul_tma", "matmul_tma_kernel", (1, 1, 1),
                     [*descriptor_args(a), *descriptor_args(b), *descriptor_args(c), k])
    np.testing.assert_allclose(out[10].astype(np.float64), a.astype(np.float64) @ b.astype(np.float64).T,
                               rtol=2e-3, atol=2e-3)
    (smem,) = images
    slots = {offset: smem[offset:offset + 8192] for offset in range(0, len(smem) - 8191, 1024)}
    for step in (1, 2):
        for name, matrix in (("A", a), ("B", b)):
            expected = swizzled_image(matrix[:, 64 * step:64 * step + 64], 128)
            assert any(np.array_equal(image, expected) for image in slots.values()), f"{name} box of K step {step}"


# endregion
