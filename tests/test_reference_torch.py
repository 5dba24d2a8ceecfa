"""The reference checks take what `tessera.attention` returns at the CPU levels, PyTorch CPU tensors in bf16 or
FP8, as they take NumPy arrays: converted bit for bit (`tessera.host_arrays`), not through `np.asarray`, which
raised inside torch ("Got unsupported ScalarType BFloat16 / Float8_e4m3fn"; found by unseen23f)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tessera  # noqa: E402
from tessera import reference  # noqa: E402
from tessera.host_arrays import host_numpy  # noqa: E402
from tessera.numerics import BF16  # noqa: E402


def test_bf16_tensors_in_and_out_are_checked_as_numpy():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 70, 64, generator=g).to(torch.bfloat16) for _ in range(3))
    o = tessera.attention(q, k, v, causal=True, level="tile")
    assert isinstance(o, torch.Tensor) and o.dtype == torch.bfloat16
    check = reference.check_attention(o, q, k, v, BF16, causal=True)
    assert check.ok
    same = reference.check_attention(*(host_numpy(x) for x in (o, q, k, v)), BF16, causal=True)
    assert (check.max_error, check.tolerance) == (same.max_error, same.tolerance)
    wrong = o.clone()
    wrong[0, 1, 5, 3] += 1
    assert not reference.check_attention(wrong, q, k, v, BF16, causal=True).ok


def test_fp8_tensors_and_tensor_descales():
    g = torch.Generator().manual_seed(1)
    q8, k8, v8 = ((torch.randn(1, 2, 40, 64, generator=g) * 4).to(torch.float8_e4m3fn) for _ in range(3))
    d = torch.tensor([[0.5, 0.25]])
    o = tessera.attention(q8, k8, v8, descale_q=d, descale_k=d, descale_v=d, level="tile")
    assert reference.check_attention_fp8(o, q8, k8, v8, d, d, d).ok


def test_gradients_as_a_tuple_of_tensors():
    g = torch.Generator().manual_seed(2)
    q, k, v, do = (torch.randn(1, 1, 33, 64, generator=g).to(torch.bfloat16) for _ in range(4))
    o, lse = tessera.attention(q, k, v, return_lse=True, level="tile")
    grads = tessera.attention_backward(q, k, v, o, lse, do, level="tile")
    assert all(isinstance(x, torch.Tensor) for x in grads)
    assert all(c.ok for c in reference.check_attention_backward(tuple(grads), q, k, v, o, do, BF16))


def test_host_numpy_is_bit_exact_and_leaves_numpy_alone():
    x = torch.tensor([1.0, -2.5, 3e38, float("nan")]).to(torch.bfloat16)
    np.testing.assert_array_equal(host_numpy(x).view(np.uint16), x.view(torch.int16).numpy().view(np.uint16))
    a = np.arange(3.0)
    assert host_numpy(a) is a and host_numpy((a, 1))[0] is a
