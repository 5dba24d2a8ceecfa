"""The PTX executor on the second round of CUDA kernels it was not written against (tests/nvcc_kernels_more.py:
a softmax row, a Welford layernorm, a padded-tile transpose, a radix-sort pass, redux.sync, atomicInc/Dec
wrapping, rounding-mode and integer intrinsics, clock64 and __nanosleep, warp-to-warp message passing,
cuda::atomic_ref orders, half comparisons, a 3-D grid with __launch_bounds__, __maxnreg__; one kernel built with
--use_fast_math and one with -G), against float64 NumPy or exact integers with the race checks on; then
ordering bugs seeded into two of them, each reported naming both sides. `-m slow` runs every kernel again
under the adversarial schedule."""

from __future__ import annotations

import numpy as np
import pytest

import nvcc_kernels_more
from nvcc_kernels import delete_line, ptx
from nvcc_kernels_more import CASES, check, message_case, message_debug_case, radix_case
from test_ptx_nvcc_races import _sides
from tessera.interpreters.ptx import PtxExecutionError, PtxHazardError, launch


@pytest.mark.parametrize("name", sorted(CASES))
def test_nvcc_kernel_against_numpy(name):
    got, want = CASES[name](np.random.default_rng(7))
    check(name, got, want)


SHARED = ("ld.shared.u32", "st.shared.u32")


@pytest.mark.parametrize("case,pattern,occurrence,sides", [
    (message_case, r"^\s*membar\.cta;", 0, SHARED),  # the producer's __threadfence_block before the flag
    (message_case, r"^\s*membar\.cta;", 1, SHARED),  # the consumer's after seeing it
    (message_case, r"^\s*bar\.warp\.sync\s+-1;", 0, SHARED),  # the __syncwarp before lane 0 publishes
    (message_debug_case, r"^\s*membar\.cta;", 0, ("ld.u32", "st.u32")),  # -G: generic addresses of shared
])
def test_message_passing_without_its_fence_or_syncwarp_is_a_race_naming_both_sides(case, pattern, occurrence,
                                                                                     sides):
    name = case.__name__[:-5]
    text, _ = delete_line(ptx(name), pattern, occurrence)
    with pytest.raises(PtxHazardError) as error:
        case(np.random.default_rng(7), text)
    message = str(error.value)
    assert "no synchronisation orders the two" in message
    assert _sides(message, text, name) == sides, message
    assert "(thread (31, 0, 0) of CTA (0, 0, 0))" in message and "(thread (32, 0, 0)" in message  # two warps


def test_radix_pass_without_its_second_syncwarp_is_a_race_and_without_its_first_is_not():
    """Lane 0 writes the digit starts that every lane reads after the second __syncwarp; the first only
    separates lane 0's own counts from its own prefix sum, so deleting it is no race and changes nothing."""
    text, _ = delete_line(ptx("radix"), r"^\s*bar\.warp\.sync\s+-1;", 1)
    with pytest.raises(PtxHazardError) as error:
        radix_case(np.random.default_rng(7), text)
    message = str(error.value)
    assert _sides(message, text, "radix") == ("ld.shared.u32", "st.shared.u32"), message
    assert "thread (0, 0, 0)" in message and "no synchronisation orders the two" in message
    text, _ = delete_line(ptx("radix"), r"^\s*bar\.warp\.sync\s+-1;", 0)
    got, want = radix_case(np.random.default_rng(7), text)  # the same sort, and no report
    check("radix", got, want)


@pytest.mark.parametrize("edit", [("st.release.gpu.b32", "st.relaxed.gpu.b32"),
                                  ("ld.acquire.gpu.b32", "ld.relaxed.gpu.b32")])
def test_atomic_ref_publication_with_a_relaxed_side_is_a_race_naming_both_sides(edit):
    """cuda::atomic_ref's release store and acquire load, either made relaxed: the consumer block's plain read
    of the data is no longer ordered after the producer block's plain write (the adversarial schedule lets the
    consumer see the flag at all; in thread order the producer block runs to its end first)."""
    text = ptx("atomic_ref").replace(*edit)
    n = 50
    args = [np.zeros(64, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(2 * n, np.int32),
            np.int32(n)]
    with pytest.raises(PtxHazardError) as error:
        launch(text, "k_atomic_ref", 2, 64, args, source="atomic_ref.ptx", schedule="adversarial", seed=1)
    message = str(error.value)
    assert _sides(message, text, "atomic_ref") == ("ld.global.u32", "st.global.u32"), message
    assert "of CTA (0, 0, 0))" in message and "of CTA (1, 0, 0))" in message


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_nvcc_kernel_under_the_adversarial_schedule(name, seed, monkeypatch):
    """The same results, and no report, when the ready lanes run in a random order (the atomics' old values
    are compared as multisets already)."""
    original = nvcc_kernels_more.launch

    def adversarial(*args, **kwargs):
        return original(*args, schedule="adversarial", seed=seed, **kwargs)

    monkeypatch.setattr(nvcc_kernels_more, "launch", adversarial)
    monkeypatch.setattr(nvcc_kernels_more, "run", lambda name, grid, block, args, **options: adversarial(
        ptx(name), f"k_{name}", grid, block, args, source=f"{name}.ptx", **options))
    got, want = CASES[name](np.random.default_rng(7))
    check(name, got, want)


def test_grid3d_refuses_a_block_past_its_launch_bounds_and_stops_at_its_failed_assert():
    """__launch_bounds__(64, 4) is `.maxntid 64, 1, 1`: a 128-thread block is refused as the driver refuses it;
    an empty size fails the kernel's assert(), named as such."""
    args = [np.zeros(600, np.int32), np.int32(6), np.int32(4), np.int32(4)]
    with pytest.raises(ValueError, match=r"entry k_grid3d allows at most 64 threads \(.maxntid\), got 128"):
        launch(ptx("grid3d"), "k_grid3d", 1, (8, 4, 4), args, source="grid3d.ptx")
    args[2] = np.int32(0)
    with pytest.raises(PtxExecutionError, match=r"grid3d.ptx:\d+: error: call.uni: the kernel called __assertfail "
                                                r"\(a failed assert\(\)\)"):
        launch(ptx("grid3d"), "k_grid3d", (2, 3, 2), (4, 4, 4), args, source="grid3d.ptx")
