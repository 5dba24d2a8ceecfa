"""`tessera-run` from the shell: runs, checks, and refuses bad input with a diagnostic, never a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "flash_attention.mlir"
GEMM = ROOT / "examples" / "gemm.mlir"


def run(*args: str):
    proc = subprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", *args], capture_output=True, text=True)
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc


def test_check_passes_on_the_example():
    proc = run(str(EXAMPLE), "-d", "batch=1", "-d", "heads=2", "-d", "seq_q=130", "-d", "seq_k=77", "--check")
    assert proc.returncode == 0, proc.stderr
    assert "check: max error" in proc.stdout and ": ok" in proc.stdout


def test_gemm_example_checks():
    proc = run(str(GEMM), "-d", "M=70", "-d", "N=130", "-d", "K=100", "--check")
    assert proc.returncode == 0, proc.stderr
    assert ": ok" in proc.stdout


def test_a_wrong_kernel_fails_the_check(tmp_path):
    broken = tmp_path / "broken.mlir"
    text = EXAMPLE.read_text()
    # Claim a different scale than the kernel computes with: the check must catch it.
    wrong, count = re.subn(r"scale = [-0-9.e+]+ : f32", "scale = 0.5 : f32", text, count=1)
    assert count == 1
    broken.write_text(wrong)
    proc = run(str(broken), "-d", "batch=1", "-d", "heads=1", "-d", "seq_q=64", "-d", "seq_k=64", "--check")
    assert proc.returncode == 1


@pytest.mark.parametrize(
    "args,message",
    [
        (["missing.mlir"], "No such file"),
        ([str(EXAMPLE)], "needs sizes for"),
        ([str(EXAMPLE), "-d", "batch=0"], "must be positive"),
        ([str(EXAMPLE), "-d", "seq_q=1", "--kernel", "nope", "-d", "batch=1"], "no kernel named 'nope'"),
    ],
)
def test_bad_input_is_a_diagnostic(args, message):
    proc = run(*args)
    assert proc.returncode != 0
    assert message in proc.stderr


def test_syntax_error_names_the_location(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @k() {\n  %x = tile.bogus : index\n}\n")
    proc = run(str(bad))
    assert proc.returncode == 1
    assert "bad.mlir:2" in proc.stderr
