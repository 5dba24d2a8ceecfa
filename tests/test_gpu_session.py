"""bench/gpu_session.py, the one command a GPU machine runs: its stage machinery (budgets, cuts, partial
results), the wheels check, the ULP measure of the fidelity table, the SVG, and the quick dry run end to end
(so the GPU command cannot rot between the rare sessions on a GPU)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import gpu_fidelity  # noqa: E402 - bench/ is not a package
import gpu_plan  # noqa: E402
import gpu_plot  # noqa: E402
import gpu_session  # noqa: E402
import gpu_stages  # noqa: E402
import gpu_tests  # noqa: E402

from tessera.kernels.gemm import GEMM_SCHEDULES  # noqa: E402
from tessera.numerics import BF16  # noqa: E402

# region Stages and budgets


def _stage(name: str, body: str) -> list[str]:
    """A stage process that writes out/stages/<name>.json as gpu_session's stages do, then runs `body`."""
    script = textwrap.dedent(f"""
        import json, os, sys, time
        from pathlib import Path
        out = Path(sys.argv[1]) / "stages"
        out.mkdir(parents=True, exist_ok=True)
        def write(data):
            (out / "{name}.tmp").write_text(json.dumps(data))
            (out / "{name}.tmp").replace(out / "{name}.json")
    """) + textwrap.dedent(body)
    return [sys.executable, "-c", script]


def test_a_stage_past_its_budget_is_cut_its_results_kept_and_the_next_runs(tmp_path):
    sleepy = _stage("sleepy", """
        import subprocess
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        write({"rows": [1, 2], "child": child.pid})
        time.sleep(60)
        write({"rows": [1, 2, 3]})
    """)
    after = _stage("after", 'write({"done": True})')
    stages = [("sleepy", sleepy + [str(tmp_path)], 3), ("after", after + [str(tmp_path)], 30)]
    start = time.monotonic()
    session = gpu_session.run_session(stages, tmp_path, dict(os.environ), 60, {"test": True})
    assert time.monotonic() - start < 30
    cut = session["stages"]["sleepy"]
    assert cut["status"] == "cut at its budget of 3 s" and cut["results"]["rows"] == [1, 2]
    child = Path(f"/proc/{cut['results']['child']}/stat")
    for _ in range(50):  # the stage's own children go with it (its process group); a zombie counts as gone
        if not child.exists() or child.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the cut stage's child process is still running")
    assert session["stages"]["after"]["status"] == "ok" and session["stages"]["after"]["results"] == {"done": True}
    written = json.loads((tmp_path / "session.json").read_text())
    assert written["test"] is True and written["stages"]["sleepy"]["results"]["rows"] == [1, 2]
    with tarfile.open(tmp_path / gpu_session.ARCHIVE) as archive:  # everything, in the one file a cut call returns
        assert {"session.json", "stages/sleepy.json", "stages/after.json", "logs/sleepy.log"} <= set(archive.getnames())
        assert json.load(archive.extractfile("stages/sleepy.json"))["rows"] == [1, 2]


def test_a_failing_stage_is_reported_with_its_output_and_a_spent_session_runs_nothing_more(tmp_path):
    failing = _stage("bad", 'write({"partial": 1}); print("what went wrong"); sys.exit(3)')
    slow = _stage("slow", "time.sleep(60)")
    never = _stage("never", 'write({"ran": True})')
    stages = [("bad", failing + [str(tmp_path)], 30), ("slow", slow + [str(tmp_path)], 60),
              ("never", never + [str(tmp_path)], 30)]
    session = gpu_session.run_session(stages, tmp_path, dict(os.environ), 4, {})
    bad = session["stages"]["bad"]
    assert bad["status"] == "failed (exit 3)" and bad["results"] == {"partial": 1} and "what went wrong" in bad["tail"]
    assert session["stages"]["slow"]["status"].startswith("cut at its budget")  # what was left of the 4 s
    assert session["stages"]["never"]["status"] == "not run: the session's time is spent"


def test_an_item_past_its_limit_cuts_its_stage_which_names_it(tmp_path):
    """A stage whose current item (a benchmark row, a fidelity case) runs past the item limit is cut there, long
    before its budget, and the status names the item."""
    hung = _stage("hung", """
        write({"records": [1], "running": {"item": {"seq": 512}, "since": time.time()}})
        time.sleep(60)
    """)
    start = time.monotonic()
    session = gpu_session.run_session([("hung", hung + [str(tmp_path)], 60, 1.0)], tmp_path, dict(os.environ), 60, {})
    assert time.monotonic() - start < 15
    cut = session["stages"]["hung"]
    assert cut["status"] == 'cut: {"seq": 512} ran past the item limit of 1 s' and cut["results"]["records"] == [1]


def test_a_second_call_measures_only_the_rows_the_first_did_not(tmp_path):
    """--resume: the earlier records are kept, the rows they cover and the one the earlier stage was cut in are
    not measured again."""
    rows = gpu_plan.benchmark_rows("forward")
    earlier = tmp_path / "earlier"
    (earlier / "stages").mkdir(parents=True)
    records = [{"system": "Tessera", "config": rows[0], "status": "ok"}]
    (earlier / "stages" / "forward.json").write_text(json.dumps({"records": records,
                                                                 "running": {"item": rows[1], "since": 0}}))
    writer = gpu_session.StageWriter(tmp_path / "forward.json")
    assert gpu_stages.rows_left("forward", rows, writer, earlier) == rows[2:]
    assert writer.data["records"] == records and writer.data["cut_before"] == [rows[1]]
    assert gpu_stages.rows_left("forward", rows, writer, None) == rows
    gpu_session.write_archive(earlier)  # the earlier call's session.tgz, carried back, serves as well
    unpacked = gpu_session.unpacked(earlier / gpu_session.ARCHIVE)
    assert unpacked != earlier and gpu_stages.rows_left("forward", rows, writer, unpacked) == rows[2:]
    assert gpu_session.unpacked(earlier) == earlier


def test_the_second_call_is_self_contained_and_names_what_the_first_did_not_finish():
    """The device tool empties $OUT before each command: the second call reads nothing of the first's; its
    stages come from the first call's session.json (returned at the top level)."""
    first = {"stages": {name: {"status": "ok"} for name in gpu_plan.FIRST_RUN}}
    assert gpu_plan.second_run(first) is None
    first["stages"]["fp8"] = {"status": "cut: {...} ran past the item limit of 30 s"}
    first["stages"]["variants"] = {"status": "not run: the session's time is spent"}
    first["stages"]["compile"] = {"status": "failed (exit 1)"}
    assert gpu_plan.second_run(first) == ("python bench/gpu_session.py --out $OUT --stages install compile variants "
                                          "fp8 report; python bench/gpu_fp8_probe.py --out $OUT/fp8probe")
    assert "--resume" not in gpu_plan.SECOND_RUN and "$OUT/" not in gpu_plan.SECOND_RUN
    first["stages"]["fp8"] = {"status": "ok"}  # the probe only when the FP8 forward did not finish
    assert gpu_plan.second_run(first) == "python bench/gpu_session.py --out $OUT --stages install compile variants report"


def test_the_budgets_cover_every_stage_and_fit_the_session(tmp_path):
    assert set(gpu_plan.BUDGETS_S) == set(gpu_plan.STAGES)
    total, device, *benchmarks = gpu_session.budget_checks()
    first = sum(gpu_plan.BUDGETS_S[s] for s in gpu_plan.FIRST_RUN)
    assert total["ok"] and total["value_s"] == first <= gpu_plan.SESSION_LIMIT_S <= 560
    assert device["ok"] and device["value_s"] <= 900 - 60  # a minute of the device's 15 left for a rerun
    assert [c["check"].split(":")[0] for c in benchmarks] == ["forward", "fp8", "backward", "gemm", "variants"]
    assert all(c["ok"] and c["value_s"] > 0 for c in benchmarks)
    over = {"stages": {"compile": {"results": {"estimate_on_gpu_machine_s": gpu_plan.BUDGETS_S["compile"] + 1}}}}
    assert [c["ok"] for c in gpu_session.budget_checks(over)] == [True] * 7 + [False]
    for name in ("session.json", "session.tgz", "benchmark.csv", *(f"stage-{s}.json" for s in gpu_session.TOP_LEVEL)):
        (tmp_path / name).write_text("{}")
    (tmp_path / "stages").mkdir()
    (tmp_path / "stages" / "forward.json").write_text("{}")  # below the top level: in the archive
    *_, files = gpu_session.budget_checks(None, tmp_path)
    assert files["ok"] and files["value_s"] == 6 <= gpu_session.RETURNED_FILES == 8
    for name in ("a.svg", "b.svg", "c.svg"):  # the first session's pictures at the top level: 9 files
        (tmp_path / name).write_text("")
    assert not gpu_session.budget_checks(None, tmp_path)[-1]["ok"]
    assert set(gpu_plan.ITEM_LIMITS_S) <= set(gpu_plan.STAGES) and gpu_plan.STAGES[-3:] == ("variants", "fp8", "report")
    assert gpu_plan.FIRST_RUN == gpu_plan.STAGES  # the 2026-11-30 session's stage times: 383 s, variants included


def test_gpu_tests_are_marked_so_the_session_finds_them():
    """A test that needs a GPU is marked `gpu` (tests/conftest.py skips it, saying why), not given a skipif of its
    own that the session could not find; every file marking tests `gpu` is in the session's plan."""
    needs_a_gpu = re.compile(r"skipif\(\s*not\s+has_gpu\(\)|skipif\([^)]*unavailable_reason\(\)\s+is\s+not\s+None")
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        assert not needs_a_gpu.search(path.read_text()), f"{path.name}: mark its GPU tests @pytest.mark.gpu"
    planned = {f for _, files, _, _ in gpu_plan.GPU_TESTS for f in files}
    assert set(gpu_tests.marked_files()) <= planned and "tests/test_launch.py" in planned


def test_the_grid_is_flashattention_3s():
    forward = gpu_plan.attention_rows("forward")
    assert len(forward) == 36 and {r["batch"] * r["seq"] for r in forward} == {16384}
    assert {r["heads"] * r["head_dim"] for r in forward} == {2048}
    assert {(r["head_dim"], r["causal"]) for r in forward} == {(d, c) for d in (64, 128, 256) for c in (False, True)}
    row = dict(seq=1024, batch=16, heads=16, head_dim=128, causal=True, direction="backward")
    assert gpu_plan.attention_flops(row) == 2.5 * 4 * 1024**2 * 128 * 16 * 16 / 2
    assert [(r["M"], r.get("schedule")) for r in gpu_plan.gemm_rows()[:3]] == [(4096, None), (8192, None),
                                                                               (4096, "128x256")]
    assert gpu_plan.GEMM_SCHEDULES == tuple(GEMM_SCHEDULES) and gpu_plan.QUICK_GEMM_SCHEDULE in GEMM_SCHEDULES


def test_the_fp8_grid_and_fa3s_published_figures():
    """The FP8 rows keep the bf16 grid's shape rule at FP8_SEQS; FA3's Figure 7 numbers are looked up by head_dim,
    mask and sequence length (none for head_dim 128 causal, nor off FA3's grid)."""
    rows = gpu_plan.fp8_rows()
    assert len(rows) == 18 and {r["dtype"] for r in rows} == {"e4m3"}
    assert {r["batch"] * r["seq"] for r in rows} == {16384}
    figure = {(r["head_dim"], r["causal"], r["seq"]): gpu_plan.fa3_fp8_tflops(r) for r in rows}
    assert figure[(128, False, 16384)] == 1008 and figure[(256, False, 16384)] == 1171
    assert figure[(256, True, 4096)] == 856 and figure[(128, True, 16384)] is None
    assert gpu_plan.fa3_fp8_tflops(dict(rows[2], batch=2)) is None  # 32k tokens: not FA3's grid
    from tessera.runtime import attention_fp8

    (config,) = gpu_plan.row_configs(rows[0])
    assert dict(config.options)["dtype"] == "e4m3"
    assert dict(config.options)["v_transposed"] == attention_fp8.LOWERED_V_LAYOUT  # the kernel tessera.attention runs


# endregion

# region Wheels


def test_the_wheels_are_tesseras_dependencies_the_image_lacks():
    wanted = gpu_session.wheel_requirements()
    names = {gpu_session._name(r) for r in wanted}
    assert "xdsl==0.74.0" in wanted and {"threadpoolctl", "setuptools", "nvidia-cuda-nvcc-cu12", "pytest-xdist"} <= names
    assert not names & {"numpy", "ml-dtypes", "torch", "pytest"}


def test_missing_wheels_say_how_to_make_them(tmp_path):
    report = gpu_session.wheel_report(tmp_path / ".whl")
    assert not report["found"] and "bench/gpu_wheels.sh" in report["message"]


def _manifest(folder: Path, python: str, files: dict[str, bytes]) -> None:
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    (folder / "MANIFEST.json").write_text(json.dumps({
        "python": python, "requirements": ["xdsl==0.74.0"], "total_bytes": sum(map(len, files.values())),
        "files": {name: len(data) for name, data in files.items()}}))


def test_wheels_for_another_python_are_named_and_refused_where_they_cannot_install(tmp_path):
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    _manifest(tmp_path / "pure", "3.99", {"xdsl-0.74.0-py3-none-any.whl": b"x"})
    pure = gpu_session.wheel_report(tmp_path / "pure")
    assert pure["installable"] and f"downloaded for Python 3.99, this is Python {running}" in pure["message"]
    assert f"bench/gpu_wheels.sh --python {running}" in pure["message"]
    _manifest(tmp_path / "binary", "3.99", {"numpy-2.0-cp399-cp399-manylinux_2_17_x86_64.whl": b"x"})
    binary = gpu_session.wheel_report(tmp_path / "binary")
    assert not binary["installable"] and "cannot be installed here" in binary["message"]
    _manifest(tmp_path / "same", running, {"xdsl-0.74.0-py3-none-any.whl": b"x"})
    (tmp_path / "same" / "xdsl-0.74.0-py3-none-any.whl").write_bytes(b"changed")
    assert "missing or changed" in gpu_session.wheel_report(tmp_path / "same")["message"]


@pytest.mark.parametrize("arguments, message", [
    (["--bogus"], "unknown argument '--bogus'"),
    (["--python", "twelve"], "--python takes a CPython version such as 3.12, got 'twelve'"),
])
def test_the_wheel_script_refuses_bad_arguments_before_downloading(arguments, message):
    result = subprocess.run(["bash", str(ROOT / "bench" / "gpu_wheels.sh"), *arguments], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and message in result.stderr


# endregion

# region The fidelity table's measure


def test_ulp_distance_counts_representable_values_between():
    one = np.array([1.0], BF16)
    after = (one.view(np.uint16) + 1).view(BF16)
    assert gpu_fidelity.ulp_distance(one, after)[0] == 1
    signed = np.array([0.0, -0.0, 1.0, np.nan, np.nan, np.inf], BF16)
    other = np.array([-0.0, 0.0, -1.0, 1.0, np.nan, np.inf], BF16)
    # +1 to -1: 0x3f80 steps down to zero and as many below it
    assert list(gpu_fidelity.ulp_distance(signed, other)) == [0, 0, 2 * 0x3F80, np.inf, 0, 0]
    smallest = np.array([np.float32(1e-45)], np.float32)  # the smallest subnormal, one step from +-0
    assert gpu_fidelity.ulp_distance(smallest, -smallest)[0] == 2
    with pytest.raises(ValueError, match="one 16- or 32-bit float type"):
        gpu_fidelity.ulp_distance(one, one.astype(np.float32))


def test_compare_reports_ulps_differing_elements_and_both_errors():
    ref = (np.arange(12) / 4 - 1).reshape(3, 4)  # exact in bf16: the GPU side's error is 0
    gpu = ref.astype(BF16)
    ptx = gpu.copy()
    ptx.view(np.uint16)[1, 2] += 3
    row = gpu_fidelity.compare({"o": gpu}, {"o": ptx}, {"o": ref})["o"]
    assert (row["dtype"], row["elements"], row["max_ulp"], row["differing"]) == ("bfloat16", 12, 3.0, 1)
    assert row["gpu_error"] == 0 and row["ptx_error"] == row["max_abs_diff"] == 3 * 2.0**-8  # 0.5: ulp 2^-8


def test_every_fidelity_case_builds_its_inputs_and_names_its_kernels():
    names = {c.name for c in gpu_fidelity.cases()}
    assert set(gpu_fidelity.QUICK) <= names and set(gpu_stages.QUICK_EXECUTOR) <= set(gpu_fidelity.QUICK)
    assert {c.kind for c in gpu_fidelity.cases()} == {"forward", "varlen", "backward", "split", "paged", "cluster", "gemm",
                                                      "fp8"}
    for case in gpu_fidelity.cases():
        arrays = gpu_fidelity.inputs(case)
        again = gpu_fidelity.inputs(case)
        assert all(np.array_equal(arrays[k].view(np.uint8), again[k].view(np.uint8)) for k in arrays)  # seeded
        assert gpu_fidelity.case_configs(case, arrays), case.name


# endregion

def test_the_fidelity_stage_compares_the_gpu_with_the_prepared_executor_side_and_refuses_a_stale_one(tmp_path,
                                                                                                      monkeypatch):
    """The executor side prepared ahead (`--prepare`); a fake GPU that returns the executor's result with one
    element 2 ULP off: the row says so. The same file with another PTX hash is refused by name, and the row
    keeps the GPU against float64."""
    import gpu_prepared

    case = gpu_fidelity.case_named("gemm-odd-mn")
    real_run = gpu_fidelity.run

    def fake_run(c, arrays, level):
        outputs = real_run(c, arrays, "ptx")
        if level is None:
            outputs["c"].view(np.uint32)[5, 7] += 2
        return outputs

    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(gpu_fidelity, "cases", lambda: [case])
    prepared = tmp_path / "whl" / "fidelity"
    manifest = prepared / gpu_prepared.MANIFEST
    assert gpu_prepared.prepare(gpu_session.StageWriter(manifest), prepared, [case.name], processes=1) == []
    entry = json.loads(manifest.read_text())["cases"][case.name]
    assert entry["outputs"] == {"c": {"dtype": "float32", "shape": [333, 136]}} and len(entry["ptx_sha256"]) == 64
    monkeypatch.setattr(gpu_fidelity, "run", fake_run)
    monkeypatch.setattr(gpu_stages, "gpu_reason", lambda: None)

    def stage() -> dict:
        path = tmp_path / "fidelity.json"
        gpu_stages.fidelity_stage(gpu_session.StageWriter(path), tmp_path, prepared, dry=False, quick=False)
        (row,) = json.loads(path.read_text())["cases"]
        return row

    row = stage()
    c = row["outputs"]["c"]
    assert (row["case"], row["planned"], c["dtype"], c["max_ulp"], c["differing"]) == ("gemm-odd-mn", True, "float32", 2, 1)
    assert c["gpu_error"] > 0 and c["ptx_error"] > 0 and c["max_abs_diff"] > 0 and "executor" not in row
    assert row["raw"] == {"file": "fidelity-outputs/gemm-odd-mn.npz",
                          "dtypes": {"gpu.c": "float32", "executor.c": "float32"}}
    with np.load(tmp_path / row["raw"]["file"]) as raw:  # both sides bit for bit, for study offline
        gpu, executor = raw["gpu.c"].view(np.float32), raw["executor.c"].view(np.float32)
        assert gpu.shape == (333, 136) and np.count_nonzero(gpu != executor) == 1
        assert gpu_fidelity.ulp_distance(gpu, executor)[5, 7] == 2
    manifest.write_text(manifest.read_text().replace(entry["ptx_sha256"], "0" * 64))
    row = stage()
    assert row["executor"] == (f"gemm-odd-mn: stale: prepared from other PTX (sha256 000000000000, now "
                               f"{entry['ptx_sha256'][:12]}): {gpu_prepared.HOW}")
    assert set(row["outputs"]["c"]) == {"dtype", "elements", "gpu_error"} and row["outputs"]["c"]["gpu_error"] > 0
    assert row["raw"]["dtypes"] == {"gpu.c": "float32"}  # the GPU's side kept alone


# region Pictures and test reports


def test_the_svg_has_one_bar_per_measured_system_and_configuration(tmp_path):
    rows = gpu_plan.attention_rows("forward")[:3]
    records = [{"system": s, "config": r, "status": "ok", "tflops": 100.0 + i} for i, r in enumerate(rows)
               for s in ("Tessera", "PyTorch flash")]
    records.append({"system": "Triton", "config": rows[0], "status": "unsupported"})
    path = gpu_plot.write_svg(tmp_path / "a.svg", records, "Forward <bf16>")
    svg = ElementTree.parse(path).getroot()
    bars = [e for e in svg.iter("{http://www.w3.org/2000/svg}rect") if e.get("fill") != "white" and e.get("width") != "10"]
    assert len(bars) == 6
    assert "Forward &lt;bf16&gt;" in path.read_text()
    gpu_plot.write_csv(tmp_path / "a.csv", records)
    assert (tmp_path / "a.csv").read_text().splitlines()[0].startswith("system,status,tflops")


def test_each_gpu_test_is_recorded_as_it_ends_and_one_past_its_limit_is_cut_and_the_rest_run(tmp_path):
    """The tests stage's runner on a file of five tests: a pass, a failure, a skip, one that hangs (cut at its
    limit, pytest started again without it) and one that kills pytest (recorded as crashed); each recorded."""
    (tmp_path / "test_five.py").write_text(textwrap.dedent("""
        import os, time, pytest

        def test_a_pass():
            pass

        def test_a_failure():
            assert 1 == 2, "one is not two"

        def test_a_hang():
            time.sleep(60)

        def test_a_crash():
            os._exit(3)

        @pytest.mark.skip(reason="not here")
        def test_a_skip():
            pass
    """))
    writer = gpu_session.StageWriter(tmp_path / "tests.json")
    tests = gpu_tests.collect(["test_five.py"], cwd=tmp_path)  # every test, no marker
    assert [t.split("::")[1] for t in tests] == ["test_a_pass", "test_a_failure", "test_a_hang", "test_a_crash",
                                                 "test_a_skip"]
    start = time.monotonic()
    counts = gpu_tests.run_tests(writer, tests, 1, 2.0, tmp_path / "log.jsonl", cwd=tmp_path)
    assert time.monotonic() - start < 30
    records = {r["test"].split("::")[1]: r for r in json.loads((tmp_path / "tests.json").read_text())["tests"]}
    assert {n: r["outcome"] for n, r in records.items()} == {
        "test_a_pass": "passed", "test_a_failure": "failed", "test_a_hang": "timeout", "test_a_crash": "crashed",
        "test_a_skip": "skipped"}
    assert counts == {"passed": 1, "failed": 1, "timeout": 1, "crashed": 1, "skipped": 1}
    assert records["test_a_failure"]["message"] == "AssertionError: one is not two"
    assert records["test_a_skip"]["message"] == "Skipped: not here"
    assert 2 <= records["test_a_hang"]["seconds"] < 10 and "limit of 2 s" in records["test_a_hang"]["message"]


# endregion


def test_the_quick_dry_run_compiles_builds_checks_and_writes_its_plan(tmp_path):
    """The command the suite keeps from rotting (the full dry run, `--dry-run` alone, compiles all the
    session's kernels: bench/README)."""
    out = tmp_path / "plan"
    result = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_session.py"), "--dry-run", "--quick", "--out",
                             str(out), "--cache", str(tmp_path / "cache"), "--wheels", str(tmp_path / "no-wheels")],
                            capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    plan = json.loads((out / "plan.json").read_text())
    stages = plan["stages"]
    assert all(stages[s]["status"] == "ok" for s in gpu_plan.STAGES)
    assert "bench/gpu_wheels.sh" in stages["install"]["wheels"]["message"]
    compiled = stages["compile"]["compiled"]
    assert len(compiled) == stages["compile"]["kernels"] == 14 and all("error" not in k for k in compiled)
    assert {k["builder"] for k in compiled} == {"flash_attention", "attention_combine", "flash_attention_paged",
                                               "gemm", *(f"attention_backward_{p}" for p in ("preprocess", "main",
                                                                                             "postprocess")),
                                               "flex_attention (variants)"}
    assert stages["tests"]["runtime"]["collected"] > 50
    assert {i["case"] for i in stages["fidelity"]["inputs"]} == set(gpu_fidelity.QUICK)
    executed = {c["case"]: c for c in stages["fidelity"]["cases"]}
    assert set(executed) == set(gpu_stages.QUICK_EXECUTOR)
    assert executed["paged-decode-d64"]["outputs"]["o"]["ptx_error"] < 1e-2
    assert "python bench/gpu_session.py --prepare" in stages["fidelity"]["prepared"]["not_usable"][0]  # no .whl/
    assert set(json.loads((out / "fidelity" / "manifest.json").read_text())["cases"]) == set(gpu_stages.QUICK_EXECUTOR)
    assert plan["benchmark_rows"] == {"forward": 45, "fp8": 18, "backward": 38, "gemm": 10, "variants": 8}  # at 2k
    parts = json.loads((out / "stages" / "backward_parts.json").read_text())["records"]
    assert len(parts) == 6 and all(r["host_check"] in ("ok", "not in --quick") for r in parts)
    checked = json.loads((out / "stages" / "gemm.json").read_text())["records"]
    assert {r["config"].get("schedule", "128x128"): r["host_check"] for r in checked} == {  # both sizes alike
        s: "ok" if s in ("128x128", gpu_plan.QUICK_GEMM_SCHEDULE) else "not in --quick" for s in GEMM_SCHEDULES}
    backward = json.loads((out / "stages" / "backward.json").read_text())["records"]  # the quick kernels' rows
    assert [r["host_check"] for r in backward if (r["config"]["head_dim"], r["config"]["causal"]) == (64, True)] == \
        ["ok"] * 6
    fp8 = json.loads((out / "stages" / "fp8.json").read_text())["records"]  # the quick kernel's rows checked
    assert [r["host_check"] for r in fp8 if (r["config"]["head_dim"], r["config"]["causal"]) == (128, False)] == \
        ["ok"] * 3
    variants = {r["config"]["variant"]: r for r in json.loads((out / "stages" / "variants.json").read_text())["records"]}
    assert {r["host_check"] for r in variants.values()} == {"not in --quick"}  # the full dry run host-checks them
    assert variants["sliding window 1024"]["density"] == 27 / 64 and variants["ALiBi"]["density"] == 1.0
    assert all(c["ok"] for c in plan["budget_checks"]) and len(plan["budget_checks"]) == 9
    assert {p.name for p in (out / "pictures").glob("*.svg")} == {"attention_forward.svg", "attention_fp8.svg",
                                                                  "attention_backward.svg", "gemm.svg",
                                                                  "attention_variants.svg"}
    assert gpu_session.top_level_files(out) == ["benchmark.csv", "plan.json", "session.json", "session.tgz",
                                                "stage-backward_parts.json", "stage-fidelity.json", "stage-tests.json"]
    with tarfile.open(out / "session.tgz") as archive:
        names = set(archive.getnames())
    assert {"stages/variants.json", "logs/report.log", "pictures/gemm.svg", "fidelity/manifest.json",
            "fidelity-outputs/paged-decode-d64.npz"} <= names


def test_backward_parts_times_each_kernel_its_zero_fills_the_gaps_and_the_host_work(monkeypatch):
    """bench/backward_parts.py around the real `tessera.attention_backward` on a fake CUDA: tensors that say they
    are on the GPU, events that read the host clock, a launch_on_tensors that spends 1 ms before its kernel and
    kernels of 2 ms. Each part's kernel and zero fill, the host work and the gaps come out; the runtime's
    functions are restored after."""
    from types import SimpleNamespace

    import backward_parts

    import tessera
    import tessera.runtime.attention_backward as backward
    from tessera.runtime import compiler, launch

    class Tensor:
        is_cuda, shape = True, (1, 2, 300, 128)

        def float(self):
            return self

        def contiguous(self):
            return self

    class Event:
        def __init__(self, enable_timing=False):
            self.at = None

        def record(self, stream=None):
            self.at = time.perf_counter()

        def elapsed_time(self, other):
            return (other.at - self.at) * 1e3

    torch = SimpleNamespace(Tensor=Tensor, cuda=SimpleNamespace(Event=Event, synchronize=lambda: None))

    def launch_on_tensors(kernel, *inputs, **sizes):
        time.sleep(0.001)  # the zero fills
        launch.prepare_planned(kernel, None, {}, 0)()
        return [Tensor()] * (1 if kernel.config.builder.endswith("postprocess") else 3)

    def prepare_planned(kernel, plan, tensors, *rest, **options):
        return lambda: time.sleep(0.002)

    config = SimpleNamespace(attention=SimpleNamespace(head_dim=128, causal=False, dtype="bf16", scale=0.1,
                                                       block_m=128, block_n=128), deterministic=False)
    monkeypatch.setattr(launch, "_torch", lambda: torch)
    monkeypatch.setattr("tessera.host_arrays._torch", lambda: torch)  # is_torch_tensor's
    monkeypatch.setattr(launch, "usable_device", lambda inputs: 0)
    monkeypatch.setattr(backward, "check_backward_arguments", lambda *arguments: config)
    monkeypatch.setattr(compiler, "compile_kernel", lambda c: SimpleNamespace(config=c))
    monkeypatch.setattr(launch, "launch_on_tensors", launch_on_tensors)
    monkeypatch.setattr(launch, "prepare_planned", prepare_planned)
    monkeypatch.setattr(tessera, "attention", lambda *a, **k: (Tensor(), Tensor()))
    q = Tensor()
    parts = backward_parts.measure(torch, q, q, q, q, causal=False, warmup=1, repeats=3)
    assert set(parts) == {"plain", "wall", "gpu_span", "kernel", "zero_fill", "gap", "host"}
    assert all(2 <= parts["kernel"][p] < 50 and 1 <= parts["zero_fill"][p] < 50 for p in backward_parts.PARTS)
    assert set(parts["gap"]) == {"before_preprocess", "preprocess_to_main", "main_to_postprocess", "after_postprocess"}
    assert {"check", "lookup", "preprocess", "main", "postprocess", "prepare[main]"} <= set(parts["host"])
    assert parts["wall"] >= parts["gpu_span"] >= sum(parts["kernel"].values()) + sum(parts["zero_fill"].values())
    assert parts["plain"] >= 9  # three parts of 3 ms
    assert launch.launch_on_tensors is launch_on_tensors and launch.prepare_planned is prepare_planned  # restored
    assert compiler.compile_kernel(1).config == 1
    assert [r["seq"] for r in backward_parts.rows()] == [512, 1024, 2048] * 2
