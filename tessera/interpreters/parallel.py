"""Running the independent CTAs of one launch in parallel: processes on this machine or any executor.

The CTA simulator (`sm90.launch.run_target_kernel`) and the PTX executor (`ptx.launcher.launch`) take
`workers=N` and `executor=`. The grid's run units (a CTA, a whole cluster, or for the PTX executor a batch of
CTAs vectorised together) are cut, in the serial run's order, into `workers` contiguous *groups*; each group runs
in one task on its own copy of global memory, exactly as the serial run would run those units.

What crosses process boundaries: without an executor, the tasks run in N processes forked for the launch,
which inherit the parent's program (parsed, registers allocated, decoded) and arguments, so a task is only
its units. With an executor (a process pool, a Dask client's `get_executor()`, Ray's), a task carries the
program's text (parsed and allocated once per worker process, cached by a key) and the arguments (an all-zero
array as its shape only). A task returns, per buffer, the bytes its CTAs wrote (runs of bytes with the CTA
that wrote them last, and their values), the runs of bytes they read, and the group's first error, if any.
The logs behind them take 4 bytes per byte of each buffer a group reads or writes, twice (reads, writes), in
each worker.

The parent merges the groups in the serial order. Group g's result is what the serial run computes unless
- a CTA of g read bytes that a CTA of an earlier group writes (the serial run would have read them written), or
- a CTA of g wrote bytes that a CTA of another group writes too (CTAs are unordered: last-writer-wins);
both are reported as races between CTAs naming the two CTAs and the byte, never merged silently. Otherwise its
writes are applied, and its error (the first in its serial order) raised: since the groups are examined in
order, the error reported is the serial run's first error whatever order the tasks complete in. Inside a group
the serial semantics hold (a CTA may read what an earlier CTA of its group wrote), so a cross-CTA dependence
the serial run tolerates may be reported only with some group counts; a race-free kernel is bitwise equal for
every count.

What does not run in parallel (a kernel with atomics or reductions between CTAs, semaphores, interpreter
listeners) runs serially with a `SerialFallback` warning naming the reason (`warnings.simplefilter("error",
SerialFallback)` makes it an error).
"""

from __future__ import annotations

import atexit
import hashlib
import multiprocessing
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from tessera.ir.diagnostics import TesseraWarning

NO_CTA = -1
"""The mark of a byte no CTA of the group touched."""

PROGRAM_CACHE_SIZE = 4
"""Programs (parsed, registers allocated) a worker process keeps, most recent first."""


class SerialFallback(TesseraWarning):
    """A launch that asked for workers ran serially; the message names why (the tools print it as
    `PROG: warning: ...`)."""


@dataclass(frozen=True)
class Parallel:
    """How a launch runs in parallel: `groups` tasks (the grid cut into that many contiguous groups) on
    `executor` (None: `groups` processes of this machine, forked for the launch, or where the platform cannot
    fork, the spawned `local_pool(groups)`)."""

    groups: int
    executor: object | None = None

    @property
    def forks(self) -> bool:
        """Whether the groups run in processes forked for this launch, which inherit the program and the
        arguments (the tasks then carry neither)."""
        return self.executor is None and can_fork()


def parallel_options(where: str, workers, executor) -> Parallel | None:
    """Check `workers` (an integer >= 1, or None) and `executor` (a `concurrent.futures.Executor` or any object
    with a `submit(fn, *args)` returning futures, or None); None when neither asks for parallel running or
    `workers` is 1 without an executor. With an executor and no `workers`, the grid is cut into
    `os.cpu_count()` groups (pass the executor's worker count as `workers` for a cluster of machines)."""
    if workers is not None and (isinstance(workers, (bool, np.bool_)) or not isinstance(workers, (int, np.integer))):
        raise TypeError(f"{where}: workers must be an integer >= 1 (processes), got {type(workers).__name__} "
                        f"{workers!r}")
    if workers is not None and int(workers) < 1:
        raise ValueError(f"{where}: workers must be >= 1, got {workers}")
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise TypeError(f"{where}: executor must be a concurrent.futures.Executor (ProcessPoolExecutor, a Dask "
                        f"client's get_executor(), ...); got {type(executor).__name__}")
    if executor is None and (workers is None or int(workers) == 1):
        return None
    groups = int(workers) if workers is not None else (os.cpu_count() or 1)
    return Parallel(groups, executor)


def serial_note(where: str, reason: str) -> None:
    """Warn that a launch asked to run in parallel runs serially, and why."""
    warnings.warn(f"{where}: runs serially: {reason}", SerialFallback, stacklevel=3)


def split(count: int, groups: int) -> list[range]:
    """`range(count)` cut into at most `groups` contiguous, non-empty ranges whose lengths differ by <= 1."""
    groups = max(1, min(groups, count))
    bounds = [count * g // groups for g in range(groups + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


# region the processes of this machine
def can_fork() -> bool:
    """Whether workers are forked (Linux: they then inherit a launch's state); macOS, where forking a process
    that uses system frameworks is unsafe, and Windows spawn them."""
    return sys.platform.startswith("linux")


_SPAWNED: dict[int, ProcessPoolExecutor] = {}


def local_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of `workers` spawned processes, kept for later launches (each keeps the programs it parsed): the
    local pool where processes cannot be forked."""
    pool = _SPAWNED.get(workers)
    if pool is None or getattr(pool, "_broken", False):
        pool = _SPAWNED[workers] = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    return pool


@atexit.register
def _shutdown_pools() -> None:
    for pool in _SPAWNED.values():
        pool.shutdown(wait=False, cancel_futures=True)
    _SPAWNED.clear()
# endregion


# region what crosses process boundaries
@dataclass(frozen=True)
class Zeros:
    """An all-zero argument shipped as its shape and element type (an output before the kernel runs)."""

    shape: tuple[int, ...]
    dtype: np.dtype


def ship(value):
    """`value` as sent to a worker: an all-zero contiguous array becomes `Zeros`."""
    if isinstance(value, np.ndarray) and value.flags.c_contiguous and value.size and not value.any():
        return Zeros(value.shape, value.dtype)
    return value


def unship(value):
    return np.zeros(value.shape, value.dtype) if isinstance(value, Zeros) else value


def program_key(*parts: str) -> str:
    """The cache key of a program: a hash of its text and how it is run."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


_PROGRAMS: dict[str, object] = {}


def cached_program(key: str, build: Callable[[], object]) -> object:
    """The program of `key` in this process, built by `build()` the first time (the few most recent kept)."""
    if key not in _PROGRAMS:
        while len(_PROGRAMS) >= PROGRAM_CACHE_SIZE:
            _PROGRAMS.pop(next(iter(_PROGRAMS)))
        _PROGRAMS[key] = build()
    return _PROGRAMS[key]
# endregion


# region logs of global accesses
Runs = tuple[np.ndarray, np.ndarray, np.ndarray]
"""(starts, ends, ranks): byte ranges [start, end) of one buffer and the CTA (linear rank) of each."""


class AccessLog:
    """The bytes of each global buffer the CTAs of a group read and wrote, with the CTA (its linear index in
    the grid, x fastest) that touched each last. `buffers` are the flat uint8 views of the buffers."""

    def __init__(self, sizes: Sequence[int]):
        self.sizes = list(sizes)
        self.written: dict[int, np.ndarray] = {}
        self.read: dict[int, np.ndarray] = {}
        self.current = NO_CTA
        """The CTA to charge for accesses that do not name theirs (the CTA simulator's TMA loads)."""

    def note(self, buffer: int, index: np.ndarray, ranks, write: bool) -> None:
        """Bytes `index` (any shape; `ranks` broadcast against it) of `buffer` were written (or read)."""
        table = self.written if write else self.read
        marks = table.get(buffer)
        if marks is None:
            marks = table[buffer] = np.full(self.sizes[buffer], NO_CTA, np.int32)
        marks[index] = ranks

    @staticmethod
    def runs(marks: np.ndarray) -> Runs:
        edges = np.flatnonzero(marks[1:] != marks[:-1]) + 1
        starts = np.r_[0, edges]
        ends = np.r_[edges, marks.size]
        ranks = marks[starts]
        keep = ranks != NO_CTA
        return starts[keep], ends[keep], ranks[keep]

    def result(self, buffers: Sequence[np.ndarray]) -> tuple[dict[int, Runs], dict[int, np.ndarray], dict[int, Runs]]:
        """(written runs, the written bytes of each buffer concatenated, read runs)."""
        written = {b: self.runs(m) for b, m in self.written.items()}
        data = {b: buffers[b][expand(*written[b][:2])] for b in written}
        return written, data, {b: self.runs(m) for b, m in self.read.items()}


def expand(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The byte positions of the ranges [starts, ends), in order."""
    lengths = ends - starts
    if not lengths.size:
        return np.zeros(0, np.int64)
    offsets = np.repeat(starts - np.r_[0, np.cumsum(lengths)[:-1]], lengths)
    return offsets + np.arange(int(lengths.sum()), dtype=np.int64)


@dataclass
class GroupResult:
    """What a group's task returns: its global accesses (see `AccessLog.result`), the first error of its serial
    run (None when it ran to the end), and `extra` (per launch path: traffic, instruction counts; and the
    task's CPU seconds, "cpu_seconds", which bench/parallel.py reads)."""

    written: dict[int, Runs]
    data: dict[int, np.ndarray]
    read: dict[int, Runs]
    error: BaseException | None = None
    extra: dict = field(default_factory=dict)
# endregion


def innermost_op(error: BaseException):
    """The innermost op being interpreted when `error` was raised (the deepest frame with an `op` local that is
    an xDSL Operation), or None: what a diagnostic locates the error at, found in the worker before the
    traceback is lost crossing the process boundary (the parent sets it as `error.failing_op`)."""
    from xdsl.ir import Operation

    op, tb = None, error.__traceback__
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("op")
        if isinstance(candidate, Operation):
            op = candidate
        tb = tb.tb_next
    return op


# region merging
@contextmanager
def running_groups(parallel: Parallel, run: Callable, tasks: list, key: str, program: object) -> Iterator[list]:
    """In its scope, the futures of `run(task)` for each task, in task order. Without an executor, on a
    platform that forks, the tasks run in `parallel.groups` processes forked for this launch, which find
    `program` (the parent's, with the arguments) under `key` in their `cached_program`; elsewhere in
    `parallel.executor` or the spawned `local_pool`, where a task carries its program's text."""
    if parallel.forks:
        _PROGRAMS[key] = program
        pool = ProcessPoolExecutor(min(parallel.groups, len(tasks)), mp_context=multiprocessing.get_context("fork"))
        try:
            yield [pool.submit(run, task) for task in tasks]
        except BaseException:
            for process in list(getattr(pool, "_processes", {}).values()):  # the groups after an error are moot
                process.terminate()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            _PROGRAMS.pop(key, None)
        return
    pool = parallel.executor if parallel.executor is not None else local_pool(parallel.groups)
    yield [pool.submit(run, task) for task in tasks]


def merge(futures: list, buffers: Sequence[np.ndarray], where_byte: Callable[[int, int], str],
          cta_name: Callable[[int], str], race: Callable[[str], BaseException],
          absorb: Callable[[GroupResult], None] | None = None) -> None:
    """Merge the groups' results (futures of `GroupResult`, in the serial order) into `buffers` (flat uint8),
    as the module docstring says: raise `race(message)` for a race between CTAs of different groups, else
    apply the group's writes (and `absorb(result)`) and raise its error. `where_byte(buffer, offset)` names a
    byte; `cta_name(rank)` a CTA."""
    writers: dict[int, np.ndarray] = {}
    try:
        for future in futures:
            result: GroupResult = future.result()
            for b, (starts, ends, ranks) in result.read.items():
                if b in writers:
                    positions = expand(starts, ends)
                    prior = writers[b][positions]
                    hit = np.flatnonzero(prior != NO_CTA)
                    if hit.size:
                        i = int(hit[0])
                        reader = int(np.repeat(ranks, ends - starts)[i])
                        raise race(f"CTA {cta_name(reader)} reads {where_byte(b, int(positions[i]))}, which CTA "
                                   f"{cta_name(int(prior[i]))} writes in this launch: a race between CTAs (they "
                                   "are unordered, so the value read depends on which runs first; run with "
                                   "workers=1 for the serial order)")
            for b, (starts, ends, ranks) in result.written.items():
                positions = expand(starts, ends)
                owners = np.repeat(ranks, ends - starts)
                marks = writers.get(b)
                if marks is None:
                    marks = writers[b] = np.full(buffers[b].size, NO_CTA, np.int32)
                prior = marks[positions]
                hit = np.flatnonzero(prior != NO_CTA)
                if hit.size:
                    i = int(hit[0])
                    raise race(f"CTA {cta_name(int(prior[i]))} and CTA {cta_name(int(owners[i]))} both write "
                               f"{where_byte(b, int(positions[i]))}: a race between CTAs (they are unordered, so "
                               "the bytes kept depend on which runs last)")
                buffers[b][positions] = result.data[b]
                marks[positions] = owners
            if absorb is not None:
                absorb(result)
            if result.error is not None:
                raise result.error
    finally:
        for future in futures:
            future.cancel()
# endregion


__all__ = ["Parallel", "SerialFallback", "parallel_options", "serial_note", "split", "local_pool", "running_groups",
           "AccessLog", "innermost_op",
           "GroupResult", "merge", "ship", "unship", "program_key", "cached_program"]
