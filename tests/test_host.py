"""The host-side description of a compiled kernel: launch shape, parameters in order, and the
cuTensorMapEncodeTiled arguments of each tensor map, checked against the driver's rules."""

import pytest

import tessera
from tessera.host import describe
from tessera.sm90 import facts

from conftest import build_kernel


def test_flash_attention_description():
    (h,) = describe(tessera.compile(build_kernel("flash_attention", head_dim=128, causal=False, dtype="bf16"), "target"))
    assert h.block == (384, 1, 1)  # the default pipeline: a producer and two consumer warpgroups
    assert [(p.name, p.kind) for p in h.params] == [
        ("Q_map128", "tensormap"), ("K_map176", "tensormap"), ("V_map176", "tensormap"), ("O_ptr", "pointer"),
        ("batch", "size"), ("heads", "size"), ("seq_q", "size"), ("seq_k", "size")]
    # the kernel's bytes (Q, the K and V rings, mask-by-mma's 176 x 16 bias tile, the barriers) plus room to align
    # the base to 1024
    assert h.dynamic_smem_bytes == 32768 + 2 * 2 * 176 * 128 * 2 + 176 * 16 * 2 + 1024 + 1023
    sizes = dict(batch=2, heads=4, seq_q=1000, seq_k=700)
    assert h.grid(sizes) == (8, 4, 2)
    q = h.tensor_maps(sizes)["Q_map128"]
    assert q.dtype == facts.TensorMapDataType.BFLOAT16
    assert q.global_dims == (128, 1000, 4, 2) and q.global_strides == (256, 256000, 1024000)
    assert q.box_dims == (64, 128, 1, 1) and q.swizzle == facts.TensorMapSwizzle.B128
    k = h.tensor_maps(sizes)["K_map176"]  # FlashAttention-3's 176-key blocks, the default at head_dim 128
    assert k.global_dims == (128, 700, 4, 2) and k.box_dims == (64, 176, 1, 1)


def test_gemm_rows_the_driver_refuses_are_reported():
    (h,) = describe(tessera.compile(build_kernel("gemm", dtype="f16"), "target"))
    assert h.tensor_maps(dict(M=64, K=64, N=64))["A_map128"].dtype == facts.TensorMapDataType.FLOAT16
    with pytest.raises(ValueError, match="multiples of 16"):
        h.tensor_maps(dict(M=64, K=300, N=64))
