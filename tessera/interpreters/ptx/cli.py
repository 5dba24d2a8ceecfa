"""`tessera-run kernel.ptx`: run any PTX entry in the PTX executor from the shell.

    tessera-run gemm.ptx --kernel gemm_bf16 --grid 2,2 --block 128 --shared-bytes 33791 \\
        --arg bf16[256,128]=random --arg bf16[128,256]=random --arg f32[256,256]=zeros \\
        --arg tensormap:0:box=64,128:swizzle=128 ... --save out/

Arguments (`--arg`, one per kernel parameter, in order):
  TYPE[D0,D1,...]=INIT       a global array (the parameter gets its address). TYPE: f16 bf16 f32 f64 u8 u16
                             u32 u64 s8 s16 s32 s64 e4m3 e5m2. INIT: random (floats: standard normal;
                             integers: 0..99), zeros, ones, arange, or a .npy file (converted to TYPE,
                             shape checked).
  TYPE=VALUE                 a scalar, e.g. u32=7, f32=0.5.
  tensormap:I:box=B0,B1,...[:swizzle=0|32|64|128][:source=J|bJ]
                             a tensor map over a row-major array: --arg number J (default: I) or, with
                             bJ, --buffer number J; box innermost first (cuTensorMapEncodeTiled's boxDim).
                             I numbers the map's own position and is only checked.
  struct:FILE.json           a by-value Params struct (CUTLASS, FlashAttention-3: `.param .align 128 .b8
                             name[N]`) from a launch description: its bytes, its tensors (TYPE[SHAPE]=INIT)
                             and at byte offsets pointers to them and tensor maps over them (with every
                             cuTensorMapEncodeTiled argument); its grid, block, cluster and shared_bytes are
                             the defaults of --grid, --block, --cluster, --shared-bytes. The format is in
                             tessera/interpreters/ptx/params.py; its tensors are saved as DIR/<name>.npy.
--buffer TYPE[D0,...]=INIT   a global array that is not a parameter, reachable through tensor maps (e.g.
                             the A and B of a TMA GEMM), numbered from 0 in order.
Arrays are created in order (arguments, then buffers) with --seed. With --save DIR every array argument
is written after the run as DIR/arg<N>_<param>.npy and every buffer as DIR/buffer<N>.npy (bf16, e4m3, e5m2 as
f32). Errors (syntax, unsupported instructions, memory faults, deadlocks, bad launches, a launch past the driver's
limits or the memory budget, a run past --max-steps) print one diagnostic and exit with 1; so do races and
other asynchrony hazards (happens_before, asynchrony). --schedule adversarial --schedule-seed N runs the
threads in a seeded random order (the same N replays it); --schedule delayed --schedule-seed N runs CTA N (linear
index, modulo the CTAs) only when no other CTA can run; --schedule delayed-warp (delayed-warpgroup) runs warp
(warpgroup) N of every CTA only when no other of its CTA can; --no-races turns the generic race check off;
--strict-proxy asks a fence.proxy.async after cp.async bytes an mbarrier completed, before wgmma reads them.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import warnings

import ml_dtypes
import numpy as np

_DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64, "u8": np.uint8,
           "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "s8": np.int8, "s16": np.int16, "s32": np.int32,
           "s64": np.int64, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
_ML_FLOATS = {np.dtype(_DTYPES[t]) for t in ("bf16", "e4m3", "e5m2")}
"""ml_dtypes' floats (NumPy gives them kind 'V'): made from floats, saved as f32."""
_ARRAY = re.compile(r"^(\w+)\[([\d,\s]+)\]=(.+)$")
_SCALAR = re.compile(r"^(\w+)=(.+)$")


def _dims(text: str, what: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"{what} must be comma-separated integers, got '{text}'") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{what} must be positive integers, got '{text}'")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tessera-run FILE.ptx", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file", help="a PTX file (.ptx)")
    parser.add_argument("--kernel", help="the entry to run (default: the only entry)")
    parser.add_argument("--grid", help="grid X[,Y[,Z]] (default 1)")
    parser.add_argument("--cluster", help="cluster X[,Y[,Z]] (default: the entry's .reqnctapercluster, or 1)")
    parser.add_argument("--block", help="block X[,Y[,Z]] (default: the entry's .reqntid)")
    parser.add_argument("--shared-bytes", type=int, default=None, help="dynamic shared memory in bytes (default 0)")
    parser.add_argument("--arg", dest="args", action="append", default=[], metavar="SPEC",
                        help="a kernel argument, in parameter order (see below)")
    parser.add_argument("--buffer", dest="buffers", action="append", default=[], metavar="SPEC",
                        help="a global array reachable only through tensor maps: TYPE[SHAPE]=INIT")
    parser.add_argument("--seed", type=int, default=0, help="seed of random arrays")
    parser.add_argument("--save", metavar="DIR", help="save every array argument after the run as .npy")
    parser.add_argument("--max-steps", type=int, default=None, metavar="N",
                        help="steps a batch of CTAs may take before the run stops, naming where each warp is "
                             f"(default {_default_max_steps()})")
    parser.add_argument("--memory-budget", type=int, default=None, metavar="BYTES",
                        help="host memory the run may need, arrays included (default 8 GiB)")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="run the batches of CTAs in N processes (the same results and first error as one "
                             "process; default: one)")
    parser.add_argument("--races", action=argparse.BooleanOptionalAction, default=True,
                        help="report generic shared-memory accesses no synchronisation orders (default on; proxy "
                             "fences and the other asynchrony checks stay on with --no-races)")
    parser.add_argument("--strict-proxy", action="store_true",
                        help="hold cp.async bytes read by wgmma to the PTX ISA's letter: a fence.proxy.async even "
                             "after a cp.async.mbarrier.arrive completed them (by default that completion suffices, "
                             "as CUTLASS's and FlashAttention-3's cp.async mainloops rely on)")
    from tessera.interpreters.ptx.schedule import SCHEDULES

    parser.add_argument("--schedule", choices=SCHEDULES, default="min-pc",
                        help="which ready threads run next: min-pc (default), adversarial (random, replayed by "
                             "--schedule-seed), delayed (CTA --schedule-seed, modulo the CTAs, runs only when no "
                             "other can), delayed-warp or delayed-warpgroup (warp or warpgroup --schedule-seed of "
                             "every CTA runs only when no other of its CTA can)")
    parser.add_argument("--schedule-seed", type=int, default=None, metavar="N",
                        help="the seed of --schedule adversarial, or the CTA, warp or warpgroup a delayed schedule "
                             "delays (default 0)")
    return parser


def _default_max_steps() -> int:
    from tessera.interpreters.ptx.schedule import DEFAULT_MAX_STEPS

    return DEFAULT_MAX_STEPS


def _array(spec: str, rng: np.random.Generator, budget: int | None = None) -> np.ndarray:
    from tessera.interpreters.limits import check_memory

    match = _ARRAY.match(spec)
    type_name, shape_text, init = match.groups()
    if type_name not in _DTYPES:
        raise ValueError(f"--arg {spec}: unknown element type '{type_name}' (types: {', '.join(_DTYPES)})")
    dtype, shape = np.dtype(_DTYPES[type_name]), _dims(shape_text, f"--arg {spec}: the shape")
    # the initial values are made in float64/int64, then converted: 8 bytes an element, plus the array
    check_memory(f"--arg {spec}", [(f"{type_name}{list(shape)}", (8 + dtype.itemsize) * int(np.prod(shape, dtype=object)))],
                 budget)
    if init == "random":
        values = rng.standard_normal(shape) if dtype.kind == "f" or dtype in _ML_FLOATS \
            else rng.integers(0, 100, shape)
    elif init in ("zeros", "ones"):
        values = np.full(shape, 0 if init == "zeros" else 1)
    elif init == "arange":
        values = np.arange(int(np.prod(shape))).reshape(shape)
    elif init.endswith(".npy"):
        values = np.load(init)
        if values.shape != shape:
            raise ValueError(f"--arg {spec}: {init} has shape {values.shape}")
        if values.dtype.kind not in "biuf" and values.dtype not in _ML_FLOATS or \
                values.dtype.kind == "f" and dtype.kind in "iu" and not np.all(np.mod(values, 1) == 0):
            raise ValueError(f"--arg {spec}: {init} holds {values.dtype} values, which {type_name} does not hold "
                             "(real numbers; integers for an integer type)")
    else:
        raise ValueError(f"--arg {spec}: INIT must be random, zeros, ones, arange or a .npy file")
    from tessera.numerics import BF16, round_to  # bf16 rounded once from float64, whatever ml_dtypes does

    values = np.asarray(values)
    return np.ascontiguousarray(round_to(values, BF16) if np.dtype(dtype) == BF16 else values.astype(dtype))


def _arguments(specs: list[str], buffer_specs: list[str], rng: np.random.Generator,
               budget: int | None = None) -> tuple[list, list]:
    """(argument values, buffers) from the --arg and --buffer specs."""
    from tessera.interpreters.ptx import TensorMapArg

    values: list = []
    maps: list[tuple[int, dict[str, str]]] = []
    for i, spec in enumerate(specs):
        if spec.startswith("struct:"):
            values.append(_struct(spec[len("struct:"):], rng, budget))
        elif spec.startswith("tensormap:"):
            fields = spec.split(":")
            if len(fields) < 3 or not fields[1].isdigit() or int(fields[1]) != i:
                raise ValueError(f"--arg {spec}: expected tensormap:{i}:box=...")
            options = dict(f.split("=", 1) for f in fields[2:] if "=" in f)
            if "box" not in options or set(options) - {"box", "swizzle", "source"}:
                raise ValueError(f"--arg {spec}: options are box=..., swizzle=..., source=...")
            maps.append((i, options))
            values.append(None)
        elif _ARRAY.match(spec):
            values.append(_array(spec, rng, budget))
        elif _SCALAR.match(spec):
            type_name, text = _SCALAR.match(spec).groups()
            if type_name not in _DTYPES:
                raise ValueError(f"--arg {spec}: unknown type '{type_name}'")
            dtype = np.dtype(_DTYPES[type_name])
            try:
                values.append(float(text) if dtype.kind == "f" else int(text, 0))
            except ValueError:
                raise ValueError(f"--arg {spec}: '{text}' is not a {type_name} value") from None
        else:
            raise ValueError(f"--arg {spec}: expected TYPE[SHAPE]=INIT, TYPE=VALUE or tensormap:I:box=...")
    for spec in buffer_specs:
        if not _ARRAY.match(spec):
            raise ValueError(f"--buffer {spec}: expected TYPE[SHAPE]=INIT")
    buffers = [_array(spec, rng, budget) for spec in buffer_specs]
    for i, options in maps:
        source = options.get("source", str(i))
        if source.startswith("b") and source[1:].isdigit() and int(source[1:]) < len(buffers):
            target = buffers[int(source[1:])]
        elif source.isdigit() and int(source) < len(values) and isinstance(values[int(source)], np.ndarray):
            target = int(source)
        else:
            raise ValueError(f"--arg {specs[i]}: source={source} is not an array argument or buffer")
        array = target if isinstance(target, np.ndarray) else values[target]
        box = _dims(options["box"], f"--arg {specs[i]}: the box")
        values[i] = TensorMapArg.tiled(target, box, int(options.get("swizzle", 0)), shape=array.shape,
                                       dtype=array.dtype)
    return values, buffers


def _struct(path: str, rng: np.random.Generator, budget: int | None):
    """The `params.Description` of the launch description file `path`, its tensors made as --arg arrays."""
    import json

    from tessera.interpreters.ptx.params import load_description

    try:
        with open(path) as f:
            description = json.load(f)
    except json.JSONDecodeError as error:
        raise ValueError(f"--arg struct:{path}: not JSON: {error}") from None
    except OSError as error:
        raise ValueError(f"--arg struct:{path}: cannot read '{path}': {error.strerror or error}") from None

    def make(name, spec):
        if not isinstance(spec, str) or not _ARRAY.match(spec):
            raise ValueError(f"--arg struct:{path}: tensor {name!r} must be TYPE[SHAPE]=INIT, got {spec!r}")
        return _array(spec, rng, budget)

    return load_description(description, make, f"--arg struct:{path}")


def run(args: argparse.Namespace) -> int:
    from tessera.interpreters.ptx import launch
    from tessera.interpreters.ptx.parse import parse_ptx

    try:
        with open(args.file, "rb") as f:
            data = f.read()
    except OSError as e:  # as tessera-run says it of an MLIR file, not Python's "[Errno 2] ..."
        raise ValueError(f"cannot read '{args.file}': {e.strerror or e}") from None
    try:
        text = data.decode()
    except UnicodeDecodeError as e:  # as tessera-opt and tessera-run say it of an MLIR file
        raise ValueError(f"{args.file} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    module = parse_ptx(text, args.file)
    if args.kernel is None:
        if len(module.entries) != 1:
            raise ValueError(f"{args.file} has entries {', '.join(module.entries) or 'none'}: pass --kernel NAME")
        args.kernel = next(iter(module.entries))
    entry = module.entries.get(args.kernel)
    if entry is None:
        raise ValueError(f"no entry named '{args.kernel}' (entries: {', '.join(module.entries)})")
    values, buffers = _arguments(args.args, args.buffers, np.random.default_rng(args.seed), args.memory_budget)
    if len(args.args) != len(entry.params):  # the launch counts them too, but cannot say how a shell gives them
        raise ValueError(
            f"entry {args.kernel} has {len(entry.params)} parameters ({', '.join(p.name for p in entry.params)}), "
            f"got {len(args.args)} --arg: give one per parameter, in order (tessera-run FILE.ptx --help); a kernel "
            "Tessera printed runs from its MLIR with tessera-run FILE.mlir --level ptx, which makes its arguments")
    from tessera.interpreters.ptx.params import Description

    described = next((v for v in values if isinstance(v, Description)), None)
    values = [v.struct if isinstance(v, Description) else v for v in values]
    default = (lambda key: getattr(described, key)) if described is not None else (lambda key: None)
    block = args.block or ",".join(map(str, default("block") or entry.directives.get("reqntid", ())))
    if not block:
        raise ValueError(f"entry {args.kernel} has no .reqntid: pass --block X[,Y,Z]")
    grid = _dims(args.grid or ",".join(map(str, default("grid") or (1,))), "--grid")
    block = _dims(block, "--block")
    cluster = args.cluster or (",".join(map(str, default("cluster"))) if default("cluster") else None)
    cluster = _dims(cluster, "--cluster") if cluster else None
    shared_bytes = args.shared_bytes if args.shared_bytes is not None else (default("shared_bytes") or 0)
    start = time.perf_counter()
    if args.schedule_seed is not None and args.schedule == "min-pc":
        raise ValueError("--schedule-seed replays --schedule adversarial or picks what a delayed schedule delays")
    limits = {"memory_budget": args.memory_budget, "workers": args.workers, "races": args.races,
              "schedule": args.schedule, "seed": args.schedule_seed, "strict_proxy": args.strict_proxy}
    if args.max_steps is not None:
        limits["max_steps"] = args.max_steps
    if args.save:  # before the run, which may take minutes: an unwritable DIR is refused first
        try:
            os.makedirs(args.save, exist_ok=True)
        except OSError as error:
            raise ValueError(f"--save {args.save}: cannot make the directory ({error.strerror})") from None
    results = launch(module, args.kernel, grid, block, values, shared_bytes, args.file, cluster=cluster, **limits)
    elapsed = time.perf_counter() - start
    print(f"{args.kernel}: grid {grid}, block {block}" + (f", cluster {cluster}" if cluster else "") +
          f", {shared_bytes} B dynamic shared memory, {elapsed:.2f} s")
    if described is not None:  # the struct's tensors, updated in place by the run
        for name, array in described.tensors.items():
            wide = array.astype(np.float64)
            print(f"  {name}: {array.dtype}{list(array.shape)} min {wide.min():.6g} max {wide.max():.6g} "
                  f"mean {wide.mean():.6g}")
            if args.save:
                saved_array = array.astype(np.float32) if array.dtype in _ML_FLOATS else array
                np.save(os.path.join(args.save, f"{name}.npy"), saved_array)
    named = {id(b): f"buffer{j}" for j, b in enumerate(buffers)}
    saved = set()
    for i, (param, value, result) in enumerate(zip(entry.params, values, results)):
        if result is None or isinstance(result, dict):
            continue
        target = getattr(value, "array", value)
        name = named.get(id(target), f"arg{i}_{param.name}") if not isinstance(target, (int, np.integer)) \
            else f"arg{int(target)}_{entry.params[int(target)].name}"
        if name in saved:
            continue
        saved.add(name)
        wide = result.astype(np.float64)
        print(f"  {name}: {result.dtype}{list(result.shape)} min {wide.min():.6g} max {wide.max():.6g} "
              f"mean {wide.mean():.6g}")
        if args.save:  # .npy has no bfloat16: such arrays are saved as their float32 values
            saved_array = result.astype(np.float32) if result.dtype in _ML_FLOATS else result
            np.save(os.path.join(args.save, f"{name}.npy"), saved_array)
    return 0


def _warnings_as_lines():
    """`warnings.showwarning` that prints a TesseraWarning (`--workers` running serially) as one line,
    `tessera-run: warning: ...`, and others as before."""
    from tessera.ir.diagnostics import TesseraWarning

    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, TesseraWarning):
            print(f"tessera-run: warning: {message}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    return show


def main(argv: list[str] | None = None) -> int:
    from tessera.interpreters.ptx import PtxExecutionError
    from tessera.interpreters.ptx.syntax import PtxSyntaxError

    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _warnings_as_lines()
            return run(args)
    except BrokenPipeError:  # the reader of standard output stopped early: tessera-run's main ends quietly
        raise
    except (PtxSyntaxError, PtxExecutionError, ValueError, OSError) as error:
        print(f"tessera-run: error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # an internal error: no traceback unless asked for
        if os.environ.get("TESSERA_DEBUG") == "1":
            raise
        print(f"tessera-run: internal error: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
