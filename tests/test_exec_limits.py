"""Every launch path stops with a diagnostic instead of hanging or running out of memory: a PTX kernel that
loops forever stops at the step budget naming where each warp is (function, line, instruction); launches past
the driver's limits (grid x < 2^31, y and z <= 65535, block x, y <= 1024, z <= 64, 1024 threads, 227 KiB of
shared memory) and sizes past the simulators' memory budget are refused, naming the limit, before anything
is allocated, in the PTX executor, the CTA simulator and the Tile interpreter, from Python and from
tessera-run. Each case takes well under a second of simulation."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

import tessera
from tessera.interpreters.limits import MemoryBudgetError
from tessera.interpreters.ptx import PtxExecutionError, launch
from tessera.interpreters.ptx.schedule import DEFAULT_MAX_STEPS
from tessera.interpreters.sm90 import run_target_kernel
from tessera.tools.tessera_run import main as tessera_run

from conftest import build_kernel
from text_edits import checked

# Warp 0 waits at a barrier for the others; warps 1 and 2 call `spin`, which never returns.
SPIN = """\
.version 8.0
.target sm_90a
.address_size 64

.func spin()
{
    .reg .b32 %s<2>;
LOOP:
    add.s32 %s1, %s1, 1;
    bra.uni LOOP;
}

.visible .entry endless(.param .u64 out)
{
    .reg .b32 %r<2>;
    .reg .pred %p<2>;
    mov.u32 %r0, %tid.x;
    setp.lt.u32 %p1, %r0, 32;
    @%p1 bra WAIT;
    call.uni spin, ();
WAIT:
    bar.sync 0;
    ret;
}
"""


# region step budget


def test_an_endless_loop_stops_at_the_step_budget_naming_each_warp():
    with pytest.raises(PtxExecutionError) as error:
        launch(SPIN, "endless", 2, 96, [np.zeros(4, np.float32)], max_steps=2000, source="spin.ptx")
    message = str(error.value)
    assert message.startswith("spin.ptx: error: the run stopped after 2000 steps (max_steps")
    lines = message.splitlines()
    looping = next(line for line in lines if "in spin" in line)
    # the loop's two instructions: line 9 (add) or line 10 (bra.uni), in function spin
    assert re.fullmatch(r"  warp 1 of CTA \(0, 0, 0\), warp 2 of CTA \(0, 0, 0\), warp 1 of CTA \(1, 0, 0\), warp 2 "
                        r"of CTA \(1, 0, 0\): running at line (9 \(add.s32\)|10 \(bra.uni\)) in spin", looping)
    assert "  warp 0 of CTA (0, 0, 0), warp 0 of CTA (1, 0, 0): at a barrier at line 22 (bar.sync) in endless" \
        in lines


def test_the_default_budget_is_far_above_the_suites_kernels():
    """The largest kernel of the suite (three-pass attention at head_dim 128 from its PTX) takes under 7,000
    steps per batch."""
    assert DEFAULT_MAX_STEPS >= 100 * 7000


def test_a_finite_loop_within_the_budget_runs():
    counted = checked(SPIN).replace("bra.uni LOOP;", "setp.lt.s32 %p, %s1, 50;\n    @%p bra LOOP;\n    ret;").replace(
        ".reg .b32 %s<2>;", ".reg .b32 %s<2>;\n    .reg .pred %p;")
    launch(counted, "endless", 1, 64, [np.zeros(4, np.float32)], max_steps=400)
    with pytest.raises(PtxExecutionError, match="stopped after 100 steps"):
        launch(counted, "endless", 1, 64, [np.zeros(4, np.float32)], max_steps=100)


@pytest.mark.parametrize("bad", [0, -5, 1.5, True, "100"])
def test_max_steps_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_steps must be a positive integer"):
        launch(SPIN, "endless", 1, 32, [np.zeros(4, np.float32)], max_steps=bad)


def test_tessera_run_takes_max_steps(tmp_path, capsys):
    path = tmp_path / "spin.ptx"
    path.write_text(SPIN)
    assert tessera_run([str(path), "--block", "64", "--arg", "f32[4]=zeros", "--max-steps", "500"]) == 1
    err = capsys.readouterr().err
    assert "the run stopped after 500 steps" in err and "in spin" in err and "Traceback" not in err


# endregion
# region launch limits


@pytest.mark.parametrize("grid, block, message", [
    ((65536, 65536, 65536), 32, r"grid y = 65536 exceeds the launch limit of 65535"),
    ((2**31, 1, 1), 32, r"grid x = 2147483648 exceeds the launch limit of 2147483647"),
    ((1, 1, 65536), 32, r"grid z = 65536 exceeds the launch limit of 65535"),
    (1, (1025, 1, 1), r"block x = 1025 exceeds the launch limit of 1024"),
    (1, (1, 1, 65), r"block z = 65 exceeds the launch limit of 64"),
    (1, (64, 32, 1), r"block \(64, 32, 1\) has 2048 threads, more than the 1024"),
])
def test_the_ptx_executor_refuses_launches_the_driver_refuses(grid, block, message):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        launch(SPIN, "endless", grid, block, [np.zeros(4, np.float32)])
    assert time.perf_counter() - start < 5


def test_the_largest_legal_grid_is_not_materialised():
    """Grid (2^31-1, 65535, 65535) is legal: the launch gets to running the first batch at once (CTA ids are
    made per batch), where this kernel stops at its step budget."""
    start = time.perf_counter()
    with pytest.raises(PtxExecutionError, match="stopped after 300 steps"):
        launch(SPIN, "endless", (2**31 - 1, 65535, 65535), 64, [np.zeros(4, np.float32)], max_steps=300)
    assert time.perf_counter() - start < 10


def test_dynamic_shared_memory_past_227_kib_is_refused():
    with pytest.raises(ValueError, match="shared memory of 232449 bytes per block exceeds the 232448 bytes"):
        launch(SPIN, "endless", 1, 32, [np.zeros(4, np.float32)], shared_bytes=227 * 1024 + 1)


def test_tessera_run_names_the_grid_limit(tmp_path, capsys):
    path = tmp_path / "spin.ptx"
    path.write_text(SPIN)
    assert tessera_run([str(path), "--grid", "65536,65536,65536", "--block", "32", "--arg", "f32[4]=zeros"]) == 1
    assert "grid y = 65536 exceeds the launch limit of 65535" in capsys.readouterr().err


# endregion
# region memory budget


def test_the_ptx_executor_checks_its_memory_budget_before_copying():
    big = np.zeros(1 << 20, np.float32)  # 4 MiB, copied into global memory and back: 12 MiB
    with pytest.raises(MemoryBudgetError, match=r"the launch of endless would need about \d+ bytes .* more than "
                                                r"the simulator's budget of 8000000 bytes .*array float32\[1048576\]"):
        launch(SPIN, "endless", 1, 32, [big], memory_budget=8_000_000)


def test_a_huge_module_variable_is_refused_before_allocation():
    text = checked(SPIN).replace(".func spin()", ".global .align 8 .b8 table[1000000000000];\n\n.func spin()")
    with pytest.raises(MemoryBudgetError, match=r"module variable table: 2000000000000 bytes"):
        launch(text, "endless", 1, 32, [np.zeros(4, np.float32)])


def test_tessera_run_refuses_a_1e12_element_array(tmp_path, capsys):
    path = tmp_path / "spin.ptx"
    path.write_text(SPIN)
    assert tessera_run([str(path), "--block", "32", "--arg", "f32[1000000,1000000]=zeros"]) == 1
    err = capsys.readouterr().err
    assert "f32[1000000, 1000000]" in err and "more than the simulator's budget" in err


def test_the_tile_interpreter_refuses_sizes_past_the_budget(capsys):
    module = build_kernel("flash_attention", head_dim=64, causal=False, dtype="bf16")
    assert tessera_run(["examples/flash_attention.mlir", "-d", "batch=1", "-d", "heads=70000", "-d",
                        "seq_q=64", "-d", "seq_k=64"]) == 1
    err = capsys.readouterr().err
    assert "grid y = 70000 exceeds the launch limit of 65535" in err
    assert tessera_run(["examples/flash_attention.mlir", "-d", "batch=1", "-d", "heads=1", "-d",
                        "seq_q=2000000000", "-d", "seq_k=64"]) == 1
    err = capsys.readouterr().err
    assert "more than the simulator's budget" in err and "argument %Q (in) of shape [1, 1, 2000000000, 128]" in err
    q = np.zeros((1, 70000, 1, 64), np.float32)
    with pytest.raises(ValueError, match="grid y = 70000 exceeds the launch limit of 65535"):
        tessera.interpret(module, q, q, q)


def test_the_cta_simulator_refuses_a_grid_past_the_limits():
    from tessera.interpreters.launch import prepare_arguments

    module = build_kernel("gemm", dtype="bf16")
    sig = tessera.find_kernel(module)
    target = tessera.lower_to_target(module, sig.name)
    arguments, sizes = prepare_arguments(sig, [np.zeros((8, 64), np.float32), np.zeros((64, 8), np.float32)])
    huge = dict(sizes, M=128 * 70000, N=128 * 70000)  # refused before the arrays' shapes are compared
    with pytest.raises(ValueError, match=r"@gemm_bf16: grid \(\d+, 70000, 1\): grid y = 70000 exceeds the launch "
                                         r"limit of 65535"):
        run_target_kernel(target, arguments, huge)


# endregion
# region the CTA simulator's loops

SPIN_TARGET = """\
builtin.module {
  func.func @spin(%out: i64 {sm90.source = 0 : i64, tile.dims = #tile.dims<32>, tile.role = "out"})
      attributes {sm90.kernel = {threads = 64 : i64, smem_bytes = 0 : i64},
                  tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<1>} {
    %tid = sm90.special "tid.x" : index
    %c32 = arith.constant 32 : index
    %late = arith.cmpi uge, %tid, %c32 : index
    scf.while () : () -> () {
      scf.condition(%late)
    } do {
      scf.yield
    }
    func.return
  }
}
"""


def test_the_cta_simulator_stops_an_endless_while_naming_the_op_and_threads(monkeypatch):
    """An scf.while whose condition never changes (deadlocked mbarrier waits are reported as deadlocks, see
    test_sm90_simulator) stops after MAX_WHILE_ITERATIONS iterations."""
    from tessera.interpreters.block_batch import KernelHazardError
    from tessera.interpreters.sm90 import control
    from tessera.ir import parse_module
    from tessera.kernel_abi import is_target_kernel

    monkeypatch.setattr(control, "MAX_WHILE_ITERATIONS", 50)
    kernel = next(op for op in parse_module(SPIN_TARGET).walk() if is_target_kernel(op))
    with pytest.raises(KernelHazardError, match=r"scf.while.*is still looping after 50 iterations in thread 32 \(warp 1, lane 0\)"):
        run_target_kernel(kernel, [np.zeros(32, np.float32)], {})


# endregion
