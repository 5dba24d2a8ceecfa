"""What each GEMM tile schedule (`tessera.kernels.gemm.GEMM_SCHEDULES`) asks of the memory system and the SM, from
the CPU: the figures docs/performance.md ("GEMM") reasons with.

    python bench/gemm_schedules.py [--size 512] [--ptxas-all]

For each schedule, one row:
- TMA bytes per CTA: the CTA simulator's traffic counter on an M = N = K = `--size` problem (bytes each CTA's
  bulk copies read from global memory, so a multicast B copy counts once per cluster), per tensor, and per
  FLOP of the CTA's tile (2 * BM * BN * K);
- shared memory: the bytes the kernel places, and per k-step what the tensor cores read (each consumer
  warpgroup's wgmma reads its own A slab and the whole B tile) plus what TMA writes, per FLOP;
- ptxas (13.0, or every ptxas with `--ptxas-all`): registers at launch, spills, the main loop's SASS
  instructions (the innermost loop holding HGMMA: the consumers' k-step), its HGMMA and their shape, and
  its named barriers (the ping-pong's turns);
- results bitwise equal to the 128 x 128 schedule's (the CTA simulator's outputs).
Each run is checked against `tessera.reference.check_gemm` as well. About a minute at the default size.
"""

from __future__ import annotations

import argparse
import re
import time

import numpy as np
from clusters import run

import tessera
from tessera import reference
from tessera.host import describe
from tessera.kernels import gemm
from tessera.kernels.gemm import GEMM_SCHEDULES
from tessera.numerics import BF16
from tessera.passes import PINGPONG_PIPELINE
from tessera.runtime.gemm import gemm_config
from tessera.sass import disassemble, innermost_loop
from tessera.toolchain import compile_ptx, find_all_ptxas, find_ptxas, tool_version

BLOCK_K = 64
"""The builder's default k-step (`gemm(block_k=64)`): one 128-byte swizzle span of bf16."""


def sass_row(ptx: str, ptxas: str) -> str:
    result = compile_ptx(ptx, ptxas=ptxas)
    entry = result.entry()
    loop = innermost_loop(disassemble(result.cubin), containing="HGMMA")
    counts = loop.opcode_counts
    shapes = sorted({m.group(1) for ins in loop.instructions if (m := re.search(r"HGMMA\.(\d+x\d+x\d+)", str(ins)))})
    return (f"{entry.registers} registers, spill {entry.spill_store_bytes} B, loop {len(loop.instructions)} SASS "
            f"({counts.get('HGMMA', 0)} HGMMA {'/'.join(shapes)}, {counts.get('BAR', 0)} BAR)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=512, help="M = N = K of the simulated problem")
    parser.add_argument("--ptxas-all", action="store_true", help="every ptxas found, not only the default one")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = args.size
    a, b = (rng.standard_normal((n, n)).astype(BF16) for _ in range(2))
    ptxases = find_all_ptxas() if args.ptxas_all else [tool_version(find_ptxas())]
    baseline = None
    for name in GEMM_SCHEDULES:
        start = time.perf_counter()
        config = gemm_config(schedule=name)
        options = dict(config.options)
        bm, bn = options.get("block_m", 128), options.get("block_n", 128)
        module = gemm(**options)
        out, traffic = run(module, (a, b), "target", config.pipeline)  # bench/clusters.py's traffic counter
        assert reference.check_gemm(out, a, b, BF16).ok, name
        baseline = out if baseline is None else baseline
        flops = 2 * bm * bn * n
        tma = sum(traffic.values())
        host = describe(tessera.compile(module, target="target", pipeline=config.pipeline))[0]
        k_step = 2 * bm * bn * BLOCK_K
        smem_reads = 2 * (bm // 2 * BLOCK_K + BLOCK_K * bn) * 2  # two consumer warpgroups: own A slab, all of B
        smem_writes = (bm + bn) * BLOCK_K * 2
        print(f"{name}: tile {bm}x{bn}x{BLOCK_K}, stages {options.get('stages', 2)}, cluster "
              f"{options.get('cluster', (1, 1))}, ping-pong {config.pipeline == PINGPONG_PIPELINE}; bitwise equal "
              f"to 128x128: {np.array_equal(out, baseline)}")
        print(f"  TMA bytes per CTA ({n}^3): " + ", ".join(f"{k} {v}" for k, v in traffic.items())
              + f"; {tma / flops:.4f} B/FLOP")
        print(f"  shared memory: {host.dynamic_smem_bytes} B placed; per k-step ({k_step / 1e6:.2f} MFLOP) wgmma "
              f"reads {smem_reads} B + TMA writes {smem_writes} B = {(smem_reads + smem_writes) / k_step:.4f} B/FLOP")
        ptx = tessera.compile(module, target="ptx", pipeline=config.pipeline)
        for ptxas in ptxases:
            print(f"  ptxas {ptxas.release}: {sass_row(ptx, ptxas.path)}")
        print(f"  ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
