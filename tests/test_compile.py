"""Every configuration of the foundation matrix compiles, through register allocation and the PTX printer,
to PTX that ptxas accepts with no warning, no spill and no stack frame; its SASS uses HGMMA and UTMALDG and
never local memory (LDL/STL). One known exception, marked as a strict expected failure: three-pass causal
attention under the full pipeline spills 8 bytes. The test command installs ptxas and nvdisasm (tessera-compiler[ptx]):
without them these tests fail, never skip."""

from __future__ import annotations

import pytest

import tessera
import tessera.kernel_abi
import tessera.regalloc
from tessera.toolchain import sass_opcode_counts

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
] + [("gemm", dict(dtype="bf16")), ("gemm", dict(dtype="f16"))]


FULL = SPECIALIZED_PIPELINE + ",allocate-registers"
"""The full pipeline (two-stage rings, overlap-softmax, peeling, warp specialization)."""

PIPELINES = [pytest.param(PTX_PIPELINE, id="single-stage"), pytest.param(FULL, id="full")]

class Spill(AssertionError):
    """ptxas spilled registers to local memory or gave the kernel a stack frame."""


KNOWN_SPILL = pytest.mark.xfail(
    strict=True, raises=Spill,
    reason="three-pass causal attention under the full pipeline: ptxas spills 8 bytes in the consumer "
           "warpgroups within their 240 registers (the allocator's peak is 222; without peel-masked-iterations, "
           "or with 248 registers, nothing spills). Strict: the day it stops spilling, this reports XPASS.")


def _cases():
    """(variant, config, pipeline, spill_limit): the known spill may grow to 8 bytes and no more."""
    for variant, config in CONFIGS:
        for pipeline in PIPELINES:
            name = f"{variant}-{'-'.join(map(str, config.values()))}-{pipeline.id}"
            spills = pipeline.values[0] == FULL and variant == "three_pass_attention" and config["causal"]
            yield pytest.param(variant, config, pipeline.values[0], 8 if spills else 0, id=name,
                               marks=[KNOWN_SPILL] if spills else [])


@pytest.mark.parametrize("variant,config,pipeline,spill_limit", list(_cases()))
def test_ptxas_accepts_without_warning_spill_or_stack(variant, config, pipeline, spill_limit):
    """No ptxas warning and no informational diagnostic either (C7513 "wgmma serialized", C7512 spills,
    setmaxnreg ignored), SASS with HGMMA and UTMALDG; then no spill, no stack frame and no local memory access
    (a known spill fails here, as Spill, within its `spill_limit`)."""
    result = tessera.compile(build_kernel(variant, **config), target="cubin", pipeline=pipeline)
    entry = result.entry()
    assert not result.warnings, [str(w) for w in result.warnings]
    assert not result.log.diagnostics, [str(d) for d in result.log.diagnostics]
    assert entry.registers <= 255
    sass = sass_opcode_counts(result.cubin)
    assert sass["HGMMA"] > 0 and sass["UTMALDG"] > 0
    assert entry.spill_store_bytes <= spill_limit and entry.spill_load_bytes <= spill_limit
    if entry.spill_store_bytes or entry.spill_load_bytes or entry.stack_frame_bytes or sass["LDL"] or sass["STL"]:
        raise Spill(f"spill stores {entry.spill_store_bytes} bytes, loads {entry.spill_load_bytes} bytes, stack "
                    f"frame {entry.stack_frame_bytes} bytes, {sass['LDL']} LDL and {sass['STL']} STL in the SASS")


def test_flash_attention_head_dim_128_profile():
    """The main kernel: registers close to the allocator's peak, the wgmma count of two 128x128 products
    over two warpgroups per K/V tile, and 64 + 2 ex2 per thread per tile (P and the two rescale factors)."""
    module = build_kernel("flash_attention", head_dim=128, causal=False, dtype="bf16")
    result = tessera.compile(module, target="cubin")
    peak = tessera.regalloc.allocate_registers(
        next(op for op in tessera.compile(module, target="target").walk() if tessera.kernel_abi.is_target_kernel(op))).peak
    assert abs(result.entry().registers - peak) <= 8
    sass = sass_opcode_counts(result.cubin)
    assert sass["HGMMA"] == 16
    assert sass["MUFU.EX2"] == 66


def test_compile_is_deterministic():
    module = build_kernel("flash_attention", head_dim=64, causal=True, dtype="bf16")
    assert tessera.compile(module) == tessera.compile(module)


def test_unknown_target_is_refused():
    with pytest.raises(ValueError, match="unknown compile target 'sass'"):
        tessera.compile(build_kernel("gemm", dtype="bf16"), target="sass")
