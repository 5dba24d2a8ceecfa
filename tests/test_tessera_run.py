"""`tessera-run` from the shell: runs, checks, and refuses bad input with a diagnostic, never a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import inprocess
from text_edits import checked

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "flash_attention.mlir"
GEMM = ROOT / "examples" / "gemm.mlir"


def run(*args: str):
    """`python -m tessera.tools.tessera_run ARGS`, run in this process as its own process would run it
    (tests/inprocess.py); `test_the_module_runs_in_a_process_of_its_own` runs it in one."""
    proc = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", *args])
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc


def test_the_module_runs_in_a_process_of_its_own():
    proc = subprocess.run([sys.executable, "-m", "tessera.tools.tessera_run", str(EXAMPLE), "-d", "batch=0"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "must be positive" in proc.stderr and "Traceback" not in proc.stderr


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


# --- in-process cases: the diagnostics of tessera-run (issue 21) -------------------------------------------------

from tessera.tools import tessera_opt, tessera_run  # noqa: E402

TARGET_PIPELINE = "assign-swizzle,convert-tile-to-sm90,canonicalize,cse,rematerialize-constants"
GEMM_SIZES = ("-d", "M=70", "-d", "N=136", "-d", "K=128")


def run_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """(status, stdout, stderr) of `tessera-run ARGS` in this process."""
    return inprocess.main_in_process(tessera_run.main, capsys, *args)


@pytest.mark.parametrize(
    "size,message",
    [
        ("M=+3", "size 'M' must be written in plain decimal digits 0-9, got '+3'"),
        ("M=5_0", "size 'M' must be written in plain decimal digits 0-9, got '5_0'"),
        ("M=\uff13", "size 'M' must be written in plain decimal digits 0-9, got '\uff13'"),  # fullwidth 3
        ("M=\u0663", "size 'M' must be written in plain decimal digits 0-9, got '\u0663'"),  # Arabic-Indic 3
        ("M= 3", "plain decimal digits"),
        ("M=0x10", "plain decimal digits"),
        ("M=", "plain decimal digits"),
        ("M=0", "size 'M' must be positive (from 1 to 2147483647"),
        ("M=-1", "size 'M' must be positive (from 1 to 2147483647"),
        ("M=2147483648", "size 'M' = 2147483648 is over the limit (from 1 to 2147483647"),
        ("=3", "expected NAME=SIZE"),
        ("M3", "expected NAME=SIZE"),
        ("\u039c=3", "expected NAME=SIZE"),  # a Greek capital mu, not M
    ],
)
def test_sizes_are_plain_ascii_decimal_within_limits(capsys, size, message):
    status, _, err = run_in_process(capsys, str(GEMM), "-d", size)
    assert status == 2 and message in err


@pytest.mark.parametrize(
    "extra,message",
    [
        (("-d", "foo=3"), "no kernel declares the size 'foo' (sizes declared: @gemm_bf16: M, K, N)"),
        (("-d", "M=4"), "size 'M' given more than once"),
        (("-d", "foo=3", "-d", "bar=1"), "no kernel declares the sizes 'foo', 'bar'"),
    ],
)
def test_every_size_is_declared_by_the_kernel_and_given_once(capsys, extra, message):
    status, out, err = run_in_process(capsys, str(GEMM), *GEMM_SIZES, *extra)
    assert status == 1 and message in err and out == ""


@pytest.mark.parametrize(
    "flag,message",
    [
        (("--seed", "+1"), "expected a seed in plain decimal digits 0-9, got '+1'"),
        (("--seed", "-1"), "expected a seed in plain decimal digits 0-9, got '-1'"),
        (("--max-gib", "0"), "expected a positive number of GiB such as 4 or 0.5, got '0'"),
        (("--max-gib", "nan"), "expected a positive number of GiB such as 4 or 0.5, got 'nan'"),
    ],
)
def test_other_numbers_on_the_command_line_are_checked_too(capsys, flag, message):
    status, _, err = run_in_process(capsys, str(GEMM), *GEMM_SIZES, *flag)
    assert status == 2 and message in err


def test_sizes_too_large_for_memory_are_refused_before_allocating(capsys):
    status, _, err = run_in_process(capsys, str(GEMM), "-d", "M=2000000", "-d", "N=2000000", "-d", "K=8")
    assert status == 1
    assert "kernel @gemm_bf16 would need about" in err and "(--max-gib 8)" in err


def test_a_malformed_pipeline_is_a_diagnostic(capsys):
    status, _, err = run_in_process(capsys, str(GEMM), *GEMM_SIZES, "-p", "cse{")
    assert status == 1
    assert err.startswith("tessera-run: error: invalid pass pipeline 'cse{' at column 5: Expected argument name here")
    status, _, err = run_in_process(capsys, str(GEMM), *GEMM_SIZES, "-p", "no-such-pass")
    assert status == 1 and "Unrecognized passes: ['no-such-pass']" in err


def test_a_lowering_that_stops_short_of_target_ir_says_what_it_produced(capsys):
    status, _, err = run_in_process(capsys, str(GEMM), *GEMM_SIZES, "--level", "target", "--lower", "assign-swizzle")
    assert status == 1
    assert "the lowering pipeline 'assign-swizzle' left kernel @gemm_bf16 in Tile IR: --level target needs a " \
           "pipeline that ends in Target IR (one with convert-tile-to-sm90" in err


@pytest.fixture(scope="module")
def gemm_target_files(tmp_path_factory):
    """examples/gemm.mlir lowered to Target IR by tessera-opt, without and with allocate-registers."""
    work = tmp_path_factory.mktemp("target")
    files = {}
    for name, spec in (("plain", TARGET_PIPELINE), ("allocated", TARGET_PIPELINE + ",allocate-registers")):
        files[name] = work / f"gemm.{name}.mlir"
        assert tessera_opt.main([str(GEMM), "-p", spec, "-o", str(files[name])]) == 0
    return files


@pytest.mark.parametrize("which", ["plain", "allocated"])
def test_a_target_ir_file_runs_in_the_cta_simulator_and_checks(capsys, gemm_target_files, which):
    status, out, err = run_in_process(capsys, str(gemm_target_files[which]), *GEMM_SIZES, "--check")
    assert status == 0, err
    assert "@gemm_bf16 [M=70 K=128 N=136]: grid (1, 2, 1), Target IR, CTA simulator" in out
    assert "check: max error" in out and ": ok" in out


UNREAD_INPUT = """
func.func @scaled(%X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>},
                  %U: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<m, 64>},
                  %Y: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<n, 64>, tile.role = "out"})
    attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
  %c0 = arith.constant 0 : index
  %w = tile.view %X[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  %x = tile.load %w : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
  %t = tile.tanh %x : !tile.tile<64x64xf32, register>
  %o = tile.view %Y[%c0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
  tile.store_global %t, %o : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
  func.return
}
"""


def test_a_target_ir_kernel_with_an_input_it_never_reads_runs(capsys, tmp_path):
    """Regression (found by tables24): the lowering gives an input the kernel never reads no argument, and
    tessera-run refused the Target IR ("the 'sm90.source' indices [0, 2] do not number the tensors"); the kernel
    keeps the tensor's description (`sm90.unread_tensors`), so the Target IR runs with every tensor in its
    place, its size m included."""
    tile_file, target_file = tmp_path / "unread.mlir", tmp_path / "unread.target.mlir"
    tile_file.write_text(UNREAD_INPUT)
    assert tessera_opt.main([str(tile_file), "-p", TARGET_PIPELINE, "-o", str(target_file)]) == 0
    text = target_file.read_text()
    assert 'sm90.unread_tensors = [{sm90.source = 1 : i64, sm90.element_type = f32, tile.dims = #tile.dims<m, 64>, ' \
           'tile.role = "in", name = "U"}]' in text
    for level in ("target", "ptx"):
        status, out, err = run_in_process(capsys, str(target_file), "-d", "n=64", "-d", "m=3", "--level", level)
        assert status == 0, err
        assert "@scaled [n=64 m=3]: grid (1, 1, 1), Target IR" in out and "-> Y[64, 64]" in out
    broken = tmp_path / "broken.mlir"
    broken.write_text(checked(text).replace('name = "U"', 'label = "U"'))
    status, _, err = run_in_process(capsys, str(broken), "-d", "n=64", "-d", "m=3")
    assert status == 1 and "each entry of 'sm90.unread_tensors' needs" in err and "Traceback" not in err


def test_a_wrong_target_ir_kernel_fails_the_check(capsys, gemm_target_files, tmp_path):
    """The check compares with NumPy: a Target IR GEMM that stores twice its product must fail it."""
    text = gemm_target_files["plain"].read_text()
    store = re.search(r"\n(\s*)sm90\.st_global (\S+), %acc_final,", text)
    assert store is not None
    doubled = f"\n{store[1]}%doubled = arith.addf %acc_final, %acc_final : vector<64xf32>" + \
              checked(store[0]).replace("%acc_final", "%doubled")
    broken = tmp_path / "broken.mlir"
    broken.write_text(checked(text).replace(store[0], doubled))
    status, out, err = run_in_process(capsys, str(broken), *GEMM_SIZES, "--check")
    assert status == 1, out + err
    assert "check: max error" in out and ": ok" not in out


def test_a_kernel_hazard_is_one_located_diagnostic(capsys, gemm_target_files, tmp_path):
    """A Target IR GEMM whose K loop starts at trip 1 waits on the wrong mbarrier parity: the simulator's
    deadlock report names the file, line, kernel and op, without the module that xDSL attaches to it."""
    lowered = tmp_path / "lowered.mlir"
    assert tessera_opt.main([str(GEMM), "-p", "assign-swizzle,convert-tile-to-sm90", "-o", str(lowered)]) == 0
    text, count = re.subn(r"scf\.for (%\w+) = %c0 to", r"scf.for \1 = %c1 to", lowered.read_text(), count=1)
    assert count == 1
    broken = tmp_path / "deadlock.mlir"
    broken.write_text(text)
    status, out, err = run_in_process(capsys, str(broken), *GEMM_SIZES)
    assert status == 1
    assert re.match(rf"tessera-run: error: {re.escape(str(broken))}:\d+:\d+: kernel @gemm_bf16: op "
                    r"'sm90.mbarrier_try_wait_parity': .*deadlock", err)
    assert "builtin.module" not in err and len(err.splitlines()) == 3  # the message, the source line, a caret


def test_a_hazard_of_a_lowered_tile_kernel_is_located_at_its_tile_op():
    """Regression: a Tile IR kernel run in the CTA simulator (`--level target`) whose table of block entries is
    one short (B = 2 for 4 row blocks) reads past it: the diagnostic was located at the kernel's line (the deepest
    op on the error's own traceback, which ends above the op's frames); it is at the `tile.load_index` whose load
    it is, with that line under it."""
    kernel = ROOT / "tests" / "user_kernels" / "moe_grouped_gemm.mlir"
    line = next(n for n, text in enumerate(kernel.read_text().splitlines(), 1) if "= tile.load_index" in text)
    proc = run(str(kernel), "--level", "target", "-d", "M=200", "-d", "N=130", "-d", "K=72", "-d", "E=3", "-d", "B=2")
    assert proc.returncode == 1
    assert re.match(rf"tessera-run: error: {re.escape(str(kernel))}:{line}:5: kernel @moe_grouped_gemm: op "
                    r"'sm90.ld_global': .*outside tensor %EXPERT_ptr", proc.stderr), proc.stderr
    assert proc.stderr.splitlines()[1].strip().startswith("%e = tile.load_index"), proc.stderr

def test_what_cannot_run_is_named(capsys, gemm_target_files, tmp_path):
    status, _, err = run_in_process(capsys, str(gemm_target_files["plain"]), *GEMM_SIZES, "--level", "tile")
    assert status == 1 and "kernel @gemm_bf16 is Target IR: it runs in the CTA simulator" in err
    status, _, err = run_in_process(capsys, str(gemm_target_files["plain"]), *GEMM_SIZES, "--level", "target",
                                    "--lower", TARGET_PIPELINE)
    assert status == 1 and "is already Target IR: --lower applies to Tile IR kernels" in err
    plain = tmp_path / "plain.mlir"
    plain.write_text("func.func @f() {\n  func.return\n}\n")
    status, _, err = run_in_process(capsys, str(plain))
    assert status == 1
    assert ("no kernel to run: tessera-run runs Tile IR kernels (a func.func with a 'tile.kernel' attribute), Target "
            "IR kernels (with 'sm90.kernel', as convert-tile-to-sm90 writes them) and PTX files (.ptx); this file "
            "has functions @f without those attributes") in err


BAD_INPUTS = {
    "syntax": "func.func @f() {\n  %x = arith.constant : index\n}\n",
    "verifier": '%t = "test.op"() : () -> !tile.tile<4x4xf32, register>\n'
                "%n = tile.dim %t[0] : !tile.tile<4x4xf32, register>\n",
    "type": '\n"test.op"() : () -> !tile.tile<8x64xf16, global, swizzle 128>\n',
    "unknown-op": "func.func @f() {\n  %x = tile.bogus : index\n  func.return\n}\n",
    "no-terminator": "func.func @f() {\n  %c = arith.constant 0 : index\n}\n",
    "kernel-abi": checked(GEMM.read_text()).replace('kind = "gemm"', 'kind = "conv"'),
    "property": "\nsm90.setmaxnreg 100 100\n",
}


@pytest.mark.parametrize("name", BAD_INPUTS)
def test_tessera_run_reports_what_tessera_opt_reports(capsys, tmp_path, name):
    """The same input gives the same diagnostic, at the same file:line:col, from both tools."""
    path = tmp_path / f"{name}.mlir"
    path.write_text(BAD_INPUTS[name])
    assert tessera_opt.main([str(path)]) == 1
    opt_err = capsys.readouterr().err
    status, _, run_err = run_in_process(capsys, str(path), "-d", "M=1")
    assert status == 1
    assert run_err == opt_err
    assert re.match(rf"{re.escape(str(path))}:\d+:\d+", opt_err), opt_err


def test_an_internal_error_is_never_empty(capsys, monkeypatch):
    """An exception without a message (StopIteration) is described by where it was raised."""
    import tessera.interpreters.launch as launch

    def crash(*args, **kwargs):
        raise StopIteration

    monkeypatch.setattr(launch, "run_grid", crash)
    monkeypatch.delenv("TESSERA_DEBUG", raising=False)
    status, _, err = run_in_process(capsys, str(GEMM), *GEMM_SIZES)
    assert status == 1
    assert err.startswith("tessera-run: internal error: StopIteration: raised at ") and "in crash" in err


@pytest.mark.parametrize("builder,args", [
    (builder, args) for builder in ("flash_attention_varlen", "flash_attention_paged")
    for args in (["-d", "batch=2"], ["-d", "batch=2", "-d", "max_seqlen_q=1", "--check"], ["--level", "ptx"])
] + [("flash_attention_paged", ["--target-ir"])])
def test_a_kernel_sized_by_its_launch_is_refused_by_name(builder, args, tmp_path, capsys):
    """Regression: tessera-run drew random float index tables (cu_seqlens, page_table) for the packed and paged
    attention kernels and failed with "internal error: KeyError: 'max_seqlen_q'", and `-d max_seqlen_q` was
    "declared by no kernel". It now refuses them as `--validate` does, before lowering, Target IR included."""
    import tessera.kernels

    path = tmp_path / "serving.mlir"
    path.write_text(str(getattr(tessera.kernels, builder)(head_dim=64, causal=True)))
    if args == ["--target-ir"]:  # lowered: the launch size is kept on the Target IR kernel
        lowered = tmp_path / "serving.target.mlir"
        status, _, err = inprocess.main_in_process(tessera_opt.main, capsys, str(path), "-p", "default-pipeline",
                                                   "-o", str(lowered))
        assert status == 0, err
        path, args = lowered, []
    status, out, err = inprocess.main_in_process(tessera_run.main, capsys, str(path), *args)
    assert status == 1 and not out, out + err
    assert err.startswith(f"tessera-run: error: {path}:2:3: kernel @{builder}") and \
        ": sized by its launch (max_seqlen_q) and reads index tables that are not generated; run it with " \
        "tessera.launch" in err, err


def _window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 40)


@pytest.mark.parametrize("kernel", ["forward", "backward main"])
@pytest.mark.parametrize("tool", ["tessera-run --level ptx", "tessera-opt --validate"])
def test_a_block_sparse_kernel_is_refused_by_name(kernel, tool, tmp_path, capsys):
    """Regression: tessera-run drew random block lists for a kernel built from a mask_mod with block_sparse=True
    (negative counts, key blocks past the sequence): at level ptx the PTX executor reported its producer's TMA
    load still in flight at the CTA's end, a hazard of lists no mask makes. It now refuses the kernel as it
    refuses the serving kernels' index tables, at the kernel, before running it; so does --validate."""
    import tessera.kernels

    module = tessera.kernels.flash_attention(64, mask_mod=_window, block_sparse=True) if kernel == "forward" \
        else tessera.kernels.attention_backward(64, mask_mod=_window, block_sparse=True).main
    path = tmp_path / "sparse.mlir"
    path.write_text(str(module))
    sizes = ["-d", "batch=1", "-d", "heads=2", "-d", "seq_q=300", "-d", "seq_k=190"]
    if tool == "tessera-run --level ptx":
        status, out, err = inprocess.main_in_process(tessera_run.main, capsys, str(path), *sizes, "--level", "ptx")
        prefix = f"tessera-run: error: {path}:2:3: kernel @"
    else:
        status, out, err = inprocess.main_in_process(tessera_opt.main, capsys, str(path), "-p", "default-pipeline",
                                                     "--validate", *sizes, "-o", str(tmp_path / "out.mlir"))
        prefix = f"tessera-opt: error: --validate: tessera.validate.validate: {path}:2:3: kernel @"
    assert status == 1 and not out, out + err
    lists = "Q_NUM_VISITS, Q_VISITS" if kernel == "backward main" else \
        "FULL_KV_NUM_BLOCKS, FULL_KV_INDICES, KV_NUM_BLOCKS, KV_INDICES"
    assert err.startswith(prefix) and f": reads block lists ({lists}) that are not generated; run it with " \
        "tessera.launch" in err, err
