"""`assign-swizzle` changes layout only: every kernel computes the same outputs after it, and the pipeline
refuses nothing the builders produce."""

import numpy as np
import pytest

import tessera
from tessera.dialects import tile
from tessera.passes import apply_pipeline

from conftest import build_kernel


@pytest.mark.parametrize("variant,config", [
    ("flash_attention", dict(head_dim=64, causal=True, dtype="f16")),
    ("two_pass_attention", dict(head_dim=128)),
    ("gemm", dict(dtype="bf16")),
])
def test_outputs_unchanged(variant, config, rng):
    module = build_kernel(variant, **config)
    swizzled = module.clone()
    apply_pipeline(swizzled, "assign-swizzle")
    allocs = [op for op in swizzled.walk() if isinstance(op, tile.AllocSharedOp)]
    assert allocs and all(op.alignment is not None for op in allocs)
    if variant == "gemm":
        inputs = (rng.standard_normal((70, 90)), rng.standard_normal((90, 50)))
    else:
        d = config["head_dim"]
        inputs = tuple(rng.standard_normal((1, 2, n, d)) for n in (70, 130, 130))
    np.testing.assert_array_equal(tessera.interpret(module, *inputs), tessera.interpret(swizzled, *inputs))
