"""The in-process lit runner (tests/lit_inprocess.py) means what lit means: a failing check, a failing command in
a pipeline, `not`, redirections in shell order, %t files, escaped exceptions, and refuses what it cannot run."""

from __future__ import annotations

from pathlib import Path

import pytest

import lit_inprocess

CONFIG = lit_inprocess.load_config()


def _run(tmp_path: Path, text: str) -> tuple[bool, str]:
    path = tmp_path / "case.mlir"
    path.write_text(text)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return lit_inprocess.run_file(path, CONFIG, work)


ROUND_TRIP = "func.func @f() {\n  func.return\n}\n"


def test_passing_check(tmp_path: Path) -> None:
    passed, log = _run(tmp_path, "// RUN: tessera-opt %s | filecheck %s\n// CHECK: func.func @f()\n" + ROUND_TRIP)
    assert passed, log


def test_failing_check(tmp_path: Path) -> None:
    passed, log = _run(tmp_path, "// RUN: tessera-opt %s | filecheck %s\n// CHECK: func.func @g()\n" + ROUND_TRIP)
    assert not passed
    assert "exit status: 1" in log and "filecheck" in log


def test_not(tmp_path: Path) -> None:
    assert not _run(tmp_path, "// RUN: not tessera-opt %s\n" + ROUND_TRIP)[0]
    passed, log = _run(tmp_path, "// RUN: not tessera-opt %s 2>&1 | filecheck %s\n// CHECK: Expected argument\nfunc.func @f( {\n")
    assert passed, log


def test_pipefail(tmp_path: Path) -> None:
    """A failing command fails its pipeline even when the last command succeeds."""
    passed, log = _run(tmp_path, "// RUN: python -c 'import sys; sys.exit(3)' | python -c 'pass'\n")
    assert not passed and "exit status: 3" in log


def test_redirections_in_order(tmp_path: Path) -> None:
    """`2>&1 >/dev/null`: stderr goes where stdout went (the pipe), then stdout is discarded."""
    write = "python -c 'import sys; print(\"OUT\"); print(\"ERR\", file=sys.stderr)'"
    assert _run(tmp_path, f"// RUN: {write} 2>&1 >/dev/null | filecheck %s\n// CHECK: ERR\n// CHECK-NOT: OUT\n")[0]
    assert _run(tmp_path, f"// RUN: {write} 2>/dev/null | filecheck %s\n// CHECK: OUT\n// CHECK-NOT: ERR\n")[0]
    passed, log = _run(tmp_path, f"// RUN: {write} 2>&1 | filecheck %s\n// CHECK: OUT\n// CHECK: ERR\n")
    assert passed, log


def test_temporary_file(tmp_path: Path) -> None:
    text = f"// RUN: tessera-opt %s -o %t.mlir\n// RUN: tessera-opt %t.mlir | filecheck %s\n// CHECK: @f\n{ROUND_TRIP}"
    passed, log = _run(tmp_path, text)
    assert passed, log
    assert (tmp_path / "work" / "case.mlir.tmp.mlir").read_text().strip().startswith("builtin.module")


def test_escaped_exception_is_status_one(tmp_path: Path) -> None:
    passed, log = _run(tmp_path, "// RUN: python -c 'raise RuntimeError(\"boom\")'\n")
    assert not passed and "RuntimeError: boom" in log and "exit status: 1" in log
    assert _run(tmp_path, "// RUN: not python -c 'raise RuntimeError(\"boom\")'\n")[0]


def test_echo_into_stdin(tmp_path: Path) -> None:
    text = "// RUN: echo 'func.func @e() { func.return }' | tessera-opt | filecheck %s\n// CHECK: func.func @e()\n"
    passed, log = _run(tmp_path, text)
    assert passed, log


@pytest.mark.parametrize("line", ["cat %s", "tessera-opt %s && tessera-opt %s", "python %s"])
def test_refuses_what_it_cannot_run(tmp_path: Path, line: str) -> None:
    with pytest.raises(lit_inprocess.Unsupported):
        _run(tmp_path, f"// RUN: {line}\n" + ROUND_TRIP)
