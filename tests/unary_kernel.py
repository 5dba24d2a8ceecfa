"""One Target IR test kernel for an elementwise f32 instruction, shared by the tests of the approximate
instructions (tests/test_tanh_rsqrt_sqrt.py, tests/test_lg2_approx.py): 32 threads each load two f32 of a
[32, 2] input, apply the op and store the two results, so that one kernel runs a table of 64 inputs in the CTA
simulator, in the PTX executor (its printed PTX) and under ptxas."""

from __future__ import annotations

import numpy as np

from tessera.interpreters.sm90 import run_target_kernel
from tessera.ir import parse_module
from tessera.kernel_abi import is_target_kernel
from tessera.ptx import launch, print_ptx
from text_edits import filled

SHAPE = (32, 2)
"""The input and output of the kernel: one row of two f32 per thread."""

_KERNEL = """\
builtin.module {
  func.func @NAME(%x: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "in"},
                  %out: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>,
                  sm90.kernel = {threads = 32 : i64, smem_bytes = 0 : i64}} {
    %tid = sm90.special "tid.x" : index
    %t64 = arith.index_cast %tid : index to i64
    %c8 = arith.constant 8 : i64
    %row = arith.muli %t64, %c8 : i64
    %rows = vector.broadcast %row : i64 to vector<2xi64>
    %cols = arith.constant dense<[0, 4]> : vector<2xi64>
    %offs = arith.addi %rows, %cols : vector<2xi64>
    %all = arith.constant dense<true> : vector<2xi1>
    %v = sm90.ld_global %x[%offs], %all : vector<2xi64>, vector<2xi1> -> vector<2xf32>
    %r = OP %v : vector<2xf32>
    sm90.st_global %out[%offs], %r, %all : vector<2xi64>, vector<2xf32>, vector<2xi1>
    func.return
  }
}
"""


def unary_module(op: str, name: str = "unary"):
    """The module of kernel @`name` applying the one-operand Target IR op `op` (`sm90.tanh_approx`,
    `math.sqrt`, ...) to each element."""
    return parse_module(filled(_KERNEL, NAME=name, OP=op))


def simulate(op: str, x: np.ndarray) -> np.ndarray:
    """`op` applied to the f32 inputs `x` (SHAPE) by the kernel in the CTA simulator."""
    out = np.zeros(SHAPE, np.float32)
    kernel = next(k for k in unary_module(op).walk() if is_target_kernel(k))
    run_target_kernel(kernel, [np.asarray(x, np.float32).reshape(SHAPE), out], {})
    return out


def execute_ptx(op: str, x: np.ndarray) -> tuple[str, np.ndarray]:
    """The kernel's printed PTX and what the PTX executor computes from the inputs `x` (SHAPE) with it."""
    ptx = print_ptx(unary_module(op))
    _, out = launch(ptx, "unary", (1, 1, 1), (SHAPE[0], 1, 1),
                    [np.asarray(x, np.float32).reshape(SHAPE), np.zeros(SHAPE, np.float32)])
    return ptx, out
