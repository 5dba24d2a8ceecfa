"""`tessera-run graph.mlir`: run a StableHLO graph (a model's function as JAX exports it) on generated inputs.

    tessera-run graph.mlir [--seed N]                                   # run @main, print its outputs
    tessera-run graph.mlir -p rewrite-attention --compare               # original vs rewritten
    tessera-run graph.mlir -p 'rewrite-attention{match=patterns}' --compare [--attention-level ptx]

`tessera_run` hands a file here when it holds no Tile IR or Target IR kernel but a function of StableHLO (or
Tessera's attention ops). The entry is `@main` (else the only public function). Inputs are drawn, seeded, for
each argument: standard normal floats, except matrices (rank 2, both sizes at least 16) drawn with variance
1/rows, and weights of higher rank (an argument a product without batching dimensions contracts over its
leading dimensions: Flax's DenseGeneral kernels [in, heads, head_dim] and [heads, head_dim, out]) with variance
1/(those dimensions' sizes), as weight initialisers do, so that a model's activations stay O(1); random bits
for booleans and integers. They are rounded to each argument's element type.

Without `--compare` the graph (after `-p PIPELINE`, if given) runs in the StableHLO interpreter, attention
ops in Tessera's kernels (`tessera.graph.graph_runtime`; `--attention-level`), and each output's shape and range are
printed. With `--compare` the original graph runs in its own precision and in float64, the pipeline is applied
to a copy, and the rewritten graph runs; it prints how many attentions were replaced, and for each output the
largest difference between the two graphs, each one's error against float64 and the tolerance: the attention
rule of `tessera.reference` (twice the original graph's error, plus `ABSOLUTE_TOLERANCE`; the original graph
is the same-precision computation). Exit status 1 when an output disagrees or nothing was replaced.
"""

from __future__ import annotations

import time

import numpy as np
from xdsl.dialects.builtin import ModuleOp, TensorType

from tessera.graph.stablehlo_interpreter import GraphInterpretationError, entry_function, storage_dtype
from tessera.ir.diagnostics import located


def is_graph(module: ModuleOp) -> bool:
    """Whether `module` is a graph for this mode: no kernel, and some StableHLO or tessera op."""
    from tessera.kernel_abi import is_kernel, is_target_kernel

    ops = list(module.walk())
    if any(is_kernel(op) or is_target_kernel(op) for op in ops):
        return False
    return any(op.dialect_name() in ("stablehlo", "chlo", "tessera") or op.name == "builtin.unregistered"
               and op.op_name.data.split(".")[0] in ("stablehlo", "chlo") for op in ops)


def weight_fan_in(module: ModuleOp) -> dict[int, int]:
    """For each argument of the entry function of rank 3 or more that a `dot_general` without batching dimensions
    contracts over its leading dimensions (a layer's weight [in..., out...]), the number of inputs it sums: the
    product of those dimensions' sizes. Keyed by the argument's index."""
    from xdsl.ir import BlockArgument

    fan_in: dict[int, int] = {}
    for op in entry_function(module).walk():
        if op.name != "stablehlo.dot_general":
            continue
        dims = op.dot_dimension_numbers
        if dims.dims("lhs_batching_dimensions"):
            continue
        for operand, side in zip(op.operands, ("lhs", "rhs")):
            contracted = sorted(dims.dims(f"{side}_contracting_dimensions"))
            if isinstance(operand, BlockArgument) and operand.owner is entry_function(module).body.blocks.first \
                    and len(operand.type.get_shape()) >= 3 and contracted == list(range(len(contracted))):
                fan_in[operand.index] = int(np.prod([operand.type.get_shape()[d] for d in contracted]))
    return fan_in


def generate_inputs(module: ModuleOp, seed: int) -> list[np.ndarray]:
    """Seeded inputs for the entry function's arguments (module docstring)."""
    rng = np.random.default_rng(seed)
    inputs = []
    fan_in = weight_fan_in(module)
    entry = entry_function(module)
    for arg in entry.body.blocks.first.args:
        if not isinstance(arg.type, TensorType):
            raise ValueError(located(entry, f"argument %{arg.index} of the entry function is {arg.type}, not a tensor"))
        shape = tuple(arg.type.get_shape())
        if any(n < 0 for n in shape):
            raise ValueError(located(entry, f"argument %{arg.index} of the entry function is {arg.type}: inputs are "
                                            "drawn for static shapes only (export the graph for concrete sizes)"))
        try:
            dtype = storage_dtype(arg.type.element_type)
        except GraphInterpretationError as e:
            raise GraphInterpretationError(located(entry, f"argument %{arg.index}: {e}")) from None
        if dtype.kind == "f":
            x = rng.standard_normal(shape)
            if len(shape) == 2 and min(shape) >= 16:
                x = x / np.sqrt(shape[0])
            elif arg.index in fan_in:
                x = x / np.sqrt(fan_in[arg.index])
        elif dtype == np.bool_:
            x = rng.integers(0, 2, shape).astype(bool)
        else:
            info = np.iinfo(dtype)
            x = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
        inputs.append(x)
    return inputs


def _describe(x: np.ndarray) -> str:
    finite = x[np.isfinite(x)] if x.dtype.kind == "f" else x
    span = f"[{finite.min():.4g}, {finite.max():.4g}]" if finite.size else "[]"
    return f"{list(x.shape)} {x.dtype} in {span}" + (f", {x.size - finite.size} not finite" if x.size != finite.size else "")


def run_graph_file(args, ctx, module: ModuleOp, name: str) -> int:
    """The graph mode of tessera-run (module docstring); returns the exit status."""
    from tessera import reference
    from tessera.graph.graph_runtime import run_graph
    from tessera.graph.rewrite_report import take_reports
    from tessera.tools.tessera_opt import UsageError, parse_pipeline, run_pipeline

    given = [flag for flag, value in (("-d", args.dims), ("--kernel", args.kernel), ("--level", args.level),
                                      ("--lower", args.lower), ("--check", args.check)) if value]
    if given:
        raise UsageError(f"{name} is a StableHLO graph: {', '.join(given)} appl{'y' if len(given) > 1 else 'ies'} to "
                         "kernels (a graph's shapes are its own; --compare checks it against float64)")
    level = args.attention_level
    inputs = generate_inputs(module, args.seed)
    fn = entry_function(module).sym_name.data
    if not args.compare:
        if args.passes:
            run_pipeline(parse_pipeline(args.passes), ctx, module)
            take_reports()
        start = time.perf_counter()
        outputs = run_graph(module, inputs, level=level)
        print(f"@{fn} ({len(inputs)} inputs, seed {args.seed}): {time.perf_counter() - start:.2f} s")
        for i, x in enumerate(outputs):
            print(f"  output {i}: {_describe(x)}")
        return 0
    if not args.passes:
        raise UsageError("--compare needs -p PIPELINE (e.g. -p rewrite-attention): it compares the graph before "
                         "and after the pipeline")
    rewritten = module.clone()
    take_reports()
    run_pipeline(parse_pipeline(args.passes), ctx, rewritten)
    # only the function that runs: a module's other public functions are rewritten too, but not compared
    reports = [r for r in take_reports() if r.function == fn]
    forwards = sum(r.replaced("forward") + r.replaced("composite") for r in reports)
    backwards = sum(r.replaced("backward") for r in reports)
    start = time.perf_counter()
    original = run_graph(module, inputs)
    exact = run_graph(module, inputs, exact=True)
    middle = time.perf_counter()
    new = run_graph(rewritten, inputs, level=level)
    end = time.perf_counter()
    print(f"@{fn} ({len(inputs)} inputs, seed {args.seed}): replaced {forwards + backwards} attention"
          f"{'s' if forwards + backwards != 1 else ''} ({forwards} forward, {backwards} backward); original graph "
          f"{middle - start:.2f} s (with its float64 run), rewritten {end - middle:.2f} s (attention at {level} level)")
    status = 0
    for i, (a, b, ref) in enumerate(zip(original, new, exact)):
        ref = np.asarray(ref, np.float64)
        difference = reference._max_error(b, np.asarray(a, np.float64))
        baseline = reference._max_error(a, ref)
        comparison = reference.Comparison(reference._max_error(b, ref), 2 * baseline + reference.ABSOLUTE_TOLERANCE)
        print(f"  output {i} {list(np.shape(a))}: max |rewritten - original| {difference:.3e}; error vs float64: "
              f"rewritten {comparison.max_error:.3e}, original {baseline:.3e}; tolerance {comparison.tolerance:.3e}: "
              f"{'ok' if comparison.ok else 'MISMATCH'}")
        status |= 0 if comparison.ok else 1
    if forwards + backwards == 0:
        print(f"  nothing was replaced: -p '{args.passes}' found no attention to rewrite "
              "(tessera-opt --rewrite-report says why)")
        status = 1
    return status
