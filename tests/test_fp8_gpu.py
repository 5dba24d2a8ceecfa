"""FP8 attention on the GPU path (`tessera.attention(q8, k8, v8, level=None)`, issue 27) and PyTorch FP8 tensors.

Without a GPU the launch goes through the fake driver of test_runtime (parameter bytes, tensor maps, then the
PTX in the PTX executor): what is launched, with V in the layout the kernel's ABI asks for (V^T in P8 key
order today) and the descales as device buffers; with one, on it (marked `gpu`). PyTorch's float8_e4m3fn
tensors are converted bit for bit (skipped without torch: CI has none)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import tessera
from tessera import api
from tessera import reference as R
from tessera import reference_fp8
from tessera.kernels import flash_attention
from tessera.runtime.attention_base import UnsupportedKernel
from tessera.runtime.attention_fp8 import LOWERED_V_LAYOUT, fp8_config, fp8_signature, kernel_v
from tessera.runtime.compiler import compile_kernel
from tessera.sm90.fp8 import p8_key_positions
from fp8_inputs import E4M3, fp8_inputs


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed (CI has none)")


def _tensor(torch, a: np.ndarray):
    """A CPU tensor of an ml_dtypes e4m3 (or any) array, through its bytes (independent of the runtime's own)."""
    if a.dtype == E4M3:
        return torch.from_numpy(a.view(np.uint8).copy()).view(torch.float8_e4m3fn)
    return torch.from_numpy(a.copy())


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernel-cache"))


# region V in the layout the kernel asks for


@pytest.mark.parametrize("v_transposed", [False, "p8"])
def test_kernel_v_follows_the_kernels_signature(v_transposed):
    """V as given (V's dims are K's), and transposed (K's last two swapped) in P8 key order (`tile.key_order`):
    read from the kernel's signature; NumPy and PyTorch give the same bytes."""
    _, _, v, _ = fp8_inputs(1, 2, 2, 1, 1, 48, 64)
    sig = api.find_kernel(flash_attention(head_dim=64, dtype="e4m3", grouped=True, v_transposed=v_transposed))
    expected = v if not v_transposed else np.swapaxes(v, 2, 3)
    if v_transposed == "p8":
        expected = expected[..., p8_key_positions(48)]
    got = kernel_v(v, sig)
    assert got.flags.c_contiguous and np.array_equal(got.view(np.uint8), expected.view(np.uint8))
    try:
        import torch
    except ImportError:
        return
    arranged = kernel_v(_tensor(torch, v), sig)
    assert arranged.dtype == torch.float8_e4m3fn and arranged.is_contiguous()
    assert np.array_equal(arranged.view(torch.uint8).numpy(), expected.view(np.uint8))
    out = torch.empty(expected.shape, dtype=torch.float8_e4m3fn)
    assert kernel_v(_tensor(torch, v), sig, out=out) is out
    assert torch.equal(out.view(torch.uint8), arranged.view(torch.uint8))


def test_the_lowered_kernel_is_the_same_on_the_gpu_and_below_tile_level():
    """level=None compiles the very kernel levels "target" and "ptx" run (LOWERED_V_LAYOUT); "tile" takes V as
    given. The signature is built once per configuration (the ABI the runtime reads V's layout from)."""
    configs = {level: fp8_config(128, True, None, True, False, level) for level in (None, "target", "ptx", "tile")}
    assert configs[None] == configs["target"] == configs["ptx"]
    assert dict(configs[None].options)["v_transposed"] == LOWERED_V_LAYOUT
    assert dict(configs["tile"].options)["v_transposed"] is False
    assert fp8_signature(configs[None]) is fp8_signature(configs["ptx"])
    assert fp8_signature(configs[None]).args[2].key_order == (LOWERED_V_LAYOUT if LOWERED_V_LAYOUT == "p8" else None)


# endregion

# region Through the fake driver


def fake_gpu(monkeypatch, config):
    """The fake driver of test_runtime, running `config`'s compiled kernel."""
    from test_runtime import FakeCuda

    from tessera.runtime import launch as launch_module
    from tessera.runtime.driver import Driver

    fake = FakeCuda([compile_kernel(config)])
    monkeypatch.setattr(launch_module, "get_driver", lambda: Driver(fake))
    return fake


def test_fp8_attention_runs_through_the_driver_calls(monkeypatch):
    """GQA, causal, LSE: one launch over (ceildiv(seq_q, 128), heads, batch); the V tensor map addresses V in the
    layout the kernel's signature asks for (V^T in P8 key order while the lowering takes that), the descales are
    f32 device buffers; the result meets `check_attention_fp8`."""
    q, k, v, (dq, dk, dv) = fp8_inputs(3, 1, 2, 1, 70, 96, 64)
    config = fp8_config(64, True, None, True, True, None)
    fake = fake_gpu(monkeypatch, config)
    o, lse = tessera.attention(q, k, v, causal=True, descale_q=dq, descale_k=dk, descale_v=dv, return_lse=True)
    assert o.dtype == np.dtype(ml_dtypes.bfloat16) and o.shape == q.shape and lse.shape == q.shape[:3]
    check = R.check_attention_fp8(o, q, k, v, dq, dk, dv, causal=True)
    assert check.ok, check
    finite = np.isfinite(ref_lse := reference_fp8.attention_fp8_lse(q, k, dq, dk, causal=True))
    assert np.abs(lse[finite] - ref_lse[finite]).max() < R.LSE_TOLERANCE
    (launch,) = fake.launches
    assert launch.grid == (math.ceil(70 / 128), 2, 1)
    given = kernel_v(v, fp8_signature(config))
    if LOWERED_V_LAYOUT == "p8":
        assert np.array_equal(given, np.swapaxes(v, 2, 3)[..., p8_key_positions(96)])
    expected = given.view(np.uint8).ravel()
    maps = [a for a in launch.args if getattr(a, "spec", None) is not None]
    assert any(tuple(m.spec.global_dims) == given.shape[::-1]  # innermost first
               and np.array_equal(m.array[m.offset:m.offset + expected.size], expected) for m in maps)
    buffers = [a for a in launch.args if isinstance(a, np.ndarray)]
    for descale in (dq, dk, dv):
        assert any(b.nbytes == descale.nbytes and np.array_equal(b.view(np.float32), descale.ravel())
                   for b in buffers)


def test_torch_cpu_tensors_run_through_the_driver_calls(monkeypatch):
    """CPU float8_e4m3fn tensors and f32 descale tensors: through NumPy bit for bit, returned as CPU tensors."""
    torch = _torch()
    q, k, v, (dq, dk, dv) = fp8_inputs(4, 1, 1, 1, 20, 48, 64)
    fake_gpu(monkeypatch, fp8_config(64, False, None, False, False, None))
    o = tessera.attention(*(_tensor(torch, x) for x in (q, k, v)), descale_q=_tensor(torch, dq),
                          descale_k=_tensor(torch, dk), descale_v=dv)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.bfloat16 and not o.is_cuda
    assert R.check_attention_fp8(o.view(torch.int16).numpy().view(ml_dtypes.bfloat16), q, k, v, dq, dk, dv).ok


def test_fp8_on_the_gpu_compiles_nothing_without_one(monkeypatch):
    from test_runtime import FakeCuda, FakeResult

    from tessera.runtime import CudaUnavailable
    from tessera.runtime import attention_fp8
    from tessera.runtime import launch as launch_module
    from tessera.runtime.driver import Driver

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled without a GPU")

    no_device = FakeCuda(fail={"cuInit": FakeResult.CUDA_ERROR_NO_DEVICE})
    monkeypatch.setattr(launch_module, "get_driver", lambda: Driver(no_device))
    monkeypatch.setattr(attention_fp8, "compile_kernel", no_compile)
    q, k, v, _ = fp8_inputs(0, 1, 2, 2, 8, 32, 64)
    with pytest.raises(CudaUnavailable, match="level="):
        tessera.attention(q, k, v)
    multiple = fp8_signature(fp8_config(64, False, None, False, False, None)).divisible.get("seq_k", 1)
    if multiple > 1:  # the kernel's promise (V^T in P8 key order), refused by name before the GPU is looked for
        with pytest.raises(UnsupportedKernel, match=rf"on the GPU \(level=None\) needs seq_k a multiple of {multiple}"):
            tessera.attention(q, k[:, :, :multiple + 8], v[:, :, :multiple + 8])


# endregion

# region PyTorch tensors on the CPU levels


def test_torch_fp8_tensors_are_the_arrays_bit_for_bit():
    torch = _torch()
    q, k, v, (dq, dk, dv) = fp8_inputs(5, 1, 2, 1, 33, 50, 64)
    dk = dk.astype(ml_dtypes.bfloat16).astype(np.float32)  # given as a bf16 tensor below, exactly
    arrays = tessera.attention(q, k, v, causal=True, descale_q=dq, descale_k=dk, descale_v=dv, return_lse=True,
                               level="tile")
    tensors = tessera.attention(*(_tensor(torch, x) for x in (q, k, v)), causal=True, descale_q=_tensor(torch, dq),
                                descale_k=_tensor(torch, dk).to(torch.bfloat16),
                                descale_v=_tensor(torch, dv), return_lse=True, level="tile")
    (o, lse), (o_t, lse_t) = arrays, tensors
    assert isinstance(o_t, torch.Tensor) and o_t.dtype == torch.bfloat16 and lse_t.dtype == torch.float32
    np.testing.assert_array_equal(o.view(np.uint16), o_t.view(torch.int16).numpy().view(np.uint16))
    np.testing.assert_array_equal(lse, lse_t.numpy())


def test_torch_fp8_refusals_are_named():
    torch = _torch()
    q, k, v, (dq, _, _) = fp8_inputs(0, 1, 2, 2, 8, 16, 64)
    tq, tk, tv = (_tensor(torch, x) for x in (q, k, v))
    with pytest.raises(UnsupportedKernel, match="element type float8_e5m2 is not supported"):
        tessera.attention(*(x.to(torch.float8_e5m2) for x in (tq, tk, tv)), level="tile")
    with pytest.raises(ValueError, match="all NumPy arrays or all PyTorch tensors"):
        tessera.attention(tq, tk, v, level="tile")
    with pytest.raises(ValueError, match=r"descale_q must have shape \[batch, heads_k\]"):
        tessera.attention(tq, tk, tv, descale_q=torch.ones(2, 1), level="tile")
    with pytest.raises(TypeError, match="descale_k must be an array or tensor of real numbers, got complex64"):
        tessera.attention(tq, tk, tv, descale_k=torch.ones(1, 2, dtype=torch.complex64), level="tile")
    with pytest.raises(ValueError, match="descale_v must be finite"):
        tessera.attention(tq, tk, tv, descale_v=torch.full((1, 2), float("nan")), level="tile")


def test_runtime_converts_fp8_tensors_through_their_bits():
    """Every e4m3 and e5m2 code, NaNs included, survives the round trip NumPy -> torch -> NumPy."""
    torch = _torch()
    from tessera.runtime.launch import element_dtype, numpy_to_torch, torch_to_numpy

    for dtype, torch_dtype in ((E4M3, torch.float8_e4m3fn), (ml_dtypes.float8_e5m2, torch.float8_e5m2)):
        codes = np.arange(256, dtype=np.uint8).view(dtype)
        tensor = numpy_to_torch(codes)
        assert tensor.dtype == torch_dtype and element_dtype(tensor) == np.dtype(dtype)
        assert np.array_equal(torch_to_numpy(tensor).view(np.uint8), codes.view(np.uint8))
        assert np.array_equal(tensor.float().numpy(), codes.astype(np.float32), equal_nan=True)  # one format


# endregion


@pytest.mark.gpu
def test_fp8_attention_on_the_gpu():
    """NumPy arrays and CUDA float8_e4m3fn tensors (with CUDA and NumPy descales) on an H100/H200: GQA, causal,
    a key length off the block size, head_dim 128; the rule of `check_attention_fp8`, and both kinds agree."""
    import torch

    q, k, v, (dq, dk, dv) = fp8_inputs(6, 2, 4, 2, 300, 528, 128)
    o, lse = tessera.attention(q, k, v, causal=True, descale_q=dq, descale_k=dk, descale_v=dv, return_lse=True)
    check = R.check_attention_fp8(o, q, k, v, dq, dk, dv, causal=True)
    assert check.ok, check
    cuda = [_tensor(torch, x).cuda() for x in (q, k, v)]
    o_t, lse_t = tessera.attention(*cuda, causal=True, descale_q=_tensor(torch, dq).cuda(), descale_k=dk,
                                   descale_v=_tensor(torch, dv).cuda(), return_lse=True)
    assert o_t.is_cuda and o_t.dtype == torch.bfloat16
    np.testing.assert_array_equal(o.view(np.uint16), o_t.cpu().view(torch.int16).numpy().view(np.uint16))
    np.testing.assert_array_equal(lse, lse_t.cpu().numpy())
    for seq_q, d in ((1, 64), (129, 256)):  # a single query row (decoding); head_dim 256
        q, k, v, ds = fp8_inputs(seq_q + d, 1, 2, 1, seq_q, 144, d)
        assert R.check_attention_fp8(tessera.attention(q, k, v, descale_q=ds[0], descale_k=ds[1],
                                                       descale_v=ds[2]), q, k, v, *ds).ok
