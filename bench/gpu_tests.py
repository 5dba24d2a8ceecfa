"""The GPU session's tests stage (bench/gpu_session.py): tests/test_runtime.py and every test marked `gpu`, each
test under its own time limit, each outcome written to the stage's JSON as the test ends.

The first H200 session ran them as two pytest calls whose JUnit report is written at the end: one failed early,
one ran past the stage's budget, and which ones was lost. Here pytest reports each test's start and end through
a plugin (bench/pytest_plugin/gpu_test_log.py) into a file this stage watches; a test still running
`gpu_plan.TEST_LIMIT_S` after its start is a timeout: pytest is killed (its process group: a kernel that hangs
the GPU cannot be interrupted from inside), the test recorded as `timeout`, and pytest started again on the
tests not yet run.
A pytest that dies under a test (a crash of the driver, say) has that test recorded as `crashed`, and the rest
run likewise. No pytest-timeout needed (the GPU machine may not have it).

The selections run in `gpu_plan.GPU_TESTS`' order, cheap first: the runtime's tests on 8 workers (pytest-xdist,
from .whl/), then the other `gpu` tests one at a time in their files' planned order. `tests` in the stage's
JSON: one record per test as it ends ({"test", "outcome", "seconds", "message"}); `running_tests`: those running now.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import gpu_plan

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
PLUGIN = BENCH / "pytest_plugin"
"""The folder of the plugin alone, put on pytest's PYTHONPATH (bench/ itself would shadow modules by its names)."""
POLL_S = 0.2


MARKS_GPU = re.compile(r"^\s*@pytest\.mark\.gpu\b|=\s*pytest\.mark\.gpu\b", re.MULTILINE)
"""A test file's text marking tests `gpu`: the decorator, or a name given to the marker (test_runtime's
`needs_gpu = pytest.mark.gpu`)."""


def marked_files(root: Path = ROOT) -> list[str]:
    """The test files that mark tests `gpu` (`MARKS_GPU`), relative to `root`."""
    return sorted(str(p.relative_to(root)) for p in (root / "tests").glob("test_*.py")
                  if MARKS_GPU.search(p.read_text()))


def collect(files: list[str], marker: str | None = None, cwd: Path = ROOT) -> list[str]:
    """The node ids of the tests of `files` (with `marker`, those it selects: `-m marker`), in collection
    order; SystemExit with pytest's output when it cannot collect them."""
    marker = ["-m", marker] if marker else []
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "-p", "no:xdist", *marker, *files], cwd=cwd, capture_output=True, text=True)
    if result.returncode not in (0, 5):  # 5: nothing collected
        raise SystemExit(f"pytest could not collect {' '.join(files)}: {result.stdout[-2000:]}{result.stderr[-2000:]}")
    return [line.strip() for line in result.stdout.splitlines() if "::" in line and not line.startswith(" ")]


def _events(path: Path, offset: int) -> tuple[list[dict], int]:
    """The complete JSON lines of `path` past byte `offset`, and the offset after them."""
    if not path.exists():
        return [], offset
    with open(path, "rb") as log:
        log.seek(offset)
        data = log.read()
    complete = data[:data.rfind(b"\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.strip()], offset + len(complete)


def run_tests(writer, tests: list[str], workers: int, limit_s: float, log: Path, cwd: Path = ROOT) -> dict:
    """Run `tests` (node ids) with pytest, on `workers` xdist workers (1: in one process, in order), each under
    `limit_s`; each test's record added to writer's `tests` as it ends. The counts of each outcome."""
    remaining, counts = list(tests), {}
    env = dict(os.environ, GPU_TEST_LOG=str(log),
               PYTHONPATH=os.pathsep.join(filter(None, [str(PLUGIN), os.environ.get("PYTHONPATH")])))
    parallel = ["-n", str(workers)] if workers > 1 and importlib.util.find_spec("xdist") else ["-p", "no:xdist"]

    def record(test: str, outcome: str, seconds: float, message: str = "") -> None:
        remaining.remove(test)
        counts[outcome] = counts.get(outcome, 0) + 1
        writer.add("tests", {"test": test, "outcome": outcome, "seconds": round(seconds, 2), "message": message})

    while remaining:
        log.unlink(missing_ok=True)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "gpu_test_log", "-p", "no:cacheprovider", *parallel,
                   *remaining]
        process = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True)
        running, offset, over = {}, 0, None
        while over is None:
            exited = process.poll() is not None
            events, offset = _events(log, offset)
            for event in events:
                if event["event"] == "start":
                    running[event["test"]] = event["time"]
                elif event["test"] in remaining:
                    running.pop(event["test"], None)
                    record(event["test"], event["outcome"], event["seconds"], event["message"])
            if events:
                writer.set("running_tests", sorted(running))
            if exited:
                break
            over = next((t for t, since in running.items() if time.time() - since > limit_s), None)
            time.sleep(0 if over else POLL_S)
        if over is not None:
            _kill(process)
            record(over, "timeout", time.time() - running.pop(over),
                   f"still running after its limit of {limit_s:.0f} s")
        elif running:  # pytest died under these tests
            for test, since in running.items():
                record(test, "crashed", time.time() - since, f"pytest exited ({process.returncode}) during the test")
        elif remaining:  # pytest ended without running them: a collection error, say
            for test in list(remaining):
                record(test, "not run", 0.0, f"pytest exited ({process.returncode}) without running it")
    writer.set("running_tests", [])
    return counts


def _kill(process: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=3)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def tests_stage(writer, out: Path, dry: bool, quick: bool) -> None:
    """Each selection of `gpu_plan.GPU_TESTS` collected, then run test by test (`run_tests`); the dry run
    collects only (the quick one tests/test_runtime.py alone) and checks that every test file marking tests
    `gpu` is planned (the full one: that every test `pytest -m gpu tests` collects is in a planned file)."""
    planned = [f for _, files, _, _ in gpu_plan.GPU_TESTS for f in files]
    unplanned = sorted(set(marked_files()) - set(planned))
    if unplanned:
        raise SystemExit(f"{', '.join(unplanned)} mark tests `gpu` but are not in gpu_plan.GPU_TESTS")
    for name, files, marker, workers in gpu_plan.GPU_TESTS:
        if dry and quick and name != "runtime":
            continue
        tests = collect(list(files), marker)
        writer.set(name, {"collected": len(tests), "files": list(files), "workers": workers})
        if not dry:
            writer.set(name, {**writer.data[name], "outcomes": run_tests(
                writer, tests, workers, gpu_plan.TEST_LIMIT_S, out / "logs" / f"tests-{name}.jsonl")})
    if dry and not quick:
        found = {t.split("::")[0] for t in collect(["tests"], "gpu")}
        if found - set(planned):
            raise SystemExit(f"`pytest -m gpu tests` finds gpu tests in {', '.join(sorted(found - set(planned)))}, "
                             "which gpu_plan.GPU_TESTS does not plan")
