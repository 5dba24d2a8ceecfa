"""The GPU session's probes of Hopper's arithmetic (bench/gpu_probes.py), dry: the same kernels in the PTX
executor. Under the "hopper" wgmma numerics the GEMM kernel's K loop must be the chain the model assumes (every
element equal to `chained_gemm`, and the executor's exact default visibly different), and the executor's
ex2.approx is the correctly rounded 2^x; the recorded arrays are what the GPU run will fill."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import gpu_probes  # noqa: E402 - bench/ is not a package


def test_the_probes_dry_run_matches_the_model(tmp_path):
    summary = gpu_probes.run_probes(tmp_path, "ptx", gpu_probes.DRY_EX2_ROWS)
    assert [w["case"] for w in summary["wgmma"]] == list(gpu_probes.wgmma_cases())
    for case in summary["wgmma"]:
        assert case["equal_to_model"] == case["elements"] and not case["first_differences"], case
        assert case["equal_to_exact"] < case["elements"] - 200, case  # the probe tells the two apart
    assert summary["ex2"]["correctly_rounded"] == summary["ex2"]["inputs"] == gpu_probes.DRY_EX2_ROWS * 64
    saved = np.load(tmp_path / "probes.npz")
    assert saved["crafted_d"].shape == (64, 64) and saved["ex2_d"].dtype == np.uint32
    nan = summary["nan"]
    assert nan["equal"] and set(nan["bits"]) == {f"{b:08x}" for b in gpu_probes.NAN_INPUTS}
    for outputs in nan["bits"].values():  # the f32 arithmetic gives the canonical NaN whatever came in
        assert outputs["add"] == outputs["max"] == ["7fffffff"], outputs


def test_the_nan_probe_has_the_same_bits_in_both_simulators():
    """What the GPU session compares the hardware with: the CTA simulator and the PTX executor agree."""
    assert gpu_probes.nan_bits("target") == gpu_probes.nan_bits("ptx")


def test_the_crafted_inputs_are_bf16_values():
    """Every crafted value is a bf16 (`crafted_wgmma` refuses one that rounds), one NaN among the ex2 inputs."""
    a, b = gpu_probes.crafted_wgmma()
    assert a.shape == (64, 32) and b.shape == (32, 64)
    assert np.isnan(gpu_probes.ex2_inputs(64)).sum() == 1
