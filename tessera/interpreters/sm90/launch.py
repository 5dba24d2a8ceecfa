"""Launching a Target IR kernel in the CTA simulator.

`run_target_kernel` takes a target kernel (its attributes and arguments: `target_kernel`), the arrays (as
`tessera.interpreters.launch.prepare_arguments` makes them) and the sizes, encodes the tensor maps, and runs
every CTA of the grid (x fastest), one at a time or in batches of a leader and its followers (`batches`), or in
groups on several processes (`tessera.interpreters.parallel`), writing the outputs in place.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from tessera.dialects import sm90, sm90_reductions
from tessera.interpreters.blas_threads import single_threaded_blas
from tessera.interpreters.block_batch import KernelHazardError
from tessera.interpreters.sm90.arith import RegisterArithFunctions
from tessera.cluster import CLUSTER_ATTR, kernel_cluster, launch_cluster
from tessera.interpreters.sm90.cluster import Cluster, ClusterFunctions
from tessera.interpreters.sm90.control import DivergentControlFunctions
from tessera.interpreters.sm90.cp_async import CpAsyncFunctions
from tessera.interpreters.sm90.cta import CtaState
from tessera.interpreters.sm90.batches import batchable, run_batches
from tessera.interpreters.sm90.followers import Followers
from tessera.interpreters.sm90.global_memory import GlobalMemory
from tessera.interpreters.sm90.machine import Sm90Functions
from tessera.interpreters.sm90.program import CompiledCta, CompiledKernel
from tessera.interpreters.sm90.record_pool import RecordPool, launch_pool
from tessera.interpreters.sm90.reductions import ReductionFunctions, reduction_targets
from tessera.interpreters.sm90.strands import SCHEDULES, HazardUnwind, Scheduler
from tessera.interpreters.sm90.target_abi import TargetKernel, argument_values, module_of, target_kernel
from tessera.interpreters.sm90.tma import TensorMap
from tessera.interpreters.sm90.register_check import RegisterFileChecker, RegisterLayout
from tessera.interpreters.sm90.wgmma_checks import PendingUseChecker, RegisterWrites, wgmma_register_sources
from tessera.interpreters import serving_checks
from tessera.interpreters.parallel import (
    GroupResult, Parallel, cached_program, innermost_op, merge, parallel_options, program_key, running_groups,
    serial_note, ship, split, unship,
)
from tessera.kernel_abi import BOX_ATTR, SIZE_ATTR, SOURCE_ATTR, SWIZZLE_ATTR
from tessera.sm90 import facts



BATCH_CTAS = 16
"""CTAs of a grid run as one leader and its followers (`followers`), at most: the followers' values take F times
the leader's memory."""


@dataclass(frozen=True)
class SimulatorOptions:
    """How a CTA is simulated and checked: `races` (happens-before checks of writes, wgmma fences and
    mbarrier-init fences, `happens_before`), the strand `schedule` ("round_robin", or "adversarial": producers run
    as far ahead as the synchronisation allows, the others in a random order drawn from `seed`; see
    `strands.Scheduler`), `strict_proxy` (`CtaState.strict_proxy`)."""

    races: bool = True
    schedule: str = "round_robin"
    seed: int = 0
    strict_proxy: bool = False
    register_sources: tuple = (frozenset(),) * 4
    """`wgmma_checks.wgmma_register_sources` of the kernel (filled in by `simulator_options`)."""


def simulator_options(func_op: func.FuncOp, races: bool = True, schedule: str = "round_robin",
                      seed: int = 0, strict_proxy: bool = False,
                      program: CompiledKernel | None = None) -> SimulatorOptions:
    """The options of a run of `func_op` (ValueError for an unknown schedule); `program`: its
    `CompiledKernel.of`, if the caller has it."""
    if schedule not in SCHEDULES:
        raise ValueError(f"run_target_kernel: schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if program is None and races:
        program = CompiledKernel.of(func_op)
    sources = (program.fact("wgmma register sources", lambda: wgmma_register_sources(func_op))
               if races else (frozenset(),) * 4)
    return SimulatorOptions(bool(races), schedule, int(seed), bool(strict_proxy), sources)


def _checkers(cta: CtaState, allocation, listeners, options: SimulatorOptions) -> tuple:
    checkers: tuple = (PendingUseChecker(cta.wgmma),)
    if options.races and allocation is None:  # with an allocation the register file's fence rule replaces the SSA
        # one (`RegisterFileChecker` sets `WgmmaUnit.register_fences`), the only reader of these records
        checkers += (RegisterWrites(cta.wgmma, options.register_sources),)
    if allocation is not None:
        checkers += (RegisterFileChecker(cta, allocation),)
    if listeners is not None:
        checkers += tuple(listeners(cta))
    return checkers


def _linear(cta_id: tuple[int, int, int], grid: tuple[int, int, int]) -> int:
    return cta_id[0] + grid[0] * (cta_id[1] + grid[1] * cta_id[2])


def run_cta(kernel: TargetKernel, module: ModuleOp, values: list, memory: GlobalMemory,
            cta_id: tuple[int, int, int], grid: tuple[int, int, int], allocation=None, listeners=None,
            options: SimulatorOptions = SimulatorOptions(), pool: RecordPool | None = None,
            followers: Sequence[tuple[int, int, int]] = ()) -> CtaState:
    """Run one CTA of `kernel` to completion; raises KernelHazardError (or DeadlockError) on a hazard, carried
    by a `HazardUnwind` (`run_target_kernel` raises the error itself). `listeners`, if given, makes extra
    interpreter listeners for the CTA (`tessera.validate` records values). `pool`: where its units take their
    per-byte records from (`record_pool`). `followers`: the ids of CTAs computed alongside it
    (`tessera.interpreters.sm90.followers`; `cta.followers` says whether they dropped out)."""
    scheduler = Scheduler(lambda env: main, options.schedule, options.seed + _linear(cta_id, grid))
    cta = CtaState(kernel.threads, kernel.smem_bytes, cta_id, grid, scheduler, races=options.races,
                   strict_proxy=options.strict_proxy, pool=pool)
    functions = (DivergentControlFunctions(cta), RegisterArithFunctions(cta), Sm90Functions(cta, memory),
                 ReductionFunctions(cta, memory), CpAsyncFunctions(cta, memory))
    # one compiled program per CTA: its strands share its frame (`program`)
    main = CompiledCta(kernel.program, functions, _checkers(cta, allocation, listeners, options))
    if followers:
        cta.followers = Followers(cta, list(followers))
        main.follow(cta.followers, values)

    def body():
        results = main.run_ssacfg_region(kernel.op.body, tuple(values), kernel.name, main.fargs if followers else None)
        cta.tma.check_drained()
        cta.wgmma.check_drained()
        cta.bulk.check_drained()
        cta.cp_async.check_drained()
        cta.check_synchronisation_drained()
        return results

    scheduler.run(main, np.ones(kernel.threads, bool), body)
    main.release()
    return cta


def run_cluster(kernel: TargetKernel, module: ModuleOp, values: list, memory: GlobalMemory,
                cta_ids: Sequence[tuple[int, int, int]], grid: tuple[int, int, int], shape: tuple[int, int, int],
                allocation=None, listeners=None, options: SimulatorOptions = SimulatorOptions(),
                pool: RecordPool | None = None) -> list[CtaState]:
    """Run the CTAs `cta_ids` (in %cluster_ctarank order) of one cluster of `shape` together, each with its own
    shared memory, on one strand scheduler (`tessera.interpreters.sm90.cluster`); raises KernelHazardError
    (or DeadlockError) on a hazard in any of them."""
    # each strand makes its own CTA's interpreters
    scheduler = Scheduler(lambda env: None, options.schedule, options.seed + _linear(cta_ids[0], grid))
    cluster = Cluster(shape, scheduler, kernel.threads)
    members, bodies = [], []
    for rank, cta_id in enumerate(cta_ids):
        cta = CtaState(kernel.threads, kernel.smem_bytes, cta_id, grid, scheduler, cluster=cluster, rank=rank,
                       races=options.races, strict_proxy=options.strict_proxy, pool=pool)
        members.append(cta)
        bodies.append(_member_body(kernel, module, values, memory, cta, allocation, listeners, options))
    cluster.members = members
    scheduler.run_together(bodies)
    for _, interpreter, *_ in bodies:
        interpreter.release()
    return members


def _member_body(kernel, module, values, memory, cta: CtaState, allocation, listeners, options: SimulatorOptions):
    """(name, interpreter, mask, body, factory) of one member CTA for `Scheduler.run_together`."""
    functions = (DivergentControlFunctions(cta), RegisterArithFunctions(cta), Sm90Functions(cta, memory),
                 ReductionFunctions(cta, memory), ClusterFunctions(cta, memory), CpAsyncFunctions(cta, memory))
    main = CompiledCta(kernel.program, functions, _checkers(cta, allocation, listeners, options))

    def make_interpreter(env=None) -> CompiledCta:
        return main  # a deferred branch runs in the CTA's frame (`program`)

    def body():
        results = main.run_ssacfg_region(kernel.op.body, tuple(values), kernel.name)
        cta.cluster.exit(cta)
        cta.tma.check_drained()
        cta.wgmma.check_drained()
        cta.bulk.check_drained()
        cta.cp_async.check_drained()
        cta.check_synchronisation_drained()
        return results

    return (f"CTA {cta.cta_id} (rank {cta.rank})", main, np.ones(kernel.threads, bool), body, make_interpreter)


def cluster_members(grid: tuple[int, int, int], shape: tuple[int, int, int]) -> list[list[tuple[int, int, int]]]:
    """The CTA ids of each cluster of the grid (clusters in linear order, x fastest; members by rank)."""
    gx, gy, gz = grid
    cx, cy, cz = shape
    clusters = []
    for Z in range(gz // cz):
        for Y in range(gy // cy):
            for X in range(gx // cx):
                clusters.append([(X * cx + x, Y * cy + y, Z * cz + z)
                                 for z in range(cz) for y in range(cy) for x in range(cx)])
    return clusters


@single_threaded_blas()
def run_target_kernel(func_op: func.FuncOp, arguments: Sequence[np.ndarray], sizes: Mapping[str, int],
                      allocation=None, listeners=None, cta_order: Sequence[int] | None = None,
                      traffic: dict | None = None, cluster: tuple[int, int, int] | None = None, *,
                      workers: int | None = None, executor=None, races: bool = True, schedule: str = "round_robin",
                      seed: int = 0, batch_ctas: int = BATCH_CTAS, strict_proxy: bool = False) -> None:
    """Run every CTA of the target kernel `func_op` on the Tile-level argument arrays (inputs, outputs,
    scratch), writing outputs into them. Raises ValueError for a bad launch and KernelHazardError (or its
    subclass DeadlockError) naming the op and thread of a hazard; a grid, a thread count or dynamic shared memory
    past the driver's launch limits is refused before any CTA runs. With a register `allocation`
    (`tessera.regalloc`), every operand is also checked against the register file it implies. `listeners`
    (optional) makes extra interpreter listeners for each CTA: `listeners(cta_state)`. `cta_order` (optional) is
    the order the CTAs run in, a permutation of their linear indices (x fastest; default: that order): CTAs
    that add into one tensor must agree in any order (`global_memory`). BLAS runs on one thread meanwhile
    (`tessera.interpreters.blas_threads`).

    A kernel that declares a cluster (`tile.cluster`) runs cluster by cluster, the members together
    (`run_cluster`), with the shape `tessera.cluster.launch_cluster` gives for the grid (clusters of one where
    it does not divide the grid), or `cluster` if given (as a host description says; checked against the
    grid and the hardware's limits); `cta_order` is then refused. `traffic`, if given, receives {cta id:
    {tensor map: bytes read from global memory by its TMA copies}}.

    `workers` (processes on this machine) or `executor` (any `concurrent.futures.Executor`) runs the CTAs (whole
    clusters) in that many contiguous groups in parallel, with the serial run's results and first error, and
    races between CTAs of different groups reported (`tessera.interpreters.parallel`); a kernel with atomics,
    reductions or semaphores between CTAs, or a run with `listeners`, runs serially with a `SerialFallback`
    warning.

    `races` (default on) checks shared-memory accesses, wgmma register operands and mbarrier inits by
    happens-before (`happens_before`): a race is reported whatever order the strands ran in. `schedule`
    "adversarial" runs producers as far ahead as the synchronisation allows and the other strands in a random
    order drawn from `seed` (each CTA its own stream), for what happens-before cannot decide; the default
    "round_robin" is deterministic. `strict_proxy` asks a fence_proxy_async between cp.async bytes an mbarrier
    completed and a wgmma reading them, by the PTX ISA's letter (`memory_model.CP_ASYNC_PROXY`)."""
    if schedule not in SCHEDULES:  # refused before the kernel is compiled, as `simulator_options` refuses it
        simulator_options(func_op, races, schedule, seed, strict_proxy)
    # its structure checked once per launch (a walk of every op), for the options and the grid
    program = CompiledKernel.of(func_op) if races else None
    options = simulator_options(func_op, races, schedule, seed, strict_proxy, program)
    try:
        _run_grid(func_op, arguments, sizes, allocation, listeners, cta_order, traffic, cluster, workers, executor,
                  options, max(1, int(batch_ctas)), program)
    except HazardUnwind as unwind:
        raise unwound(unwind) from None


def unwound(unwind: HazardUnwind) -> KernelHazardError:
    """The error `unwind` carries, with `failing_op` set to the op that found it: the op's frames are on the
    unwind's traceback, not on the error's, and a diagnostic (tessera-run's) is located at that op."""
    error = unwind.error
    if getattr(error, "failing_op", None) is None:
        error.failing_op = innermost_op(unwind)
    return error


def _run_grid(func_op, arguments, sizes, allocation, listeners, cta_order, traffic, cluster, workers, executor,
              options: SimulatorOptions, batch_ctas: int = 1, program: CompiledKernel | None = None) -> None:
    kernel = target_kernel(func_op, program)
    parallel = parallel_options(f"@{kernel.name}", workers, executor)
    if allocation is not None:
        allocation = RegisterLayout.shared(allocation)  # one for all CTAs and launches
    names = [f"#{k}" for k in range(len(arguments))]
    for arg in kernel.args:
        if arg.source is not None and 0 <= arg.source < len(names):
            names[arg.source] = f"%{arg.name}"
    grid = kernel.grid_size(sizes)
    try:
        facts.check_launch(grid, (kernel.threads,), kernel.smem_bytes)
    except ValueError as error:
        raise ValueError(f"@{kernel.name}: {error}") from None
    program = kernel.program
    reduced, atomic = program.fact(("reduction targets", kernel.args), lambda: reduction_targets(kernel))
    memory = GlobalMemory(list(arguments), names, reduced, atomic, grid)
    values = argument_values(kernel, arguments, sizes, memory)
    module = module_of(func_op)
    declared = kernel_cluster(func_op) if CLUSTER_ATTR in func_op.attributes else None
    if declared is None and program.fact("cluster ops", lambda: any(isinstance(op, sm90.CLUSTER_OPS)
                                                                    for op in func_op.walk())):
        declared = (1, 1, 1)  # cluster ops without a declared cluster: each CTA is a cluster of one
    if cluster is None and declared is not None:
        cluster, _ = launch_cluster(declared, grid)
    if cluster is not None:
        if cta_order is not None:
            raise ValueError(f"@{kernel.name}: cta_order permutes single CTAs; a clustered kernel runs each "
                             "cluster's CTAs together")
        try:
            facts.check_cluster(grid, tuple(cluster))
        except ValueError as error:
            raise ValueError(f"@{kernel.name}: {error}") from None
        clusters = cluster_members(grid, tuple(cluster))
        if parallel is not None and len(clusters) > 1 and _parallel(parallel, kernel, listeners, memory):
            _run_groups(parallel, kernel, module, arguments, names, sizes, allocation, traffic, clusters,
                        tuple(cluster), options)
            return
        with launch_pool(listeners is None) as pool:  # a listener may keep a CTA's state
            for cta_ids in clusters:
                for cta in run_cluster(kernel, module, values, memory, cta_ids, grid, tuple(cluster), allocation,
                                       listeners, options, pool):
                    if traffic is not None:
                        traffic[cta.cta_id] = dict(cta.traffic)
                if pool is not None:
                    pool.reclaim()
        return
    gx, gy, gz = grid
    order = range(gx * gy * gz) if cta_order is None else [int(i) for i in cta_order]
    if sorted(order) != list(range(gx * gy * gz)):
        raise ValueError(f"@{kernel.name}: cta_order must be a permutation of the {gx * gy * gz} CTAs' linear "
                         "indices")
    if parallel is not None and len(order) > 1 and _parallel(parallel, kernel, listeners, memory):
        _run_groups(parallel, kernel, module, arguments, names, sizes, allocation, traffic, order, None, options,
                    batch_ctas, cta_order is None and gy * gz > 1)
        return
    ids = [(linear % gx, (linear // gx) % gy, linear // (gx * gy)) for linear in order]
    size = batch_ctas if batchable(kernel, listeners, memory, options) else 1
    run_batches(run_cta, kernel, module, values, memory, ids, grid, allocation, listeners, options, traffic, size,
                by_x=cta_order is None and gy * gz > 1)


# region parallel groups (`tessera.interpreters.parallel`)
def _parallel(parallel: Parallel, kernel: TargetKernel, listeners, memory: GlobalMemory) -> bool:
    """Whether the launch can run in groups; warns `SerialFallback` naming the reason when not."""
    where = f"@{kernel.name}"
    if listeners is not None:
        serial_note(where, "interpreter listeners (validation's recorders) observe the CTAs in this process")
        return False
    if memory.atomic_targets:
        serial_note(where, "its CTAs add into shared targets (red, atom, bulk reductions), which the race checks "
                           "between CTAs follow in one process")
        return False
    if kernel.program.fact("semaphores", lambda: any(isinstance(op, (sm90_reductions.SemTryWaitOp,
                                                                      sm90_reductions.SemSignalOp))
                                                     for op in kernel.op.walk())):
        serial_note(where, "its CTAs wait for each other on semaphores (a grid-wide order)")
        return False
    return True


def _values_in_order(func_op: func.FuncOp):
    """Every SSA value of `func_op` (block arguments, then results, op by op in walk order): the same sequence
    for the kernel and for its copy parsed from text, so an allocation crosses processes as a list."""
    for op in func_op.walk():
        for region in op.regions:
            for block in region.blocks:
                yield from block.args
        yield from op.results


@dataclass
class _TargetGroup:
    """One group's task: the module's text (its key), the kernel's name, the allocation (register names by
    value index), the arguments, sizes, the units (linear CTA indices, or each cluster's CTA ids) and the
    serving checks in force. Text, registers and arguments are None for a forked worker, which inherits the
    parent's program and arguments."""

    key: str
    text: str | None
    name: str
    registers: dict[int, list[str]] | None
    arrays: list | None
    sizes: dict
    units: Sequence
    cluster: tuple[int, int, int] | None
    checks: tuple
    simulation: tuple = (True, "round_robin", 0, False)
    """`SimulatorOptions` (races, schedule, seed, strict_proxy): the worker finds the kernel's register sources
    itself."""
    batch_ctas: int = 1
    """Batches of CTAs in the group (`run_batches`; the launch's `batch_ctas`)."""
    by_x: bool = False


@dataclass
class _Names:
    """An allocation as `RegisterLayout` reads it: the register names of each value."""

    names: dict


def _program(task: _TargetGroup):
    from tessera.ir import parse_module

    module = parse_module(task.text, f"<@{task.name}>")
    op = next(op for op in module.walk() if isinstance(op, func.FuncOp) and op.sym_name.data == task.name)
    layout = None
    if task.registers is not None:
        values = list(_values_in_order(op))
        layout = RegisterLayout(_Names({values[i]: names for i, names in task.registers.items()}))
    return module, op, layout, None


def _run_group(task: _TargetGroup) -> GroupResult:
    """A worker's run of one group, on its copy of the arguments (`parallel` module docstring)."""
    from tessera.interpreters.sm90.logged_memory import LoggedGlobalMemory, LoggedTensorMap

    cpu = time.process_time()
    module, op, layout, inherited = cached_program(task.key, lambda: _program(task))
    kernel = target_kernel(op)
    arrays = [a.copy() for a in inherited] if task.arrays is None else [unship(a) for a in task.arrays]
    names = [f"#{k}" for k in range(len(arrays))]
    for arg in kernel.args:
        if arg.source is not None and 0 <= arg.source < len(names):
            names[arg.source] = f"%{arg.name}"
    grid = kernel.grid_size(task.sizes)
    memory = LoggedGlobalMemory(arrays, names, (), (), grid)
    values = [LoggedTensorMap.of(v, memory.log, arg.source) if isinstance(v, TensorMap) else v
              for v, arg in zip(argument_values(kernel, arrays, task.sizes, memory), kernel.args)]
    traffic, error = {}, None
    gx, gy, _ = grid
    options = simulator_options(op, *task.simulation)
    pool = RecordPool()
    with serving_checks.checking(*task.checks):
        try:
            if task.cluster is None:
                def charge(cta_id) -> None:  # what the access log charges to a CTA (a TMA read: its leader)
                    memory.log.current = _linear(cta_id, grid)

                ids = [(unit % gx, unit // gx % gy, unit // (gx * gy)) for unit in task.units]
                size = task.batch_ctas if batchable(kernel, None, memory, options) else 1
                run_batches(run_cta, kernel, module, values, memory, ids, grid, layout, None, options, traffic,
                            size, task.by_x, charge)
            for unit in task.units if task.cluster is not None else ():
                x, y, z = unit[0]
                memory.log.current = x + gx * (y + gy * z)
                for cta in run_cluster(kernel, module, values, memory, unit, grid, task.cluster, layout, None,
                                       options, pool):
                    traffic[cta.cta_id] = dict(cta.traffic)
                pool.reclaim()
        except HazardUnwind as unwind:  # raised by the parent in the serial order (`merge`)
            error, raised = unwind.error, unwind
        except Exception as failure:  # noqa: BLE001 - raised by the parent in the serial order (`merge`)
            error, raised = failure, failure
    failing = innermost_op(raised) if error is not None else None
    where = next((i for i, o in enumerate(module.walk()) if o is failing), None) if failing is not None else None
    written, data, read = memory.log.result(memory.flat_bytes())
    return GroupResult(written, data, read, error,
                       {"traffic": traffic, "op": where, "cpu_seconds": time.process_time() - cpu})


def _run_groups(parallel: Parallel, kernel: TargetKernel, module: ModuleOp, arguments: Sequence[np.ndarray],
                names: list[str], sizes: Mapping[str, int], allocation, traffic: dict | None, units: Sequence,
                cluster: tuple[int, int, int] | None, options: SimulatorOptions = SimulatorOptions(),
                batch_ctas: int = 1, by_x: bool = False) -> None:
    """Run `units` (in the serial order) in `parallel.groups` groups and merge their results into `arguments`;
    each group runs its CTAs in batches of `batch_ctas` (`run_batches`, `by_x` as there)."""
    if parallel.forks:  # the workers inherit the program and the arguments
        text, registers, shipped = None, None, None
        key = program_key(kernel.name, str(id(kernel.op)), str(os.getpid()), str(time.monotonic_ns()))
    else:
        from tessera.ir import print_module

        text, registers = print_module(module, generic=True), None
        if allocation is not None:
            index = {value: i for i, value in enumerate(_values_in_order(kernel.op))}
            registers = {index[value]: list(names_) for value, names_ in allocation.names.items() if value in index}
        key = program_key(text, kernel.name, repr(sorted(registers.items())) if registers else "")
        shipped = [ship(a) for a in arguments]
    checks = serving_checks.active_checks()
    simulation = (options.races, options.schedule, options.seed, options.strict_proxy)
    tasks = [_TargetGroup(key, text, kernel.name, registers, shipped, dict(sizes), units[part.start:part.stop],
                          cluster, checks, simulation, batch_ctas, by_x)
             for part in split(len(units), parallel.groups)]
    flat = [a.reshape(-1).view(np.uint8) if a.flags.c_contiguous else np.zeros(0, np.uint8) for a in arguments]
    gx, gy, _ = kernel.grid_size(sizes)

    def absorb(result: GroupResult) -> None:
        if traffic is not None:
            traffic.update(result.extra["traffic"])
        if result.error is not None and result.extra["op"] is not None:
            result.error.failing_op = next(o for i, o in enumerate(module.walk()) if i == result.extra["op"])

    inherited = (module, kernel.op, allocation, list(arguments))
    with running_groups(parallel, _run_group, tasks, key, inherited) as futures:
        merge(futures, flat, lambda b, offset: f"tensor {names[b]} at byte offset {offset}",
              lambda rank: str((rank % gx, rank // gx % gy, rank // (gx * gy))),
              lambda message: KernelHazardError(f"@{kernel.name}: {message}"), absorb)
# endregion


__all__ = ["run_target_kernel", "KernelHazardError", "SOURCE_ATTR", "BOX_ATTR", "SWIZZLE_ATTR", "SIZE_ATTR"]
