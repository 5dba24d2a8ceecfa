"""tessera.toolchain: finding ptxas/nvdisasm, `ptxas -v` as data, ptxas errors as PtxasError, SASS counts.

The kernels are hand-written sm_90a PTX in tests/ptx_samples/; lines the tests look for are marked there
with a comment. The test command installs ptxas and nvdisasm (tessera-compiler[ptx]): without them these tests fail."""

from __future__ import annotations

import functools
import os
import re
import stat
from pathlib import Path

import pytest

from tessera import toolchain
from tessera.sass import disassemble, opcode_counts
from tessera.toolchain import PtxasError, ToolchainError, compile_ptx, find_nvdisasm, find_ptxas, parse_ptxas_log
from tessera.sass import innermost_loop, loop_trip, parse_sass, sass_loops, sass_opcode_counts, trip_loops

SAMPLES = Path(__file__).parent / "ptx_samples"
# The test command installs both tools (tessera-compiler[ptx]): without one these tests fail, never skip (conftest).
needs_ptxas = pytest.mark.usefixtures("ptxas")
needs_nvdisasm = pytest.mark.usefixtures("nvdisasm")


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def marked_lines(text: str, marker: str) -> list[int]:
    """1-based numbers of the lines of code whose trailing comment starts with `marker`."""
    return [
        n
        for n, line in enumerate(text.splitlines(), 1)
        if "//" in line and line.split("//", 1)[0].strip() and line.split("//", 1)[1].strip().startswith(marker)
    ]


@functools.lru_cache(maxsize=None)
def compiled(name: str) -> toolchain.PtxasResult:
    return compile_ptx(sample(name), source_name=name)


@functools.lru_cache(maxsize=None)
def sass(name: str) -> str:
    return disassemble(compiled(name).cubin)


# region Finding the tools


def _fake_tool(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / name
    tool.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


@pytest.fixture
def no_cuda(monkeypatch, tmp_path):
    """No CUDA tool on PATH or under $CUDA_HOME/$CUDA_PATH."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for variable in toolchain.CUDA_ROOT_VARIABLES:
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def no_wheels(monkeypatch):
    """No `nvidia` wheel installed."""
    monkeypatch.setattr(toolchain, "_nvidia_package_locations", lambda: [])


def test_tools_are_looked_up_on_path_then_cuda_home_then_the_wheels(no_cuda, no_wheels, monkeypatch, tmp_path):
    assert find_ptxas() is None and find_nvdisasm() is None
    wheel = _fake_tool(tmp_path / "site" / "nvidia" / "cu13" / "bin", "ptxas")
    monkeypatch.setattr(toolchain, "_nvidia_package_locations", lambda: [str(tmp_path / "site" / "nvidia")])
    assert find_ptxas() == str(wheel)
    cuda_home = _fake_tool(tmp_path / "cuda" / "bin", "ptxas")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert find_ptxas() == str(cuda_home)
    on_path = _fake_tool(tmp_path / "path", "ptxas")
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert find_ptxas() == str(on_path)
    assert toolchain.tool_version(str(on_path)).version == (13, 0, 88)


def test_the_cuda_12_nvcc_wheel_layout_is_found(no_cuda, no_wheels, monkeypatch, tmp_path):
    wheel = _fake_tool(tmp_path / "nvidia" / "cuda_nvcc" / "bin", "ptxas")
    monkeypatch.setattr(toolchain, "_nvidia_package_locations", lambda: [str(tmp_path / "nvidia")])
    assert find_ptxas() == str(wheel)


def _fake_ptxas(folder: Path, version: str) -> Path:
    tool = _fake_tool(folder, "ptxas")
    tool.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {version.rsplit('.', 1)[0]}, V{version}'\n")
    return tool


def test_every_ptxas_is_enumerated_once_per_version_newest_first(no_cuda, no_wheels, monkeypatch, tmp_path):
    """PATH (every entry), CUDA_HOME and both wheel layouts side by side; a link to a listed file and a
    second copy of a version already found are left out."""
    system = _fake_ptxas(tmp_path / "usr" / "bin", "13.0.88")
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "ptxas").symlink_to(system)
    old = _fake_ptxas(tmp_path / "old" / "bin", "12.4.131")
    monkeypatch.setenv("PATH", os.pathsep.join(str(tmp_path / d) for d in ("link", "usr/bin", "empty", "old/bin")))
    _fake_ptxas(tmp_path / "cuda" / "bin", "13.0.88")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    cu13 = _fake_ptxas(tmp_path / "site" / "nvidia" / "cu13" / "bin", "13.5.37")
    cu12 = _fake_ptxas(tmp_path / "site" / "nvidia" / "cuda_nvcc" / "bin", "12.9.86")
    monkeypatch.setattr(toolchain, "_nvidia_package_locations", lambda: [str(tmp_path / "site" / "nvidia")])
    assert toolchain.find_tools("ptxas") == [str(tmp_path / "link" / "ptxas"), str(old), str(tmp_path / "cuda" / "bin" / "ptxas"),
                                             str(cu13), str(cu12)]
    found = toolchain.find_all_ptxas()
    assert [v.version for v in found] == [(13, 5, 37), (13, 0, 88), (12, 9, 86), (12, 4, 131)]
    assert [v.path for v in found] == [str(cu13), str(tmp_path / "link" / "ptxas"), str(cu12), str(old)]


def test_wheels_are_found_through_the_nvidia_namespace_package(no_cuda, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(tmp_path))  # a site-packages folder holding a fake wheel
    tool = _fake_tool(tmp_path / "nvidia" / "cu13" / "bin", "nvdisasm")
    assert find_nvdisasm() == str(tool)


def test_a_missing_ptxas_is_a_toolchain_error_that_says_how_to_install_it(no_cuda, no_wheels):
    with pytest.raises(ToolchainError, match=r"ptxas not found.*install it with `pip install nvidia-cuda-nvcc`, or from a "
                                             r"Tessera checkout `pip install '\.\[ptx\]'`$"):
        compile_ptx(sample("gemm_tile_sanity.ptx"))


def test_a_ptxas_that_does_not_run_is_named_not_said_to_reject_the_ptx(no_cuda, no_wheels, monkeypatch, tmp_path):
    """A wrapper left on PATH after its CUDA toolkit was removed (unseen round 23: `exec /usr/local/cuda/bin/ptxas`).
    Regression: "ptxas (unknown version) rejected <ptx> (exit status 127)", as if the PTX were at fault."""
    stale = _fake_tool(tmp_path / "bin", "ptxas")
    stale.write_text('#!/bin/sh\nexec /nonexistent/cuda/bin/ptxas "$@"\n')
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    toolchain.tool_version.cache_clear()
    with pytest.raises(ToolchainError, match=rf"^{re.escape(str(stale))} is not a working ptxas: `ptxas --version` "
                                             r"printed '.*/nonexistent/cuda/bin/ptxas.*', no version; remove or fix it"):
        compile_ptx(sample("gemm_tile_sanity.ptx"))


def test_a_missing_nvdisasm_is_a_toolchain_error_that_says_how_to_install_it(no_cuda, no_wheels):
    with pytest.raises(ToolchainError, match=r"nvdisasm not found.*install it with `pip install nvidia-cuda-nvdisasm`, "
                                             r"or from a Tessera checkout `pip install '\.\[ptx\]'`$"):
        disassemble(b"not a cubin")


# endregion

# region ptxas -v


def test_resources_of_the_sanity_kernel():
    log = parse_ptxas_log(
        """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm_tile_sanity' for 'sm_90a'
ptxas info    : Function properties for gemm_tile_sanity
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 58 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compile time = 61.051 ms
"""
    )
    kernel = log.functions["gemm_tile_sanity"]
    assert (kernel.is_entry, kernel.arch, kernel.registers, kernel.barriers, kernel.smem_bytes) == (
        True, "sm_90a", 58, 1, 1024
    )
    assert (kernel.stack_frame_bytes, kernel.spill_store_bytes, kernel.spill_load_bytes) == (0, 0, 0)
    assert kernel.compile_time_ms == pytest.approx(61.051) and not kernel.spills and log.diagnostics == ()


def test_constant_banks_and_device_functions_of_older_ptxas():
    log = parse_ptxas_log(
        """ptxas info    : 64 bytes gmem, 8 bytes cmem[4]
ptxas info    : Function properties for twice
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Compiling entry function 'k' for 'sm_90a'
ptxas info    : Function properties for k
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, 8 bytes cumulative stack size, 360 bytes cmem[0], 8 bytes cmem[2]
"""
    )
    twice, k = log.functions["twice"], log.functions["k"]
    assert log.gmem_bytes == 64 and log.diagnostics == ()
    assert not twice.is_entry and twice.spills and twice.registers is None
    assert (k.registers, k.barriers, k.cumulative_stack_bytes, k.cmem_bytes) == (24, 0, 8, {0: 360, 2: 8})


def test_lines_ptxas_does_not_usually_write_are_kept_as_errors():
    (diagnostic,) = parse_ptxas_log("Segmentation fault (core dumped)\n").diagnostics
    assert diagnostic.is_error and diagnostic.message == "Segmentation fault (core dumped)"


@needs_ptxas
def test_sanity_kernel_through_ptxas():
    result = compiled("gemm_tile_sanity.ptx")
    kernel = result.entry()
    assert result.entries == {"gemm_tile_sanity": kernel} and result.arch == kernel.arch == "sm_90a"
    assert kernel.registers >= 32  # the m64n64 f32 accumulator alone is 32 registers a thread
    assert (kernel.barriers, kernel.smem_bytes) == (1, 1024)  # `.align 1024` extern smem pads static smem
    assert not kernel.spills and kernel.stack_frame_bytes == 0
    assert result.warnings == () and result.cubin.startswith(b"\x7fELF") and result.cubin_path is None
    assert result.ptxas.version >= (12, 0) and result.command[1:3] == ("-arch=sm_90a", "-v")


@needs_ptxas
def test_cluster_header_kernel_has_no_shared_memory_or_barriers():
    kernel = compiled("cluster_header.ptx").entry("fa_fwd")
    assert (kernel.barriers, kernel.smem_bytes, kernel.spills) == (0, 0, False)


@needs_ptxas
def test_spills_are_reported():
    kernel = compiled("forced_spill.ptx").entry()
    assert kernel.registers <= 32
    assert kernel.spill_store_bytes > 0 and kernel.spill_load_bytes > 0
    assert kernel.stack_frame_bytes >= kernel.spill_store_bytes and kernel.cumulative_stack_bytes > 0


@needs_ptxas
def test_a_warning_comes_back_with_its_line():
    text = sample("minnctapersm_ignored.ptx")
    result = compiled("minnctapersm_ignored.ptx")
    (warning,) = result.warnings
    assert (warning.severity, warning.file) == ("warning", "minnctapersm_ignored.ptx")
    assert [warning.line] == marked_lines(text, "warning")
    assert ".minnctapersm is ignored" in warning.message
    assert str(warning).startswith(f"minnctapersm_ignored.ptx:{warning.line}: warning: ")


@needs_ptxas
def test_coded_advisories_count_as_warnings():
    text = sample("wgmma_early_read.ptx")
    (advisory,) = compiled("wgmma_early_read.ptx").warnings
    assert (advisory.severity, advisory.code, advisory.function) == ("info", "C7517", "wgmma_early_read")
    assert advisory.line == marked_lines(text, "C7517")[0]


@needs_ptxas
def test_ptxas_errors_raise_ptxas_error_with_their_lines(tmp_path):
    text = sample("syntax_error.ptx")
    output = tmp_path / "never.cubin"
    with pytest.raises(PtxasError) as raised:
        compile_ptx(text, output=output, source_name="syntax_error.ptx")
    error = raised.value
    assert {e.line for e in error.errors if e.line is not None} == set(marked_lines(text, "error"))
    assert all(e.file == "syntax_error.ptx" for e in error.errors if e.line is not None)
    assert any("Unknown symbol '%r9'" in e.message for e in error.errors)
    assert error.returncode != 0 and "syntax_error.ptx:11: error: " in str(error)
    assert isinstance(error, ToolchainError) and not output.exists()


@needs_ptxas
def test_an_unknown_architecture_is_a_ptxas_error():
    with pytest.raises(PtxasError, match="sm_91"):
        compile_ptx(sample("cluster_header.ptx"), arch="sm_91")


@needs_ptxas
def test_the_cubin_goes_where_it_is_asked(tmp_path):
    output = tmp_path / "sanity.cubin"
    result = compile_ptx(sample("gemm_tile_sanity.ptx"), output=output, options=("-O3",))
    assert result.cubin_path == output and output.read_bytes() == result.cubin and "-O3" in result.command


# endregion

# region SASS


@needs_ptxas
@needs_nvdisasm
def test_sanity_kernel_sass_uses_hgmma_and_tma_and_never_local_memory():
    counts = sass_opcode_counts(compiled("gemm_tile_sanity.ptx").cubin)
    assert counts["HGMMA"] == counts["HGMMA.64x64x16.F32.BF16"] == 4  # four k16 steps
    assert counts["UTMALDG"] == 2  # A and B tiles
    assert counts["LDL"] == counts["STL"] == 0


@needs_ptxas
@needs_nvdisasm
def test_spilling_kernel_sass_uses_local_memory(tmp_path):
    result = compile_ptx(sample("forced_spill.ptx"), output=tmp_path / "spill.cubin")
    counts = sass_opcode_counts(result.cubin_path)
    assert counts["STL"] > 0 and counts["LDL"] > 0


@needs_ptxas
@needs_nvdisasm
def test_main_loop_of_the_k_loop_kernel():
    disassembly = sass("gemm_k_loop.ptx")
    main = innermost_loop(disassembly)
    assert main is not None and main == innermost_loop(disassembly, containing="HGMMA")
    body = main.opcode_counts
    assert (body["HGMMA"], body["UTMALDG"], body["BAR"]) == (4, 2, 1)
    assert body["STG"] == 0 and body["EXIT"] == 0  # the epilogue is outside
    wait = innermost_loop(disassembly, containing="SYNCS.PHASECHK.TRANS64.TRYWAIT")
    assert wait.is_polling and main.contains(wait)


@needs_ptxas
@needs_nvdisasm
def test_a_kernel_whose_only_loop_polls_has_no_main_loop():
    disassembly = sass("gemm_tile_sanity.ptx")  # ptxas unrolled its K loop; the barrier wait remains
    assert [loop.is_polling for loop in sass_loops(disassembly)] == [True]
    assert innermost_loop(disassembly) is None


# Hand-written in nvdisasm's format: an outer loop (0x10) around an inner loop (0x40) with an HGMMA; the wait
# at 0x20 retries out of line (0xb0) and re-enters the inner loop; 0xe0 onwards is end-of-code padding.
NESTED_SASS = """
//--------------------- .text.nested             --------------------------
        .section        .text.nested,"ax",@progbits
nested:
.text.nested:
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_0:
        /*0010*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0020*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR5], R2 ;
        /*0030*/              @!P1 BRA `(.L_x_4) ;
.L_x_2:
        /*0040*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24 ;
        /*0050*/                   IADD3 R3, R3, 0x1, RZ ;
        /*0060*/                   ISETP.GE.AND P0, PT, R3, 0x4, PT ;
        /*0070*/              @!P0 BRA `(.L_x_2) ;
        /*0080*/                   ISETP.GE.AND P2, PT, R1, R5, PT ;
        /*0090*/              @!P2 BRA `(.L_x_0) ;
        /*00a0*/                   EXIT ;
.L_x_4:
        /*00b0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR5], R2 ;
        /*00c0*/              @!P1 BRA `(.L_x_4) ;
        /*00d0*/                   BRA `(.L_x_2) ;
.L_x_5:
        /*00e0*/                   BRA `(.L_x_5);
        /*00f0*/                   NOP;
        /*0100*/                   NOP;
.L_x_6:
"""


def test_sass_is_parsed_without_the_end_of_code_padding():
    instructions = parse_sass(NESTED_SASS)
    assert [i.offset for i in instructions] == list(range(0, 0xE0, 0x10))
    hgmma = instructions[4]
    assert (hgmma.function, hgmma.mnemonic, hgmma.opcode) == ("nested", "HGMMA.64x64x16.F32.BF16", "HGMMA")
    assert (instructions[3].predicate, instructions[3].target) == ("!P1", 0xB0)
    counts = opcode_counts(instructions)
    assert (counts["BRA"], counts["NOP"], counts["EXIT"], counts["ISETP"], counts["ISETP.GE.AND"]) == (5, 0, 1, 2, 2)


def test_loops_are_natural_loops_of_the_control_flow_graph():
    outer, inner, wait = sass_loops(NESTED_SASS)
    assert [loop.head for loop in (outer, inner, wait)] == [0x10, 0x40, 0xB0]
    assert sorted(outer.offsets) == [0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xB0, 0xC0, 0xD0]
    assert sorted(inner.offsets) == [0x40, 0x50, 0x60, 0x70] and wait.is_polling
    assert outer.contains(inner) and outer.contains(wait) and not inner.contains(wait)
    assert outer.opcode_counts["SYNCS.PHASECHK.TRANS64.TRYWAIT"] == 2  # inline and out-of-line


# A loop (0x10) whose trips branch over a block without HGMMA (0x50-0x60: masks under a warp-uniform scf.if)
# and retry a wait out of line (0xa0: past the back edge, not a skippable block).
BRANCHING_SASS = """
//--------------------- .text.branching          --------------------------
        .section        .text.branching,"ax",@progbits
branching:
.text.branching:
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_0:
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR5], R2 ;
        /*0020*/              @!P1 BRA `(.L_x_3) ;
.L_x_1:
        /*0030*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24 ;
        /*0040*/               @P0 BRA `(.L_x_2) ;
        /*0050*/                   FSEL R24, R24, -INF , P3 ;
        /*0060*/                   FSEL R25, R25, -INF , P4 ;
.L_x_2:
        /*0070*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0080*/                   ISETP.GE.AND P2, PT, R1, R5, PT ;
        /*0090*/              @!P2 BRA `(.L_x_0) ;
        /*00a0*/                   EXIT ;
.L_x_3:
        /*00b0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR5], R2 ;
        /*00c0*/              @!P1 BRA `(.L_x_3) ;
        /*00d0*/                   BRA `(.L_x_1) ;
"""


def test_a_trip_may_branch_over_a_block_without_mma():
    loop = innermost_loop(BRANCHING_SASS, containing="HGMMA")
    assert [i.offset for i in loop.skippable()] == [0x50, 0x60]
    assert len(loop) - len(loop.skippable()) == 10  # 0x10-0x40, 0x70-0x90, the out-of-line retry 0xb0-0xd0
    assert innermost_loop(NESTED_SASS, containing="HGMMA").skippable() == ()
    assert loop.skippable(keep=("FSEL",)) == ()


# The PTX printer's fold (tessera/ptx/fold_epilogue.py) in miniature: the loop (0x10) issues the score mma
# (0x30-0x40), then, unless it is the first trip, the previous trip's P.V (0x60); the masks (0x90-0xa0) are
# branched over by steady trips, and inside them the last trip leaves (0x80 -> 0x160). After the latch (0xd0) the
# loop is re-entered at the P.V (0x50) through a dummy score mma (0x140), so the smallest loop holding HGMMA is
# the one 0x50 heads, without the score mma. The K wait retries out of line (0x110).
FOLDED_SASS = """
        .section        .text.folded,"ax",@progbits
folded:
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_0:
        /*0010*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR5], R2 ;
        /*0020*/              @!P1 BRA `(.L_x_6) ;
.L_x_1:
        /*0030*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24, !UPT ;
        /*0040*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR12], R24, gsb0 ;
.L_x_2:
        /*0050*/               @P5 BRA `(.L_x_3) ;
        /*0060*/                   HGMMA.64x64x16.F32.BF16 R88, gdesc[UR16], R88, gsb0 ;
.L_x_3:
        /*0070*/               @P0 BRA `(.L_x_4) ;
        /*0080*/               @P6 BRA `(.L_x_8) ;
        /*0090*/                   FSEL R24, R24, -INF , P3 ;
        /*00a0*/                   FSEL R25, R25, -INF , P4 ;
.L_x_4:
        /*00b0*/                   MUFU.EX2 R24, R24 ;
        /*00c0*/                   ISETP.GE.AND P2, PT, R1, R5, PT ;
        /*00d0*/              @!P2 BRA `(.L_x_0) ;
        /*00e0*/                   BRA `(.L_x_7) ;
.L_x_5:
        /*00f0*/                   STG.E [R2.64], R88 ;
        /*0100*/                   EXIT ;
.L_x_6:
        /*0110*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR5], R2 ;
        /*0120*/              @!P1 BRA `(.L_x_6) ;
        /*0130*/                   BRA `(.L_x_1) ;
.L_x_7:
        /*0140*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24, !UPT ;
        /*0150*/                   BRA `(.L_x_2) ;
.L_x_8:
        /*0160*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0170*/                   BRA `(.L_x_5) ;
"""


def offsets(instructions) -> list[int]:
    return [i.offset for i in instructions]


BIASED_SASS = """
//--------------------- .text.biased          --------------------------
        .section        .text.biased,"ax",@progbits
biased:
.text.biased:
        /*0000*/                   S2R R0, SR_TID.X ;
.L_x_0:
        /*0010*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
        /*0020*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR12], R24, gsb0 ;
        /*0030*/               @P0 BRA `(.L_x_1) ;
        /*0040*/                   STS.128 [R19+UR9], R8 ;
        /*0050*/                   HGMMA.64x64x16.F32.BF16 R24, R220, gdesc[UR20], R24, gsb0 ;
.L_x_1:
        /*0060*/                   HGMMA.64x64x16.F32.BF16 R88, R176, gdesc[UR16].tnspB, R88 ;
        /*0070*/                   HGMMA.64x64x16.F32.BF16 R88, R180, gdesc[UR16].tnspB, R88, gsb0 ;
        /*0080*/                   ISETP.GE.AND P2, PT, R1, R5, PT ;
        /*0090*/              @!P2 BRA `(.L_x_0) ;
        /*00a0*/                   EXIT ;
"""
"""A loop whose masked trips add the mask by a lone MMA (mask-by-mma's bias: a group of one HGMMA after the
score group's) under a branch: the steady trip branches over it, the masked trip runs it."""


def test_the_steady_trip_skips_a_lone_mma_the_masked_trip_runs():
    assert offsets(loop_trip(BIASED_SASS)) == [0x10, 0x20, 0x30, 0x60, 0x70, 0x80, 0x90]
    assert offsets(loop_trip(BIASED_SASS, masked=True)) == [0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90]


def test_a_trip_is_a_path_from_the_loop_header_back_to_it():
    (inner,) = trip_loops(NESTED_SASS)  # the outer loop's back edge (0x90) leaves from outside the inner loop
    assert inner.head == 0x40 and offsets(loop_trip(NESTED_SASS)) == [0x40, 0x50, 0x60, 0x70]
    assert loop_trip(NESTED_SASS, masked=True) == loop_trip(NESTED_SASS)
    # Steady: over the masks and the wait's retry (0xb0-0xd0), which the loop less its skippable blocks counts.
    assert offsets(loop_trip(BRANCHING_SASS)) == [0x10, 0x20, 0x30, 0x40, 0x70, 0x80, 0x90]
    assert offsets(loop_trip(BRANCHING_SASS, masked=True)) == [0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90]
    assert loop_trip("") == ()


def test_a_trip_of_a_loop_entered_twice_is_counted_in_the_loop_around_the_re_entry():
    inner = innermost_loop(FOLDED_SASS, containing="HGMMA")
    assert inner.head == 0x50 and 0x30 not in inner.offsets  # not a trip: no score mma, the dummy's instead
    (loop,) = trip_loops(FOLDED_SASS)
    assert loop.head == 0x10 and loop.contains(inner)
    steady = [0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0xB0, 0xC0, 0xD0]
    assert offsets(loop_trip(FOLDED_SASS)) == steady
    assert offsets(loop_trip(FOLDED_SASS, masked=True)) == sorted(steady + [0x80, 0x90, 0xA0])
    assert offsets(loop_trip(FOLDED_SASS, loop=inner)) == [0x50, 0x60, 0x70, 0xB0, 0xC0, 0xD0, 0xE0, 0x140, 0x150]


@needs_ptxas
@needs_nvdisasm
def test_the_trip_of_the_k_loop_kernel_runs_its_tma_issue_and_not_its_wait_retry():
    disassembly = sass("gemm_k_loop.ptx")
    main = innermost_loop(disassembly)
    wait = innermost_loop(disassembly, containing="SYNCS.PHASECHK.TRANS64.TRYWAIT")
    assert trip_loops(disassembly) == [main] and main.skippable() == ()
    trip = loop_trip(disassembly)
    assert trip[0].offset == main.head and trip[-1].target == main.head
    assert len(trip) == len(main) - len(wait) - 1  # all but the out-of-line retry: the wait loop, its way back
    counts = opcode_counts(trip)
    assert (counts["HGMMA"], counts["UTMALDG"], counts["BAR"]) == (4, 2, 1)  # the elected thread's TMA issue kept
    assert not {i.offset for i in trip} & wait.offsets and loop_trip(disassembly, masked=True) == trip


def test_the_innermost_loop_heuristic():
    assert innermost_loop(NESTED_SASS).head == 0x40
    assert innermost_loop(NESTED_SASS, containing="HGMMA").head == 0x40
    assert innermost_loop(NESTED_SASS, containing="ISETP.GE.AND").head == 0x40
    assert innermost_loop(NESTED_SASS, containing="SYNCS").head == 0xB0
    assert innermost_loop(NESTED_SASS, containing="S2R") is None
    assert innermost_loop("") is None


# endregion
