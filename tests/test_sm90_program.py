"""The CTA simulator's closure compiler (`tessera.interpreters.sm90.program`): a kernel is compiled once, its
closures are shared by every CTA and launch with the same checks, and an edit of the kernel's structure (an
operand rewired, an op erased) or of an attribute is seen by the next launch."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import IntegerAttr, IndexType
from xdsl.utils.exceptions import InterpretationError

from tessera.interpreters.sm90 import run_target_kernel
from tessera.interpreters.sm90.program import CompiledKernel
from tessera.ir import parse_module
from tessera.kernel_abi import is_target_kernel

# out[i] = 3 * i over two CTAs of 64 threads (i = 64 * ctaid + tid)
SCALE = """\
builtin.module {
  func.func @scale(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<128>, tile.role = "out"})
      attributes {sm90.kernel = {threads = 64 : i64, smem_bytes = 0 : i64}, tile.kernel = {kind = "custom"},
                  tile.grid = #tile.dims<2>} {
    %tid = sm90.special "tid.x" : index
    %cta = sm90.special "ctaid.x" : index
    %c64 = arith.constant 64 : index
    %three = arith.constant 3 : index
    %five = arith.constant 5 : index
    %base = arith.muli %cta, %c64 : index
    %i = arith.addi %base, %tid : index
    %v = arith.muli %i, %three : index
    %v32 = arith.index_cast %v : index to i32
    %i64 = arith.index_cast %i : index to i64
    %c4 = arith.constant 4 : i64
    %off = arith.muli %i64, %c4 : i64
    %offsets = vector.broadcast %off : i64 to vector<1xi64>
    %values = vector.broadcast %v32 : i32 to vector<1xi32>
    %mask = arith.constant dense<true> : vector<1xi1>
    sm90.st_global %out[%offsets], %values, %mask : vector<1xi64>, vector<1xi32>, vector<1xi1>
    func.return
  }
}
"""


@pytest.fixture
def kernel():
    return next(op for op in parse_module(SCALE).walk() if is_target_kernel(op))


def _run(kernel) -> np.ndarray:
    out = np.zeros(128, np.int32)
    run_target_kernel(kernel, [out], {})
    return out


def _op(kernel, result_name: str):
    return next(op for op in kernel.walk() if op.results and op.results[0].name_hint == result_name)


def test_one_compilation_serves_every_cta_and_launch(kernel):
    assert (_run(kernel) == 3 * np.arange(128)).all()
    compiled = CompiledKernel.of(kernel)
    assert (_run(kernel) == 3 * np.arange(128)).all()
    assert CompiledKernel.of(kernel) is compiled
    assert len(compiled.steps) == 1  # one set of closures for both CTAs of both launches


def test_a_rewired_operand_is_seen_by_the_next_launch(kernel):
    compiled = CompiledKernel.of(kernel)
    _run(kernel)
    _op(kernel, "v").operands[1] = _op(kernel, "five").results[0]
    assert (_run(kernel) == 5 * np.arange(128)).all()
    assert CompiledKernel.of(kernel) is not compiled


def test_an_attribute_edit_is_seen_without_recompiling(kernel):
    compiled = CompiledKernel.of(kernel)
    _run(kernel)
    _op(kernel, "three").properties["value"] = IntegerAttr(7, IndexType())
    assert (_run(kernel) == 7 * np.arange(128)).all()
    assert CompiledKernel.of(kernel) is compiled


def test_an_erased_op_is_seen_by_the_next_launch(kernel):
    _run(kernel)
    store = next(op for op in kernel.walk() if op.name == "sm90.st_global")
    store.detach()
    store.erase()
    assert (_run(kernel) == 0).all()


def test_an_op_without_semantics_fails_when_it_runs(kernel):
    mul = _op(kernel, "v")
    mul.parent.insert_op_before(arith.ConstantOp(IntegerAttr(1, 32)), mul)
    _run(kernel)  # arith.constant has semantics
    mul.parent.insert_op_before(math.CtPopOp(_op(kernel, "i").results[0]), mul)
    with pytest.raises(InterpretationError, match="math.ctpop"):
        _run(kernel)
