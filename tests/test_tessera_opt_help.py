"""`tessera-opt --help` lists Tessera's passes, pipelines and targets, not xDSL's hundred others (RISC-V, x86,
WGSL, ...), which `--all-passes` lists after Tessera's."""

from __future__ import annotations

import sys

import pytest

import inprocess
from tessera import passes
from tessera.passes import PASSES, all_passes

XDSL_ONLY = ("convert-arith-to-riscv", "riscv-allocate-registers", "x86-allocate-registers", "arm-asm", "wgsl",
             "riscv-asm", "csl-stencil-bufferize")


def tessera_opt(*args: str, columns: int = 100) -> inprocess.Completed:
    """`python -m tessera.tools.tessera_opt ARGS` at a terminal `columns` wide, run in this process as its own
    process would run it (tests/inprocess.py)."""
    proc = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_opt", *args], env={"COLUMNS": str(columns)})
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def help_text() -> str:
    proc = tessera_opt("--help")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_help_lists_every_tessera_pass_with_its_options_and_summary(help_text):
    listing = help_text.split("Tessera's passes", 1)[1]
    positions = [listing.index(f"\n  {name}") for name in PASSES]
    assert positions == sorted(positions)  # in the registry's order
    assert "  pipeline-loops{stages=2}\n" in listing
    assert "  allocate-registers{budget=255 report=false spill=false}\n" in listing
    assert "Give each shared tile the widest swizzle" in listing
    assert "module docstring" not in listing  # a pointer the reader of --help cannot follow


def test_help_lists_the_pipelines_as_text_for_p(help_text):
    for name in ("DEFAULT_PIPELINE", "TARGET_PIPELINE", "PIPELINED_PIPELINE", "SPECIALIZED_PIPELINE", "PTX_PIPELINE"):
        assert f"  {name.lower().replace('_', '-')} = tessera.passes.{name}" in help_text
        assert f"      {getattr(passes, name)}\n" in help_text  # on one line, to copy
    assert help_text.index("DEFAULT_PIPELINE") < help_text.index("TARGET_PIPELINE")
    assert "Targets (-t): mlir, ptx" in help_text


def test_help_leaves_xdsl_passes_and_targets_to_all_passes(help_text):
    for name in XDSL_ONLY:
        assert name not in help_text
    others = len(all_passes()) - len(PASSES) - 2  # canonicalize and cse are named: Tessera's pipelines use them
    assert f"xDSL's {others} other passes" in " ".join(help_text.split())
    assert "tessera-opt --all-passes lists them" in " ".join(help_text.split())


def test_all_passes_lists_tessera_first_then_every_other_pass_and_target():
    proc = tessera_opt("--all-passes")
    assert proc.returncode == 0, proc.stderr
    sections = proc.stdout.split("\n\n")
    titles = [s.splitlines()[0] for s in sections]
    assert titles == [f"Tessera's passes ({len(PASSES)}):", f"xDSL's passes ({len(all_passes()) - len(PASSES)}):",
                      "Targets of Tessera's flow (2):", f"xDSL's other targets ({len(sections[3].splitlines()) - 1}):"]
    listed = [line.strip() for s in sections[:2] for line in s.splitlines()[1:]]
    assert listed[:len(PASSES)] == list(PASSES)
    assert sorted(listed) == sorted(all_passes())
    assert "  wgsl" in sections[3] and "  riscv-asm" in sections[3] and "  ptx" in sections[2]


def test_all_passes_exits_before_reading_input():
    proc = tessera_opt("missing.mlir", "-p", "cse", "--all-passes")
    assert proc.returncode == 0 and proc.stdout.startswith("Tessera's passes")


def test_a_usage_error_does_not_print_the_listing():
    proc = tessera_opt("-t", "nosuch")
    assert proc.returncode == 2
    assert "invalid choice: 'nosuch'" in proc.stderr
    assert "Tessera's passes" not in proc.stderr + proc.stdout



def _flash_tile_ir() -> str:
    import tessera.kernels

    return str(tessera.kernels.flash_attention(head_dim=64, causal=True, dtype="bf16"))


def test_a_named_pipeline_is_its_passes(tmp_path):
    """`-p default-pipeline` (the README's command) prints the same PTX as the pipeline spelled out, falls back
    as the default does, and a named pipeline is one element among others."""
    source = tmp_path / "flash.mlir"
    source.write_text(_flash_tile_ir())
    named = tessera_opt(str(source), "-p", "default-pipeline", "-t", "ptx")
    spelled = tessera_opt(str(source), "-p", passes.DEFAULT_PIPELINE, "-t", "ptx")
    assert named.returncode == spelled.returncode == 0, named.stderr
    assert named.stdout == spelled.stdout and ".target sm_90a" in named.stdout
    assert passes.falls_back(passes.parse_pipeline("default-pipeline").passes)
    composed = [p.name for p in passes.parse_pipeline("cse, ptx-pipeline ,canonicalize").passes]
    assert composed == ["cse", *[p.name for p in passes.parse_pipeline(passes.PTX_PIPELINE).passes], "canonicalize"]
    assert set(passes.named_pipelines()) >= {"default-pipeline", "target-pipeline", "pingpong-pipeline"}


def test_a_named_pipeline_with_options_is_refused_by_name(tmp_path):
    source = tmp_path / "flash.mlir"
    source.write_text(_flash_tile_ir())
    proc = tessera_opt(str(source), "-p", "default-pipeline{stages=3}")
    assert proc.returncode != 0
    assert "the named pipeline 'default-pipeline' takes no options" in proc.stderr
    with pytest.raises(passes.PipelineError, match="named pipeline 'ptx-pipeline' takes no options"):
        passes.parse_pipeline("cse,ptx-pipeline{x=1}")
    with pytest.raises(passes.PipelineError, match="default-pipelines"):  # a near name is an unknown pass
        passes.parse_pipeline("default-pipelines")
