"""CTAs in parallel (`tessera.interpreters.parallel`): `workers=N` and `executor=` give the serial run's results
bit for bit at target and PTX level, its first error whatever order the groups finish in, and report writes
and reads that cross groups as races between CTAs; what cannot run in groups runs serially with a note."""

from __future__ import annotations

import warnings
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest
from xdsl.utils.exceptions import InterpretationError

import tessera
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.parallel import AccessLog, GroupResult, SerialFallback, merge, parallel_options, split
from tessera.interpreters.ptx.launcher import launch, launch_described
from tessera.interpreters.ptx.printed import ptx_text
from tessera.interpreters.ptx.state import PtxExecutionError
from tessera.interpreters.sm90.launch import run_target_kernel
from tessera.host import describe
from tessera.ir import parse_module
from tessera.kernel_abi import is_target_kernel, specialized
from tessera.passes import TARGET_PIPELINE
from tessera.regalloc import allocate_registers
from text_edits import checked, filled


def _lowered(module, inputs, pipeline=TARGET_PIPELINE):
    sig = tessera.find_kernel(module)
    arguments, sizes = prepare_arguments(sig, inputs)
    lowered = tessera.compile(specialized(module, sig, sizes), target="target", pipeline=pipeline)
    return sig, arguments, sizes, lowered


def _target_outputs(lowered, sig, arguments, sizes, **parallel):
    kernel = next(op for op in lowered.walk() if is_target_kernel(op) and op.sym_name.data == sig.name)
    copies = [a.copy() for a in arguments]
    traffic = {}
    run_target_kernel(kernel, copies, sizes, allocate_registers(kernel), traffic=traffic, **parallel)
    return copies, traffic


def _ptx_outputs(lowered, sig, arguments, sizes, **parallel):
    text, printed = ptx_text(lowered)
    host = next(h for h in describe(printed) if h.kernel == sig.name)
    copies = [a.copy() for a in arguments]
    launch_described(text, host, copies, dict(sizes), **parallel)
    return copies


def _bitwise_equal(serial, parallel):
    assert [a.tobytes() for a in serial] == [a.tobytes() for a in parallel]


@pytest.fixture(scope="module")
def flash():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 2, 70, 64)) for _ in range(3))  # 1 query block x 2 heads x 2 batches
    return _lowered(tessera.kernels.flash_attention(head_dim=64, causal=True, dtype="bf16"), [q, k, v])


@pytest.fixture(scope="module")
def gemm():
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((300, 64)), rng.standard_normal((64, 260))  # 3 x 3 CTAs, partial edges
    return _lowered(tessera.kernels.gemm(), [a, b])


@pytest.mark.parametrize("case", ["flash", pytest.param("gemm", marks=pytest.mark.slow)])
def test_target_level_with_two_workers_is_bitwise_serial(case, request):
    """GEMM at target level runs in the default suite through `tessera.launch` (below)."""
    sig, arguments, sizes, lowered = request.getfixturevalue(case)
    serial, serial_traffic = _target_outputs(lowered, sig, arguments, sizes)
    parallel, parallel_traffic = _target_outputs(lowered, sig, arguments, sizes, workers=2)
    _bitwise_equal(serial, parallel)
    assert parallel_traffic == serial_traffic and len(serial_traffic) == sig.grid_size(sizes)[0] * \
        sig.grid_size(sizes)[1] * sig.grid_size(sizes)[2]
    assert np.abs(serial[-1].astype(np.float32)).max() > 0  # the outputs were written


@pytest.mark.parametrize("case", ["flash", "gemm"])
def test_ptx_level_with_two_workers_is_bitwise_serial(case, request):
    sig, arguments, sizes, lowered = request.getfixturevalue(case)
    _bitwise_equal(_ptx_outputs(lowered, sig, arguments, sizes), _ptx_outputs(lowered, sig, arguments, sizes,
                                                                                 workers=2))


@pytest.mark.slow
def test_clusters_run_whole_in_a_group():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((512, 64)), rng.standard_normal((64, 512))  # 4 x 4 CTAs in clusters of 2 x 1
    sig, arguments, sizes, lowered = _lowered(tessera.kernels.gemm(cluster=(2, 1)), [a, b])
    serial, serial_traffic = _target_outputs(lowered, sig, arguments, sizes)
    parallel, parallel_traffic = _target_outputs(lowered, sig, arguments, sizes, workers=3)
    _bitwise_equal(serial, parallel)
    assert serial_traffic == parallel_traffic
    _bitwise_equal(_ptx_outputs(lowered, sig, arguments, sizes), _ptx_outputs(lowered, sig, arguments, sizes,
                                                                                 workers=2))


def test_public_entry_points_take_workers():
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((200, 64)), rng.standard_normal((64, 130))  # 2 x 2 CTAs
    module = tessera.kernels.gemm()
    serial = tessera.launch(module, a, b, level="target", pipeline=TARGET_PIPELINE)
    parallel = tessera.launch(module, a, b, level="target", pipeline=TARGET_PIPELINE, workers=2)
    assert serial.tobytes() == parallel.tobytes()
    with pytest.warns(SerialFallback, match=r"tessera.interpret: runs serially: the Tile IR interpreter"):
        tile = tessera.interpret(module, a, b, workers=2)
    assert tile.shape == serial.shape
    with pytest.raises(ValueError, match=r"tessera.launch: workers and executor .* pass level="):
        tessera.launch(module, a, b, workers=2)
    with pytest.raises(ValueError, match=r"workers must be >= 1, got 0"):
        tessera.launch(module, a, b, level="ptx", workers=0)
    with pytest.raises(TypeError, match=r"executor must be a concurrent.futures.Executor"):
        tessera.launch(module, a, b, level="ptx", executor="dask")


# region small kernels whose CTAs write rows: a seeded hazard, races between groups
def _rows_target(row: str, load_row: str | None = None) -> str:
    """A Target IR kernel of 4 CTAs of 32 threads: CTA c stores c + 1 (or, with `load_row`, the word it loads
    from that row) into row `row` (an index expression of %cta) of a [4, 32] i32 output."""
    load = ""
    value = "%v32 = arith.index_cast %cta1 : index to i32\n    %vals = vector.broadcast %v32 : i32 to vector<1xi32>"
    if load_row is not None:
        load = f"""%lrow = {load_row}
    %lbase = arith.muli %lrow, %c32 : index
    %li = arith.addi %lbase, %tid : index
    %lbyte = arith.muli %li, %c4 : index
    %lb64 = arith.index_cast %lbyte : index to i64
    %loffs = vector.broadcast %lb64 : i64 to vector<1xi64>
    %loaded = sm90.ld_global %out[%loffs], %true : vector<1xi64>, vector<1xi1> -> vector<1xf32>
    %vals = arith.bitcast %loaded : vector<1xf32> to vector<1xi32>"""
        value = ""
    return f"""builtin.module {{
  func.func @rows(%out: i64 {{sm90.source = 0 : i64, tile.dims = #tile.dims<4, 32>, tile.role = "out",
                             sm90.element_type = i32}})
      attributes {{sm90.kernel = {{threads = 32 : i64, smem_bytes = 0 : i64}},
                  tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<4>}} {{
    %tid = sm90.special "tid.x" : index
    %cta = sm90.special "ctaid.x" : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c4 = arith.constant 4 : index
    %c32 = arith.constant 32 : index
    %c100 = arith.constant 100 : index
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %parity = arith.remui %cta, %c2 : index
    %odd = arith.cmpi eq, %parity, %c1 : index
    %last = arith.cmpi eq, %cta, %c3 : index
    %cta1 = arith.addi %cta, %c1 : index
    %true = arith.constant dense<true> : vector<1xi1>
    {value}{load}
    %row = {row}
    %base = arith.muli %row, %c32 : index
    %i = arith.addi %base, %tid : index
    %byte = arith.muli %i, %c4 : index
    %b64 = arith.index_cast %byte : index to i64
    %offs = vector.broadcast %b64 : i64 to vector<1xi64>
    sm90.st_global %out[%offs], %vals, %true : vector<1xi64>, vector<1xi32>, vector<1xi1>
    func.return
  }}
}}
"""


ODD_CTAS_OUT_OF_BOUNDS = "arith.select %odd, %c100, %cta : index"
"""CTAs 1 and 3 (one in each of two groups) store out of bounds."""


def _run_rows(text: str, **parallel) -> np.ndarray:
    kernel = next(op for op in parse_module(text).walk() if is_target_kernel(op))
    out = np.zeros((4, 32), np.int32)
    run_target_kernel(kernel, [out], {}, **parallel)
    return out


def _error(run) -> str:
    try:
        run()
    except (InterpretationError, PtxExecutionError) as error:
        return str(error)
    raise AssertionError("no error")


def test_the_first_failing_cta_is_reported_as_in_the_serial_run():
    text = _rows_target(ODD_CTAS_OUT_OF_BOUNDS)
    serial = _error(lambda: _run_rows(text))
    assert "outside tensor %out" in serial and "thread 0" in serial
    assert _error(lambda: _run_rows(text, workers=2)) == serial
    assert _error(lambda: _run_rows(text, workers=4)) == serial


def test_races_between_groups_are_reported_not_merged():
    assert _run_rows(_rows_target("arith.addi %cta, %c0 : index"), workers=2)[:, 0].tolist() == [1, 2, 3, 4]
    both = _rows_target("arith.select %last, %c0, %cta : index")
    with pytest.raises(InterpretationError, match=r"@rows: CTA \(0, 0, 0\) and CTA \(3, 0, 0\) both write tensor "
                                                  r"%out at byte offset 0: a race between CTAs"):
        _run_rows(both, workers=2)
    reads = _rows_target("arith.addi %cta, %c0 : index", load_row="arith.subi %c3, %cta : index")
    # CTA 3 (second group) reads row 0, which CTA 0 (first group) writes: the serial run would see it written
    with pytest.raises(InterpretationError, match=r"CTA \(3, 0, 0\) reads tensor %out at byte offset 0, which "
                                                  r"CTA \(0, 0, 0\) writes in this launch: a race between CTAs"):
        _run_rows(reads, workers=2)


PTX_ROWS = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry rows(.param .u64 out)
{
  .reg .b32 %r<8>;
  .reg .b64 %rd<8>;
  .reg .pred %p<4>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %tid.x;
  and.b32 %r5, %r1, 1;
  setp.eq.u32 %p1, %r5, 1;
  selp.u32 %r3, ROW_OF_ODD, %r1, %p1;
  mad.lo.u32 %r4, %r3, 1024, %r2;
  mul.wide.u32 %rd2, %r4, 4;
  add.s64 %rd3, %rd1, %rd2;
  add.u32 %r6, %r1, 1;
  st.global.u32 [%rd3], %r6;
  ret;
}
"""
"""4 CTAs of 1024 threads (two batches of two, so two groups); odd CTAs store into row ROW_OF_ODD."""


def _ptx_rows(row_of_odd: str, **parallel):
    out = np.zeros((4, 1024), np.uint32)
    return launch(filled(PTX_ROWS, ROW_OF_ODD=row_of_odd), "rows", 4, 1024, [out], **parallel)[0]


def test_ptx_executor_groups_errors_and_races():
    serial_stats, parallel_stats = {}, {}
    assert _ptx_rows("%r1", stats=serial_stats).tobytes() == _ptx_rows("%r1", workers=2, stats=parallel_stats).tobytes()
    assert parallel_stats == serial_stats and serial_stats["thread_instructions"] > 4 * 1024
    serial = _error(lambda: _ptx_rows("100"))
    assert "out of bounds" in serial
    assert _error(lambda: _ptx_rows("100", workers=2)) == serial
    with pytest.raises(PtxExecutionError, match=r"CTA \(1, 0, 0\) and CTA \(3, 0, 0\) both write argument 0 "
                                                r"\(out\) at byte offset 4096: a race between CTAs"):
        _ptx_rows("1", workers=2)


def test_kernels_with_atomics_run_serially_with_a_note():
    text = checked(PTX_ROWS).replace("st.global.u32 [%rd3], %r6;", "red.global.add.u32 [%rd3], %r6;")
    out = np.zeros((4, 1024), np.uint32)
    with pytest.warns(SerialFallback, match=r"runs serially: the entry has red, atom or cp.reduce"):
        result = launch(filled(text, ROW_OF_ODD="%r1"), "rows", 4, 1024, [out], workers=2)[0]
    assert result[:, 0].tolist() == [1, 2, 3, 4]
    with warnings.catch_warnings():
        warnings.simplefilter("error", SerialFallback)
        with pytest.raises(SerialFallback):
            launch(filled(text, ROW_OF_ODD="%r1"), "rows", 4, 1024, [out], workers=2)
# endregion


# region the merge, the split and the options alone
def _done(result: GroupResult) -> Future:
    future = Future()
    future.set_result(result)
    return future


def test_merge_reports_the_first_group_in_serial_order_not_the_first_to_finish():
    empty = {}
    first, second = ValueError("CTA 1 failed"), ValueError("CTA 3 failed")
    late, early = Future(), _done(GroupResult(empty, empty, empty, second))
    late.set_result(GroupResult(empty, empty, empty, first))  # finished after `early`, but earlier in the grid
    with pytest.raises(ValueError, match="CTA 1 failed"):
        merge([late, early], [], str, str, RuntimeError)


def test_access_log_runs_and_split():
    log = AccessLog([16])
    log.note(0, np.array([[2, 3, 4, 5]]), 7, True)
    log.note(0, np.array([[4, 5]]), 9, True)
    written, data, _ = log.result([np.arange(16, dtype=np.uint8)])
    starts, ends, ranks = written[0]
    assert (starts.tolist(), ends.tolist(), ranks.tolist()) == ([2, 4], [4, 6], [7, 9])
    assert data[0].tolist() == [2, 3, 4, 5]
    assert [list(r) for r in split(5, 2)] == [[0, 1], [2, 3, 4]] and len(split(2, 8)) == 2
    assert parallel_options("f", 1, None) is None and parallel_options("f", None, None) is None
    with pytest.raises(TypeError, match="workers must be an integer"):
        parallel_options("f", True, None)
# endregion


def test_any_executor_runs_the_groups_from_the_programs_text():
    """An executor (here threads, in-process) gets tasks that carry the program's text and the arguments (the
    output as its shape: it is all zeros), parsed once per worker; a local process pool forks instead."""
    text = _rows_target("arith.addi %cta, %c0 : index")
    with ThreadPoolExecutor(2) as executor:
        assert _run_rows(text, executor=executor, workers=2).tobytes() == _run_rows(text).tobytes()
        assert _ptx_rows("%r1", executor=executor, workers=2).tobytes() == _ptx_rows("%r1").tobytes()
        failing = _rows_target(ODD_CTAS_OUT_OF_BOUNDS)
        assert _error(lambda: _run_rows(failing, executor=executor)) == _error(lambda: _run_rows(failing))


@pytest.fixture(scope="module")
def dask_executor():
    distributed = pytest.importorskip("dask.distributed", reason="dask[distributed] is not installed")
    with distributed.LocalCluster(processes=True, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        yield client.get_executor()


@pytest.mark.slow
def test_a_local_dask_cluster_runs_the_groups_bitwise(dask_executor, gemm):
    """A Dask cluster of two worker processes (about 30 s to start and import Tessera in each: -m slow)."""
    text = _rows_target("arith.addi %cta, %c0 : index")
    assert _run_rows(text, executor=dask_executor, workers=2).tobytes() == _run_rows(text).tobytes()
    failing = _rows_target(ODD_CTAS_OUT_OF_BOUNDS)
    assert _error(lambda: _run_rows(failing, executor=dask_executor)) == _error(lambda: _run_rows(failing))
    sig, arguments, sizes, lowered = gemm
    serial, _ = _target_outputs(lowered, sig, arguments, sizes)
    _bitwise_equal(serial, _target_outputs(lowered, sig, arguments, sizes, executor=dask_executor, workers=2)[0])
    _bitwise_equal(_ptx_outputs(lowered, sig, arguments, sizes),
                   _ptx_outputs(lowered, sig, arguments, sizes, executor=dask_executor, workers=2))


def test_tessera_run_workers_reports_the_serial_diagnostic(tmp_path, capsys):
    from tessera.tools.tessera_run import main

    path = tmp_path / "rows.mlir"
    path.write_text(_rows_target(ODD_CTAS_OUT_OF_BOUNDS))
    assert main([str(path)]) == 1
    serial = capsys.readouterr().err
    assert main([str(path), "--workers", "2"]) == 1
    assert capsys.readouterr().err == serial and "outside tensor %out" in serial
    path.write_text(_rows_target("arith.addi %cta, %c0 : index"))
    assert main([str(path), "--workers", "2"]) == 0
    with pytest.raises(SystemExit):
        main([str(path), "--workers", "0"])
    assert "expected a number of processes >= 1" in capsys.readouterr().err
