"""tessera-opt's error paths: each bad input gives a diagnostic and an exit status, never a traceback.

Every case runs tessera-opt's console-script entry point in this process (tests/inprocess.py: its own argv,
streams, working directory and exit status, an escaped exception a traceback as in a process); a few also run
the installed script in a subprocess (`SCRIPT_CASES`), and `pytest -m slow` runs every case that way."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import inprocess
from tessera.tools import tessera_opt
from text_edits import checked

KERNEL = """\
func.func @k(%x: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>}) \
attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(n, 64)>} {
  %i = tile.program_id x : index
  func.return
}
"""

INPUTS = {
    "ok.mlir": KERNEL,
    "empty.mlir": "",
    "comments.mlir": "// nothing but a comment\n\n",
    "syntax.mlir": "func.func @f() {\n  %x = arith.constant : index\n}\n",
    "verifier.mlir": "%t = \"test.op\"() : () -> !tile.tile<4x4xf32, register>\n%n = tile.dim %t[0] : !tile.tile<4x4xf32, register>\n",
    "type.mlir": "\n\"test.op\"() : () -> !tile.tile<8x64xf16, global, swizzle 128>\n",
    "kernel.mlir": checked(KERNEL).replace('kind = "custom"', 'kind = "conv"'),
    "unknown-op.mlir": "func.func @f() {\n  %x = tile.bogus : index\n  func.return\n}\n",
    "unknown-dialect.mlir": '"nosuch.op"() : () -> ()\n',
    "split.mlir": KERNEL + "// -----\n" + checked(KERNEL).replace("64>}", "32>}", 1),
    "not-utf8.mlir": b"\xff\xfe\n",
    "no-terminator.mlir": "func.func @f() {\n  %c = arith.constant 0 : index\n}\n",
    "unknown-type.mlir": 'func.func @f() {\n  %x = "test.op"() : () -> !nosuch.type\n  func.return\n}\n',
    "property.mlir": "\nsm90.setmaxnreg 100 100\n",
    "rows32.mlir": checked(KERNEL).replace("  %i = tile.program_id x : index\n",
                                  "  %i = tile.program_id x : index\n  %z = tile.fill 0.0 : !tile.tile<32x64xf32, register>\n"),
    "functions.mlir": "func.func @f() {\n  func.return\n}\n",
    "sm90.mlir": 'func.func @f() {\n  %t = sm90.special "tid.x" : index\n  func.return\n}\n',
    "wrong.txt": KERNEL,
}


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    status: int
    stderr: tuple[str, ...] = ()  # substrings of stderr
    stdout: tuple[str, ...] = ()  # substrings of stdout
    stdin: str = ""


CASES = {
    "ok": Case(("ok.mlir",), 0, stdout=("tile.program_id x : index",)),
    "empty-file": Case(("empty.mlir",), 0, stdout=("builtin.module {",)),
    "comments-only": Case(("comments.mlir",), 0, stdout=("builtin.module {",)),
    "stdin": Case((), 0, stdout=("tile.program_id x : index",), stdin=KERNEL),
    # regression: `-` (mlir-opt's and tessera-run's spelling of standard input) was taken for a file named '-'
    "stdin-dash": Case(("-",), 0, stdout=("tile.program_id x : index",), stdin=KERNEL),
    # standard input is `<stdin>` in diagnostics, as tessera-run names it (it was `stdin`)
    "stdin-diagnostic": Case(("-",), 1, stderr=("<stdin>:2:23", "attribute expected"),
                             stdin="func.func @f() {\n  %x = arith.constant : index\n}\n"),
    "syntax-error": Case(("syntax.mlir",), 1, stderr=("syntax.mlir:2:23", "attribute expected")),
    "verifier-error": Case(
        ("verifier.mlir",), 1, stderr=("verifier.mlir:2:1: 'tile.dim' op source must be a global tile, got register",)
    ),
    "type-error": Case(("type.mlir",), 1, stderr=("type.mlir:2:31", "tile type: only shared tiles can be swizzled")),
    "kernel-abi-error": Case(("kernel.mlir",), 1, stderr=("kernel @k: 'tile.kernel' needs kind",)),
    "unknown-op": Case(("unknown-op.mlir",), 1, stderr=("unknown-op.mlir:2:8", "tile.bogus is not registered")),
    "unknown-dialect": Case(("unknown-dialect.mlir",), 1, stderr=("unknown-dialect.mlir:1:", "nosuch.op")),
    "error-in-second-chunk": Case(
        ("split.mlir", "--split-input-file"), 1, stderr=("argument 0 (%x): dimension '32' contradicts the static size 64",)
    ),
    "verify-diagnostics": Case(
        ("verifier.mlir", "--verify-diagnostics"), 0, stdout=("'tile.dim' op source must be a global tile",)
    ),
    "unknown-pass": Case(("ok.mlir", "-p", "no-such-pass"), 1, stderr=("Unrecognized passes: ['no-such-pass']",)),
    "bad-pass-option": Case(("ok.mlir", "-p", "canonicalize{x=1}"), 1, stderr=("invalid pass pipeline",)),
    "malformed-pipeline": Case(("ok.mlir", "-p", "cse{"), 1, stderr=("invalid pass pipeline 'cse{' at column 5",)),
    "xdsl-pass-runs": Case(("ok.mlir", "-p", "canonicalize,cse"), 0, stdout=("func.func @k",)),
    "missing-file": Case(("missing.mlir",), 1, stderr=("cannot read 'missing.mlir': No such file or directory",)),
    "directory": Case((".",), 1, stderr=("cannot read '.'",)),
    "not-utf8": Case(("not-utf8.mlir",), 1, stderr=("not-utf8.mlir is not UTF-8 text",)),
    "unknown-extension": Case(("wrong.txt",), 1, stderr=("Unrecognized file extension 'txt'",)),
    "unwritable-output": Case(("ok.mlir", "-o", "no-such-dir/out.mlir"), 1, stderr=("cannot write",)),
    "bad-argument": Case(("ok.mlir", "--no-such-flag"), 2, stderr=("unrecognized arguments: --no-such-flag",)),
    "bad-target": Case(("ok.mlir", "-t", "no-such-target"), 2, stderr=("invalid choice: 'no-such-target'",)),
    # regression: xDSL's printers know only their own dialects: -t wgsl or wat printed nothing of a kernel and
    # exited with 0, -t riscv-asm failed inside xDSL
    "xdsl-target-on-tile-ir": Case(("ok.mlir", "-t", "wgsl"), 1, stderr=(
        "ok.mlir:1:1: kernel @k: -t wgsl prints xDSL's own dialects, not Tile IR: use -t mlir, or -t ptx",)),
    "xdsl-target-on-target-ir": Case(("sm90.mlir", "-t", "riscv-asm"), 1, stderr=(
        "sm90.mlir:1:1: func @f: -t riscv-asm prints xDSL's own dialects, not Target IR",)),
    "xdsl-target-on-xdsl-ir": Case(("functions.mlir", "-t", "wat"), 0),
    # regression: -t ptx's refusals named the function but not where it is
    "ptx-of-tile-ir": Case(("ok.mlir", "-t", "ptx"), 1, stderr=(
        "ok.mlir:1:1: kernel @k: ptx: @k is a Tile IR kernel: lower it first (-p default-pipeline)",)),
    "ptx-of-a-function": Case(("functions.mlir", "-t", "ptx"), 1, stderr=(
        "functions.mlir:1:1: func @f: ptx: @f is not a Target IR kernel",)),
    "version": Case(("--version",), 0, stdout=("tessera-opt 0.1.0", "xdsl 0.74.0")),
    # every diagnostic says where: file:line:col, and the kernel and op where there is one (issue 21)
    "missing-terminator": Case(("no-terminator.mlir",), 1, stderr=("no-terminator.mlir:2:3: func @f: op 'arith.constant': "
                                                                  "Operation arith.constant terminates block",)),
    "unknown-type": Case(("unknown-type.mlir",), 1, stderr=("unknown-type.mlir:2:28", "'nosuch.type' is not registered")),
    "property-constraint": Case(("property.mlir",), 1, stderr=("property.mlir:2:1", "should be of base attribute string")),
    "pass-refuses-kernel": Case(
        ("rows32.mlir", "-p", "assign-swizzle,convert-tile-to-sm90"), 1,
        stderr=("rows32.mlir:1:1: kernel @k: convert-tile-to-sm90: register tiles have 32 rows; warpgroups take 64 rows each",
                "func.func @k(")),
    "pass-refuses-op": Case(
        ("rows32.mlir", "-p", "convert-tile-to-sm90"), 1,
        stderr=("rows32.mlir:1:1: kernel @k: convert-tile-to-sm90: register tiles have 32 rows",)),
    # a Tessera pass given only the other IR level is an error; one with nothing to do at all is a warning
    "allocate-registers-on-tile-ir": Case(
        ("ok.mlir", "-p", "allocate-registers"), 1,
        stderr=("ok.mlir:1:1: kernel @k: pass 'allocate-registers' transforms Target IR, but the input (@k) is Tile IR; "
                "lower it first: convert-tile-to-sm90",)),
    "warp-specialize-on-tile-ir": Case(
        ("ok.mlir", "-p", "canonicalize,warp-specialize"), 1,
        stderr=("kernel @k: pass 'warp-specialize' transforms Target IR, but the input (@k) is Tile IR",)),
    "tile-pass-on-target-ir": Case(
        ("sm90.mlir", "-p", "pipeline-loops"), 1,
        stderr=("sm90.mlir:1:1: func @f: pass 'pipeline-loops' transforms Tile IR, but the input (@f) is Target IR; it runs before "
                "convert-tile-to-sm90",)),
    "pass-with-nothing-to-do": Case(
        ("functions.mlir", "-p", "allocate-registers"), 0, stdout=("func.func @f",),
        stderr=("tessera-opt: warning: pass 'allocate-registers': the input has no Target IR (no kernel, no function "
                "with sm90 ops); nothing to do",)),
}


SCRIPT_CASES = ("stdin", "syntax-error", "bad-argument")
"""The cases that also run the installed console script in a subprocess: success reading stdin, a diagnostic
(status 1) and an argparse error (status 2)."""


def _tessera_opt() -> list[str]:
    script = shutil.which("tessera-opt", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    assert script, "the tessera-opt console script is not installed (pip install -e '.[test]')"
    return [script]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    work: Path = tmp_path_factory.mktemp("tessera-opt")
    for name, text in INPUTS.items():
        (work / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return work


@pytest.fixture(scope="module")
def results(work) -> dict[str, inprocess.Completed]:
    return {name: inprocess.run(["tessera-opt", *case.args], case.stdin, cwd=work, env={"TESSERA_DEBUG": None})
            for name, case in CASES.items()}


def _run_script(work: Path, names) -> dict[str, subprocess.CompletedProcess]:
    """The cases `names` run by the installed script, concurrently (one Python start-up each)."""
    env = {k: v for k, v in os.environ.items() if k != "TESSERA_DEBUG"}

    def run(name: str) -> subprocess.CompletedProcess:
        case = CASES[name]
        return subprocess.run(_tessera_opt() + list(case.args), cwd=work, input=case.stdin, capture_output=True,
                              text=True, env=env, timeout=120)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip(names, pool.map(run, names)))


def _check(name: str, result) -> None:
    case = CASES[name]
    output = result.stdout + result.stderr
    where = f"tessera-opt {' '.join(case.args)}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode == case.status, where
    assert "Traceback" not in output, where
    for text in case.stderr:
        assert text in result.stderr, where
    for text in case.stdout:
        assert text in result.stdout, where


@pytest.mark.parametrize("name", CASES)
def test_exit_status_and_diagnostic(name: str, results) -> None:
    _check(name, results[name])


def test_the_installed_script_gives_the_same(work) -> None:
    for name, result in _run_script(work, SCRIPT_CASES).items():
        _check(name, result)


@pytest.mark.slow
def test_the_installed_script_gives_the_same_in_every_case(work) -> None:
    for name, result in _run_script(work, tuple(CASES)).items():
        _check(name, result)


def test_internal_error_is_one_line_unless_debugging(monkeypatch, capsys, tmp_path) -> None:
    """An unexpected exception is an internal error: one line, and a traceback only with TESSERA_DEBUG=1."""
    source = tmp_path / "ok.mlir"
    source.write_text(KERNEL)

    def crash(self, module):
        raise RuntimeError("boom")

    monkeypatch.setattr(tessera_opt.TesseraOptMain, "apply_passes", crash)
    monkeypatch.delenv("TESSERA_DEBUG", raising=False)
    assert tessera_opt.main([str(source)]) == 1
    err = capsys.readouterr().err
    assert err == "tessera-opt: internal error: RuntimeError: boom\n"

    monkeypatch.setenv("TESSERA_DEBUG", "1")
    assert tessera_opt.main([str(source)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.endswith("tessera-opt: internal error: RuntimeError: boom\n")


def test_an_internal_error_in_a_pass_names_the_pass_and_is_never_empty(monkeypatch, capsys, tmp_path) -> None:
    """An exception without a message escaping a pass is reported with the pass and where it was raised."""
    from tessera.passes.assign_swizzle import AssignSwizzlePass

    source = tmp_path / "ok.mlir"
    source.write_text(KERNEL)

    def crash(self, ctx, module):
        raise StopIteration

    monkeypatch.setattr(AssignSwizzlePass, "apply", crash)
    monkeypatch.delenv("TESSERA_DEBUG", raising=False)
    assert tessera_opt.main([str(source), "-p", "assign-swizzle"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tessera-opt: internal error in pass 'assign-swizzle': StopIteration: raised at ")
    assert err.rstrip().endswith("in crash") and len(err.splitlines()) == 1
