"""SSA dominance is verified wherever a module enters Tessera (`tessera.ir.dominance`, `tessera.ir.verify`): IR
whose values are used before their definition or outside the region defining them is a diagnostic naming
the use, the value and the place, never a KeyError from a pass or an interpreter. The lit test
tests/lit/tools/dominance-invalid.mlir checks each rule's message on parsed input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import arith
from xdsl.utils.exceptions import VerifyException

import tessera
from tessera.ir.dominance import DominanceError, verify_dominance
from tessera.kernels import flash_attention, gemm, three_pass_attention, two_pass_attention
from text_edits import checked

ROOT = Path(__file__).resolve().parent.parent


def move_first_muli_to_the_end_of_its_block(module):
    """The GEMM builder's `%m0 = arith.muli ...` moved after every use: a use-before-def a builder can't make."""
    muli = next(op for op in module.walk() if isinstance(op, arith.MuliOp))
    block = muli.parent_block()
    muli.detach()
    block.insert_op_before(muli, block.last_op)
    return muli


@pytest.mark.parametrize("build", [flash_attention, two_pass_attention, three_pass_attention, gemm])
def test_the_builders_kernels_verify(build):
    verify_dominance(build())


def test_interpret_and_compile_refuse_a_use_before_its_definition():
    module = gemm()
    move_first_muli_to_the_end_of_its_block(module)
    a, b = np.ones((64, 64), np.float32), np.ones((64, 64), np.float32)
    for call in (lambda: tessera.interpret(module, a, b), lambda: tessera.interpret(module, a, b, level="target"),
                 lambda: tessera.compile(module)):
        with pytest.raises(DominanceError) as error:
            call()
        # a built module has no file location: the kernel, the op and the value (by its name hint) are named
        assert str(error.value) == ("kernel @gemm_bf16: operand #1 of 'tile.view' uses %m0 before its definition "
                                    "(later in the same block)")


def test_a_use_of_an_erased_op_is_named():
    module = gemm()
    muli = move_first_muli_to_the_end_of_its_block(module)
    muli.detach()
    with pytest.raises(DominanceError, match="which is not in the IR"):
        verify_dominance(module)


def test_dominance_errors_are_verify_exceptions():
    """So that every tool reports them as it reports verifier errors (tessera-opt --verify-diagnostics too)."""
    assert issubclass(DominanceError, VerifyException)


def test_tessera_run_reports_a_use_before_def_with_its_location(tmp_path, capsys):
    from tessera.tools.tessera_run import main

    text = (ROOT / "examples" / "gemm.mlir").read_text()
    m0 = "    %m0 = arith.muli %m_block, %c128 : index                 // first row of this block's C tile\n"
    n0 = "    %n0 = arith.muli %n_block, %c128 : index                 // first column\n"
    assert m0 + n0 in text
    path = tmp_path / "gemm.mlir"
    path.write_text(checked(text).replace(m0 + n0, checked(n0).replace("%n_block", "%m0") + m0))
    assert main([str(path), "-d", "M=64", "-d", "N=64", "-d", "K=64"]) == 1
    err = capsys.readouterr().err
    line = text[:text.index(m0)].count("\n") + 1
    assert (f"{path}:{line}:5: kernel @gemm_bf16: operand #0 of 'arith.muli' uses %m0 before its definition "
            f"(later in the same block); %m0 is defined at {path}:{line + 1}:5") in err
    assert "internal error" not in err and "KeyError" not in err


def test_an_operand_naming_the_ops_own_region_argument_is_located():
    """`scf.for %j = %c0 to %n step %j`: the parser leaves the step a placeholder (%j is defined only inside
    the loop's region); the verifier says so at the loop, never 'Forward declared values do not have an owner'."""
    text = (ROOT / "examples" / "gemm.mlir").read_text()
    loop = next(line for line in text.splitlines() if "scf.for %" in line)
    step = loop.split(" step ")[1].split()[0]
    iv = loop.split("scf.for ")[1].split()[0]
    with pytest.raises(VerifyException, match=r"gemm.mlir:\d+:\d+: kernel @\w+: operand #2 of 'scf.for' uses a value "
                                              r"which is not defined where this use can see it"):
        tessera.parse_module(checked(text).replace(loop, loop.replace(f" step {step}", f" step {iv}")), "gemm.mlir")
