"""The PTX executor on whole CUDA kernels it was not written against (tests/nvcc_kernels.py: kernels of
tests/ptx_nvcc/ as a user or a library writes them, compiled by nvcc 13.5), against float64 NumPy with the race
checks on, so each passing kernel is also one the race detector finds nothing in; what the executor does not
run is refused by name. `-m slow` runs every kernel again under the adversarial schedule."""

from __future__ import annotations

import numpy as np
import pytest

import nvcc_kernels
from nvcc_kernels import CASES, check, mma_bf16_case, ptx, run
from tessera.interpreters.ptx import PtxExecutionError, launch
from tessera.interpreters.ptx.syntax import PtxSyntaxError
from tessera.sm90 import approx
from text_edits import checked, planted


@pytest.mark.parametrize("name", sorted(CASES))
def test_nvcc_kernel_against_numpy(name):
    got, want = CASES[name](np.random.default_rng(7))
    check(name, got, want)


def test_sinf_of_large_arguments_takes_the_payne_hanek_path_within_its_bound():
    """sinf reduces |x| > 105615 by 2/pi in 192 bits from a table in global memory, through a local array and
    mad.wide chains: within the guide's 2 ulp (NumPy's float64 sin reduces exactly too)."""
    a = np.array([105615.0, 123456.7, -7.5e5, -3e7, 1e10, 2.0**60, 1e30, 3.4e38], np.float32)
    n = len(a)
    out = run("mathlib", 1, n, [a, np.ones(n, np.float32), np.zeros(12 * n, np.float32), np.zeros(2 * n),
                                np.int32(n)])[2].reshape(n, 12)[:, 2]
    exact = np.sin(a.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert (np.abs(out - exact) <= approx.STANDARD_FUNCTION_ULPS["sinf"] * ulp).all()


@pytest.mark.parametrize("edit,message", [
    (("m16n16k16.global.f16", "m32n8k16.global.f16"), r"wmma .m32n8k16 \(supported: .m16n16k16\)"),
    (("m16n16k16.f32.f32", "m16n16k16.s32.s32"), r"wmma.mma .s32.s32 \(supported:"),
    ((", %r14;\n\twmma.load.b", ";\n\twmma.load.b"), r"wmma.load without its stride operand")])
def test_wmma_beyond_the_supported_forms_is_refused_by_name(edit, message):
    text = str(checked(ptx("wmma")).replace(*edit, 1))
    args = [np.zeros((16, 16), np.float16)] * 2 + [np.zeros((16, 16), np.float32)] + [np.int32(16)] * 3
    with pytest.raises(PtxExecutionError, match=r"wmma.ptx:\d+: error: .*not supported by the PTX executor: "
                       + message):
        launch(text, "k_wmma", 1, 32, args, source="wmma.ptx")


def test_textures_function_pointers_and_failed_asserts_are_refused_by_name():
    with pytest.raises(PtxExecutionError, match=r"tex.ptx:\d+: error: .*unknown instruction 'tex'"):
        launch(ptx("tex"), "k_tex", 1, 32, [np.uint64(0), np.zeros(32, np.float32), np.int32(32)], source="tex.ptx")
    good = [np.arange(32, dtype=np.int32), np.zeros(32, np.int32), np.int32(32)]
    np.testing.assert_array_equal(launch(ptx("tex"), "k_assert", 1, 32, good)[1], np.arange(1, 33))
    bad = [np.arange(32, dtype=np.int32) - 1, np.zeros(32, np.int32), np.int32(32)]
    with pytest.raises(PtxExecutionError, match=r"call.uni: the kernel called __assertfail \(a failed assert\(\)\)"):
        launch(ptx("tex"), "k_assert", 1, 32, bad)
    args = [np.zeros(32, np.float32), np.zeros(32, np.int32), np.zeros(32, np.float32), np.int32(32)]
    with pytest.raises(PtxSyntaxError, match=r"the address of '_Z5twicef' as an initial value \(a table of "
                                             r"function or variable pointers\) is not supported"):
        launch(ptx("func_ptr"), "k_func_ptr", 1, 32, args)
    without_table = planted(ptx("func_ptr"), "{_Z5twicef, _Z6squaref, _Z6negatef}", "{0, 0, 0}")
    with pytest.raises(PtxSyntaxError, match=r"'.callprototype': indirect calls through a function pointer"):
        launch(without_table, "k_func_ptr", 1, 32, args)


def test_printf_is_refused_by_name_and_trap_stops_the_run():
    good = [np.arange(64, dtype=np.int32), np.zeros(64, np.int32), np.int32(64)]
    np.testing.assert_array_equal(run("trap", 1, 64, good)[1], np.arange(64) * 2)  # nobody prints
    bad = [np.arange(64, dtype=np.int32) - 3, np.zeros(64, np.int32), np.int32(64)]
    with pytest.raises(PtxExecutionError, match=r"trap.ptx:\d+: error: call.uni: the kernel called vprintf \(printf\)"):
        run("trap", 1, 64, bad)
    with pytest.raises(PtxExecutionError, match=r"trap.ptx:\d+: error: trap: the kernel executed a trap"):
        launch(ptx("trap"), "k_trap_quiet", 1, 64, bad, source="trap.ptx")


# --- seeded ordering bugs: reported with both sides named --------------------------------------------------


def test_mma_bf16_for_sm_80():
    """nvcc -arch=sm_80 writes this kernel's PTX as for sm_90a but for the .target line (checked with nvcc 13.5):
    the Ampere GEMM runs the same on an sm_80 target."""
    text = planted(ptx("mma_bf16"), ".target sm_90a", ".target sm_80")
    got, want = mma_bf16_case(np.random.default_rng(3), text)
    check("mma_bf16", got, want)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_nvcc_kernel_under_the_adversarial_schedule(name, seed, monkeypatch):
    """The same results, and no report, when the ready lanes run in a random order."""
    original = nvcc_kernels.launch

    def adversarial(*args, **kwargs):
        return original(*args, schedule="adversarial", seed=seed, **kwargs)

    monkeypatch.setattr(nvcc_kernels, "launch", adversarial)
    got, want = CASES[name](np.random.default_rng(7))
    if name == "atomics":  # the atomics' order follows the schedule: sums within rounding, the rest exact
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        np.testing.assert_allclose(got[1].astype(np.float64), want[1].astype(np.float64), atol=0.25)
        np.testing.assert_allclose(got[2].astype(np.float64), want[2].astype(np.float64), atol=0.25)
        np.testing.assert_array_equal(got[3], want[3])
        np.testing.assert_array_equal(got[4], want[4])
        return
    check(name, got, want)
