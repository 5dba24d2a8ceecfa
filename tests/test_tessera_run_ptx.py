"""`tessera-run --level ptx`: a kernel lowered (or given as Target IR), printed as PTX and run in the PTX executor,
the path of `tessera.interpret(..., level="ptx")`. Small shapes: the executor runs every thread."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import inprocess
import tessera
from tessera import reference
from tessera.numerics import numpy_dtype
from tessera.tools import tessera_opt, tessera_run

ROOT = Path(__file__).resolve().parents[1]
GEMM = ROOT / "examples" / "gemm.mlir"
SIZES = {"M": 70, "N": 64, "K": 32}  # a partial block of rows, one K tile
SIZE_ARGS = tuple(a for n, v in SIZES.items() for a in ("-d", f"{n}={v}"))


def run_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """(status, stdout, stderr) of `tessera-run ARGS` in this process."""
    return inprocess.main_in_process(tessera_run.main, capsys, *args)


def test_level_ptx_gives_what_tessera_interpret_gives(capsys):
    """The same inputs (tessera-run's, seed 0) through tessera.interpret(level="ptx"): the same max error."""
    status, out, err = run_in_process(capsys, str(GEMM), *SIZE_ARGS, "--level", "ptx", "--check")
    assert status == 0, err
    assert re.search(r"@gemm_bf16 \[M=70 K=32 N=64\]: grid \(1, 1, 1\), ptx level \(-p .*allocate-registers, "
                     r"PTX executor\)", out)
    printed = re.search(r"check: (max error \S+, tolerance \S+): ok", out)
    assert printed, out

    module = tessera.parse_module(GEMM.read_text())
    sig = tessera.find_kernel(module)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(arg.shape(SIZES)).astype(np.float32) for arg in sig.inputs]
    output = tessera.interpret(module, *inputs, level="ptx")
    check = reference.check_gemm_kernel(sig, output, inputs, numpy_dtype(sig.inputs[0].type.element_type))
    assert printed[1] in str(check)


@pytest.fixture(scope="module")
def lowered(tmp_path_factory) -> Path:
    """examples/gemm.mlir in Target IR without allocate-registers (the PTX path allocates on a copy)."""
    path = tmp_path_factory.mktemp("ptx-level") / "gemm.target.mlir"
    assert tessera_opt.main([str(GEMM), "-p", "assign-swizzle,convert-tile-to-sm90", "-o", str(path)]) == 0
    return path


def test_a_target_ir_file_runs_as_ptx(capsys, lowered):
    status, out, err = run_in_process(capsys, str(lowered), *SIZE_ARGS, "--level", "ptx", "--check")
    assert status == 0, err
    assert "@gemm_bf16 [M=70 K=32 N=64]: grid (1, 1, 1), Target IR, PTX executor" in out and ": ok" in out


def test_a_hazard_in_the_ptx_is_one_diagnostic(capsys, lowered, tmp_path):
    """The K loop started at trip 1 reads a stage its TMA load has not signalled: the executor names the PTX
    line and instruction; tessera-run reports it as an error, not an internal one."""
    text, count = re.subn(r"scf\.for (%\w+) = %c0 to", r"scf.for \1 = %c1 to", lowered.read_text(), count=1)
    assert count == 1
    broken = tmp_path / "hazard.mlir"
    broken.write_text(text)
    status, out, err = run_in_process(capsys, str(broken), "-d", "M=70", "-d", "N=64", "-d", "K=128", "--level", "ptx")
    assert status == 1 and out == ""
    assert re.match(r"tessera-run: error: <ptx of @gemm_bf16>:\d+: error: wgmma\.mma_async\S*: wgmma operand B reads "
                    r"shared address 0x[0-9a-f]+ before it was signalled", err)
    assert "internal error" not in err and len(err.splitlines()) == 1


def test_the_lowering_must_reach_target_ir(capsys):
    status, _, err = run_in_process(capsys, str(GEMM), *SIZE_ARGS, "--level", "ptx", "--lower", "assign-swizzle")
    assert status == 1
    assert "left kernel @gemm_bf16 in Tile IR: --level ptx needs a pipeline that ends in Target IR" in err
    status, _, err = run_in_process(capsys, str(GEMM), *SIZE_ARGS, "--lower", "assign-swizzle")
    assert status == 1 and "--lower applies with --level target or --level ptx" in err


def test_level_choices_are_the_python_apis(capsys):
    status, _, err = run_in_process(capsys, str(GEMM), *SIZE_ARGS, "--level", "sass")
    assert status == 2
    assert "invalid choice: 'sass' (choose from 'tile', 'target', 'ptx')" in err
