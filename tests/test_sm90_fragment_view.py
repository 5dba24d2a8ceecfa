"""The accumulator fragments of a wgmma's products as one strided pass (`interpreters.sm90.fragment_view`):
the same bits as gathering each (thread, register) element named by `facts.accumulator_coords` and rounding once."""

from __future__ import annotations

import numpy as np
import pytest

from tessera.interpreters.sm90.fragment_view import accumulate, fragment_view
from tessera.sm90 import facts


def _reference(products: np.ndarray, acc: np.ndarray, on: np.ndarray, n: int) -> np.ndarray:
    registers = facts.accumulator_registers(n, "f32")
    rows, cols = facts.accumulator_coords(np.arange(registers)[None, :], np.arange(facts.WARPGROUP_SIZE)[:, None])
    gathered = products[..., rows, cols]  # [..., 128, registers] float64
    summed = np.where(on[..., None, None], gathered + acc.astype(np.float64), gathered)
    return summed.astype(np.float32)


@pytest.mark.parametrize("n", [8, 24, 64, 128, 176, 256])
def test_accumulate_is_the_gather_rounded_once(n):
    rng = np.random.default_rng(n)
    registers = n // 2
    products = rng.standard_normal((3, 2, 64, n)) * 10.0 ** rng.integers(-8, 8, (3, 2, 64, n))
    acc = rng.standard_normal((3, 2, 128, registers)).astype(np.float32)
    on = np.array([[True, False], [True, True], [False, False]])
    out = np.full((3, 2, 128, registers), np.nan, np.float32)
    accumulate(products, acc, out, on, n)
    assert fragment_view(n) is not None
    assert out.tobytes() == _reference(products, acc, on, n).tobytes()


def test_accumulate_writes_through_a_view_of_the_rows():
    """Into rows 128..383 of a [F, 384, regs] register array in place (the followers' accumulator)."""
    rng = np.random.default_rng(1)
    products = rng.standard_normal((4, 2, 64, 128))
    acc = rng.standard_normal((4, 256, 64)).astype(np.float32)
    result = np.zeros((4, 384, 64), np.float32)
    accumulate(products, acc.reshape(4, 2, 128, 64), result[:, 128:].reshape(4, 2, 128, 64), np.ones(2, bool), 128)
    expected = _reference(products, acc.reshape(4, 2, 128, 64), np.ones((4, 2), bool), 128)
    assert (result[:, :128] == 0).all() and result[:, 128:].tobytes() == expected.reshape(4, 256, 64).tobytes()
