"""GEMM TFLOP/s on an H100/H200: Tessera's GEMM (C = A B, bf16 inputs, f32 output) against torch.matmul
(cuBLAS, bf16 output), on square problems M = N = K from 512 to 16k.

    python bench/gemm.py [--size 512 1024 ...] [--dtype bf16|f16] [--schedule 128x128 128x256 ...] [--repeats 30]
                         [--warmup 5] [--out bench/results]

FLOPs = 2 * M * N * K. Every result is first checked against an fp64 PyTorch product of the same inputs
under Tessera's GEMM tolerance (`tessera.reference.check_gemm`: twice the error of a plain f32 product plus
K * 2^-24 * max(|A| |B|)), widened by the rounding of the output type for a system that writes 16-bit
results; a wrong result is reported as WRONG and never timed. Timing, table, `gemm.json` and `gemm.png` as in
bench/attention.py, whose harness this uses. Without a usable GPU it prints "no CUDA GPU: <why>" and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import (  # noqa: E402 - bench/ is not a package; the harness lives in bench/harness.py
    Record,
    System,
    Unsupported,
    environment,
    measure,
    plot,
    print_header,
    print_row,
    report_problems,
    require_gpu,
    write_results,
)

SIZES = (512, 1024, 2048, 4096, 8192, 16384)


def tessera_system(torch, schedule: str = "128x128") -> System:
    """Tessera's GEMM with the tile schedule `schedule` (`tessera.kernels.gemm.GEMM_SCHEDULES`): "Tessera" for
    the default, "Tessera <schedule>" for the others."""
    from tessera.runtime.attention import UnsupportedKernel
    from tessera.runtime.gemm import gemm_kernel
    from tessera.runtime.launch import prepare_torch

    def build(inputs):
        a, b = inputs
        try:
            kernel = gemm_kernel(a, b, schedule=schedule)
        except UnsupportedKernel as why:
            raise Unsupported(str(why)) from None
        launch, (c,) = prepare_torch(kernel, a, b)

        def run():
            launch()
            return c
        return run
    return System("Tessera" if schedule == "128x128" else f"Tessera {schedule}", build)


def cublas_system(torch) -> System:
    def build(inputs):
        a, b = inputs
        return lambda: torch.matmul(a, b)
    return System("torch.matmul (cuBLAS)", build, output_rounding=2.0**-8)


def gemm_check(torch, a, b):
    """(errors by name, tolerance, max |reference|): max |C - A B| against the fp64 product, and the
    tolerance of `tessera.reference.check_gemm`."""
    a64, b64 = a.double(), b.double()
    ref = a64 @ b64
    plain = (a.float() @ b.float()).double()
    bound = a.shape[1] * 2.0**-24 * float((a64.abs() @ b64.abs()).max())
    tolerance = 2 * float((plain - ref).abs().max()) + bound
    magnitude = float(ref.abs().max())
    del a64, b64, plain

    def check(outputs: dict):
        errors = {name: float(torch.nan_to_num((c.double() - ref).abs(), nan=float("inf")).max())
                  for name, c in outputs.items()}
        return errors, tolerance, magnitude
    return check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, nargs="+", default=list(SIZES), help="M = N = K")
    parser.add_argument("--dtype", choices=("bf16", "f16"), default="bf16")
    parser.add_argument("--schedule", nargs="+", default=None,
                        help="Tessera's tile schedules to time (default: all of tessera.kernels.gemm.GEMM_SCHEDULES)")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs per system (median reported)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results", help="folder for JSON and PNG")
    args = parser.parse_args()
    torch = require_gpu()

    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    from tessera.kernels.gemm import GEMM_SCHEDULES

    systems = [tessera_system(torch, s) for s in args.schedule or GEMM_SCHEDULES] + [cublas_system(torch)]
    env = environment(torch)
    print(f"{env['device']}: torch {env['torch']} (CUDA {env['cuda']}), tessera {env['tessera']}, {env['ptxas']}")
    widths = print_header(systems)
    records: list[Record] = []
    for n in args.size:
        config = dict(M=n, N=n, K=n, dtype=args.dtype)
        generator = torch.Generator(device="cuda").manual_seed(n)
        a, b = (torch.randn(n, n, device="cuda", dtype=dtype, generator=generator) for _ in range(2))
        row = measure(torch, systems, (a, b), config, 2.0 * n * n * n, gemm_check(torch, a, b), args)
        records += row
        print_row(f"M = N = K = {n}", row, widths)
        report_problems(row)
        del a, b
        torch.cuda.empty_cache()
    path = write_results(args.out, "gemm", env, args, records)
    print(f"results: {path}")
    picture = plot(args.out, "gemm", records, lambda c: c["dtype"], lambda p: f"{p} inputs, f32 accumulation",
                   lambda c: c["M"], "M = N = K", f"GEMM, {env['device']}")
    if picture is not None:
        print(f"plot: {picture}")


if __name__ == "__main__":
    main()
