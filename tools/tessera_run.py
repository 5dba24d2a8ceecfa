"""`tessera-run FILE`: run each kernel of a file on generated inputs, optionally checking it against NumPy.

    tessera-run examples/flash_attention.mlir -d batch=2 -d heads=3 -d seq_q=200 -d seq_k=300 --check
    tessera-run examples/gemm.mlir --level target -d M=70 -d N=128 -d K=64 --check
    tessera-run examples/gemm.mlir --level ptx -d M=70 -d N=128 -d K=64 --check
    tessera-opt examples/gemm.mlir -p '<a pipeline to Target IR>' -o gemm.target.mlir
    tessera-run gemm.target.mlir -d M=70 -d N=128 -d K=64 --check

What runs where:
- a Tile IR kernel (`func.func` with `tile.kernel`) runs in the Tile IR interpreter (`--level tile`, the
  default), or is lowered by `--lower PIPELINE` (default: the full pipeline) and runs in the CTA simulator
  (`--level target`), its register allocation checked against a simulated register file, or its PTX is
  printed and runs in the PTX executor (`--level ptx`, the path of `tessera.interpret(..., level="ptx")`);
- a Target IR kernel (with `sm90.kernel`: what `tessera-opt -p '... convert-tile-to-sm90 ...'` writes, with or
  without `allocate-registers`) runs in the CTA simulator, or with `--level ptx` as PTX in the PTX executor;
- a `.ptx` file runs in the PTX executor (`tessera-run FILE.ptx --help`);
- a StableHLO graph (no kernel; `@main` of stablehlo ops, as JAX exports it) runs in the StableHLO
  interpreter, `--compare` checks `-p rewrite-attention` on it (`tessera.tools.tessera_run_graph`).

The file is read and verified as `tessera-opt` reads it (the same diagnostics, at the same locations), then
`-p PIPELINE` is applied as `tessera-opt -p` would. Inputs are drawn from a standard normal distribution
(seeded) with the shapes the kernel's `tile.dims` give for the sizes on the command line: `-d NAME=SIZE` once
per size the kernel declares, SIZE plain ASCII decimal from 1 to MAX_SIZE. A kernel whose grid is sized by a
launch size no argument uses (the packed and paged attention kernels' max_seqlen_q) reads int32 index tables
that are not generated: it is refused by name, as `--validate` refuses it (run it with `tessera.launch` on real
tables). With `--check`, the outputs are compared with the NumPy reference of the kernel's kind (attention,
gemm) under the tolerance rule of `tessera.reference`, or, for any other kernel, with its own Tile IR run in float64 under the tolerance of
where it rounds (`tessera.validation.rounding`); the max error and the tolerance are printed, and a
mismatch (or a Target IR kernel without a NumPy reference, which has no Tile IR to run) exits with 1. Bad input
(syntax, verifier, sizes, kernel hazards) is a diagnostic and exit status 1, never a traceback; set
TESSERA_DEBUG=1 to see the traceback of an internal error. `--workers N` runs the CTAs of the CTA simulator and
the PTX executor in N processes (`tessera.interpreters.parallel`: the same results and first error).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import sys
import time
import traceback
import warnings

import numpy as np

from tessera.interpreters.launch import check_sizes
from tessera.interpreters.limits import DEFAULT_MEMORY_BUDGET, MemoryBudgetError

from tessera import LEVELS, __version__  # where a kernel runs: tile, target, ptx, as tessera.interpret's level=
from tessera.tools.arguments import parse_seed, parse_size, parse_workers
from tessera.tools.streams import STDIN_NAME, quiet_broken_pipe, read_standard_input, reads_standard_input

DEFAULT_MAX_GIB = DEFAULT_MEMORY_BUDGET / 2**30
"""Default limit on the memory a run takes (`--max-gib`): the simulators' own budget."""


class RunError(Exception):
    """Something tessera-run cannot do with the file or the command line: reported as one diagnostic."""


def parse_gib(text: str) -> float:
    """A memory limit in GiB: a positive finite decimal number."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")) or not re.fullmatch(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", text):
        raise argparse.ArgumentTypeError(f"expected a positive number of GiB such as 4 or 0.5, got '{text}'")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tessera-run", description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a Tile IR or Target IR file (.mlir), or - for standard input; a .ptx file "
                                     "runs the PTX executor instead (see tessera-run FILE.ptx --help)")
    parser.add_argument("-d", "--dim", dest="dims", action="append", type=parse_size, default=[],
                        metavar="NAME=SIZE", help="size of a named dimension (once for each the kernel declares)")
    parser.add_argument("--kernel", help="run only this kernel")
    parser.add_argument("--check", action="store_true", help="compare with the NumPy reference")
    parser.add_argument("--seed", type=parse_seed, default=0, help="seed of the generated inputs")
    parser.add_argument("-p", "--passes", default="", help="a pass pipeline to apply first (as tessera-opt -p)")
    parser.add_argument("--level", default=None, choices=LEVELS,
                        help="for Tile IR kernels, tile (default): the Tile IR interpreter; target: lower to sm_90a "
                             "Target IR and run the CTA simulator; ptx: lower, print the PTX and run it in the PTX "
                             "executor (as tessera.interpret(..., level='ptx')). Target IR kernels run in the CTA "
                             "simulator, or with --level ptx in the PTX executor")
    parser.add_argument("--lower", metavar="PIPELINE", default=None,
                        help="with --level target or ptx: the Tile IR to Target IR pipeline (default: the full "
                             "pipeline, tessera.passes.DEFAULT_PIPELINE)")
    parser.add_argument("--compare", action="store_true",
                        help="for a StableHLO graph: run it before and after -p PIPELINE and compare (see "
                             "tessera/tools/tessera_run_graph.py)")
    parser.add_argument("--attention-level", default="tile", choices=("tile", "ptx"),
                        help="for a StableHLO graph: where Tessera's attention ops run (Tile interpreter, or the "
                             "forward kernel's PTX in the PTX executor)")
    parser.add_argument("--max-gib", type=parse_gib, default=DEFAULT_MAX_GIB,
                        help=f"refuse sizes whose arguments would take more memory (default {DEFAULT_MAX_GIB:g} GiB)")
    parser.add_argument("--workers", type=parse_workers, default=None, metavar="N",
                        help="run the CTAs in N processes (CTA simulator and PTX executor; the same results and "
                             "first error as one process; default: one)")
    parser.add_argument("-v", "--version", action="version",
                        version=f"tessera-run {__version__} (xdsl {importlib.metadata.version('xdsl')})",
                        help="print the version, as tessera-opt -v does, and exit")
    return parser


def target_signature(op):
    """The Tile-level signature of a Target IR kernel, read back from what convert-tile-to-sm90 keeps on it:
    `tile.kernel`, `tile.grid`, and on each tensor-map or pointer argument the `tile.dims`, `tile.role` and
    `sm90.element_type` of the Tile IR argument `sm90.source` names, and the tensors the kernel has no argument
    for (`sm90.unread_tensors`). RunError says what is missing."""
    from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, StringAttr

    from tessera.dialects.tile_types import DYNAMIC, DimsAttr, MemSpace, TileType
    from tessera.ir.diagnostics import located
    from tessera.kernel_abi import (
        DIMS_ATTR, ELEMENT_ATTR, GRID_ATTR, KERNEL_ATTR, ROLE_ATTR, SOURCE_ATTR, UNREAD_ATTR, KernelArg,
        KernelSignature, gemm_options, launch_size_names, size_multiples,
    )

    name = op.sym_name.data
    info = op.attributes.get(KERNEL_ATTR)
    grid = op.attributes.get(GRID_ATTR)
    if not isinstance(info, DictionaryAttr) or not isinstance(grid, DimsAttr):
        raise RunError(located(op, f"a Target IR kernel needs the '{KERNEL_ATTR}' and '{GRID_ATTR}' attributes of "
                                   "the Tile IR kernel it was lowered from"))
    kind = info.data.get("kind")
    causal = info.data.get("causal")
    scale = info.data.get("scale")
    block_args = op.body.blocks.first.args if op.body.blocks else ()
    arg_attrs = op.arg_attrs.data if op.arg_attrs is not None else []
    tensors: dict[int, KernelArg] = {}
    for i, attrs in enumerate(arg_attrs):
        attrs = attrs.data
        if SOURCE_ATTR not in attrs:
            continue
        source = attrs[SOURCE_ATTR]
        dims, role, element = attrs.get(DIMS_ATTR), attrs.get(ROLE_ATTR, StringAttr("in")), attrs.get(ELEMENT_ATTR)
        arg_name = block_args[i].name_hint if i < len(block_args) and block_args[i].name_hint else f"arg{i}"
        if not isinstance(source, IntegerAttr) or not isinstance(dims, DimsAttr) or element is None \
                or not isinstance(role, StringAttr):
            raise RunError(located(op, f"argument {i} (%{arg_name}) needs '{SOURCE_ATTR}', '{DIMS_ATTR}', "
                                       f"'{ROLE_ATTR}' and '{ELEMENT_ATTR}' to say which tensor it stands for"))
        index = source.value.data
        tensor_name = arg_name.split("_map")[0].removesuffix("_ptr")
        tile_type = TileType([DYNAMIC] * len(dims), element, MemSpace.GLOBAL)
        tensors.setdefault(index, KernelArg(tensor_name, role.data, tile_type, dims))
    unread = op.attributes.get(UNREAD_ATTR)  # tensors the kernel has no argument for, in their places
    for entry in unread.data if isinstance(unread, ArrayAttr) else ():
        attrs = entry.data if isinstance(entry, DictionaryAttr) else {}
        source, dims, role, element, tensor = (attrs.get(k) for k in (SOURCE_ATTR, DIMS_ATTR, ROLE_ATTR, ELEMENT_ATTR,
                                                                       "name"))
        if not isinstance(source, IntegerAttr) or not isinstance(dims, DimsAttr) or element is None \
                or not isinstance(role, StringAttr) or not isinstance(tensor, StringAttr):
            raise RunError(located(op, f"each entry of '{UNREAD_ATTR}' needs '{SOURCE_ATTR}', '{DIMS_ATTR}', "
                                       f"'{ROLE_ATTR}', '{ELEMENT_ATTR}' and 'name', got {entry}"))
        tile_type = TileType([DYNAMIC] * len(dims), element, MemSpace.GLOBAL)
        tensors.setdefault(source.value.data, KernelArg(tensor.data, role.data, tile_type, dims))
    if sorted(tensors) != list(range(len(tensors))):
        raise RunError(located(op, f"the '{SOURCE_ATTR}' indices {sorted(tensors)} do not number the tensors "
                                   "0, 1, ... (each tensor of the Tile IR kernel once)"))
    return KernelSignature(op, name, kind.data if isinstance(kind, StringAttr) else "custom",
                           bool(causal.value.data) if isinstance(causal, IntegerAttr) else False,
                           scale.value.data if scale is not None and hasattr(scale, "value") else None,
                           tuple(tensors[i] for i in range(len(tensors))), grid,
                           gemm_options(op, info.data) if isinstance(kind, StringAttr) and kind.data == "gemm" else None,
                           launch_sizes=launch_size_names(op), multiples=size_multiples(op),
                           tables=_declared_tables(op, [tensors[i] for i in range(len(tensors))]))


def _declared_tables(op, args):
    """The index-table rules a Target IR kernel keeps from its Tile IR (`tile.tables`), checked against its
    tensors `args` as `kernel_abi.signature` checks a Tile IR kernel's; RunError if malformed."""
    from tessera.index_tables import TABLES_ATTR, parse_tables, table_problem
    from tessera.ir.diagnostics import located
    from tessera.kernel_abi import launch_size_names

    tables = parse_tables(op.attributes.get(TABLES_ATTR))
    defined = {e.symbol.data for a in args if a.role == "in" for e in a.dims if e.is_name}
    problem = tables if isinstance(tables, str) else table_problem(tables, args, defined, launch_size_names(op))
    if problem:
        raise RunError(located(op, problem))
    return tables


def _check_sizes(selected_sigs, sizes: dict[str, int], max_gib: float) -> None:
    """Every size given must be declared by a kernel that runs, with the multiples the kernel declares
    (`tile.multiples`, refused located at the kernel); each kernel's arguments must fit `max_gib`."""
    from tessera.ir.diagnostics import located
    from tessera.kernel_abi import check_multiples

    declared = {n for sig in selected_sigs for n in sig.size_names()}
    unknown = [n for n in sizes if n not in declared]
    if unknown:
        listing = "; ".join(f"@{s.name}: {', '.join(s.size_names()) or 'none'}" for s in selected_sigs)
        raise RunError(f"no kernel declares the size{'s' if len(unknown) > 1 else ''} "
                       f"{', '.join(repr(n) for n in unknown)} (sizes declared: {listing})")
    for sig in selected_sigs:
        missing = [n for n in sig.size_names() if n not in sizes]
        if missing:
            flags = " ".join(f"-d {n}=..." for n in missing)
            raise RunError(f"kernel @{sig.name} needs sizes for {', '.join(missing)} ({flags})")
        used = {n: sizes[n] for n in sig.size_names()}
        try:
            check_multiples(sig.name, sig.multiples, used)
        except ValueError as e:
            message = str(e).replace(f"kernel @{sig.name} ", f"kernel @{sig.name}: ", 1)  # named once, located
            raise RunError(located(sig.op, message)) from None
        try:  # the launch limits and the simulators' memory budget, before anything is allocated
            # inputs three times: float64 draws, their float32 copy, the kernel's converted copy
            check_sizes(sig, used, memory_budget=int(max_gib * 2**30), input_copies=3)
        except MemoryBudgetError as e:
            raise RunError(f"{e} (--max-gib {max_gib:g})") from None
        except ValueError as e:  # a launch limit
            raise RunError(str(e)) from None


def _check(sig, outputs, inputs, tile_module, sizes, seed):
    """(comparison, what the reference is) of `outputs` with the kernel's reference
    (`tessera.validation.verdict`): its kind's NumPy reference, or its own Tile IR (in `tile_module`; None for a
    Target IR file) run in float64, with, on a mismatch against the latter, which elements of which output are
    off. None when there is no reference: a Target IR kernel of a kind without a NumPy reference keeps no Tile
    IR to run."""
    from tessera.reference import Comparison
    from tessera.validation.compare import describe_elements
    from tessera.validation.verdict import BUILDER_KINDS, reference_for

    if sig.kind not in BUILDER_KINDS and tile_module is None:
        return None
    reference = reference_for(tile_module, sig, inputs, sizes, seed)
    comparison = Comparison(*reference.judge(outputs))
    k, mask = reference.beyond(outputs)
    if comparison.ok or mask is None or not mask.any():
        return comparison, reference.source
    return comparison, f"{reference.source}; {describe_elements(sig.outputs[k].name, mask)} beyond their tolerance"


def _describe_functions(module) -> str:
    from xdsl.dialects import func

    names = [f"@{op.sym_name.data}" for op in module.walk() if isinstance(op, func.FuncOp)]
    return f"functions {', '.join(names)} without those attributes" if names else "no function"


def run(args: argparse.Namespace) -> int:
    from tessera.interpreters.launch import prepare_arguments, run_grid
    from tessera.interpreters.parallel import serial_note
    from tessera.interpreters.sm90.launch import run_target_kernel
    from tessera.kernel_abi import is_kernel, is_target_kernel, signature, specialized
    from tessera.passes import DEFAULT_PIPELINE
    from tessera.regalloc import allocate_registers
    from tessera.tools.tessera_opt import UsageError, load_module, opt_context, parse_pipeline, run_pipeline
    from tessera.validation.levels import run_ptx

    pipeline = parse_pipeline(args.passes) if args.passes else None
    lowering_spec = args.lower or DEFAULT_PIPELINE
    lowering = parse_pipeline(lowering_spec) if args.level in ("target", "ptx") else None
    if args.lower and args.level not in ("target", "ptx"):
        raise UsageError("--lower applies with --level target or --level ptx")
    names = [n for n, _ in args.dims]
    if duplicates := sorted({n for n in names if names.count(n) > 1}):
        raise UsageError(f"size{'s' if len(duplicates) > 1 else ''} {', '.join(repr(n) for n in duplicates)} "
                         "given more than once")
    sizes = dict(args.dims)

    name = STDIN_NAME if reads_standard_input(args.file) else args.file
    try:
        if reads_standard_input(args.file):
            text = read_standard_input().decode()
        else:
            with open(args.file, encoding="utf-8") as f:
                text = f.read()
    except OSError as e:
        raise UsageError(f"cannot read '{args.file}': {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise UsageError(f"{name} is not UTF-8 text ({e.reason} at byte {e.start})") from e
    ctx = opt_context()
    module = load_module(ctx, text, name)
    from tessera.tools.tessera_run_graph import is_graph, run_graph_file

    if is_graph(module):  # a model's StableHLO function, not a kernel
        return run_graph_file(args, ctx, module, name)
    if args.compare:
        raise UsageError("--compare applies to StableHLO graphs (with -p rewrite-attention)")
    if pipeline is not None:
        run_pipeline(pipeline, ctx, module)

    tile_kernels = [op for op in module.walk() if is_kernel(op)]
    target_kernels = [op for op in module.walk() if is_target_kernel(op)]
    if args.kernel is not None:
        tile_kernels = [k for k in tile_kernels if k.sym_name.data == args.kernel]
        target_kernels = [k for k in target_kernels if k.sym_name.data == args.kernel]
        if not tile_kernels and not target_kernels:
            raise RunError(f"{name}: no kernel named '{args.kernel}'")
    if not tile_kernels and not target_kernels:
        raise RunError(f"{name}: no kernel to run: tessera-run runs Tile IR kernels (a func.func with a "
                       f"'tile.kernel' attribute), Target IR kernels (with 'sm90.kernel', as convert-tile-to-sm90 "
                       f"writes them) and PTX files (.ptx); this file has {_describe_functions(module)}")
    if target_kernels and args.level == "tile":
        raise RunError(f"{name}: kernel @{target_kernels[0].sym_name.data} is Target IR: it runs in the CTA "
                       "simulator (--level target, or no --level) or the PTX executor (--level ptx)")
    if target_kernels and args.lower:
        raise RunError(f"{name}: kernel @{target_kernels[0].sym_name.data} is already Target IR: --lower "
                       "applies to Tile IR kernels")

    from tessera.validation.verdict import check_generated_inputs

    # before anything is lowered: packed and paged attention index their tensors through tables only a caller knows
    for sig in [signature(op) for op in tile_kernels] + [target_signature(op) for op in target_kernels]:
        check_generated_inputs(None, sig)

    # (signature, what runs it, the level, the Target IR function of the kernel, its module) for each kernel
    plan = []
    if tile_kernels and args.level in ("target", "ptx"):
        lowered = module.clone()
        for op in tile_kernels:  # the variant for these sizes of a kernel that asks for it (`tile.specialize`)
            sig = signature(op)
            if all(n in sizes for n in sig.specialize):
                lowered = specialized(lowered, sig, sizes)
        run_pipeline(lowering, ctx, lowered)
        by_name = {op.sym_name.data: op for op in lowered.walk() if is_target_kernel(op)}
        for op in tile_kernels:
            if op.sym_name.data not in by_name:
                raise RunError(f"the lowering pipeline '{lowering_spec}' left kernel @{op.sym_name.data} in Tile IR: "
                               f"--level {args.level} needs a pipeline that ends in Target IR (one with "
                               f"convert-tile-to-sm90, such as the default '{DEFAULT_PIPELINE}')")
            runner = "CTA simulator" if args.level == "target" else "PTX executor"
            plan.append((signature(op), f"{args.level} level (-p {lowering_spec}, {runner})", args.level,
                         by_name[op.sym_name.data], lowered))
    else:
        plan += [(signature(op), "tile level", "tile", None, module) for op in tile_kernels]
    target_level = "ptx" if args.level == "ptx" else "target"
    runner = "PTX executor" if target_level == "ptx" else "CTA simulator"
    plan += [(target_signature(op), f"Target IR, {runner}", target_level, op, module) for op in target_kernels]

    _check_sizes([sig for sig, *_ in plan], sizes, args.max_gib)
    if args.check:  # before anything runs
        from tessera.validation.verdict import check_outputs

        for sig, *_ in plan:
            check_outputs("--check", sig)
    status = 0
    rng = np.random.default_rng(args.seed)
    for sig, level, how, target, kernel_module in plan:
        used = {n: sizes[n] for n in sig.size_names()}
        inputs = [rng.standard_normal(arg.shape(used)).astype(np.float32) for arg in sig.inputs]
        arguments, bound = prepare_arguments(sig, inputs, used)
        start = time.perf_counter()
        if how == "tile":
            if args.workers not in (None, 1):
                serial_note(f"@{sig.name}", "the Tile IR interpreter runs the blocks vectorised in one process "
                                           "(--workers applies to --level target and ptx)")
            run_grid(sig, kernel_module, arguments, bound)
        elif how == "target":
            run_target_kernel(target, arguments, bound, allocate_registers(target), workers=args.workers)
        else:  # printed (registers allocated on a copy where the pipeline did not) and run as tessera.interpret does
            run_ptx(kernel_module, sig, arguments, bound, workers=args.workers)
        elapsed = time.perf_counter() - start
        outputs = [a for a, arg in zip(arguments, sig.args) if arg.role == "out"]
        grid = sig.grid_size(used)
        shapes = ", ".join(f"{a.name}{list(o.shape)}" for a, o in zip(sig.outputs, outputs)) or "no outputs"
        sizes_text = " ".join(f"{k}={v}" for k, v in used.items())
        print(f"@{sig.name} [{sizes_text}]: grid {grid}, {level}, {elapsed:.2f} s -> {shapes}")
        if args.check:
            tile_module = module if target is None or sig.op is not target else None
            comparison = _check(sig, outputs, inputs, tile_module, used, args.seed)
            if comparison is None:
                print(f"  check: no reference: kernel @{sig.name} (kind '{sig.kind}') is Target IR, and only its "
                      "Tile IR can be run in float64 as its reference; check the Tile IR file with --level target")
                status = 1
            else:
                comparison, source = comparison
                print(f"  check: {comparison} (reference: {source})")
                status |= 0 if comparison.ok else 1
    return status


def _interpretation_diagnostic(e: BaseException) -> str:
    """An interpreter's error as one located diagnostic: xDSL attaches the whole module, printed once per
    enclosing op, as notes; the message is what matters, and the op that found it says where: the CTA
    simulator's `failing_op` (found on the frames of the hazard's unwind, or in a worker process), else the
    innermost op being run (the deepest frame with an `op` being interpreted). The error's own traceback ends
    where the simulator raised it again, above the frames of the op: there the deepest op is the kernel's."""
    from tessera.interpreters.parallel import innermost_op
    from tessera.ir.diagnostics import internal_error_text, located, with_context

    if not str(e).strip():
        return internal_error_text(e)
    op = getattr(e, "failing_op", None) or innermost_op(e)
    return with_context(located(op, str(e)))


def main(argv: list[str] | None = None) -> int:
    from xdsl.utils.exceptions import DiagnosticException, InterpretationError, ParseError

    argv = sys.argv[1:] if argv is None else argv
    if any(a.lower().endswith(".ptx") and not a.startswith("-") for a in argv):
        from tessera.interpreters.ptx.cli import main as run_ptx

        try:
            return run_ptx(argv)
        except BrokenPipeError:  # the reader of standard output stopped early (`| head`)
            return quiet_broken_pipe()
    args = build_parser().parse_args(argv)
    from tessera.ir.diagnostics import internal_error_text
    from tessera.interpreters.ptx.state import PtxExecutionError
    from tessera.tools.tessera_opt import PassCrash, UsageError, format_diagnostic, print_warnings
    from tessera.validation.levels import PtxExecutorMissing

    with warnings.catch_warnings():
        print_warnings("tessera-run")
        try:
            code = run(args)
        except InterpretationError as e:  # a kernel hazard or an interpreter's refusal, while running
            print(f"tessera-run: error: {_interpretation_diagnostic(e)}", file=sys.stderr)
            code = 1
        except (PtxExecutionError, PtxExecutorMissing) as e:  # --level ptx: a hazard, a deadlock, a refusal
            print(f"tessera-run: error: {e}", file=sys.stderr)
            code = 1
        except (ParseError, DiagnosticException) as e:  # the diagnostics tessera-opt prints, as it prints them
            print(format_diagnostic(e, "tessera-run"), file=sys.stderr)
            code = 1
        except (UsageError, RunError, ValueError) as e:
            print(f"tessera-run: {f'error: {e}' if str(e).strip() else internal_error_text(e)}", file=sys.stderr)
            code = 1
        except KeyboardInterrupt:
            code = 130
        except BrokenPipeError:  # the reader of standard output stopped early (`| head`)
            return quiet_broken_pipe()
        except Exception as e:  # an internal error: no traceback unless asked for
            if os.environ.get("TESSERA_DEBUG") == "1":
                traceback.print_exc()
            what = f"internal error in {e}" if isinstance(e, PassCrash) else internal_error_text(e)
            print(f"tessera-run: {what}", file=sys.stderr)
            code = 1
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
