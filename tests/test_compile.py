"""Every configuration of the foundation matrix compiles, through register allocation and the PTX printer,
to PTX that ptxas accepts with no warning, no spill and no stack frame; its SASS uses HGMMA and UTMALDG and
never local memory (LDL/STL). The test command installs ptxas and nvdisasm (tessera-compiler[ptx]): without them
these tests fail, never skip (conftest.require_tool).

Every ptxas the suite finds checks the kernels (`toolchain.find_all_ptxas`: PATH, CUDA_HOME and the wheels;
`pip install -e '.[test,ptx]'` brings a CUDA 12 one and the newest CUDA 13 one): the newest checks the whole
matrix under both pipelines, each older one a representative slice of the full pipeline (`SLICE`), and
`pytest --all-ptxas tests/test_compile.py` checks the whole matrix with every one of them. ptxas versions
differ in what they spill: 13.3 to 13.5 spilled kernels that 12.x and 13.0 assembled cleanly (see
`tessera.regalloc`'s register spaces and `print_ld_global`)."""

from __future__ import annotations

import functools
import re

import pytest

import tessera
import tessera.kernel_abi
import tessera.regalloc
from tessera.toolchain import compile_ptx, find_all_ptxas
from tessera.sass import sass_opcode_counts

from tessera.passes import PTX_PIPELINE, SPECIALIZED_PIPELINE

from conftest import build_kernel

pytestmark = pytest.mark.usefixtures("ptxas", "nvdisasm")

CONFIGS = [("flash_attention", dict(head_dim=d, causal=c, dtype=t)) for d in (64, 128) for c in (False, True)
           for t in ("bf16", "f16")] + [
    (v, dict(head_dim=d, causal=c)) for v in ("two_pass_attention", "three_pass_attention") for d in (64, 128)
    for c in (False, True)] + [
    ("flash_attention", dict(head_dim=256, causal=False, dtype="bf16")),
    ("flash_attention", dict(head_dim=256, causal=True, dtype="f16")),
    ("two_pass_attention", dict(head_dim=256, causal=True)), ("three_pass_attention", dict(head_dim=256, causal=False)),
] + [("flash_attention", dict(head_dim=d, causal=c, dtype=t))  # FlashAttention-3's other head dims
     for d, c, t in ((96, False, "bf16"), (96, True, "f16"), (192, False, "f16"), (192, True, "bf16"))] + [("gemm", dict(dtype="bf16")), ("gemm", dict(dtype="f16"))] + [
    ("flash_attention", dict(head_dim=d, causal=c, dtype=t, bias=True, return_lse=lse))
    for d, c, t, lse in ((64, False, "bf16", False), (64, True, "f16", True), (128, False, "f16", False),
                         (128, True, "bf16", True))]

SLICE = [
    ("flash_attention", dict(head_dim=128, causal=False, dtype="bf16")),  # the README's kernel
    ("flash_attention", dict(head_dim=64, causal=True, dtype="f16")),
    ("flash_attention", dict(head_dim=256, causal=True, dtype="f16")),
    ("flash_attention", dict(head_dim=96, causal=True, dtype="f16")),
    ("flash_attention", dict(head_dim=192, causal=True, dtype="bf16")),
    ("three_pass_attention", dict(head_dim=64, causal=True)),
    ("two_pass_attention", dict(head_dim=128, causal=False)),
    ("gemm", dict(dtype="bf16")),
    ("flash_attention", dict(head_dim=128, causal=True, dtype="bf16", bias=True, return_lse=True)),
]
"""What each ptxas but the newest checks by default: one kernel of each builder, every head_dim, both
dtypes, causal or not, under the full pipeline (where the ptxas versions have differed)."""

FULL = SPECIALIZED_PIPELINE + ",allocate-registers"
"""The full pipeline (two-stage rings, overlap-softmax, peeling, warp specialization)."""

PIPELINES = [pytest.param(PTX_PIPELINE, id="single-stage"), pytest.param(FULL, id="full")]

ALL_PTXAS = find_all_ptxas()
"""Every ptxas found, newest first."""


def _id(variant: str, config: dict) -> str:
    return f"{variant}-{'-'.join(map(str, config.values()))}"


@functools.lru_cache(maxsize=None)
def _ptx(variant: str, config: tuple, pipeline: str) -> str:
    """The kernel's PTX, printed once per worker for every ptxas that checks it."""
    return tessera.compile(build_kernel(variant, **dict(config)), target="ptx", pipeline=pipeline)


def _assert_clean(variant: str, config: dict, pipeline: str, ptxas: str) -> None:
    """No ptxas warning and no informational diagnostic either (C7513 "wgmma serialized", C7512, setmaxnreg
    ignored), no spill, no stack frame; SASS holds HGMMA and UTMALDG and no local memory access."""
    result = compile_ptx(_ptx(variant, tuple(config.items()), pipeline), ptxas=ptxas, source_name=_id(variant, config))
    entry = result.entry()
    assert not result.warnings, [f"{result.ptxas}: {w}" for w in result.warnings]
    assert not result.log.diagnostics, [f"{result.ptxas}: {d}" for d in result.log.diagnostics]
    assert entry.spill_store_bytes == entry.spill_load_bytes == entry.stack_frame_bytes == 0, (
        f"{result.ptxas}: {entry.stack_frame_bytes} bytes stack frame, {entry.spill_store_bytes} bytes spill stores")
    assert entry.registers <= 255
    sass = sass_opcode_counts(result.cubin)
    assert sass["HGMMA"] > 0 and sass["UTMALDG"] > 0
    assert sass["LDL"] == sass["STL"] == 0


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("variant,config", CONFIGS, ids=[_id(v, c) for v, c in CONFIGS])
def test_ptxas_accepts_without_warning_spill_or_stack(variant, config, pipeline):
    """The whole matrix under the newest ptxas found (the wheel's CUDA 13 one where the `ptx` extra is
    installed): what a user with a current toolkit gets."""
    _assert_clean(variant, config, pipeline, ALL_PTXAS[0].path)


def _older_ptxas_cases(all_ptxas: bool) -> list:
    configs = CONFIGS if all_ptxas else SLICE
    pipelines = [PTX_PIPELINE, FULL] if all_ptxas else [FULL]
    return [pytest.param(version.path, variant, config, pipeline,
                         id=f"ptxas-{'.'.join(map(str, version.version))}-{_id(variant, config)}"
                            f"-{'full' if pipeline == FULL else 'single-stage'}")
            for version in ALL_PTXAS[1:] for variant, config in configs for pipeline in pipelines]


def pytest_generate_tests(metafunc):
    if metafunc.function.__name__ == "test_every_ptxas_accepts_without_warning_spill_or_stack":
        cases = _older_ptxas_cases(metafunc.config.getoption("--all-ptxas"))
        metafunc.parametrize("ptxas,variant,config,pipeline",
                             cases or [pytest.param(None, None, None, None, id="no-other-ptxas")])


def test_every_ptxas_accepts_without_warning_spill_or_stack(ptxas, variant, config, pipeline):
    """Each older ptxas found (the test extra's CUDA 12 one, a system CUDA's) on the slice, or with
    --all-ptxas on the whole matrix: kernels that assemble cleanly under one ptxas and spill under another
    are what users with another toolkit get."""
    if ptxas is None:
        pytest.skip("only one ptxas found")
    _assert_clean(variant, config, pipeline, ptxas)


def test_the_suite_finds_a_cuda_12_and_a_cuda_13_ptxas():
    """`pip install -e '.[test,ptx]'` installs both (nvidia-cuda-nvcc-cu12, nvidia-cuda-nvcc): a missing one
    fails here rather than silently narrowing the checks above."""
    majors = {version.version[0] for version in ALL_PTXAS if version.version}
    found = ", ".join(f"{v} ({v.path})" for v in ALL_PTXAS)
    assert 12 in majors, f"no CUDA 12 ptxas found (pip install nvidia-cuda-nvcc-cu12, in tessera-compiler[test]); found: {found}"
    assert 13 in majors, f"no CUDA 13 ptxas found (pip install nvidia-cuda-nvcc, in tessera-compiler[ptx]); found: {found}"


def test_flash_attention_head_dim_128_profile():
    """The single-stage kernel (`PTX_PIPELINE`; the warp-specialized default sizes its roles with setmaxnreg,
    so its launch registers are not the allocator's peak): ptxas fits it without spilling in the allocator's peak
    plus a margin (`.maxnreg`; uncapped, ptxas takes 213 registers a thread where it may), the wgmma count of the
    128 x 176 tile (the default key block at head_dim 128): 8 k-steps of Q K^T and 11 of P V per K/V tile, and
    88 + 2 ex2 per thread per tile (P and the two rescale factors). The margin is not a value the allocator
    misses: its peak (178: P's 88, O's 64, the row sums' partials, the row state and indices) matches what
    ptxas's own SASS keeps live at its peak (179 registers by a liveness count over nvdisasm's listing, uncapped),
    but ptxas needs about 192-200 registers to place them (16 spilled bytes at .maxnreg 191, none at 200, ptxas
    13.0): S's and O's accumulators each take consecutive registers and the P V product's A fragments aligned
    quads. The warp-specialized kernels, whose budgets the count decides, are within a step of ptxas
    (tests/test_regalloc_accuracy.py)."""
    module = build_kernel("flash_attention", head_dim=128, causal=False, dtype="bf16")
    result = tessera.compile(module, target="cubin", pipeline=PTX_PIPELINE)
    peak = tessera.regalloc.allocate_registers(next(op for op in tessera.compile(module, "target", PTX_PIPELINE).walk()
                                                    if tessera.kernel_abi.is_target_kernel(op))).peak
    ptx = tessera.compile(module, target="ptx", pipeline=PTX_PIPELINE)
    capped = tessera.toolchain.compile_ptx(re.sub(r"\.minnctapersm \d+", f".maxnreg {peak + 24}", ptx)).entry()
    assert capped.registers <= peak + 24 and capped.spill_store_bytes == 0 and capped.stack_frame_bytes == 0
    assert result.entry().registers >= peak - 8  # the allocator does not over-count either
    sass = sass_opcode_counts(result.cubin)
    assert sass["HGMMA"] == 128 // 16 + 176 // 16
    assert sass["MUFU.EX2"] == 176 // 2 + 2


def test_window_accesses_carry_their_columns_as_address_immediates():
    """A thread's registers of a [BM, BN] window of a global tensor differ in row (2 values) and column (32):
    each load and store puts its column in the address immediate (`[%rd+imm]`, `sm90.COLUMN_BYTES`). The
    register offsets of the second pass of three-pass attention, live from its load of S to its store of E,
    are then 2 addresses instead of 64 distinct offsets, which spilled under ptxas 13.3 (4-12 bytes)."""
    ptx = tessera.compile(build_kernel("three_pass_attention", head_dim=64, causal=True))
    accesses = re.findall(r"(?:ld|st)\.global\.b32 [^\n]*\[%rd\d+(?:\+(\d+))?\]", ptx)
    immediates = {int(i) for i in accesses if i}
    assert {4 * c for c in range(1, 128) if c % 8 < 2} <= immediates  # the columns of a score tile (BN = 128)
    assert sum(1 for i in accesses if i) > 0.9 * len(accesses)  # all but the registers of column 0


def test_compile_is_deterministic():
    module = build_kernel("flash_attention", head_dim=64, causal=True, dtype="bf16")
    assert tessera.compile(module) == tessera.compile(module)


def test_unknown_target_is_refused():
    with pytest.raises(ValueError, match="unknown compile target 'sass'"):
        tessera.compile(build_kernel("gemm", dtype="bf16"), target="sass")
