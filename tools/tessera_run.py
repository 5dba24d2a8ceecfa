"""`tessera-run FILE`: interpret each kernel of a Tile IR file on generated inputs, optionally checking it.

    tessera-run examples/flash_attention.mlir -d batch=2 -d heads=3 -d seq_q=200 -d seq_k=300 --check

Inputs are drawn from a standard normal distribution (seeded) with the shapes the kernel's `tile.dims` give
for the sizes on the command line. With `--check`, the outputs are compared with the NumPy reference of the
kernel's kind (attention, gemm) under the tolerance rule of `tessera.reference`; the max error and the
tolerance are printed, and a mismatch exits with 1. Bad input (syntax, verifier, missing sizes, kernel
hazards) is reported as a diagnostic with exit code 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


def _parse_size(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got '{text}'")
    try:
        size = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"size '{name}' must be an integer, got '{value}'") from None
    if size <= 0:
        raise argparse.ArgumentTypeError(f"size '{name}' must be positive, got {size}")
    return name, size


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tessera-run", description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="a Tile IR file (.mlir), or - for standard input; a .ptx file runs the PTX "
                                     "executor instead (see tessera-run FILE.ptx --help)")
    parser.add_argument("-d", "--dim", dest="dims", action="append", type=_parse_size, default=[],
                        metavar="NAME=VALUE", help="size of a named dimension (repeat for each)")
    parser.add_argument("--kernel", help="run only this kernel")
    parser.add_argument("--check", action="store_true", help="compare with the NumPy reference")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated inputs")
    parser.add_argument("-p", "--passes", default="", help="a pass pipeline to apply before interpreting")
    parser.add_argument("--level", default="tile", choices=("tile", "target"),
                        help="tile: the Tile IR interpreter; target: lower to sm_90a Target IR and run the CTA simulator")
    parser.add_argument("--lower", metavar="PIPELINE", default=None,
                        help="with --level target: the Tile IR to Target IR pipeline (default: the full pipeline, "
                             "tessera.passes.DEFAULT_PIPELINE)")
    return parser


def _inputs_for(sig, sizes: dict[str, int], rng: np.random.Generator) -> list[np.ndarray]:
    needed = sig.dim_names()
    missing = [n for n in needed if n not in sizes]
    if missing:
        flags = " ".join(f"-d {n}=..." for n in missing)
        raise ValueError(f"kernel @{sig.name} needs sizes for {', '.join(missing)} ({flags})")
    return [rng.standard_normal(arg.shape(sizes)).astype(np.float32) for arg in sig.inputs]


def _check(sig, outputs, inputs):
    from tessera import reference
    from tessera.numerics import numpy_dtype

    dtype = numpy_dtype(sig.inputs[0].type.element_type)
    if sig.kind == "attention":
        return reference.check_attention(outputs[0], *inputs, dtype, causal=sig.causal, scale=sig.scale)
    if sig.kind == "gemm":
        return reference.check_gemm(outputs[0], *inputs, dtype)
    return None


def run(args: argparse.Namespace) -> int:
    import tessera
    from tessera.kernel_abi import kernels, signature
    from tessera.passes import DEFAULT_PIPELINE, apply_pipeline

    if args.file == "-":
        text = sys.stdin.read()
    else:
        with open(args.file) as f:
            text = f.read()
    module = tessera.parse_module(text, args.file)
    if args.passes:
        apply_pipeline(module, args.passes)
    sizes = dict(args.dims)
    selected = [k for k in kernels(module) if args.kernel in (None, k.sym_name.data)]
    if not selected:
        what = f"no kernel named '{args.kernel}'" if args.kernel else "no kernel"
        raise ValueError(f"{args.file}: {what} (a func.func with a 'tile.kernel' attribute)")
    status = 0
    rng = np.random.default_rng(args.seed)
    for op in selected:
        sig = signature(op)
        inputs = _inputs_for(sig, sizes, rng)
        used = {n: sizes[n] for n in sig.dim_names()}
        start = time.perf_counter()
        lowering = (args.lower or DEFAULT_PIPELINE) if args.level == "target" else None
        result = tessera.interpret(module, *inputs, level=args.level, kernel=sig.name, pipeline=lowering)
        elapsed = time.perf_counter() - start
        outputs = result if isinstance(result, tuple) else (result,)
        grid = sig.grid_size(used)
        shapes = ", ".join(f"{a.name}{list(o.shape)}" for a, o in zip(sig.outputs, outputs))
        sizes_text = " ".join(f"{k}={v}" for k, v in used.items())
        level = "tile level" if args.level == "tile" else f"target level (-p {lowering}, CTA simulator)"
        print(f"@{sig.name} [{sizes_text}]: grid {grid}, {level}, {elapsed:.2f} s -> {shapes}")
        if args.check:
            comparison = _check(sig, outputs, inputs)
            if comparison is None:
                print(f"  check: no reference for kind '{sig.kind}'")
            else:
                print(f"  check: {comparison}")
                status |= 0 if comparison.ok else 1
    return status


def main(argv: list[str] | None = None) -> int:
    from xdsl.utils.exceptions import DiagnosticException, InterpretationError, ParseError, VerifyException

    argv = sys.argv[1:] if argv is None else argv
    if any(a.endswith(".ptx") and not a.startswith("-") for a in argv):
        from tessera.interpreters.ptx.cli import main as run_ptx

        return run_ptx(argv)
    args = build_parser().parse_args(argv)
    try:
        code = run(args)
    except (ParseError, VerifyException, DiagnosticException) as e:
        print(f"{args.file}: error: {e}", file=sys.stderr)
        code = 1
    except (InterpretationError, ValueError, OSError) as e:
        print(f"tessera-run: error: {e}", file=sys.stderr)
        code = 1
    except Exception as e:  # an internal error: no traceback unless asked for
        if os.environ.get("TESSERA_DEBUG") == "1":
            raise
        print(f"tessera-run: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        code = 1
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
