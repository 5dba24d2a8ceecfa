"""Hopper's tensor-core block FMA (`tessera.sm90.wgmma_numerics`) against measurements, and the PTX executor's
"hopper" wgmma numerics (`tessera.interpreters.ptx.tensor_core_numerics`); a GEMM's PTX run under them is
the chained model bit for bit in tests/test_gpu_probes.py (the GPU probe's dry run).

The measured vectors are Khattak & Mikaitis's (tests/tensor_core_vectors/README.md); the small worked blocks
below are the feature tests of Fasi, Higham, Mikaitis & Pranesh (2021) and Khattak & Mikaitis (HPEC 2025),
each a block whose result tells one feature (extra alignment bits, truncation, normalisation, block-wide
alignment, subnormals) apart from IEEE arithmetic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tessera.sm90.wgmma_numerics import HOPPER_BLOCK_FMA, block_fma, block_model

VECTORS = Path(__file__).parent / "tensor_core_vectors" / "km25_h100_h200.npz"
TYPES = {"bf16": "bf16", "fp16": "f16", "tf32": "tf32", "E4M3": "e4m3", "E5M2": "e5m2"}


def _f32(bits) -> np.ndarray:
    return np.asarray(bits, np.uint32).view(np.float32).astype(np.float64)


def _measured():
    data = np.load(VECTORS)
    for gpu in ("H100", "H200"):
        for name, atype in TYPES.items():
            for out, dtype in (("fp32", "f32"), ("fp16", "f16")):
                key = f"{gpu}_{name}_d_{out}"
                if key not in data:
                    continue
                a, b = _f32(data[f"{name}_a"]), _f32(data[f"{name}_b"])
                c = _f32(data[f"{gpu}_{name}_c"]) if f"{gpu}_{name}_c" in data else np.zeros(len(a))
                if dtype == "f16":
                    c = c.astype(np.float16).astype(np.float64)
                k = block_model(atype, dtype).block_k
                a, b = (np.pad(x, [(0, 0), (0, k - x.shape[1])]) for x in (a, b))
                yield f"{gpu}-{name}-{out}", a, b, c, atype, dtype, _f32(data[key])


MEASURED = list(_measured())


@pytest.mark.parametrize("case", MEASURED, ids=[m[0] for m in MEASURED])
def test_the_model_reproduces_the_measured_blocks_bit_for_bit(case):
    """Every measured block of an H100 and an H200 (64 rows per input type) is the model's result exactly."""
    _, a, b, c, atype, dtype, measured = case
    got = block_fma(a[:, None, :], b[:, None, :], c[:, None, None], atype, dtype)[:, 0, 0]
    np.testing.assert_array_equal(got, measured)


def test_exact_sums_rounded_once_do_not():
    """The executor's default arithmetic (exact, rounded to nearest once) misses many of the measured f32 blocks:
    the vectors tell the two apart."""
    for name, a, b, c, atype, dtype, measured in MEASURED:
        if dtype == "f32" and atype != "tf32":
            exact = ((a * b).sum(axis=1) + c).astype(np.float32)
            assert np.count_nonzero(exact != measured) >= 10, name


def _one(a, c=0.0, atype="bf16", dtype="f32", b=None):
    """The block of products a_k b_k (b_k = 1 unless given), zero-padded to the block, on accumulator c."""
    k = block_model(atype, dtype).block_k
    x, y = np.zeros((1, 1, k)), np.zeros((1, 1, k))
    x[0, 0, :len(a)] = a
    y[0, 0, :len(a)] = 1.0 if b is None else b
    return float(block_fma(x, y, np.full((1, 1, 1), c), atype, dtype)[0, 0, 0])


def test_two_extra_alignment_bits_and_no_sticky_bit():
    """Terms are cut at 2^(E - 25): four products of 2^-25 on c = 1 reach one f32 ulp, eight of 2^-26 vanish
    (exact arithmetic gives 1 + 2^-23 for both)."""
    assert _one([2.0**-25] * 4, 1.0) == 1.0 + 2.0**-23
    assert _one([2.0**-26] * 8, 1.0) == 1.0


def test_truncation_toward_zero_for_both_signs():
    """1 + 1.5 ulp is rounded down, -1 - 1.5 ulp up (toward zero), where round-to-nearest goes away."""
    assert _one([1.5 * 2.0**-23], 1.0) == 1.0 + 2.0**-23
    assert _one([1.75 * 2.0**-23], 1.0) == 1.0 + 2.0**-23
    assert _one([-1.5 * 2.0**-23], -1.0) == -1.0 - 2.0**-23
    assert _one([0.75 * 2.0**-23], 1.0) == 1.0  # nearest would give 1 + 2^-23


def test_alignment_is_to_the_largest_term_of_the_block():
    """A product 1.5 2^-17 beside 2^8 keeps only what lies above 2^(8 - 25), though the exact sum fits in f32
    once the large term cancels against c; alone it is exact."""
    assert _one([2.0**8, 1.5 * 2.0**-17], -(2.0**8)) == 2.0**-17
    assert _one([1.5 * 2.0**-17], 0.0) == 1.5 * 2.0**-17


def test_the_accumulator_counts_in_the_alignment():
    """c = 2^16 above every product sets E = 16: 1.5 2^-10 is below 2^(16 - 25) and vanishes (aligned at the
    largest product, 2^15, it would leave 2^-10; exact: 2^8 + 1.5 2^-10, an f32)."""
    assert _one([-(2.0**16 - 2.0**8), 1.5 * 2.0**-10], 2.0**16) == 2.0**8


def test_fp8_keeps_fourteen_bits():
    """FP8 blocks align at 2^(E - 13) and cut the result to 14 significant bits (DeepSeek-V3's ~14 bits)."""
    assert _one([2.0**-7], 1.0, "e4m3", b=[2.0**-6]) == 1.0 + 2.0**-13
    assert _one([2.0**-8], 1.0, "e4m3", b=[2.0**-6]) == 1.0
    assert _one([1.0, 1.0, 2.0**-6], 0.0, "e5m2", b=[1.0, 1.0, 2.0**-6]) == 2.0 + 2.0**-12
    assert _one([1.0, 1.0, 2.0**-7], 0.0, "e5m2", b=[1.0, 1.0, 2.0**-6]) == 2.0


def test_subnormals_are_kept():
    """A bf16 subnormal input gives an f32 subnormal; the result's ulp there is 2^-149."""
    assert _one([2.0**-130]) == 2.0**-130
    assert _one([2.0**-70, 2.0**-75], b=[2.0**-70, 2.0**-74]) == 2.0**-140 + 2.0**-149


def test_infinities_and_nans_follow_ieee():
    assert _one([np.inf, 1.0]) == np.inf
    assert np.isnan(_one([np.inf, -np.inf]))
    assert _one([2.0**127, 2.0**127]) == np.inf  # the model's overflow: infinity, also toward zero


def test_unmodelled_combinations_are_refused_by_name():
    with pytest.raises(ValueError, match=r"\.e4m3 products into \.f16"):
        block_model("e4m3", "f16")
    with pytest.raises(ValueError, match="K = 16"):
        block_fma(np.ones((1, 1, 8)), np.ones((1, 1, 8)), None, "bf16", "f32")
    assert set(HOPPER_BLOCK_FMA) >= {("bf16", "f32"), ("f16", "f32")}


def test_product_order_inverts_fragment_order():
    from tessera.interpreters.ptx.wgmma_accumulators import product_order
    from tessera.interpreters.ptx.wgmma import fragment_order

    d = np.arange(2 * 64 * 24, dtype=np.float64).reshape(2, 64, 24)
    np.testing.assert_array_equal(product_order(fragment_order(d), 24), d)


def test_the_numerics_name_is_checked():
    from tessera.interpreters.ptx.tensor_core_numerics import wgmma_numerics

    with pytest.raises(ValueError, match="exact, hopper"):
        with wgmma_numerics("ieee"):
            pass


@pytest.mark.parametrize("atype,btype,registers_a", [("tf32", "tf32", True), ("e4m3", "e5m2", False),
                                                     ("e5m2", "e4m3", True)])
def test_the_executor_applies_the_model_to_every_float_wgmma_form(atype, btype, registers_a):
    """tf32 (its low 13 bits ignored), mixed FP8, A from registers, imm-scale-b = -1 and an accumulator of 0.5
    entering the block: under "hopper" the executor's D is `block_fma` of the same values."""
    from test_ptx_exec import random_multiplicand, run_wgmma

    from tessera.interpreters.ptx.tensor_core_numerics import wgmma_numerics

    rng = np.random.default_rng(1)
    k = 8 if atype == "tf32" else 32
    a, b = random_multiplicand(atype, (64, k), rng), random_multiplicand(btype, (8, k), rng)
    with wgmma_numerics("hopper"):
        d = run_wgmma(f"wgmma.mma_async.sync.aligned.m64n8k{k}.f32.{atype}.{btype} {{d}}, {{a}}, {{b}}, 1, 1, -1",
                      a, b, init=np.float32(0.5).view(np.uint32), registers_a=registers_a)

    def value(x):
        if x.dtype == np.float32:
            return (x.view(np.uint32) & 0xFFFFE000).view(np.float32).astype(np.float64)
        return x.astype(np.float64)

    expected = block_fma(value(a), -value(b), np.full((64, 8), 0.5), atype, "f32", btype)
    np.testing.assert_array_equal(d.view(np.float32), expected.astype(np.float32))


def test_the_executor_refuses_an_unmodelled_wgmma_by_name():
    """FP8 into an .f16 accumulator under "hopper": the run stops with the instruction's diagnostic."""
    from tessera.interpreters.ptx.tensor_core_numerics import modelled_product

    class Machine:
        def error(self, inst, message, lane):
            return RuntimeError(f"{inst}: {message} (thread {lane})")

    with pytest.raises(RuntimeError, match=r"wgmma: TESSERA_PTX_WGMMA_NUMERICS=hopper: no Hopper tensor-core model "
                                           r"for \.e4m3 products into \.f16 .*\(thread 0\)"):
        modelled_product(Machine(), "wgmma", np.zeros((1, 64, 32)), np.zeros((1, 8, 32)), np.array([False]),
                         np.arange(128), None, [], 8, "e4m3", "e4m3", "f16")
