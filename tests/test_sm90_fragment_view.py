"""A wgmma's products into the accumulator fragments (`interpreters.sm90.fragment_view`): the same bits as the
flat gather of each (thread, register) element named by `facts.accumulator_coords`, summed in float64 and
rounded once, for every N, scale-d on and off per warpgroup, written in place through a view of the rows."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from tessera.interpreters.sm90.fragment_view import fragment_plan, multiply_accumulate
from tessera.sm90 import facts


def _reference(a: np.ndarray, b: np.ndarray, acc: np.ndarray, on: np.ndarray, n: int) -> np.ndarray:
    products = np.matmul(a.astype(np.float64), np.swapaxes(b.astype(np.float64), -1, -2))
    registers = facts.accumulator_registers(n, "f32")
    rows, cols = facts.accumulator_coords(np.arange(registers)[None, :], np.arange(facts.WARPGROUP_SIZE)[:, None])
    gathered = products[..., rows, cols]  # [..., 128, registers]
    return np.where(on[..., None, None], gathered + acc.astype(np.float64), gathered).astype(np.float32)


def _operands(rng, lead: tuple[int, ...], n: int):
    def bf16(shape):  # wide exponents: sums that round
        values = rng.standard_normal(shape) * 2.0 ** rng.integers(-20, 20, shape)
        return values.astype(ml_dtypes.bfloat16).astype(np.float32)

    return bf16(lead + (64, 16)), bf16(lead + (n, 16)), rng.standard_normal(lead + (128, n // 2)).astype(np.float32)


@pytest.mark.parametrize("n", [8, 24, 64, 128, 176, 256])
def test_fragments_are_the_gather_rounded_once(n):
    rng = np.random.default_rng(n)
    a, b, acc = _operands(rng, (3, 2), n)
    on = np.array([[True, False], [True, True], [False, False]])
    out = np.full(acc.shape, np.nan, np.float32)
    multiply_accumulate(a, b, acc, out, on, n)
    assert out.tobytes() == _reference(a, b, acc, on, n).tobytes()
    assert (fragment_plan(n) is None) == (n == 8)  # n = 8: lanes step rows and columns alike, the gather


def test_fragments_written_in_place_into_the_warpgroups_rows():
    """Rows 128..383 of a [F, 384, regs] register array (the followers' accumulator), B shared by warpgroups."""
    rng = np.random.default_rng(1)
    a, b, acc = _operands(rng, (4, 2), 176)
    result = np.zeros((4, 384, 88), np.float32)
    multiply_accumulate(a, b[:, :1], acc, result[:, 128:].reshape(4, 2, 128, 88), np.ones(2, bool), 176)
    expected = _reference(a, np.broadcast_to(b[:, :1], b.shape), acc, np.ones((4, 2), bool), 176)
    assert (result[:, :128] == 0).all() and result[:, 128:].tobytes() == expected.reshape(4, 256, 88).tobytes()


@pytest.mark.parametrize("on", [(True, True), (True, False)])
def test_fragments_from_a_broadcast_accumulator(on):
    """The followers' accumulator may be the leader's broadcast (a read-only view with a zero stride)."""
    rng = np.random.default_rng(2)
    a, b, _ = _operands(rng, (3, 2), 176)
    leader = rng.standard_normal((256, 88)).astype(np.float32)
    acc = np.broadcast_to(leader, (3, 256, 88)).reshape(3, 2, 128, 88)
    out = np.empty((3, 2, 128, 88), np.float32)
    multiply_accumulate(a, b[:, :1], acc, out, np.array(on), 176)
    expected = _reference(a, np.broadcast_to(b[:, :1], b.shape), acc, np.broadcast_to(np.array(on), (3, 2)), 176)
    assert out.tobytes() == expected.tobytes()


def test_a_leader_alone_takes_its_product_as_a_view():
    """A leader with no followers passes operands [W, ...] against fragments [1, W, ...]: the product's lead dims
    differ only by a 1 (reshaped, not copied); the bits are the gather's."""
    rng = np.random.default_rng(3)
    a, b, acc = _operands(rng, (2,), 176)
    out = np.empty((1, 2, 128, 88), np.float32)
    multiply_accumulate(a, b[:1], acc[None], out, np.array([True, False]), 176)
    expected = _reference(a, np.broadcast_to(b[:1], b.shape), acc, np.array([True, False]), 176)
    assert out[0].tobytes() == expected.tobytes()
