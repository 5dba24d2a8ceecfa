"""`tessera.ir.class_tests.subclass_test` answers exactly as `isinstance` does (a class, a union, a tuple, a
subclass, None), once per concrete type."""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import Float32Type, IndexType, IntegerAttr, VectorType, f32

from tessera.dialects import sm90
from tessera.ir.class_tests import subclass_test


def test_subclass_test_is_isinstance():
    constant = arith.ConstantOp(IntegerAttr(3, IndexType()))
    addi = arith.AddiOp(constant.result, constant.result)
    fence = sm90.WgmmaFenceOp()
    samples = [constant, addi, fence, None, 3, f32, VectorType(f32, [4]), IndexType()]
    for classes in (arith.ConstantOp, scf.ForOp | scf.WhileOp, (arith.AddiOp, sm90.WgmmaFenceOp), arith.SignlessIntegerBinaryOperation,
                    (VectorType, Float32Type), object):
        test = subclass_test(classes)
        for _ in range(2):  # the second answer comes from the memo
            assert [test(x) for x in samples] == [isinstance(x, classes) for x in samples], classes
