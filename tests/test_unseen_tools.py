"""tessera-opt and tessera-run given what a newcomer's shell gives them (round 22 of the unseen cases): standard
input closed, a reader that stops early, `-o` naming the input, an output target of xDSL's on a Tessera kernel,
`-t ptx` on what is not a Target IR kernel, a kernel that writes nothing, a bad lowering option; and the inputs
that already ended well, kept (`INPUTS`: bad pass options, upstream MLIR, mistyped uses, a wrong scf.for). Each
bad input is one diagnostic (located where there is a location) and a non-zero exit status, never an internal
error or a traceback. About 3 s."""

from __future__ import annotations

import io
import sys

import pytest

import inprocess
from tessera.tools import tessera_opt, tessera_run

KERNEL = """builtin.module {
  func.func @copy(%X: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>},
                  %Y: !tile.tile<?x?xf32, global> {tile.dims = #tile.dims<M, N>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
    %x = tile.load %xw : !tile.tile<64x32xf32, global> -> !tile.tile<64x32xf32, register>
    %yw = tile.view %Y[%m0, %c0] : !tile.tile<?x?xf32, global> -> !tile.tile<64x32xf32, global>
    tile.store_global %x, %yw : !tile.tile<64x32xf32, register>, !tile.tile<64x32xf32, global>
    func.return
  }
}
"""


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "copy.mlir"
    path.write_text(KERNEL)
    return path


@pytest.mark.parametrize("main, args", [(tessera_opt.main, []), (tessera_opt.main, ["-"]),
                                        (tessera_run.main, ["-", "-d", "M=4", "-d", "N=4"])])
def test_closed_standard_input_is_named(main, args, monkeypatch, capsys):
    """Regression: `tessera-opt <&-` (Python then has no sys.stdin) was "internal error: AttributeError:
    'NoneType' object has no attribute 'buffer'"."""
    monkeypatch.setattr(sys, "stdin", None)
    status, out, err = inprocess.main_in_process(main, capsys, *args)
    assert status == 1 and err.endswith("error: cannot read standard input: it is closed\n"), err


class _ClosedPipe(io.StringIO):
    """Standard output whose reader has gone (`| head -1`)."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self):
        raise io.UnsupportedOperation("no descriptor")


@pytest.mark.parametrize("main, args", [(tessera_opt.main, []), (tessera_run.main, ["-d", "M=70", "-d", "N=32"])])
def test_a_reader_that_stops_early_ends_the_tool_quietly(main, args, kernel_file, monkeypatch, capsys):
    """Regression: `tessera-run k.mlir ... | head -0` printed "internal error: BrokenPipeError"; it now stops
    with status 1 and nothing on stderr, as a tool killed by SIGPIPE does."""
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    status = main([str(kernel_file), *args])
    assert status == 1 and capsys.readouterr().err == ""


def test_a_target_whose_module_is_not_installed_is_named():
    """Regression: `-t llvm` without llvmlite (xDSL does not depend on it) was "internal error:
    ModuleNotFoundError"; it is refused before any pass runs."""
    def llvm_target():
        raise ModuleNotFoundError("No module named 'llvmlite'", name="llvmlite")

    with pytest.raises(tessera_opt.UsageError, match="target 'llvm' needs the Python module 'llvmlite', which is "
                                                     "not installed"):
        tessera_opt.check_target_options("llvm", {"llvm": llvm_target})


NO_OUTPUT = KERNEL.replace(', tile.role = "out"', "").replace("    tile.store_global %x, %yw", "    // no store").replace(
    "    %yw = tile.view", "    // %yw = tile.view")


@pytest.mark.parametrize("tool, args, prefix", [
    (tessera_run.main, ["-d", "M=70", "-d", "N=32", "--check"], "tessera-run: error: --check: "),
    (tessera_opt.main, ["-p", "assign-swizzle", "--validate", "-d", "M=70", "-d", "N=32"],
     "tessera-opt: error: --validate: tessera.validate.validate: "),
])
def test_checking_a_kernel_without_outputs_is_refused(tool, args, prefix, tmp_path, capsys):
    """Regression: `tessera-run --check` of a kernel that writes nothing said "max error 0, tolerance 0: ok",
    a verdict on no elements, and `tessera-opt --validate` failed with "max() arg is an empty sequence"."""
    path = tmp_path / "nothing.mlir"
    path.write_text(NO_OUTPUT)
    status, out, err = inprocess.main_in_process(tool, capsys, str(path), *args)
    assert status == 1 and "ok" not in out, out + err
    assert err.startswith(prefix + f"{path}:2:3: kernel @copy: no outputs (no argument with tile.role = \"out\"): "
                                   "there is nothing to check"), err


def test_running_a_kernel_without_outputs_says_so(tmp_path, capsys):
    path = tmp_path / "nothing.mlir"
    path.write_text(NO_OUTPUT)
    status, out, err = inprocess.main_in_process(tessera_run.main, capsys, str(path), "-d", "M=70", "-d", "N=32")
    assert status == 0 and "@copy [M=70 N=32]: grid (2, 1, 1), tile level" in out and out.rstrip().endswith(
        "-> no outputs"), out + err


def test_a_reader_that_stops_early_ends_a_ptx_run_quietly(monkeypatch, capsys):
    from pathlib import Path

    vector_add = Path(__file__).resolve().parent / "ptx_kernels" / "vector_add.ptx"
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    status = tessera_run.main([str(vector_add), "--grid", "1", "--block", "128", "--arg", "f32[32]=random", "--arg",
                               "f32[32]=random", "--arg", "f32[32]=zeros", "--arg", "u32=32"])
    assert status == 1 and capsys.readouterr().err == ""


@pytest.mark.parametrize("option", ["atomic-add=foo", "store-shared=ldmatrix", "mma-order=last-read"])
def test_a_lowering_option_value_is_a_pipeline_error(option, kernel_file, capsys):
    """Regression: convert-tile-to-sm90 checked its options only when it ran (after the passes before it), and
    tessera-opt printed the refusal without its `tessera-opt: error: invalid pass pipeline` head; every other
    pass's options are refused when the pipeline is parsed (passes/__init__.py)."""
    pipeline = f"assign-swizzle,convert-tile-to-sm90{{{option}}}"
    status, out, err = inprocess.main_in_process(tessera_opt.main, capsys, str(kernel_file), "-p", pipeline)
    name = option.split("=")[0]
    assert status == 1 and err.startswith(f"tessera-opt: error: invalid pass pipeline '{pipeline}': "
                                          f"convert-tile-to-sm90: {name} must be one of "), err


def test_writing_the_output_over_the_input_keeps_the_kernel(kernel_file, capsys):
    """Regression: xDSL's driver opened `-o FILE` for writing before it read the input, so `tessera-opt k.mlir -p
    assign-swizzle -o k.mlir` read an empty file and wrote `builtin.module {}` over the kernel, exit status 0."""
    status, out, err = inprocess.main_in_process(tessera_opt.main, capsys, str(kernel_file), "-p", "assign-swizzle",
                                                 "-o", str(kernel_file))
    assert status == 0 and "func.func @copy" in kernel_file.read_text(), err


def test_a_failed_run_leaves_the_output_file_as_it_was(kernel_file, tmp_path, capsys):
    """Regression: the output file was truncated when the run started; a run that fails (here a Target IR pass
    given Tile IR) left it empty, and with `-o` naming the input, the kernel was lost."""
    before = kernel_file.read_text()
    status, out, err = inprocess.main_in_process(tessera_opt.main, capsys, str(kernel_file), "-p",
                                                 "allocate-registers", "-o", str(kernel_file))
    assert status == 1 and "transforms Target IR, but the input (@copy) is Tile IR" in err
    assert kernel_file.read_text() == before
    assert not (tmp_path / "new.mlir").exists()
    inprocess.main_in_process(tessera_opt.main, capsys, str(kernel_file), "-p", "allocate-registers", "-o",
                              str(tmp_path / "new.mlir"))
    assert not (tmp_path / "new.mlir").exists()  # nothing is created by a failed run


LOOP = KERNEL.replace(
    "    %yw = tile.view", "    %c1 = arith.constant 1 : index\n    %c4 = arith.constant 4 : index\n"
    "    %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %x) -> (!tile.tile<64x32xf32, register>) {\n"
    "      %n = tile.add %acc, %x : !tile.tile<64x32xf32, register>, !tile.tile<64x32xf32, register>\n"
    "      scf.yield %n : !tile.tile<64x32xf32, register>\n    }\n    %yw = tile.view", 1).replace(
    "tile.store_global %x, %yw", "tile.store_global %r, %yw")
GENERIC_LOOP = LOOP.replace(
    "%r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %x) -> (!tile.tile<64x32xf32, register>) {",
    '%r = "scf.for"(%c0, %c4, %c1, %x) ({\n    ^bb0(%i: index, %acc: !tile.tile<64x32xf32, register>, %extra: index):'
).replace("      scf.yield %n : !tile.tile<64x32xf32, register>\n    }",
          "      scf.yield %n : !tile.tile<64x32xf32, register>\n    }) : (index, index, index, "
          "!tile.tile<64x32xf32, register>) -> !tile.tile<64x32xf32, register>")
UPSTREAM = """#map = affine_map<(d0)[s0] -> (d0 + s0)>
module attributes {gpu.container_module} {
  func.func @f(%arg0: memref<?xf32>, %n: index) -> f32 {
    %c0 = arith.constant 0 : index
    %i = affine.apply #map(%c0)[%n]
    %0 = memref.load %arg0[%i] : memref<?xf32>
    return %0 : f32
  }
}
"""
INPUTS = {  # name: (text, tool, extra arguments, status, what stderr (or stdout, for status 0) holds)
    "an option of the wrong type": (KERNEL, tessera_opt.main, ["-p", "pipeline-loops{stages=x}"], 1,
                                    "invalid pass pipeline 'pipeline-loops{stages=x}': Incompatible types"),
    "an unknown option": (KERNEL, tessera_opt.main, ["-p", "pipeline-loops{foo=1}"], 1,
                          'Provided arguments ["foo"] not found in expected arguments ["stages"]'),
    # regression: xDSL's parser kept the last of two values of one option, silently
    "an option given twice": (KERNEL, tessera_opt.main, ["-p", "pipeline-loops{stages=2 stages=3}"], 1,
                              "option 'stages' is given more than once in {stages=2 stages=3}"),
    "an option given twice, spelled two ways": (
        KERNEL, tessera_opt.main, ["-p", "assign-swizzle,convert-tile-to-sm90{atomic-add=red atomic_add=bulk}"], 1,
        "option 'atomic-add' is given more than once"),
    "a closing brace too many": (KERNEL, tessera_opt.main, ["-p", "pipeline-loops{stages=2}}"], 1,
                                 "Expected a comma after pass argument dict here"),
    "upstream MLIR: #map, module, return": (UPSTREAM, tessera_opt.main, [], 0,
                                            "affine.apply affine_map<(d0)[s0] -> ((d0 + s0))> (%c0)[%n]"),
    "upstream MLIR to tessera-run": (UPSTREAM, tessera_run.main, ["-d", "n=3"], 1,
                                     "no kernel to run: tessera-run runs Tile IR kernels"),
    "a use typed unlike its definition": (
        KERNEL.replace("tile.store_global %x, %yw : !tile.tile<64x32xf32, register>",
                       "tile.store_global %x, %yw : !tile.tile<64x16xf32, register>"), tessera_opt.main, [], 1,
        "copy.mlir:12:23"),
    "scf.for with one block argument too many": (GENERIC_LOOP, tessera_opt.main, [], 1,
                                                 "copy.mlir:13:5: kernel @copy: op 'scf.for': Expected 2 args, but got 3"),
    "scf.for, lowered and checked": (LOOP, tessera_run.main, ["-d", "M=70", "-d", "N=32", "--level", "target",
                                                              "--check"], 0, ": ok (reference: its own Tile IR"),
    # regression: "Unrecognized file extension 'ptx' (use -f mlir)", and with -f mlir "Expected three
    # consecutive '.' for an ellipsis"
    "a PTX file to tessera-opt": ("// made by hand\n.version 8.0\n.target sm_90a\n", tessera_opt.main, ["-f", "mlir"],
                                  1, "copy.mlir holds PTX (it starts with .version), not MLIR: run PTX with tessera-run"),
    "an unknown target": (KERNEL, tessera_opt.main, ["-t", "sass"], 2, "argument -t/--target: invalid choice: 'sass'"),
}


@pytest.mark.parametrize("name", INPUTS)
def test_inputs_nobody_tried(name, tmp_path, capsys):
    text, tool, args, expected, shown = INPUTS[name]
    path = tmp_path / "copy.mlir"
    path.write_text(text)
    status, out, err = inprocess.main_in_process(tool, capsys, str(path), *args)
    assert status == expected and shown in (out if expected == 0 else err), out + err
    assert "internal error" not in err


def test_a_ptx_file_to_tessera_opt_points_at_tessera_run(tmp_path, capsys):
    path = tmp_path / "k.ptx"
    path.write_text(".version 8.0\n.target sm_90a\n")
    status, out, err = inprocess.main_in_process(tessera_opt.main, capsys, str(path))
    assert status == 1 and f"{path} is PTX, and tessera-opt reads MLIR: run PTX with tessera-run {path}" in err, err
