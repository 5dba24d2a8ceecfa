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
(see `link` and `control_flow`); recursion is refused, and a thread that calls an `.extern` function (printf's
`vprintf`, assert's `__assertfail`) stops the run naming it.

Launch checks, before anything is allocated: argument count and kinds; grid and block against the driver's
limits (`facts.check_launch`: grid x < 2^31, y and z <= 65535, block x, y <= 1024, z <= 64, 1024 threads) and
the entry's `.reqntid`/`.maxntid`; the cluster shape (`cluster=` or `.reqnctapercluster`, dividing the grid,
at most 8 CTAs or 16 with `non_portable_cluster_size`: `facts.check_cluster`); shared memory (static +
`shared_bytes`) <= 227 KiB; the host memory the run needs (`limits.check_memory`: global memory, its copies
and the state of a batch) within `memory_budget`. CTAs run in batches of several CTAs vectorised together
(`schedule`), whole clusters in a batch (`cluster`), x fastest; a batch that takes more than `max_steps` steps stops, naming where each warp is.

Where: the checks of the arguments and their marshalling are `launch_arguments`, the set-up (parsing, placing,
batch planning, decoding) and the run of batches `launch_setup`, the parallel groups of batches (`workers=`)
`launch_groups`; this module holds `launch` and `launch_described`.
"""

from __future__ import annotations


import numpy as np

from tessera.interpreters.blas_threads import single_threaded_blas
from tessera.interpreters.parallel import parallel_options, serial_note
from tessera.interpreters.ptx import schedule
from tessera.interpreters.ptx.launch_groups import run_groups
from tessera.interpreters.ptx.launch_setup import recycle_launch, launch_results, run_batches, setup_launch
from tessera.interpreters.ptx.params import ParamStruct, TensorMapArg
from tessera.interpreters.ptx.state import PtxExecutionError
from tessera.interpreters.ptx.syntax import Module
from tessera.sm90 import facts


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
    run = setup_launch(ptx, kernel, grid, block, args, shared_bytes, source, max_steps, memory_budget, cta_order,
                       cluster, non_portable_cluster_size, races, schedule, seed, fuse, strict_proxy)
    starts = range(0, run.total, run.per_batch)
    if parallel is not None and run.machine.watch is not None:
        serial_note(f"{source}: launch of {kernel}", "the entry has red, atom or cp.reduce, whose races between "
                                                      "CTAs are checked in one process")
        parallel = None
    if parallel is not None and len(starts) > 1:
        run_groups(parallel, run, starts, stats, ptx, kernel, dict(
            grid=grid, block=block, shared_bytes=shared_bytes, source=source, max_steps=max_steps,
            memory_budget=memory_budget, cta_order=cta_order, cluster=cluster,
            non_portable_cluster_size=non_portable_cluster_size, races=races, schedule=schedule, seed=seed,
            fuse=fuse, strict_proxy=strict_proxy))
    else:
        counts = run_batches(run, starts, stats is not None)
        if stats is not None:
            stats.update(counts)
    results = launch_results(run)
    recycle_launch(run)
    return results


def launch_described(ptx: str | Module, host, arrays: list[np.ndarray], sizes: dict[str, int],
                     source: str = "<ptx>", *, max_steps: int = schedule.DEFAULT_MAX_STEPS,
                     memory_budget: int | None = None, races: bool = True, workers: int | None = None,
                     executor=None, schedule: str = "min-pc", seed: int | None = None, fuse: bool = True,
                     strict_proxy: bool = False) -> None:
    """Run a Tessera kernel from its PTX as `tessera.host.describe` says to launch it: `arrays` are the
    Tile-level arguments (inputs, outputs, scratch, as `prepare_arguments` makes them; an input read through a
    tensor map may be a strided view, see `TensorMapArg.strided`), `sizes` the named sizes. Outputs and
    scratch buffers are written back into `arrays`; inputs are left as they are (they may be read-only).
    `max_steps`, `memory_budget`, `races`, `workers`, `executor`, `schedule`, `seed`, `fuse` and
    `strict_proxy` as for `launch`."""
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
    # Only what the kernel may write comes back: an input is the caller's own array (`prepare_arguments` keeps
    # one already contiguous in the kernel's element type), which may be read-only.
    written = {arg.source for arg in host.target.args if arg.role != "in"}
    for param, result in zip(host.params, results):
        if param.kind == "pointer" and param.source in written:
            arrays[param.source][...] = result


__all__ = ["launch", "launch_described", "ParamStruct", "TensorMapArg", "PtxExecutionError"]
