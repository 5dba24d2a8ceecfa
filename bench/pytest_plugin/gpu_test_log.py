"""A pytest plugin for the GPU session's tests stage (bench/gpu_tests.py loads it with `-p gpu_test_log`, this
folder on PYTHONPATH): one JSON line per event, flushed at once, into the file named by $GPU_TEST_LOG, so that
the stage, watching the file from outside, knows which test runs since when and how each one ended, even if
pytest is then killed.

    {"event": "start", "test": NODEID, "time": EPOCH_S}
    {"event": "end", "test": NODEID, "outcome": "passed" | "failed" | "skipped", "seconds": S, "message": LINE}

`end` comes after a test's teardown: its outcome is the worst of its phases (a failing setup or teardown is a
failure), its seconds their sum, its message the first line of the failure or of the skip's reason. Under
pytest-xdist only the controller writes (it receives every worker's start and reports)."""

from __future__ import annotations

import json
import os
import time

_config = None
_phases: dict[str, list] = {}


def pytest_configure(config):
    global _config
    _config = config


def _write(record: dict) -> None:
    path = os.environ.get("GPU_TEST_LOG")
    if not path or hasattr(_config, "workerinput"):  # an xdist worker: its controller writes
        return
    with open(path, "a") as log:
        log.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid, location):
    _phases[nodeid] = []
    _write({"event": "start", "test": nodeid, "time": time.time()})


def _first_line(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2])[:300]
    text = str(report.longrepr or "").strip().splitlines()
    failing = [line for line in text if line.startswith("E ")]
    return (failing[0][1:].strip() if failing else text[-1] if text else "")[:300]


def pytest_runtest_logreport(report):
    phases = _phases.setdefault(report.nodeid, [])
    phases.append(report)
    if report.when != "teardown":
        return
    worst = next((r for r in phases if r.failed), None) or next((r for r in phases if r.skipped), None)
    _write({"event": "end", "test": report.nodeid, "outcome": worst.outcome if worst else "passed",
            "seconds": round(sum(r.duration for r in phases), 3), "message": _first_line(worst) if worst else ""})
    del _phases[report.nodeid]
