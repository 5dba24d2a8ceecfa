"""`launch`: run any PTX entry over a grid on NumPy arguments.

    out = launch(ptx_text, "kernel", grid=(4, 1, 1), block=(128, 1, 1),
                 args=[a, b, np.uint32(n), TensorMapArg.tiled(q, box=(64, 128), swizzle=128)],
                 shared_bytes=49152)

`args` follow the entry's parameters in order:
- a NumPy array for a 64-bit parameter (`.u64`/`.b64`/`.s64`) is a global buffer: it is copied into the
  executor's global memory at a 256-byte aligned address, and the parameter holds that address;
- a Python/NumPy scalar for a scalar parameter (range-checked against the parameter type, a negative value
  for `.u`/`.b` taken as its two's complement; floats for `.f32/.f64`);
- a `TensorMapArg` for a tensor-map parameter (`.param .align 64 .b8 name[128]`): the arguments of
  `cuTensorMapEncodeTiled` (`facts.TensorMapSpec`) and the global tensor (an array, or the index of an array
  argument). The parameter's 128 bytes are opaque; TMA instructions find the map by their address;
- `bytes` for any other `.b8` array parameter;
- a `ParamStruct` (`params`) for a by-value struct parameter (`.param .align 128 .b8 name[N]`, CUTLASS's and
  FA3's Params): its bytes with arrays (device addresses patched in) and tensor maps at given offsets.

The result has one entry per argument: the updated copy of the array (of the tensor map's array for a
`TensorMapArg`), None for scalars, and for a `ParamStruct` the dict {offset: array} of its arrays, which are
updated in place. Other arguments are never modified. An array given twice (or as
an argument and inside a tensor map) is one buffer.

Device functions (`.func`, `call`, `ret`) run with per-thread return stacks and per-thread `.param` storage
(see `link` and `schedule`); recursion is refused, and a thread that calls an `.extern` function (printf's
`vprintf`, assert's `__assertfail`) stops the run naming it.

Launch checks, before anything is allocated: argument count and kinds; grid and block against the driver's
limits (`facts.check_launch`: grid x < 2^31, y and z <= 65535, block x, y <= 1024, z <= 64, 1024 threads) and
the entry's `.reqntid`/`.maxntid`; the cluster shape (`cluster=` or `.reqnctapercluster`, dividing the grid,
at most 8 CTAs or 16 with `non_portable_cluster_size`: `facts.check_cluster`); shared memory (static +
`shared_bytes`) <= 227 KiB; the host memory the run needs (`limits.check_memory`: global memory, its copies
and the state of a batch) within `memory_budget`. CTAs run in batches of several CTAs vectorised together
(`schedule`), whole clusters in a batch (`cluster`), x fastest; a batch that takes more than `max_steps` steps stops, naming where each warp is.
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np

from tessera.interpreters.blas_threads import single_threaded_blas
from tessera.interpreters import serving_checks
from tessera.interpreters.limits import check_memory
from tessera.interpreters.parallel import (
    AccessLog, GroupResult, Parallel, cached_program, merge, parallel_options, program_key, running_groups,
    serial_note, ship, split, unship,
)
from tessera.interpreters.ptx import (  # noqa: F401 - registers decoders
    alu, atomics, bulk_copy, compare, floats, ldmatrix, logic, memory, reductions, schedule, simd, sync,
    warp_collectives, warp_mma, wgmma, wmma,
)
from tessera.interpreters.ptx.bulk_copy import TensorMapObject
from tessera.interpreters.ptx.cluster import ClusterState
from tessera.interpreters.ptx import async_checks, ptxas_rules
from tessera.interpreters.ptx.decode import Operands, decode
from tessera.interpreters.ptx.fuse import Fusion
from tessera.interpreters.ptx.global_order import GlobalOrder
from tessera.interpreters.ptx.params import ParamStruct, TensorMapArg
from tessera.interpreters.ptx.state import (
    GLOBAL_BASE,
    GlobalMemory,
    Machine,
    PtxExecutionError,
    fail,
    layout_shared,
)
from tessera.interpreters.ptx.syntax import Module
from tessera.interpreters.ptx.types import ptx_type
from tessera.sm90 import facts

LANES_PER_BATCH = 2048
"""CTAs run together until a batch holds this many threads (at least one CTA)."""


def _map_object(where: str, name: str, value: TensorMapArg, args: list, buffers: dict, source: str) -> TensorMapObject:
    """The tensor map `value` over its array already placed in global memory (`buffers`), checked as
    cuTensorMapEncodeTiled checks it, against the array's extent, and for what the executor implements."""
    target = args[value.array] if isinstance(value.array, (int, np.integer)) else value.array
    base, array = buffers[id(target)]
    spec = replace(value.spec, global_address=base + value.offset)
    try:
        spec.validate()
    except ValueError as error:
        raise ValueError(f"{where}: cuTensorMapEncodeTiled would refuse this map: {error}") from None
    if spec.interleave != facts.TensorMapInterleave.NONE:
        raise fail(source, None, f"{where}: tensor maps with interleave {spec.interleave.name} are not supported by "
                                 "the PTX executor")
    extent = value.offset + spec.element_bytes + sum((d - 1) * s for d, s in
                                                     zip(spec.global_dims, (spec.element_bytes,) +
                                                         tuple(spec.global_strides)))
    if extent > array.nbytes:
        raise ValueError(f"{where}: the tensor map spans {extent} bytes, its array has {array.nbytes}")
    return TensorMapObject(name, spec, base + value.offset)


def _triple(value, what: str) -> tuple[int, int, int]:
    """`value` (an integer, or 1 to 3 integers x, y, z) as (x, y, z), each >= 1."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        values: tuple = (value,)
    elif isinstance(value, (tuple, list)):
        values = tuple(value)
    else:
        raise TypeError(f"{what} must be an integer or 1 to 3 integers (x, y, z); got {type(value).__name__} "
                        f"{value!r}")
    if any(isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) for v in values):
        raise TypeError(f"{what} must be an integer or 1 to 3 integers (x, y, z); got {value!r}")
    if not 1 <= len(values) <= 3 or any(int(v) < 1 for v in values):
        raise ValueError(f"{what} must be 1 to 3 positive integers, got {value!r}")
    return tuple(int(v) for v in values) + (1,) * (3 - len(values))  # type: ignore[return-value]


def _check_arguments(ptx, kernel, args, shared_bytes, source) -> None:
    """`launch`'s first checks, before the PTX is parsed: the kinds of its own arguments (TypeError naming the
    parameter: PTX text or a parsed Module, an entry name, an integer `shared_bytes`, `args` as a list or
    tuple; grid and block are checked by `_triple`), and no masked, complex or object array among `args`."""
    if not isinstance(ptx, (str, Module)):
        raise TypeError(f"ptx must be PTX text (a str) or a parsed Module; got {type(ptx).__name__}")
    if not isinstance(kernel, str):
        raise TypeError(f"kernel must be the name of an entry (a str); got {type(kernel).__name__} {kernel!r}")
    if not isinstance(source, str):
        raise TypeError(f"source must be a str naming the PTX in messages; got {type(source).__name__}")
    if isinstance(shared_bytes, (bool, np.bool_)) or not isinstance(shared_bytes, (int, np.integer)):
        raise TypeError(f"shared_bytes must be an integer; got {type(shared_bytes).__name__} {shared_bytes!r}")
    if not isinstance(args, (list, tuple)):
        raise TypeError(f"args must be a list or tuple of the entry's arguments; got {type(args).__name__}")
    for i, value in enumerate(args):
        if isinstance(value, np.ma.MaskedArray):
            raise ValueError(f"argument {i} is a masked array; the kernel would ignore the mask (pass "
                             "np.ma.filled(x, fill) or x.data)")
        if isinstance(value, np.ndarray) and value.dtype.hasobject:
            raise TypeError(f"argument {i} is an array of Python objects, which has no bytes to copy to the "
                            "device; pass an array of numbers")
        if isinstance(value, np.ndarray) and value.dtype.kind == "c":
            raise TypeError(f"argument {i} has complex element type {value.dtype}, which PTX has no type for; pass "
                            "x.view(np.float32) (or float64) to mean its interleaved real and imaginary parts")


def _check_block(entry, block, source) -> None:
    threads = math.prod(block)
    directives = entry.directives
    if "reqntid" in directives:
        want = _triple(directives["reqntid"], ".reqntid")
        if want != block:
            raise ValueError(f"entry {entry.name} requires block {want} (.reqntid), got {block}")
    if "maxntid" in directives:
        limit = _triple(directives["maxntid"], ".maxntid")
        if threads > math.prod(limit):
            raise ValueError(f"entry {entry.name} allows at most {math.prod(limit)} threads (.maxntid), got {threads}")


def _cluster_shape(entry, grid, cluster, non_portable: bool) -> tuple[tuple[int, int, int], bool]:
    """(cluster shape, explicit): the launch's `cluster` or the entry's `.reqnctapercluster` (which must agree
    when both are given), checked against the grid and the cluster size limits (`facts.check_cluster`);
    explicit when either gives one, or the entry says `.explicitcluster`."""
    directives = entry.directives
    required = _triple(directives["reqnctapercluster"], ".reqnctapercluster") \
        if "reqnctapercluster" in directives else None
    given = _triple(cluster, "cluster") if cluster is not None else None
    if required and given and required != given:
        raise ValueError(f"entry {entry.name} requires clusters of {required} (.reqnctapercluster), got cluster "
                         f"{given}")
    shape = given or required or (1, 1, 1)
    explicit = given is not None or required is not None
    if "explicitcluster" in directives and not explicit:
        raise ValueError(f"entry {entry.name} must be launched with a cluster shape (.explicitcluster)")
    if "maxclusterrank" in directives and math.prod(shape) > int(directives["maxclusterrank"][0]):
        raise ValueError(f"entry {entry.name} allows at most {directives['maxclusterrank'][0]} CTAs per cluster "
                         f"(.maxclusterrank), got {math.prod(shape)}")
    facts.check_cluster(grid, shape, non_portable)
    return shape, explicit


def _scalar_bytes(param, value, index: int) -> bytes:
    t = ptx_type(param.type)
    where = f"argument {index} ({param.name}, .{param.type})"
    if t is None or t.kind in ("pred", "x2"):
        raise ValueError(f"{where}: parameters of this type are not supported")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{where}: expected a number, got {type(value).__name__}")
    if t.kind == "f":
        return np.asarray(value, t.dtype).tobytes()
    if isinstance(value, (float, np.floating)):
        raise ValueError(f"{where}: expected an integer, got {value!r}")
    value = int(value)
    # A .u/.b parameter takes the two's complement of a negative value: LLVM (Triton, clang) declares every
    # integer parameter .u32/.u64/.b32 whatever its signedness, and the driver copies the bytes.
    low, high = -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1
    if t.kind != "s":
        high = (1 << t.bits) - 1
    if not low <= value <= high:
        raise ValueError(f"{where}: {value} is out of range [{low}, {high}]")
    return (value & ((1 << t.bits) - 1)).to_bytes(t.bits // 8, "little")


def _specials(m: Machine, module_dynamic: int) -> dict[str, np.ndarray]:
    bx, by, bz = m.block
    tid = m.tid
    s = {"%tid.x": tid % bx, "%tid.y": tid // bx % by, "%tid.z": tid // (bx * by),
         "%ntid.x": np.full(m.lanes, bx), "%ntid.y": np.full(m.lanes, by), "%ntid.z": np.full(m.lanes, bz),
         "%laneid": m.laneid, "%warpid": tid // facts.WARP_SIZE,
         "%nwarpid": np.full(m.lanes, -(-m.threads // facts.WARP_SIZE)),
         "%smid": np.zeros(m.lanes), "%nsmid": np.ones(m.lanes), "%gridid": np.zeros(m.lanes),
         "%clock": np.zeros(m.lanes), "%clock64": np.zeros(m.lanes), "%globaltimer": np.zeros(m.lanes),
         "%cluster_ctarank": np.zeros(m.lanes), "%cluster_nctarank": np.ones(m.lanes),
         "%is_explicit_cluster": np.zeros(m.lanes),
         "%dynamic_smem_size": np.full(m.lanes, module_dynamic),
         "%total_smem_size": np.full(m.lanes, m.shared_bytes), "%aggr_smem_size": np.full(m.lanes, m.shared_bytes),
         "%lanemask_eq": np.uint64(1) << m.laneid.astype(np.uint64),
         "%lanemask_lt": (np.uint64(1) << m.laneid.astype(np.uint64)) - np.uint64(1),
         "%lanemask_le": (np.uint64(2) << m.laneid.astype(np.uint64)) - np.uint64(1)}
    s["%lanemask_gt"] = ~s["%lanemask_le"] & np.uint64(0xFFFFFFFF)
    s["%lanemask_ge"] = ~s["%lanemask_lt"] & np.uint64(0xFFFFFFFF)
    s["%cluster_nctarank"] = np.full(m.lanes, m.cluster_size)
    for i, axis in enumerate("xyz"):
        s[f"%ctaid.{axis}"] = np.zeros(m.lanes)
        s[f"%clusterid.{axis}"] = np.zeros(m.lanes)
        s[f"%nctaid.{axis}"] = np.full(m.lanes, m.grid[i])
        s[f"%nclusterid.{axis}"] = np.full(m.lanes, m.grid[i] // m.cluster[i])
        s[f"%cluster_ctaid.{axis}"] = np.zeros(m.lanes)
        s[f"%cluster_nctaid.{axis}"] = np.full(m.lanes, m.cluster[i])
    return {k: np.asarray(v).astype(np.uint64) for k, v in s.items()}


def _set_cta_specials(m: Machine, specials: dict[str, np.ndarray]) -> None:
    """The per-CTA special registers of the batch just loaded: %ctaid, %clusterid, %cluster_ctaid and
    %cluster_ctarank (x fastest within the cluster)."""
    ctaid = m.ctaid[m.lane_cta]
    cluster = np.array(m.cluster, np.int64)
    inner = ctaid % cluster
    specials["%cluster_ctarank"][:] = inner[:, 0] + cluster[0] * (inner[:, 1] + cluster[1] * inner[:, 2])
    for i, axis in enumerate("xyz"):
        specials[f"%ctaid.{axis}"][:] = ctaid[:, i]
        specials[f"%clusterid.{axis}"][:] = ctaid[:, i] // cluster[i]
        specials[f"%cluster_ctaid.{axis}"][:] = inner[:, i]


def _cta_id(index: int, grid, cluster) -> tuple[int, int, int]:
    """The id of the CTA run `index`-th: cluster by cluster (clusters x fastest), each cluster's CTAs in rank
    order (x fastest); computed per CTA, so that a huge grid is never materialised."""
    size = cluster[0] * cluster[1] * cluster[2]
    c, r = divmod(index, size)
    gx, gy = grid[0] // cluster[0], grid[1] // cluster[1]
    outer = (c % gx, c // gx % gy, c // (gx * gy))
    inner = (r % cluster[0], r // cluster[0] % cluster[1], r // (cluster[0] * cluster[1]))
    return tuple(o * n + i for o, n, i in zip(outer, cluster, inner))  # type: ignore[return-value]


def _host_memory(ptx: Module, entry, args: list, ctas: int, threads: int, shared_bytes: int,
                 local_bytes: int) -> list[tuple[str, int]]:
    """The host bytes a launch needs, in parts for `limits.check_memory`: each array (its copy in global memory,
    the chunk it is copied from and the result), module .global/.const data, and the state of a batch of `ctas`
    CTAs of `threads` threads (registers, local memory, return stacks and about a hundred bytes of bookkeeping
    per thread, shared memory per CTA)."""
    arrays = {id(a): a for a in args if isinstance(a, np.ndarray)}
    arrays.update({id(a): a for s in args if isinstance(s, ParamStruct) for a in s.arrays()})
    arrays.update({id(a.array): a.array for a in args if isinstance(a, TensorMapArg) and isinstance(a.array, np.ndarray)})
    parts = [(f"array {a.dtype}{list(a.shape)}, copied into global memory and back", 3 * a.nbytes)
             for a in arrays.values()]
    parts += [(f"module variable {v.name}", 2 * v.element_bytes * (v.count or 0))
              for v in ptx.variables if v.space in ("global", "const")]
    register_bytes = sum(t.storage.itemsize if t is not None else 8 for t in map(ptx_type, entry.registers.values()))
    per_thread = register_bytes + max(local_bytes, 1) + 8 * max(entry.call_depth, 1) + 128
    parts.append((f"a batch of {ctas} CTA(s) of {threads} threads (registers, shared and local memory)",
                  ctas * (threads * per_thread + max(shared_bytes, 1))))
    return parts


@single_threaded_blas()
def launch(ptx: str | Module, kernel: str, grid, block, args, shared_bytes: int = 0,
           source: str = "<ptx>", *, max_steps: int = schedule.DEFAULT_MAX_STEPS,
           memory_budget: int | None = None, cta_order=None, cluster=None,
           non_portable_cluster_size: bool = False, stats: dict | None = None,
           races: bool = True, workers: int | None = None, executor=None, schedule: str = "min-pc",
           seed: int | None = None, fuse: bool = True, strict_proxy: bool = False) -> list[np.ndarray | None]:
    """Run entry `kernel` of `ptx` over `grid` CTAs of `block` threads; see the module docstring.
    `cluster` (x, y, z) runs the CTAs of each cluster together (`cluster`), as cudaLaunchKernelEx with the
    cluster dimension attribute; `non_portable_cluster_size` is cudaFuncAttributeNonPortableClusterSizeAllowed.
    A `stats` dict receives the counts of the run: "steps" (instructions issued for all the lanes at one pc),
    "warp_instructions" and "thread_instructions" (instructions executed by a warp / a thread, guard true).
    `max_steps` bounds the steps of each batch of CTAs (`schedule`); `memory_budget` the host bytes the run may
    need (`tessera.interpreters.limits`, 8 GiB by default). BLAS runs on one thread meanwhile
    (`tessera.interpreters.blas_threads`). `cta_order` (optional): the order the CTAs run in, a permutation of
    their linear indices (x fastest), in batches; a kernel with atomics is checked for races between CTAs
    (`reductions`). `races` (default on) reports two generic accesses to a shared-memory byte, one a write,
    that no synchronisation orders (`happens_before`); proxy fences are checked either way. `schedule` picks
    which ready lanes run next: "min-pc" (default), "adversarial", replayed by `seed`, "delayed", one CTA
    (linear index `seed` modulo the CTAs) run only when no other can, or "delayed-warp" ("delayed-warpgroup"), warp
    (warpgroup) `seed` modulo the CTA's of every CTA run only when no other lane of its CTA can (`schedule`).
    `strict_proxy` holds cp.async bytes read by the async proxy (a wgmma operand) to the PTX ISA's letter, a
    fence.proxy.async on the path even after a cp.async.mbarrier.arrive completed them; by default that completion
    suffices, as NVIDIA's kernels rely on (`memory_model.CP_ASYNC_PROXY`). `fuse`
    (default on) runs straight-line register instructions in blocks (`fuse`); off, one instruction a step, for
    comparison (the same results).

    `workers` (processes on this machine) or `executor` (any `concurrent.futures.Executor`) runs the batches of
    CTAs in that many contiguous groups in parallel, with the serial run's results, counts and first error, and
    races between CTAs of different groups reported (`tessera.interpreters.parallel`); an entry with red,
    atom or cp.reduce runs serially with a `SerialFallback` warning."""
    parallel = parallel_options(f"{source}: launch of {kernel}", workers, executor)
    run = _setup(ptx, kernel, grid, block, args, shared_bytes, source, max_steps, memory_budget, cta_order, cluster,
                 non_portable_cluster_size, races, schedule, seed, fuse, strict_proxy)
    starts = range(0, run.total, run.per_batch)
    if parallel is not None and run.machine.watch is not None:
        serial_note(f"{source}: launch of {kernel}", "the entry has red, atom or cp.reduce, whose races between "
                                                      "CTAs are checked in one process")
        parallel = None
    if parallel is not None and len(starts) > 1:
        _run_groups(parallel, run, starts, stats, ptx, kernel, dict(
            grid=grid, block=block, shared_bytes=shared_bytes, source=source, max_steps=max_steps,
            memory_budget=memory_budget, cta_order=cta_order, cluster=cluster,
            non_portable_cluster_size=non_portable_cluster_size, races=races, schedule=schedule, seed=seed,
            fuse=fuse, strict_proxy=strict_proxy))
    else:
        counts = _run_batches(run, starts, stats is not None)
        if stats is not None:
            stats.update(counts)
    results = _results(run)
    _recycle(run)
    return results


@dataclass
class _Launch:
    """A launch checked and set up: the machine and scheduler with the entry decoded, global memory with
    the arguments placed (`buffers`: id of an array -> (address, array)), the CTA order (None: x fastest, by
    cluster) and the batching."""

    args: list
    machine: Machine
    scheduler: schedule.Scheduler
    specials: dict
    memory: GlobalMemory
    buffers: dict
    order: list | None
    per_batch: int
    total: int
    grid: tuple[int, int, int]
    cluster: tuple[int, int, int]


_DECODED: dict[int, tuple] = {}
"""id(parsed Module) -> (weak reference to it, {launch key: [(machine, steps, operands, specials)]}): programs
decoded once and kept across launches (their closures refer to the machine, which `load_batch` resets); an
entry goes with its Module."""
_PARSED: OrderedDict = OrderedDict()
_PARSED_KEPT = 4
"""The last parsed PTX texts, by (sha256 of the text, source): a text launched again is not parsed again."""


def _decoded(ptx: Module) -> dict:
    entry = _DECODED.get(id(ptx))
    if entry is None or entry[0]() is not ptx:
        ref = weakref.ref(ptx, lambda _, k=id(ptx): _DECODED.pop(k, None))
        entry = _DECODED[id(ptx)] = (ref, {})
    return entry[1]


def _recycle(run: "_Launch") -> None:
    """Give the launch's decoded machine back for the next launch of the same program (one at a time: a
    concurrent launch decodes its own)."""
    ptx, key, decoded = getattr(run.machine, "recycle", (None, None, None))
    if ptx is not None:
        run.machine.recycle = None
        _decoded(ptx).setdefault(key, []).append(decoded)


def _parse_cached(text: str, source: str) -> Module:
    from tessera.interpreters.ptx.parse import parse_ptx

    key = (hashlib.sha256(text.encode()).hexdigest(), source)
    module = _PARSED.get(key)
    if module is None:
        module = _PARSED[key] = parse_ptx(text, source)
        while len(_PARSED) > _PARSED_KEPT:
            _PARSED.popitem(last=False)
    _PARSED.move_to_end(key)
    return module


def _setup(ptx, kernel, grid, block, args, shared_bytes, source, max_steps, memory_budget, cta_order, cluster,
           non_portable_cluster_size, races, schedule_name="min-pc", seed=None, fuse=True,
           strict_proxy=False) -> _Launch:
    """Every check of `launch` before a CTA runs, and the machine that runs them (see `launch`)."""
    _check_arguments(ptx, kernel, args, shared_bytes, source)
    if isinstance(ptx, str):
        ptx = _parse_cached(ptx, source)
    if kernel not in ptx.entries:
        raise ValueError(f"no entry named '{kernel}' (entries: {', '.join(ptx.entries) or 'none'})")
    entry = ptx.entries[kernel]
    grid, block = _triple(grid, "grid"), _triple(block, "block")
    if isinstance(shared_bytes, bool) or not isinstance(shared_bytes, (int, np.integer)) or shared_bytes < 0:
        raise ValueError(f"shared_bytes must be an integer >= 0, got {shared_bytes!r}")
    facts.check_launch(grid, block, int(shared_bytes))
    _check_block(entry, block, source)
    cluster, explicit_cluster = _cluster_shape(entry, grid, cluster, non_portable_cluster_size)
    cluster_size = math.prod(cluster)
    scheduler_steps = schedule.Scheduler.check_max_steps(max_steps)
    schedule.Scheduler.check_schedule(schedule_name, seed)
    args = list(args)
    if len(args) != len(entry.params):
        raise ValueError(f"entry {kernel} has {len(entry.params)} parameters, got {len(args)} arguments")

    # host memory: the arrays' copies in global memory and the results, module data, one batch's state
    shared_variables = [v for v in ptx.variables if v.space == "shared"] + \
                       [v for v in entry.variables if v.space == "shared"]
    shared = layout_shared(shared_variables, shared_bytes)
    if shared.total_bytes > facts.MAX_SHARED_MEMORY_PER_BLOCK:
        raise ValueError(f"shared memory of {shared.total_bytes} bytes ({shared.static_bytes} static + "
                         f"{shared_bytes} dynamic, with alignment) exceeds the {facts.MAX_SHARED_MEMORY_PER_BLOCK} "
                         "bytes of a CTA")
    local_offsets, local_end = {}, 0
    for v in entry.variables:  # .local variables, and the .param variables of functions and call sites
        if v.space in ("local", "param"):
            align = max(v.align, v.element_bytes)
            local_end = -(-local_end // align) * align
            local_offsets[v.name] = local_end
            local_end += v.element_bytes * (v.count or 0)
    total = math.prod(grid)
    threads = math.prod(block)
    per_batch = max(1, min(total, LANES_PER_BATCH // threads)) // cluster_size * cluster_size or cluster_size
    check_memory(f"the launch of {kernel}", _host_memory(ptx, entry, args, per_batch, threads, shared.total_bytes,
                                                         local_end), memory_budget)

    # global memory: the arrays (once each), then module .global/.const data
    memory_ = GlobalMemory()
    buffers: dict[int, tuple[int, np.ndarray]] = {}

    def place(array: np.ndarray, name: str) -> int:
        if id(array) not in buffers:
            data = np.ascontiguousarray(array)
            buffers[id(array)] = (memory_.allocate(name, data.tobytes()), array)
        return buffers[id(array)][0]

    for i, (param, value) in enumerate(zip(entry.params, args)):
        if isinstance(value, np.ndarray):
            place(value, f"argument {i} ({param.name})")
        elif isinstance(value, (TensorMapArg, ParamStruct)):
            where = f"argument {i} ({param.name})"
            if isinstance(value, ParamStruct):
                value.checked_fields(where, 0)
            for tensor_map in [value] if isinstance(value, TensorMapArg) else value.fields.values():
                target = getattr(tensor_map, "array", tensor_map)
                if isinstance(target, (int, np.integer)):
                    if not (0 <= target < len(args) and isinstance(args[target], np.ndarray)):
                        raise ValueError(f"{where}: tensor map names argument {target}, which is not an array")
                    target = args[target]
                place(target, f"tensor of {where}")
    global_symbols = {}
    for variable in ptx.variables:
        if variable.space in ("global", "const"):
            size = variable.element_bytes * (variable.count or 0)
            data = (variable.init or b"").ljust(size, b"\0")
            global_symbols[variable.name] = memory_.allocate(variable.name, data, variable.align)
    memory_.finish()

    # parameters
    params = bytearray()
    param_offsets: dict[str, int] = {}
    maps: dict[int, TensorMapObject] = {}
    for i, (param, value) in enumerate(zip(entry.params, args)):
        align = max(param.align, param.element_bytes)
        offset = -(-len(params) // align) * align
        params.extend(b"\0" * (offset - len(params)))
        param_offsets[param.name] = offset
        size = param.element_bytes * (param.count or 0)
        where = f"argument {i} ({param.name})"
        if isinstance(value, np.ndarray):
            if size != 8 or param.count != 1:
                raise ValueError(f"{where}: an array is passed as a 64-bit pointer, but the parameter is "
                                 f".{param.type}{'' if param.count == 1 else f'[{param.count}]'}")
            params.extend(place(value, "").to_bytes(8, "little"))
        elif isinstance(value, TensorMapArg):
            if param.type != "b8" or param.count != facts.TENSOR_MAP_BYTES or param.align < facts.TENSOR_MAP_ALIGNMENT:
                raise ValueError(f"{where}: a tensor map needs `.param .align 64 .b8 {param.name}[128]`")
            maps[offset] = _map_object(where, param.name, value, args, buffers, source)
            params.extend(b"\0" * size)
        elif isinstance(value, ParamStruct):
            if param.type != "b8" or param.count != len(value.data):
                raise ValueError(f"{where}: a ParamStruct of {len(value.data)} bytes for the parameter "
                                 f".{param.type}[{param.count}] (expected .b8[{len(value.data)}])")
            data = bytearray(value.data)
            for field_offset, _, field in value.checked_fields(where, offset):
                if isinstance(field, TensorMapArg):
                    maps[offset + field_offset] = _map_object(f"{where}, tensor map at offset {field_offset}",
                                                              param.name, field, args, buffers, source)
                else:
                    data[field_offset:field_offset + 8] = place(field, "").to_bytes(8, "little")
            params.extend(data)
        elif isinstance(value, (bytes, bytearray)):
            if len(value) != size:
                raise ValueError(f"{where}: expected {size} bytes, got {len(value)}")
            params.extend(value)
        else:
            if param.count != 1:
                raise ValueError(f"{where}: expected an array, tensor map or bytes for a .b8[{param.count}] parameter")
            params.extend(_scalar_bytes(param, value, i))
    params_array = np.frombuffer(bytes(params) or b"\0", np.uint8).copy()

    key = (kernel, source, block, grid, cluster, explicit_cluster, per_batch, int(shared_bytes), shared.total_bytes,
           tuple(shared.offsets.items()), tuple(local_offsets.items()), local_end, tuple(global_symbols.items()),
           len(params_array), races, bool(fuse))
    try:  # the machine, its decoded steps and their closures, from an earlier launch of this program
        decoded = _decoded(ptx)[key].pop()
    except (KeyError, IndexError):
        decoded = None
    if decoded:
        machine, steps, ops, specials, fusion = decoded
        machine.memory, machine.params = memory_, params_array
    else:
        machine = Machine(entry, source, block, per_batch, shared, local_offsets, local_end, memory_, params_array,
                          param_offsets, global_symbols, grid)
    machine.tensor_maps = maps
    machine.races = races
    machine.global_order = GlobalOrder(machine, memory_.buffer.size)
    machine.watch = reductions.ReductionWatch(machine) if reductions.uses_reductions(entry) else None
    machine.cluster, machine.cluster_size = cluster, cluster_size
    if not decoded:
        machine.cluster_state = ClusterState(machine)
        specials = _specials(machine, shared_bytes)
        specials["%is_explicit_cluster"][:] = explicit_cluster
        ops = Operands(machine, specials)
        ptxas_rules.check_entry(ptx, entry, source)
        plain = [decode(ops, inst) for inst in entry.instructions]
        steps = async_checks.install(machine, plain)
        fusion = Fusion(machine, entry, plain, steps) if fuse else None
    machine.tracker.hb.strict_proxy = bool(strict_proxy)
    machine.recycle = (ptx, key, (machine, steps, ops, specials, fusion))
    scheduler = schedule.Scheduler(machine, steps, ops, scheduler_steps, schedule_name, seed, fusion)
    order = None
    if cta_order is not None:
        gx, gy, _ = grid
        linear = [int(i) for i in cta_order]
        if sorted(linear) != list(range(total)):
            raise ValueError(f"{source}: cta_order must be a permutation of the {total} CTAs' linear indices")
        if np.prod(cluster) > 1:
            raise ValueError(f"{source}: cta_order permutes single CTAs; a launch with clusters of {tuple(cluster)} "
                             "runs each cluster's CTAs together")
        order = [(i % gx, i // gx % gy, i // (gx * gy)) for i in linear]
    return _Launch(args, machine, scheduler, specials, memory_, buffers, order, per_batch, total, grid, cluster)


def _run_batches(run: _Launch, starts, counting: bool) -> dict:
    """Run the batches of CTAs that start at `starts` (indices into the run order) one after another; the
    counts of `launch`'s `stats` when `counting`."""
    machine, scheduler = run.machine, run.scheduler
    executed = scheduler.executed
    if counting:
        scheduler.counts = {"thread_instructions": 0, "warp_instructions": 0}
    for start in starts:
        end = min(start + run.per_batch, run.total)
        machine.load_batch(run.order[start:end] if run.order is not None else
                           [_cta_id(i, run.grid, run.cluster) for i in range(start, end)])
        machine.cluster_state.reset()
        _set_cta_specials(machine, run.specials)
        scheduler.run()
        if machine.watch is not None:
            machine.watch.check_exit()
    return dict(scheduler.counts, steps=scheduler.executed - executed) if counting else {}


def _results(run: _Launch) -> list:
    """`launch`'s results: the arrays read back from global memory (see `launch`)."""
    args, memory_, buffers = run.args, run.memory, run.buffers

    def read_back(array: np.ndarray) -> np.ndarray:
        base, _ = buffers[id(array)]
        raw = memory_.buffer[base - GLOBAL_BASE:base - GLOBAL_BASE + array.nbytes]
        return raw.copy().view(array.dtype).reshape(array.shape)

    results: list = []
    for value in args:
        if isinstance(value, ParamStruct):  # arrays inside a struct are updated in place
            updated = {}
            for field_offset, field in value.fields.items():
                target = getattr(field, "array", field)
                target = args[target] if isinstance(target, (int, np.integer)) else target
                target[...] = read_back(target)
                updated[int(field_offset)] = target
            results.append(updated)
            continue
        target = value
        if isinstance(value, TensorMapArg):
            target = args[value.array] if isinstance(value.array, (int, np.integer)) else value.array
        if not isinstance(target, np.ndarray):
            results.append(None)
            continue
        base, array = buffers[id(target)]
        raw = memory_.buffer[base - GLOBAL_BASE:base - GLOBAL_BASE + array.nbytes]
        results.append(raw.copy().view(array.dtype).reshape(array.shape))
    return results




# region parallel groups (`tessera.interpreters.parallel`)
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
        run = _setup(program["ptx"], task.kernel, options.pop("grid"), options.pop("block"),
                     [unship(a) for a in task.args], options.pop("shared_bytes"), options.pop("source"),
                     options.pop("max_steps"), options.pop("memory_budget"), options.pop("cta_order"),
                     options.pop("cluster"), options.pop("non_portable_cluster_size"), options.pop("races"),
                     options.pop("schedule"), options.pop("seed"), options.pop("fuse"), options.pop("strict_proxy"))
    log = run.memory.log = AccessLog([run.memory.buffer.size])
    counts, error = {}, None
    with serving_checks.checking(*task.checks):
        try:
            counts = _run_batches(run, task.starts, task.counting)
        except Exception as failure:  # noqa: BLE001 - raised by the parent in the serial order (`merge`)
            error = failure
            counts = {}
    written, data, read = log.result([run.memory.buffer])
    return GroupResult(written, data, read, error, {"counts": counts, "cpu_seconds": time.process_time() - cpu})


def _run_groups(parallel: Parallel, run: _Launch, starts: range, stats: dict | None, ptx, kernel: str,
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
# endregion


def launch_described(ptx: str | Module, host, arrays: list[np.ndarray], sizes: dict[str, int],
                     source: str = "<ptx>", *, max_steps: int = schedule.DEFAULT_MAX_STEPS,
                     memory_budget: int | None = None, races: bool = True, workers: int | None = None,
                     executor=None, schedule: str = "min-pc", seed: int | None = None, fuse: bool = True,
                     strict_proxy: bool = False) -> None:
    """Run a Tessera kernel from its PTX as `tessera.host.describe` says to launch it: `arrays` are the
    Tile-level arguments (inputs, outputs, scratch, as `prepare_arguments` makes them; an input read through a
    tensor map may be a strided view, see `TensorMapArg.strided`), `sizes` the named sizes. Outputs are
    written back into `arrays`. `max_steps`, `memory_budget`, `races`, `workers`, `executor`, `schedule`,
    `seed`, `fuse` and `strict_proxy` as for `launch`."""
    maps = host.tensor_maps(sizes)
    args = []
    for param in host.params:
        if param.kind == "tensormap":
            array, spec = arrays[param.source], maps[param.name]
            if array.flags.c_contiguous:
                args.append(TensorMapArg(array, spec))
            else:  # a view: the map follows its strides (globalStrides), over its base array
                args.append(TensorMapArg.strided(array, spec.box_dims, facts.tensor_map_swizzle_bytes(spec.swizzle)))
        elif param.kind == "pointer":
            args.append(arrays[param.source])
        else:
            args.append(np.uint32(sizes[param.size]))
    cluster = host.cluster(sizes)  # a clustered kernel: its shape, or (1, 1, 1) where it does not divide the grid
    results = launch(ptx, host.kernel, host.grid(sizes), host.block, args, host.dynamic_smem_bytes, source,
                     max_steps=max_steps, memory_budget=memory_budget, cluster=cluster, races=races, workers=workers,
                     executor=executor, schedule=schedule, seed=seed, fuse=fuse, strict_proxy=strict_proxy)
    for param, result in zip(host.params, results):
        if param.kind == "pointer":
            arrays[param.source][...] = result


__all__ = ["launch", "launch_described", "ParamStruct", "TensorMapArg", "PtxExecutionError"]
