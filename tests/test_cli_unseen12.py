"""`tessera-run FILE.ptx` given what a shell user passes next (round 6 of the unseen cases): `--arg TYPE[SHAPE]=
FILE.npy` with values the type does not hold, and `--save` into a directory that cannot be made. Each is one
diagnostic naming the argument and exit status 1, before the kernel runs. About 1 s."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import inprocess
from tessera.tools import tessera_run

VECTOR_ADD = Path(__file__).resolve().parent / "ptx_kernels" / "vector_add.ptx"


def _run(capsys, *args: str) -> tuple[int, str, str]:
    return inprocess.main_in_process(tessera_run.main, capsys, str(VECTOR_ADD), "--grid", "1", "--block", "128",
                                     *args)


@pytest.mark.parametrize("values, spec, message", [
    # regression: a complex .npy was cast to its real parts (NumPy's ComplexWarning) and the run went on
    (np.ones(32, complex), "f32[32]", "holds complex128 values, which f32 does not hold"),
    # regression: 1.5 became 1 in a u32 argument, silently
    (np.full(1, 1.5), "u32[1]", "holds float64 values, which u32 does not hold"),
])
def test_npy_values_the_type_does_not_hold_are_refused(values, spec, message, tmp_path, capsys):
    path = tmp_path / "values.npy"
    np.save(path, values)
    arguments = ["f32[32]=random", "f32[32]=random", "f32[32]=zeros", "u32=32"]
    arguments[0 if spec.startswith("f32") else 3] = f"{spec}={path}"
    status, out, err = _run(capsys, *(a for spec in arguments for a in ("--arg", spec)))
    assert status == 1 and f"--arg {spec}={path}: {path} {message}" in err and "Traceback" not in err, err
    assert "add_kernel: grid" not in out  # refused before the run


def test_real_npy_values_are_taken(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.linspace(-1, 1, 32))
    np.save(tmp_path / "b.npy", np.arange(32))
    status, out, err = _run(capsys, "--arg", f"f32[32]={tmp_path / 'a.npy'}", "--arg", f"f32[32]={tmp_path / 'b.npy'}",
                            "--arg", "f32[32]=zeros", "--arg", "u32=32")
    assert status == 0 and "add_kernel: grid" in out, err


def test_save_into_a_directory_that_cannot_be_made_is_refused_before_the_run(tmp_path, capsys):
    """Regression: the directory was made after the run (which may take minutes), and its OSError printed bare."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    status, out, err = _run(capsys, "--arg", "f32[32]=random", "--arg", "f32[32]=random", "--arg", "f32[32]=zeros",
                            "--arg", "u32=32", "--save", str(blocker / "out"))
    assert status == 1 and f"--save {blocker / 'out'}: cannot make the directory" in err, err
    assert "add_kernel: grid" not in out


def test_a_ptx_file_that_is_not_utf8_is_named(tmp_path, capsys):
    """Regression (unseen round 22): a binary .ptx gave "'utf-8' codec can't decode byte 0xab in position 1",
    naming neither the file nor the rule; it now reads as tessera-opt says it of an MLIR file."""
    path = tmp_path / "binary.ptx"
    path.write_bytes(b"\x00\xab\xff binary")
    status, out, err = inprocess.main_in_process(tessera_run.main, capsys, str(path), "--grid", "1", "--block", "32")
    assert status == 1 and err == f"tessera-run: error: {path} is not UTF-8 text (invalid start byte at byte 1)\n", err
