"""The CTA simulator's `vector.shuffle` plans (`arith.shuffle_plan`): each fast path (lanes of one operand at a
step, a view; a concatenation; a gather from the first operand alone) gives the
lanes of the plain gather from both operands' lanes, for the leader and for a batch's followers."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import vector
from xdsl.dialects.builtin import DenseArrayBase, VectorType, f32, i64
from xdsl.utils.test_value import create_ssa_value

from tessera.interpreters.sm90.arith import RegisterArithFunctions, shuffle_plan
from tessera.interpreters.sm90.follower_rules import shuffle_followers
from tessera.interpreters.sm90.registers import concatenated_lanes

MASKS = [(0, 2), (1, 3), (0, 1), (2, 3), (4, 6), (5, 7), (0, 1, 2, 3, 4, 5), (0, 3), (3, 0), (0, 1, 4, 5),
         (2, 3, 6, 7), (1, 1), (0, 2, 4, 6), (4,), (0,), (0, 0, 1, 1), (3, 5), (7, 4)]


def _op(mask: tuple[int, ...], lanes: int) -> vector.ShuffleOp:
    value = create_ssa_value(VectorType(f32, [lanes]))
    return vector.ShuffleOp(value, value, DenseArrayBase.from_list(i64, list(mask)),
                            result_type=VectorType(f32, [len(mask)]))


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("same", [False, True])
def test_shuffle_fast_paths_match_the_gather(mask, same):
    lanes = 4
    op = _op(mask, lanes)
    rng = np.random.default_rng(len(mask))
    v1 = rng.standard_normal((8, lanes)).astype(np.float32)
    v2 = v1 if same else rng.standard_normal((8, lanes)).astype(np.float32)
    expected = np.concatenate([v1, v2], axis=1)[:, list(mask)]
    (result,) = RegisterArithFunctions.run_shuffle(None, None, op, (v1, v2)).values
    assert result.shape == expected.shape and np.array_equal(result, expected)
    plan = shuffle_plan(op, lanes)
    if isinstance(plan, tuple) and plan[0] in (0, 1):  # a read-only view
        assert np.shares_memory(result, v2 if plan[0] else v1) and not result.flags.writeable
    f1 = rng.standard_normal((3, 8, lanes)).astype(np.float32)
    f2 = f1 if same else rng.standard_normal((3, 8, lanes)).astype(np.float32)
    followers = shuffle_followers(op, f1, f2)
    assert np.array_equal(followers, np.concatenate([f1, f2], axis=2)[:, :, list(mask)])


def test_shuffle_plan_kinds():
    assert shuffle_plan(_op((1, 2), 4), 4) == (0, slice(1, 3, 1))
    assert shuffle_plan(_op((5, 6, 7), 4), 4) == (1, slice(1, 4, 1))
    assert shuffle_plan(_op((0, 2), 4), 4) == (0, slice(0, 3, 2))
    assert shuffle_plan(_op((5, 7), 4), 4) == (1, slice(1, 4, 2))
    assert shuffle_plan(_op((0, 1, 2, 3, 4, 5), 4), 4) == (2, slice(0, 2))
    kind, lanes = shuffle_plan(_op((0, 1, 4, 5), 8), 8)
    assert kind == 3 and lanes.tolist() == [0, 1, 4, 5]
    assert not isinstance(shuffle_plan(_op((3, 5), 4), 4), tuple)  # lanes of both operands: the plain gather


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint16, np.bool_])
@pytest.mark.parametrize("a,b", [(4, 4), (40, 4), (1, 3), (3, 1), (0, 2), (2, 0)])
def test_concatenated_lanes_match_numpy(dtype, a, b):
    rng = np.random.default_rng(a * 10 + b)
    wide = (rng.standard_normal((5, 2 * (a + b) + 1)) * 100).astype(dtype)
    for first, second in ((wide[:, :a], wide[:, a:a + b]), (wide[:, ::2][:, :a], wide[:, 1:][:, :b]),
                          (np.ascontiguousarray(wide[:, :a]), wide[:, ::2][:, :b])):
        expected = np.concatenate([first, second], axis=1)
        result = concatenated_lanes(first, second)
        assert result.dtype == expected.dtype and np.array_equal(result, expected)
    mixed = concatenated_lanes(wide[:, :a].astype(np.float64), wide[:, :b])
    assert np.array_equal(mixed, np.concatenate([wide[:, :a].astype(np.float64), wide[:, :b]], axis=1))


def test_concatenated_lanes_keep_nan_payloads():
    bits = np.array([[0x7FC00001, 0xFFC00002], [0x7F800001, 0x00000001]], np.uint32)
    first, second = bits[:, :1].view(np.float32), bits[:, 1:].view(np.float32)
    assert np.array_equal(concatenated_lanes(first, second).view(np.uint32), bits)
