"""The CTA simulator's float ops give IEEE results (overflow to inf, inf - inf = NaN) and raise or warn nothing,
whatever the caller's NumPy error settings: every strand runs its ops under `np.errstate(all="ignore")`
(`tessera.interpreters.sm90.strands`), as the GPU raises nothing."""

from __future__ import annotations

import warnings

import numpy as np

from tessera.interpreters.sm90 import run_target_kernel
from tessera.ir import parse_module
from tessera.kernel_abi import is_target_kernel

# out[2 i] = bits of 3e38 * 4 (inf), out[2 i + 1] = bits of inf - inf (NaN), over one CTA of 32 threads
OVERFLOW = """\
builtin.module {
  func.func @overflow(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<64>, tile.role = "out"})
      attributes {sm90.kernel = {threads = 32 : i64, smem_bytes = 0 : i64}, tile.kernel = {kind = "custom"},
                  tile.grid = #tile.dims<1>} {
    %tid = sm90.special "tid.x" : index
    %big = arith.constant 3.0e+38 : f32
    %four = arith.constant 4.0 : f32
    %inf = arith.mulf %big, %four : f32
    %nan = arith.subf %inf, %inf : f32
    %inf_bits = arith.bitcast %inf : f32 to i32
    %nan_bits = arith.bitcast %nan : f32 to i32
    %i64 = arith.index_cast %tid : index to i64
    %c8 = arith.constant 8 : i64
    %off = arith.muli %i64, %c8 : i64
    %offsets = vector.broadcast %off : i64 to vector<2xi64>
    %lo = vector.broadcast %inf_bits : i32 to vector<1xi32>
    %hi = vector.broadcast %nan_bits : i32 to vector<1xi32>
    %values = vector.shuffle %lo, %hi [0, 1] : vector<1xi32>, vector<1xi32>
    %mask = arith.constant dense<true> : vector<2xi1>
    sm90.st_global %out[%offsets], %values, %mask {column_bytes = array<i32: 0, 4>}
        : vector<2xi64>, vector<2xi32>, vector<2xi1>
    func.return
  }
}
"""


def test_overflow_and_invalid_give_ieee_results_under_any_numpy_settings():
    kernel = next(op for op in parse_module(OVERFLOW).walk() if is_target_kernel(op))
    out = np.zeros(64, np.int32)
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        run_target_kernel(kernel, [out], {})
    values = out.view(np.float32)
    assert (values[0::2] == np.inf).all()
    assert np.isnan(values[1::2]).all()
