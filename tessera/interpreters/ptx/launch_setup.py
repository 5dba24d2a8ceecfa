"""A launch set up and run (see `launcher`): `setup_launch` parses (`_parse_cached`) and checks the entry, places the
arguments in global memory, plans the batches (CTAs vectorised together up to `LANES_PER_BATCH` threads, whole
clusters in a batch, x fastest, in `cta_order`), decodes the entry once per module (`_decoded`, machines and
schedulers recycled between launches) and installs the checks; `run_batches` runs batches, setting each
batch's special registers (`_specials`, `_set_cta_specials`); `launch_results` copies the arguments back.
"""

from __future__ import annotations

import hashlib
import math
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from tessera.interpreters.limits import check_memory
from tessera.interpreters.ptx import (  # noqa: F401 - registers decoders
    alu, atomics, bulk_copy, compare, control_flow, conversions, floats, ldmatrix, logic, mbarrier, memory, reductions,
    schedule, simd, sync, warp_collectives, warp_mma, wgmma, wmma,
)
from tessera.interpreters.ptx.tma_boxes import TensorMapObject
from tessera.interpreters.ptx.cluster import ClusterState
from tessera.interpreters.ptx import async_checks, ptxas_rules, tensor_core_numerics
from tessera.interpreters.ptx.decode import Operands, decode
from tessera.interpreters.ptx.fuse import Fusion
from tessera.interpreters.ptx.launch_arguments import (
    check_arguments, check_block, cluster_shape, host_memory, map_object, scalar_bytes, triple,
)
from tessera.interpreters.ptx.global_order import GlobalOrder
from tessera.interpreters.ptx.params import ParamStruct, TensorMapArg
from tessera.interpreters.ptx.state import GLOBAL_BASE, GlobalMemory, Machine, layout_shared
from tessera.interpreters.ptx.syntax import Module
from tessera.sm90 import facts


LANES_PER_BATCH = 2048
"""CTAs run together until a batch holds this many threads (at least one CTA)."""


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


@dataclass
class PreparedLaunch:
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


def recycle_launch(run: "PreparedLaunch") -> None:
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


def setup_launch(ptx, kernel, grid, block, args, shared_bytes, source, max_steps, memory_budget, cta_order,
                 cluster, non_portable_cluster_size, races, schedule_name="min-pc", seed=None, fuse=True,
                 strict_proxy=False) -> PreparedLaunch:
    """Every check of `launch` before a CTA runs, and the machine that runs them (see `launch`)."""
    check_arguments(ptx, kernel, args, shared_bytes, source)
    if isinstance(ptx, str):
        ptx = _parse_cached(ptx, source)
    if kernel not in ptx.entries:
        raise ValueError(f"no entry named '{kernel}' (entries: {', '.join(ptx.entries) or 'none'})")
    entry = ptx.entries[kernel]
    grid, block = triple(grid, "grid"), triple(block, "block")
    if isinstance(shared_bytes, bool) or not isinstance(shared_bytes, (int, np.integer)) or shared_bytes < 0:
        raise ValueError(f"shared_bytes must be an integer >= 0, got {shared_bytes!r}")
    facts.check_launch(grid, block, int(shared_bytes))
    check_block(entry, block, source)
    cluster, explicit_cluster = cluster_shape(entry, grid, cluster, non_portable_cluster_size)
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
    check_memory(f"the launch of {kernel}", host_memory(ptx, entry, args, per_batch, threads, shared.total_bytes,
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
            maps[offset] = map_object(where, param.name, value, args, buffers, source)
            params.extend(b"\0" * size)
        elif isinstance(value, ParamStruct):
            if param.type != "b8" or param.count != len(value.data):
                raise ValueError(f"{where}: a ParamStruct of {len(value.data)} bytes for the parameter "
                                 f".{param.type}[{param.count}] (expected .b8[{len(value.data)}])")
            data = bytearray(value.data)
            for field_offset, _, field in value.checked_fields(where, offset):
                if isinstance(field, TensorMapArg):
                    maps[offset + field_offset] = map_object(f"{where}, tensor map at offset {field_offset}",
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
            params.extend(scalar_bytes(param, value, i))
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
        machine.has_reductions = reductions.uses_reductions(entry)  # (a walk of the program: once, not per launch)
    machine.tensor_maps = maps
    machine.wgmma_numerics = tensor_core_numerics.current()  # (the environment read once a launch, not per wgmma)
    machine.races = races
    machine.global_order = GlobalOrder(machine, memory_.buffer.size, machine.global_order if decoded else None)
    machine.watch = reductions.ReductionWatch(machine) if machine.has_reductions else None
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
    return PreparedLaunch(args, machine, scheduler, specials, memory_, buffers, order, per_batch, total, grid, cluster)


def run_batches(run: PreparedLaunch, starts, counting: bool) -> dict:
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


def launch_results(run: PreparedLaunch) -> list:
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
