"""The bodies of the GPU session's stages after `install` (bench/gpu_session.py runs each in its own process
and cuts it at its budget). Each writes what it has through `writer` as it goes (`writer.set(key, value)`,
`writer.add(key, record)`), so a stage cut short leaves its results so far.

With `dry` (the session's --dry-run, no GPU needed): `compile` compiles every kernel; `tests` collects the
GPU tests; `fidelity` builds every case's inputs and runs the PTX-executor side; `forward`, `backward` and
`gemm` build every configuration's inputs (as zero-stride arrays: shapes and types, no memory) and pass them
through Tessera's host-side launch checks (sizes, tensor maps, grid); `report` draws what there is.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import resource
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import gpu_fidelity
import gpu_plan
import gpu_probes
import gpu_results
import gpu_tests
import gpu_variants
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
QUICK_EXECUTOR = ("gemm-odd-mn", "paged-decode-d64")
"""`--dry-run --quick` runs the PTX-executor side of these cases only: one through a compiled kernel, one
through an entry point."""
QUICK_FP8 = dict(head_dim=128, causal=False)
"""`--dry-run --quick` compiles the FP8 forward's kernel of this row (and host-checks its rows)."""
QUICK_BACKWARD = dict(head_dim=64, causal=True)
"""`--dry-run --quick` compiles the forward with LSE of these backward rows (the quick fidelity case compiles
their three backward kernels), so that their launches, the postprocess's seq_q included, are host-checked."""
FLEX_SHARE_S = 45
"""The forward stage's seconds FlexAttention's builds (torch.compile per shape) may take: about 12 compiles of
2-4 s on the H200 (a static and a dynamic one per head_dim and mask, `harness.RECOMPILE_LIMIT`)."""


def workers(jobs: int) -> int:
    """Processes for `jobs` independent jobs: one per core, at most one per job."""
    return max(1, min(jobs, os.cpu_count() or 1))


def _pool(jobs: int):
    """Worker processes forked now, before this process touches a GPU (a forked CUDA context is unusable)."""
    return multiprocessing.get_context("fork").Pool(workers(jobs))


def gpu_reason() -> str | None:
    """None when the GPU, the driver bindings and PyTorch with CUDA are usable, else why not."""
    from tessera.runtime import cuda_unavailable_reason

    reason = cuda_unavailable_reason()
    if reason is not None:
        return reason
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    return None if torch.cuda.is_available() else f"PyTorch {torch.__version__} sees no CUDA device"


# region compile


def kernel_plan(quick: bool) -> list:
    """Every kernel the session runs (with `quick`, those of the quick fidelity cases: one per builder and
    launch path)."""
    configs = []
    if not quick:
        for name in gpu_plan.BENCHMARKS:
            for row in gpu_plan.benchmark_rows(name):
                configs += gpu_plan.row_configs(row)
    for case in gpu_fidelity.cases():
        if not quick or case.name in gpu_fidelity.QUICK:
            configs += gpu_fidelity.case_configs(case)
    if quick:
        configs.append(gpu_plan.gemm_config(schedule=gpu_plan.QUICK_GEMM_SCHEDULE))  # host-checked on the GEMM rows
        configs.append(gpu_plan.fp8_config(**QUICK_FP8))
        configs.append(gpu_plan.forward_config(**QUICK_BACKWARD, return_lse=True))
    return gpu_plan.unique(configs + gpu_variants.kernel_jobs(quick))


def compile_one(config) -> dict:
    """Compile one kernel into the cache (a process-pool job; a `KernelConfig`, or a job with its own
    `compile()`: `gpu_variants.VariantKernel`): its name, seconds, PTX size, whether ptxas made a cubin, or the
    first line of its error."""
    from tessera.runtime.compiler import compile_kernel

    start, cpu = time.perf_counter(), _cpu_seconds()
    record = {"kernel": str(config), "builder": config.builder}
    try:
        kernel = config.compile() if isinstance(config, gpu_variants.VariantKernel) else compile_kernel(config)
    except Exception as error:  # noqa: BLE001 - one kernel's failure is recorded; the others compile on
        return {**record, "error": f"{type(error).__name__}: {str(error).strip().splitlines()[0]}",
                "seconds": time.perf_counter() - start, "cpu_seconds": _cpu_seconds() - cpu}
    return {**record, "name": kernel.name, "seconds": time.perf_counter() - start,
            "cpu_seconds": _cpu_seconds() - cpu, "ptx_bytes": len(kernel.ptx),
            "cubin": kernel.cubin is not None, "ptxas": kernel.ptxas, "from_cache": kernel.from_cache}


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (ptxas): what a compile costs a core, whatever
    else the machine runs (wall seconds on a loaded two-core machine overstate it several times)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def compile_stage(writer, quick: bool) -> None:
    """Every kernel of the plan compiled on every core, each recorded as it finishes; the estimate of the
    GPU machine's time for the whole plan; SystemExit naming the first kernel that failed."""
    from tessera.runtime.compiler import ptxas_version

    configs = kernel_plan(quick)
    total = len(kernel_plan(False)) if quick else len(configs)
    writer.set("kernels", len(configs))
    writer.set("ptxas", ptxas_version())
    if ptxas_version() == "none":
        writer.set("note", "no ptxas: the runtime hands the PTX to the driver's JIT (cuModuleLoadData)")
    start = time.perf_counter()
    writer.set("workers", workers(len(configs)))
    with _pool(len(configs)) as pool:
        for record in pool.imap_unordered(compile_one, configs):
            writer.add("compiled", record)
    writer.set("seconds", time.perf_counter() - start)
    seconds = [r["cpu_seconds"] for r in writer.data["compiled"]]
    # The GPU machine compiles `total` kernels on its cores; each takes about the mean CPU time it took here.
    estimate = sum(seconds) / len(seconds) * total / gpu_plan.GPU_MACHINE_CORES + max(seconds)
    writer.set("estimate_on_gpu_machine_s", round(estimate, 1))
    errors = [r for r in writer.data["compiled"] if "error" in r]
    if errors:
        raise SystemExit(f"{len(errors)} of {len(configs)} kernels failed to compile; first: {errors[0]['kernel']}: "
                         f"{errors[0]['error']}")


# endregion

# region fidelity


def fidelity_stage(writer, out: Path, prepared: Path, dry: bool, quick: bool) -> None:
    """Every case's inputs recorded; then, on the GPU, each case's GPU side compared with its executor side
    prepared ahead (bench/gpu_prepared.py, `prepared`: .whl/fidelity/), a row per case as it ends (`running`
    names the case in progress). A case whose prepared side is missing or stale says so by name and keeps
    the GPU against float64. The dry run prepares the executor side of its cases into out/fidelity/ as
    `--prepare` does (the quick one: `QUICK_EXECUTOR`), each row the executor against float64 (SystemExit
    naming the cases the executor failed on), and reports which prepared cases are usable (`prepared`). Each
    case's raw outputs, both sides, go to out/RAW_OUTPUTS (`save_raw_outputs`; row `raw`)."""
    import gpu_prepared

    cases = [c for c in gpu_fidelity.cases() if not quick or c.name in gpu_fidelity.QUICK]
    for case in cases:
        arrays = gpu_fidelity.inputs(case)
        writer.add("inputs", {"case": case.name, "kind": case.kind,
                              "shapes": {k: list(v.shape) for k, v in arrays.items()},
                              "bytes": int(sum(v.nbytes for v in arrays.values())),
                              "kernels": [str(c) for c in gpu_fidelity.case_configs(case, arrays)]})
    if dry:
        run_here = [c for c in cases if not quick or c.name in QUICK_EXECUTOR]
        writer.set("prepared", gpu_prepared.status(prepared, run_here if quick else cases))
        prepared = out / gpu_prepared.FOLDER
        failed = gpu_prepared.prepare(gpu_results.StageWriter(prepared / gpu_prepared.MANIFEST), prepared,
                                      [c.name for c in run_here])
        cases = run_here
    else:
        reason = gpu_reason()
        if reason is not None:
            writer.set("skipped", f"no GPU: {reason}")
            return
    manifest = gpu_prepared.load(prepared)
    for case in cases:
        writer.running(case.name)  # a hang names its case
        arrays = gpu_fidelity.inputs(case)
        row = {"case": case.name, "kind": case.kind, **({} if dry else _gpu_side(case, arrays))}
        gpu = row.pop("_outputs", None)
        executor, why = gpu_prepared.executor_outputs(manifest, prepared, case, arrays)
        if executor is None:
            row["executor"] = why
        row["raw"] = save_raw_outputs(out, case.name, gpu, executor)
        measured = gpu if gpu is not None else executor
        if measured is not None:
            table = gpu_fidelity.compare(measured, executor or measured, gpu_fidelity.reference(case, arrays))
            if gpu is None or executor is None:  # one side only: its error against float64, no difference
                for output in table.values():
                    for key in ("max_ulp", "differing", "max_abs_diff", "gpu_error" if gpu is None else "ptx_error"):
                        output.pop(key)
            row["outputs"] = table
        writer.add("cases", row)
    writer.running(None)
    if dry and failed:
        raise SystemExit(f"the PTX executor failed on {', '.join(failed)} (each row's `executor` says how)")


RAW_OUTPUTS = "fidelity-outputs"
"""The fidelity stage's folder in --out (and so in session.tgz) of each case's raw outputs, GPU and executor."""


def save_raw_outputs(out: Path, case: str, gpu: dict | None, executor: dict | None) -> dict | None:
    """Both sides' outputs of a fidelity case, bit for bit, in out/RAW_OUTPUTS/<case>.npz (compressed; keys
    "gpu.<output>" and "executor.<output>", each the unsigned integers of its elements' bits:
    `gpu_prepared.bits`), so that their differences can be studied offline (the inputs: `gpu_fidelity.inputs`
    of the case, seeded). Returns the file and each array's type, None when neither side ran."""
    import gpu_prepared

    sides = {side: outputs for side, outputs in (("gpu", gpu), ("executor", executor)) if outputs is not None}
    if not sides:
        return None
    arrays = {f"{side}.{name}": np.asarray(a) for side, outputs in sides.items() for name, a in outputs.items()}
    (out / RAW_OUTPUTS).mkdir(parents=True, exist_ok=True)
    path = out / RAW_OUTPUTS / f"{case}.npz"
    np.savez_compressed(path, **{key: gpu_prepared.bits(a) for key, a in arrays.items()})
    return {"file": f"{RAW_OUTPUTS}/{path.name}", "dtypes": {key: str(a.dtype) for key, a in arrays.items()}}


def _gpu_side(case, arrays: dict) -> dict:
    """The case on the GPU: its outputs (`_outputs`), seconds, and the kernels it compiled (`planned`: all
    of them in the session's compile list), or why it failed."""
    from tessera.runtime import compiler

    before = set(compiler._COMPILED)
    start = time.perf_counter()
    try:
        outputs = gpu_fidelity.run(case, arrays, None)
    except Exception as error:  # noqa: BLE001 - a failing case is a row of the table
        return {"gpu_failed": f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"}
    used = set(compiler._COMPILED) - before
    planned = {compiler.kernel_key(c) for c in gpu_fidelity.case_configs(case, arrays)}
    return {"_outputs": outputs, "gpu_seconds": time.perf_counter() - start, "planned": used <= planned,
            "kernels": sorted(compiler._COMPILED[k].name for k in used)}


# endregion

# region benchmarks


def zeros(shape, dtype) -> np.ndarray:
    """An array of `shape` that takes no memory (one element, broadcast): for host-side checks."""
    return np.broadcast_to(np.zeros((), dtype), tuple(shape))


def host_check(kernel, inputs: list, **launch: int) -> list:
    """Tessera's host-side checks of a launch of `kernel` on `inputs` with launch sizes `launch`
    (`check_inputs`: sizes, tensor maps, grid); its outputs as zero-stride arrays."""
    from tessera.runtime.arguments import kernel_tensors
    from tessera.runtime.launch import check_inputs

    sizes, _ = check_inputs(kernel.host, inputs, launch)
    return [zeros(t.dims.evaluate(sizes), t.dtype) for t in kernel_tensors(kernel.host) if t.role == "out"]


def fp8_plan_inputs(row: dict, config) -> list:
    """An FP8 row's kernel inputs as the runtime makes them: q, k, V in the layout the kernel's signature asks
    for (`attention_fp8.kernel_v`, on a zero-stride V) and the three f32 descales."""
    from tessera.numerics import F8E4M3
    from tessera.runtime.attention_fp8 import fp8_signature, kernel_v

    shape = (row["batch"], row["heads"], row["seq"], row["head_dim"])
    q, k, v = (zeros(shape, F8E4M3) for _ in range(3))
    return [q, k, kernel_v(v, fp8_signature(config)), *(zeros(shape[:2], np.float32) for _ in range(3))]


def plan_row(row: dict, compiled: set | None) -> dict:
    """The dry run of one benchmark row: inputs built, each Tessera kernel host-checked (with `compiled` a set
    of configurations, only those in it)."""
    from tessera.numerics import BF16
    from tessera.runtime.compiler import compile_kernel

    configs = gpu_plan.row_configs(row)
    record = {"system": "Tessera", "config": row, "status": "planned", "kernels": [str(c) for c in configs]}
    if "M" in row:
        inputs = [zeros((row["M"], row["K"]), BF16), zeros((row["K"], row["N"]), BF16)]
    elif row["dtype"] == "e4m3":
        inputs = fp8_plan_inputs(row, configs[0])
    else:
        shape = (row["batch"], row["heads"], row["seq"], row["head_dim"])
        inputs = [zeros(shape, BF16) for _ in range(4 if row["direction"] == "backward" else 3)]
    record["input_bytes"] = int(sum(np.prod(x.shape) * x.dtype.itemsize for x in inputs))
    if compiled is not None and not set(configs) <= compiled:
        record["host_check"] = "not in --quick"
        return record
    try:
        kernels = [compile_kernel(c) for c in configs]
        if "M" in row or row["direction"] == "forward":
            for kernel in kernels:
                host_check(kernel, inputs)
        elif kernels:
            q, k, v, do = inputs
            forward, pre, main, post = kernels
            o, lse = host_check(forward, [q, k, v])
            dpsum, lse2, _ = host_check(pre, [o, do, lse.reshape(lse.shape[:-1])])
            dq_accum, _, _ = host_check(main, [q, k, v, do, lse2, dpsum])
            host_check(post, [dq_accum], seq_q=row["seq"])  # dq_accum's rows are padded
        record["host_check"] = "ok" if kernels else "no Tessera kernel (the backward refuses this head_dim)"
    except Exception as error:  # noqa: BLE001 - reported in the plan, and fails the dry run
        record["host_check"] = f"{type(error).__name__}: {error}"
    return record


def benchmark_stage(name: str, writer, dry: bool, quick: bool, resume: Path | None = None) -> None:
    """The rows of stage `name` measured on the GPU (with `resume`, those an earlier session did not:
    `rows_left`); in the dry run, planned and host-checked (`plan_rows`)."""
    rows = gpu_plan.benchmark_rows(name)
    if dry:
        plan_rows(name, rows, writer, quick)
        return
    reason = gpu_reason()
    if reason is not None:
        writer.set("skipped", f"no GPU: {reason}")
        return
    _measure_rows(name, rows_left(name, rows, writer, resume), writer)


def plan_rows(name: str, rows: list[dict], writer, quick: bool) -> None:
    """Each row planned and host-checked (`plan_row`; with `quick`, only those whose kernels the quick plan
    compiles); SystemExit naming the first row Tessera's checks refuse."""
    compiled = set(kernel_plan(True)) if quick else None
    for row in rows:
        writer.add("records", plan_row(row, compiled))
    bad = [r for r in writer.data["records"] if r["host_check"] not in ("ok", "not in --quick")
           and not r["host_check"].startswith("no Tessera kernel")]
    if bad:
        raise SystemExit(f"{len(bad)} {name} rows fail Tessera's host checks; first: {bad[0]['config']}: "
                         f"{bad[0]['host_check']}")


def backward_parts_stage(writer, dry: bool, quick: bool, resume: Path | None = None) -> None:
    """bench/backward_parts.py's rows, each taken apart on the GPU and written as it ends (`running` names the
    row in progress); in the dry run, planned and host-checked."""
    import backward_parts

    rows = backward_parts.rows()
    if dry:
        plan_rows("backward_parts", rows, writer, quick)
        return
    reason = gpu_reason()
    if reason is not None:
        writer.set("skipped", f"no GPU: {reason}")
        return
    import torch

    for row in rows_left("backward_parts", rows, writer, resume):
        writer.running(row)
        generator = torch.Generator(device="cuda").manual_seed(row["seq"] + row["causal"])
        shape = (row["batch"], row["heads"], row["seq"], row["head_dim"])
        q, k, v, do = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=generator) for _ in range(4))
        try:
            writer.add("records", {"config": row, **backward_parts.measure(torch, q, k, v, do, row["causal"])})
        except Exception as error:  # noqa: BLE001 - the row says what failed, the next runs
            writer.add("records", {"config": row, "error": f"{type(error).__name__}: {error}"[:500]})
    writer.running(None)


def _measure_rows(name: str, rows: list[dict], writer) -> None:
    """bench/attention.py's harness over `rows`: each system checked, then timed; each row written as soon
    as it is measured."""
    import attention
    import attention_backward_gpu
    import gemm
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    writer.set("environment", attention.environment(torch))
    args = SimpleNamespace(warmup=gpu_plan.WARMUP, repeats=gpu_plan.REPEATS)
    if name == "gemm":
        schedules = {s: gemm.tessera_system(torch, s) for s in gpu_plan.GEMM_SCHEDULES}
        systems = [*schedules.values(), gemm.cublas_system(torch)]
    elif name == "backward":
        systems = [attention_backward_gpu.tessera_backward_system(torch)] + \
            attention_backward_gpu.sdpa_backward_systems(torch)
        orders = {o: attention_backward_gpu.tessera_backward_system(torch, o) for o in gpu_plan.BACKWARD_ORDERS}
    elif name == "fp8":
        systems = attention.tessera_fp8_systems(torch) + [attention.cudnn_fp8_system(torch)]
        writer.set("published", {"FA3 (paper, Figure 7)": [{"config": r, "tflops": gpu_plan.fa3_fp8_tflops(r)}
                                                            for r in rows if gpu_plan.fa3_fp8_tflops(r)]})
    else:
        systems = [attention.tessera_system(torch)] + attention.sdpa_systems(torch) + \
            [s for s in (attention.triton_system(torch), attention.flex_system(torch)) if s is not None]
        systems = [capped(s, FLEX_SHARE_S) if s.name == "FlexAttention" else s for s in systems]
        tiles = {t: attention.tessera_system(torch, tile=t) for t in gpu_plan.FORWARD_TILES}
    writer.set("systems", [s.name for s in systems])
    for row in rows:
        writer.running(row)  # a row past the stage's item limit is cut by gpu_session.run_stage
        seed = sum(int(v) for v in row.values() if isinstance(v, int | bool))
        generator = torch.Generator(device="cuda").manual_seed(seed)
        timed = systems  # a GEMM row: the default and cuBLAS, or its schedule alone (gpu_plan.gemm_rows)
        if name == "gemm":
            timed = [schedules[row["schedule"]]] if "schedule" in row else [schedules["128x128"], systems[-1]]
        elif "tile" in row:  # a forward row of gpu_plan.forward_tile_rows: that kernel alone
            timed = [tiles[row["tile"]]]
        elif "mma_order" in row:  # a backward row of gpu_plan.backward_order_rows: that kernel alone
            timed = [orders[row["mma_order"]]]
        try:
            inputs, check, flops = _row_inputs(torch, name, row, generator)
            records = attention.measure(torch, timed, inputs, row, flops, check, args)
        except Exception as error:  # noqa: BLE001 - out of memory in a check, say: the row says so, the next runs
            records = [attention.Record(s.name, row, "error", note=f"{type(error).__name__}: {error}"[:500])
                       for s in timed]
        for record in records:
            writer.add("records", asdict(record))
        inputs = check = None
        torch.cuda.empty_cache()
    writer.running(None)


def rows_left(name: str, rows: list[dict], writer, resume: Path | None) -> list[dict]:
    """`rows` less those an earlier session (its --out folder `resume`) measured in stage `name`, whose records
    are kept (`records`), and less the one it was cut in (`cut_before`: a row that hangs the GPU once does not
    get the chance twice)."""
    path = resume / "stages" / f"{name}.json" if resume is not None else None
    if path is None or not path.exists():
        return rows
    import json

    earlier = json.loads(path.read_text())
    key = lambda row: json.dumps(row, sort_keys=True)  # noqa: E731
    done = {key(r["config"]) for r in earlier.get("records", [])}
    cut = (earlier.get("running") or {}).get("item")
    writer.set("resumed_from", str(resume))
    writer.set("records", earlier.get("records", []))
    if cut is not None:
        writer.set("cut_before", [cut])
        done.add(key(cut))
    return [row for row in rows if key(row) not in done]


def _row_inputs(torch, name: str, row: dict, generator):
    """(inputs for the systems, the check of their outputs, FLOPs) of one benchmark row."""
    import attention
    import attention_backward_gpu
    import gemm

    if name == "gemm":
        a, b = (torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=generator)
                for shape in ((row["M"], row["K"]), (row["K"], row["N"])))
        return (a, b), gemm.gemm_check(torch, a, b), 2.0 * row["M"] * row["N"] * row["K"]
    if name == "fp8":
        q, k, v = attention.fp8_inputs(torch, row, generator)
        check = attention.fp8_check(torch, q, k, v, row["causal"])
        return (q, k, v, row["causal"]), check, gpu_plan.attention_flops(row)
    shape = (row["batch"], row["heads"], row["seq"], row["head_dim"])
    tensors = [torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=generator)
               for _ in range(4 if name == "backward" else 3)]
    if name == "backward":
        check = attention_backward_gpu.backward_check(torch, *tensors, row["causal"])
    else:
        check = attention.attention_check(torch, *tensors, row["causal"])
    return (*tensors, row["causal"]), check, gpu_plan.attention_flops(row)


def capped(system, share_s: float):
    """`system` whose builds (for FlexAttention: torch.compile) stop once they have taken `share_s` seconds
    of the stage: later configurations report it unsupported, so one slow compiler cannot starve the rest."""
    import attention

    spent = [0.0]

    def build(inputs):
        if spent[0] > share_s:
            raise attention.Unsupported(f"skipped: its builds took their {share_s:.0f} s share of the stage")
        start = time.perf_counter()
        try:
            return system.build(inputs)
        finally:
            spent[0] += time.perf_counter() - start
    return attention.System(system.name, build, system.output_rounding)


# endregion


# region variants


def variants_plan(writer, quick: bool) -> None:
    """The dry run: each row's density, and its kernel host-checked on zero-stride q, k, v and the real captured
    arrays and block lists (with `quick`: the rows at 2k, none host-checked: loading the one kernel the quick plan
    compiles and importing torch would double the stage's seconds in the test suite)."""
    from tessera.numerics import BF16

    checked = set() if quick else {(j.variant, j.seq) for j in gpu_variants.kernel_jobs(False)}
    for row in gpu_variants.rows():
        if quick and row["seq"] != 2048:
            continue
        variant = gpu_variants.variant_of(row)
        record = {"config": row, "density": gpu_variants.density(variant, row)}
        shape = (row["batch"], row["heads"], row["seq"], row["head_dim"])
        q = zeros(shape, BF16)
        if (row["variant"], row["seq"]) in checked:  # as the GPU stage's Tessera builds it
            traced = gpu_variants.variant_of(row, *gpu_variants.tracing_lib())
            kernel, block_n = gpu_variants.compiled(traced, row)
            extra = gpu_variants.tessera_inputs(traced, row, q, q, block_n)
            record["input_bytes"] = int(sum(x.nbytes for x in extra))
            (o,) = host_check(kernel, [q, q, q, *extra])
            record.update(kernel=kernel.name, block_n=block_n, host_check="ok" if o.shape == shape else o.shape)
        else:
            record["host_check"] = "not in --quick" if quick else "the forward stage's causal kernel (checked there)"
        writer.add("records", record)


def variants_stage(writer, dry: bool, quick: bool, resume: Path | None = None) -> None:
    """The attention variants against FlexAttention (bench/gpu_variants.py): each row measured and written as it
    ends (`running` names the row in progress, which the session cuts at its item limit; with `resume`, the rows
    an earlier call did not measure, its records and rows' summaries kept); in the dry run, planned
    (`variants_plan`)."""
    if dry:
        variants_plan(writer, quick)
        return
    reason = gpu_reason()
    if reason is not None:
        writer.set("skipped", f"no GPU: {reason}")
        return
    import attention
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    writer.set("environment", attention.environment(torch))
    seconds: dict = {}
    found = (gpu_variants.tessera_system(torch), gpu_variants.flex_system(torch))
    systems = [gpu_variants.timed_builds(s, seconds) for s in found if s is not None]
    writer.set("systems", [s.name for s in systems])
    args = SimpleNamespace(warmup=gpu_plan.WARMUP, repeats=gpu_plan.REPEATS)
    left = rows_left("variants", gpu_variants.rows(), writer, resume)
    if "resumed_from" in writer.data:  # the earlier call's rows' summaries with its records
        writer.set("rows", json.loads((resume / "stages" / "variants.json").read_text()).get("rows", []))
    for row in left:
        writer.running(row)
        try:
            records, summary = gpu_variants.measure(torch, row, systems, seconds, args)
        except Exception as error:  # noqa: BLE001 - the row says what failed, the next runs
            records, summary = [], {"config": row, "error": f"{type(error).__name__}: {error}"[:500]}
        for record in records:
            writer.add("records", asdict(record))
        writer.add("rows", summary)
        torch.cuda.empty_cache()
    writer.running(None)


# endregion


PICTURES = "pictures"
"""The report stage's folder in --out for its SVGs (in session.tgz; --out's top level is kept to the few files
the device tool returns: `gpu_session.RETURNED_FILES`)."""


def report_stage(writer, out: Path, resume: Path | None = None) -> None:
    """attention_forward.svg, attention_fp8.svg, attention_backward.svg, gemm.svg, attention_variants.svg (in
    out/PICTURES) and benchmark.csv from the benchmark stages (a stage this call did not run: from `resume`, an
    earlier call's --out, where it ran there)."""
    import json

    import gpu_plot

    everything = []
    pictures = out / PICTURES
    pictures.mkdir(parents=True, exist_ok=True)
    for name, title in (("forward", "Forward attention, bf16"), ("fp8", "Forward attention, FP8 e4m3"),
                        ("backward", "Backward attention, bf16"), ("gemm", "GEMM, bf16 inputs"),
                        ("variants", "Attention variants against FlexAttention, forward, bf16, head_dim 128")):
        path = out / "stages" / f"{name}.json"
        if not path.exists() and resume is not None:
            path = resume / "stages" / f"{name}.json"
        records = json.loads(path.read_text()).get("records", []) if path.exists() else []
        records = [r for r in records if "system" in r]  # the dry run's are plans
        device = json.loads(path.read_text()).get("environment", {}).get("device") if path.exists() else None
        everything += records
        title = f"{title}{', ' + device if device else ''}"
        stem = "gemm" if name == "gemm" else f"attention_{name}"
        if name == "variants":
            picture = gpu_plot.write_svg(pictures / f"{stem}.svg", records, title, gpu_plot.variant_panel, 4)
        else:
            picture = gpu_plot.write_svg(pictures / f"{stem}.svg", records, title)
        writer.add("pictures", f"{PICTURES}/{picture.name}")
    writer.set("csv", gpu_plot.write_csv(out / "benchmark.csv", everything).name)
    writer.set("records", len(everything))


def run(name: str, writer, out: Path, dry: bool, quick: bool, prepared: Path, resume: Path | None = None) -> None:
    """Run stage `name` (`prepared`: the fidelity executor side's folder, bench/gpu_prepared.py; `resume`: an
    earlier session's --out, whose measured benchmark rows are kept and not measured again)."""
    if name == "compile":
        compile_stage(writer, quick)
    elif name == "tests":
        gpu_tests.tests_stage(writer, out, dry, quick)
    elif name == "fidelity":
        fidelity_stage(writer, out, prepared, dry, quick)
    elif name == "probes":
        gpu_probes.probes_stage(writer, out, dry, quick, None if dry else gpu_reason())
    elif name in gpu_plan.BENCHMARKS:
        benchmark_stage(name, writer, dry, quick, resume)
    elif name == "backward_parts":
        backward_parts_stage(writer, dry, quick, resume)
    elif name == "variants":
        variants_stage(writer, dry, quick, resume)
    elif name == "report":
        report_stage(writer, out, resume)
    else:
        raise SystemExit(f"unknown stage '{name}' (stages: {', '.join(gpu_plan.STAGES)})")
