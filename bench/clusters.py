"""Clusters (issue 16) over the issue's matrix: flash attention with clusters of two query blocks and GEMM with
2x1 clusters, each compared bit for bit with clusters of one, in the CTA simulator (or the PTX executor), with
the traffic counter's TMA bytes per CTA.

    python bench/clusters.py [--level target|ptx] [--batch 2] [--heads 4] [--seq 1024 1000] [--head-dim 64 128]
                             [--dtype bf16 f16] [--gemm 256]

Defaults are the issue's matrix (batch 2, heads 4, seq 1024 and a ragged 1000, head_dim 64/128, bf16/f16): at
the target level about two and a half minutes per kernel on one core, so the whole matrix takes the better
part of an hour; the test suite runs the smallest sizes that give every CTA a peer (tests/test_clusters.py).
Each row: the configuration, whether cluster 2 is bitwise equal to cluster 1, the cluster the launch used (1 where
the query blocks are odd in number), and Q/K/V (A/B) bytes per CTA with clusters of one and of two.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tessera
from tessera.host import describe
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.sm90.launch import run_target_kernel
from tessera.kernel_abi import is_target_kernel, kernels, signature


def run(module, inputs, level: str, pipeline: str | None = None) -> tuple[np.ndarray, dict[str, int]]:
    """(output, TMA bytes per CTA by tensor; empty at the ptx level, which has no counter), lowered with
    `pipeline` (None: the default)."""
    if level == "ptx":
        return np.asarray(tessera.interpret(module, *inputs, level="ptx", pipeline=pipeline), np.float32), {}
    sig = signature(kernels(module)[0])
    arguments, sizes = prepare_arguments(sig, list(inputs), {})
    target = tessera.compile(module, target="target", pipeline=pipeline)
    fn = next(op for op in target.walk() if is_target_kernel(op))
    traffic: dict = {}
    run_target_kernel(fn, arguments, sizes, traffic=traffic)
    total: dict[str, int] = {}
    for per_map in traffic.values():
        for name, nbytes in per_map.items():
            key = name.split("_map")[0]
            total[key] = total.get(key, 0) + nbytes
    out = next(a for a, arg in zip(arguments, sig.args) if arg.role == "out")
    return out.astype(np.float32), {k: v // len(traffic) for k, v in sorted(total.items())}


def launched_cluster(module, sizes) -> tuple[int, int, int] | None:
    return describe(tessera.compile(module, target="target"))[0].cluster(sizes)


def compare(name: str, one, two, inputs, sizes, level: str) -> None:
    start = time.perf_counter()
    out1, traffic1 = run(one, inputs, level)
    out2, traffic2 = run(two, inputs, level)
    fmt = lambda t: " ".join(f"{k} {v}" for k, v in t.items()) or "-"  # noqa: E731
    print(f"{name:<40}{str(np.array_equal(out1, out2)):>8}{str(launched_cluster(two, sizes)):>12}  "
          f"{fmt(traffic1):<28}{fmt(traffic2):<28}{time.perf_counter() - start:>7.0f}s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--level", choices=("target", "ptx"), default="target")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, nargs="+", default=[1024, 1000])
    parser.add_argument("--head-dim", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--dtype", nargs="+", default=["bf16", "f16"])
    parser.add_argument("--gemm", type=int, nargs="*", default=[256], help="square GEMM sizes (none: skip)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"level {args.level}; bytes per CTA by tensor: cluster 1, then cluster 2")
    print(f"{'configuration':<40}{'equal':>8}{'cluster':>12}  {'cluster 1 bytes/CTA':<28}{'cluster 2 bytes/CTA':<28}"
          f"{'time':>8}")
    for head_dim in args.head_dim:
        for dtype in args.dtype:
            for seq in args.seq:
                q, k, v = (rng.standard_normal((args.batch, args.heads, seq, head_dim)).astype(np.float32)
                           for _ in range(3))
                sizes = {"batch": args.batch, "heads": args.heads, "seq_q": seq, "seq_k": seq}
                compare(f"flash d{head_dim} {dtype} b{args.batch} h{args.heads} s{seq}",
                        tessera.kernels.flash_attention(head_dim=head_dim, dtype=dtype),
                        tessera.kernels.flash_attention(head_dim=head_dim, dtype=dtype, cluster=2),
                        (q, k, v), sizes, args.level)
    for n in args.gemm:
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        compare(f"gemm bf16 {n}x{n}x{n} cluster 2x1", tessera.kernels.gemm(), tessera.kernels.gemm(cluster=(2, 1)),
                (a, b), {"M": n, "N": n, "K": n}, args.level)


if __name__ == "__main__":
    main()
