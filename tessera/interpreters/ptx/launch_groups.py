"""A launch's batches run in parallel groups (`tessera.interpreters.parallel`, whose docstring has the protocol):
`run_groups` splits the batches into groups, ships each group's task (`_PtxGroup`) to a worker (forked workers
inherit the parsed program and arguments), and merges what the groups wrote into the launch's global memory;
`_run_group` is a worker's run of one group.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import time
from dataclasses import dataclass

import numpy as np

from tessera.interpreters import serving_checks
from tessera.interpreters.parallel import (
    AccessLog, GroupResult, Parallel, cached_program, merge, program_key, running_groups, ship, split, unship,
)
from tessera.interpreters.ptx.launch_setup import PreparedLaunch, run_batches, setup_launch
from tessera.interpreters.ptx.params import ParamStruct
from tessera.interpreters.ptx.state import GLOBAL_BASE, fail
from tessera.interpreters.ptx.syntax import Module


@dataclass
class _PtxGroup:
    """One group's task: the program (PTX text or a parsed Module; None for a forked worker, which inherits the
    parent's), its cache key, the entry, `launch`'s arguments (None when inherited) and options, the starts of
    the group's batches, the serving checks in force and whether to count instructions."""

    key: str
    ptx: str | Module | None
    kernel: str
    args: list | None
    options: dict
    starts: range
    checks: tuple
    counting: bool


def _run_group(task: _PtxGroup) -> GroupResult:
    """A worker's run of one group of batches on its own global memory (`parallel` module docstring)."""
    cpu = time.process_time()

    def parse():
        if isinstance(task.ptx, str):
            from tessera.interpreters.ptx.parse import parse_ptx

            return {"ptx": parse_ptx(task.ptx, task.options["source"])}
        return {"ptx": task.ptx}

    program = cached_program(task.key, parse)
    if "run" in program:  # forked: the parent's launch, set up before any CTA ran; its memory as it was then
        run = program["run"]
        if "pristine" not in program:
            program["pristine"] = run.memory.buffer.copy()
        run.memory.buffer[...] = program["pristine"]
    else:
        options = dict(task.options)
        run = setup_launch(program["ptx"], task.kernel, options.pop("grid"), options.pop("block"),
                           [unship(a) for a in task.args], options.pop("shared_bytes"), options.pop("source"),
                           options.pop("max_steps"), options.pop("memory_budget"), options.pop("cta_order"),
                           options.pop("cluster"), options.pop("non_portable_cluster_size"), options.pop("races"),
                           options.pop("schedule"), options.pop("seed"), options.pop("fuse"),
                           options.pop("strict_proxy"))
    log = run.memory.log = AccessLog([run.memory.buffer.size])
    counts, error = {}, None
    with serving_checks.checking(*task.checks):
        try:
            counts = run_batches(run, task.starts, task.counting)
        except Exception as failure:  # noqa: BLE001 - raised by the parent in the serial order (`merge`)
            error = failure
            counts = {}
    written, data, read = log.result([run.memory.buffer])
    return GroupResult(written, data, read, error, {"counts": counts, "cpu_seconds": time.process_time() - cpu})


def run_groups(parallel: Parallel, run: PreparedLaunch, starts: range, stats: dict | None, ptx, kernel: str,
               options: dict) -> None:
    """Run the batches `starts` in `parallel.groups` groups and merge what they wrote into `run`'s global memory."""
    if parallel.forks:  # the workers inherit the parsed program and the arguments
        shipped_ptx, shipped_args = None, None
        key = program_key(kernel, str(id(run)), str(os.getpid()), str(time.monotonic_ns()))
    else:
        shipped_ptx = ptx
        key = program_key(ptx if isinstance(ptx, str) else hashlib.sha256(pickle.dumps(ptx)).hexdigest(), kernel)
        referenced = {id(getattr(v, "array", None)) for v in run.args} | {
            id(a) for v in run.args if isinstance(v, ParamStruct) for a in v.arrays()}
        shipped_args = [ship(a) if id(a) not in referenced else a for a in run.args]
    program = {"run": run}
    checks = serving_checks.active_checks()
    tasks = [_PtxGroup(key, shipped_ptx, kernel, shipped_args, options, starts[part.start:part.stop], checks,
                       stats is not None)
             for part in split(len(starts), parallel.groups)]
    totals: dict[str, int] = {}

    def absorb(result: GroupResult) -> None:
        for name, value in result.extra["counts"].items():
            totals[name] = totals.get(name, 0) + value

    memory_ = run.memory
    starts_ = np.array([seg.start - GLOBAL_BASE for seg in memory_.segments], np.int64)
    gx, gy, _ = run.grid

    def where_byte(_: int, offset: int) -> str:
        k = int(np.searchsorted(starts_, offset, side="right") - 1)
        return f"{memory_.segments[k].name} at byte offset {offset - int(starts_[k])}"

    with running_groups(parallel, _run_group, tasks, key, program) as futures:
        merge(futures, [memory_.buffer], where_byte, lambda r: str((r % gx, r // gx % gy, r // (gx * gy))),
              lambda message: fail(options["source"], None, message), absorb)
    if stats is not None:
        stats.update(totals)
