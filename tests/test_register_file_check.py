"""The register-file check of the CTA simulator (`tessera.interpreters.sm90.register_check`) on its own: a
register that another value overwrote in some threads is reported in exactly those threads, and a register
written under another dtype is not compared (a different class view), as the per-register check did."""

from types import SimpleNamespace

import numpy as np
import pytest
from xdsl.dialects.builtin import VectorType, f32, i32
from xdsl.dialects import test as test_dialect

from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.sm90.register_check import RegisterFileChecker, RegisterLayout
from tessera.regalloc import Allocation

T = 4


def _setup(b_type=f32):
    """%a (vector<2xf32> in %f9, %f10) and %b (a scalar the allocator put in %f10, a's second register)."""
    make_a = test_dialect.TestOp(result_types=[VectorType(f32, [2])])
    make_b = test_dialect.TestOp(result_types=[b_type])
    a, b = make_a.results[0], make_b.results[0]
    a.name_hint, b.name_hint = "a", "b"
    use = test_dialect.TestOp(operands=[a])
    allocation = Allocation(names={a: ["%f9", "%f10"], b: ["%f10"]}, counts={"f": 11}, peak=0, peak_position=0)
    cta = SimpleNamespace(active=np.ones(T, bool), threads=T, wgmma=None)
    checker = RegisterFileChecker(cta, RegisterLayout(allocation))
    a_value = np.arange(2 * T, dtype=np.float32).reshape(T, 2)
    checker.did_interpret_op(make_a, (a_value,))
    return checker, cta, make_b, use, a_value


def test_a_register_overwritten_in_some_threads_is_reported_in_those():
    checker, cta, make_b, use, a_value = _setup()
    checker.will_interpret_op(use, (a_value,))  # nothing overwrote it yet
    cta.active = np.array([False, False, True, False])
    checker.did_interpret_op(make_b, (np.full(T, -1.0, np.float32),))
    cta.active = np.array([True, True, False, True])
    checker.will_interpret_op(use, (a_value,))  # the threads that did not write b still hold a
    cta.active = np.ones(T, bool)
    with pytest.raises(KernelHazardError, match=r"register %f10 no longer holds %a .* in thread 2"):
        checker.will_interpret_op(use, (a_value,))


def test_bit_patterns_are_compared():
    """-0.0 is not 0.0 in a register, and a NaN is itself."""
    checker, cta, make_b, use, a_value = _setup()
    nan = a_value.copy()
    nan[:, 1] = np.nan
    checker.did_interpret_op(use.operands[0].owner, (nan,))
    checker.will_interpret_op(use, (nan,))
    zero = np.zeros((T, 2), np.float32)
    checker.did_interpret_op(use.operands[0].owner, (zero,))
    with pytest.raises(KernelHazardError, match=r"register %f9 no longer holds %a"):
        checker.will_interpret_op(use, (-zero,))


def test_a_register_written_under_another_dtype_is_not_compared():
    checker, cta, make_b, use, a_value = _setup(b_type=i32)
    checker.did_interpret_op(make_b, (np.full(T, 7, np.int32),))
    checker.will_interpret_op(use, (a_value,))  # %f10 was last written as i32: another class view
    checker.did_interpret_op(use.operands[0].owner, (a_value,))
    checker.will_interpret_op(use, (a_value,))
