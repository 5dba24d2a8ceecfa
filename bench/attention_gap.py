"""Why the flash forward at head_dim 64 (and the short rows) and the long backward trail cuDNN on the H200, from
the CPU: the figures docs/performance.md ("Where Tessera trails cuDNN on the H200") reasons with.

    python bench/attention_gap.py [--csv bench/results/2026-11-30-h200/benchmark.csv] [--ptxas 13.0]

1. Per key block (one trip of the main loop) of each kernel, for one SM (one CTA: 168 registers x 384 threads
   leave no room for a second): the SASS of the steady trip (`tessera.sass.loop_trip`: the path from the loop's
   header back to it that issues every MMA, over the masks and the waits' retries; ping-pong's first consumer's
   loop), its MUFU.EX2 and HGMMA, and three clock counts, each the work of
   the trip divided by the SM's rate (`tessera.sm90.throughput`): `tensor` the wgmma FLOPs, `ex2` the consumer
   warps' MUFU instructions x 32 lanes, `issue` the consumer warps' instructions over the four schedulers.
   `ex2/tensor` is the share of the softmax's exponentials against the tensor cores: when it passes 1/2, the
   previous trip's P.V wgmma (half the trip's MMA) no longer hides them.
2. With `--csv` (a GPU session's benchmark.csv): Tessera's forward rows taken apart into a fixed cost per CTA and
   a cost per trip (least squares over the row's sequence lengths of time per round of CTAs = F + trips x t,
   rounds = ceil(CTAs / 132)), each in microseconds and in clocks at `CLOCK_HZ`, and the trip's clocks beside
   the forward's `model`, tensor/2 + max(ex2, tensor/2) (the score wgmma exposed, then the softmax under the
   previous trip's P.V, both consumer warpgroups in step): what is left is per-trip latency no unit's
   throughput explains. The causal fits take half the key blocks per CTA on average: rougher.
About ten seconds (ptxas on seven kernels).
"""

from __future__ import annotations

import argparse
import csv
import math

import numpy as np

import tessera
from tessera.kernels import attention_backward, flash_attention
from tessera.passes import PINGPONG_PIPELINE
from tessera.sass import disassemble, loop_trip, parse_sass
from tessera.sm90.launch import SM_COUNT
from tessera.sm90.throughput import CLOCK_HZ, EX2_PER_CLOCK, SCHEDULERS, TENSOR_BF16_FLOP_PER_CLOCK
from tessera.toolchain import compile_ptx, find_all_ptxas

KERNELS = {
    "forward d64 128x128 (default)": dict(kind="forward", head_dim=64, block_m=128, block_n=128),
    "forward d64 128x128 ping-pong": dict(kind="forward", head_dim=64, block_m=128, block_n=128, pingpong=True),
    "forward d64 192x128 (FA3 causal)": dict(kind="forward", head_dim=64, block_m=192, block_n=128),
    "forward d64 128x176": dict(kind="forward", head_dim=64, block_m=128, block_n=176),
    "forward d128 128x176 (default)": dict(kind="forward", head_dim=128, block_m=128, block_n=176),
    "forward d256 128x48 (default)": dict(kind="forward", head_dim=256, block_m=128, block_n=48),
    "backward d128 64x128 (default)": dict(kind="backward", head_dim=128, block_m=64, block_n=128),
}
"""The kernels measured: the forward's defaults at each head_dim, head_dim 64 with FlashAttention-3's 192 query
rows (three consumer warpgroups; FA3's non-causal d64 tile is 192 x 192 with P through shared memory, which the
flash builder does not offer) and with ping-pong consumers; the backward's main kernel (keys on the rows)."""


def forward_module(head_dim: int, block_m: int, block_n: int, pingpong: bool = False):
    return tessera.compile(flash_attention(head_dim=head_dim, block_m=block_m, block_n=block_n), target="ptx",
                           **({"pipeline": PINGPONG_PIPELINE} if pingpong else {}))


def trip_row(name: str, spec: dict, ptxas) -> dict:
    d, bm, bn = spec["head_dim"], spec["block_m"], spec["block_n"]
    if spec["kind"] == "forward":
        ptx = forward_module(d, bm, bn, spec.get("pingpong", False))
        flop = 4 * bm * bn * d  # S = Q K^T and O += P V
    else:
        ptx = tessera.compile(attention_backward(head_dim=d, block_m=bm, block_n=bn).main, target="ptx")
        flop = 10 * bm * bn * d  # S, dP, dV, dK, dQ
    result = compile_ptx(ptx, ptxas=ptxas)
    (function,) = result.log.functions.values()
    trip = loop_trip(parse_sass(disassemble(result.cubin)))
    warps = (bm if spec["kind"] == "forward" else bn) // 64 * 4  # consumer warps: 64 rows per warpgroup
    ex2 = sum(i.mnemonic.startswith("MUFU.EX2") for i in trip)
    tensor = flop / TENSOR_BF16_FLOP_PER_CLOCK
    return {"kernel": name, "regs": function.registers, "spill": function.spill_store_bytes, "SASS": len(trip),
            "EX2": ex2, "HGMMA": sum(i.opcode.startswith("HGMMA") for i in trip), "tensor": tensor,
            "ex2": warps * 32 * ex2 / EX2_PER_CLOCK, "issue": warps * len(trip) / SCHEDULERS}


def forward_fits(path: str) -> list[dict]:
    """Tessera's forward rows of a benchmark.csv: per (head_dim, causal), F and t of ms/round = F + trips t."""
    from tessera.kernels.attention import FLASH_BLOCK_N

    groups: dict = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["system"] == "Tessera" and r["status"] == "ok" and r["direction"] == "forward" and r["dtype"] == "bf16" and not r["variant"]:
                groups.setdefault((int(r["head_dim"]), r["causal"] == "True"), []).append(r)
    fits = []
    for (d, causal), rows in sorted(groups.items()):
        bn = FLASH_BLOCK_N[d]
        xs, ys, detail = [], [], []
        for r in sorted(rows, key=lambda r: int(r["seq"])):
            seq, ctas = int(r["seq"]), int(r["batch"]) * int(r["heads"]) * math.ceil(int(r["seq"]) / 128)
            trips = math.ceil(seq / bn) / (2 if causal else 1)  # causal: half the blocks on average
            rounds = math.ceil(ctas / SM_COUNT)
            xs.append(trips)
            ys.append(float(r["ms"]) * 1e3 / rounds)
            detail.append(f"{seq}:{float(r['tflops']):.0f}TF/{rounds}r/{ys[-1]:.1f}us")
        per_trip, fixed = np.polyfit(xs, ys, 1)
        fits.append({"head_dim": d, "causal": causal, "block_n": bn, "fixed_us": fixed, "trip_us": per_trip,
                     "trip_clk": per_trip * 1e-6 * CLOCK_HZ, "fixed_clk": fixed * 1e-6 * CLOCK_HZ,
                     "fixed_share_512": fixed / ys[0], "rows": " ".join(detail)})
    return fits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", help="a GPU session's benchmark.csv: fit its Tessera forward rows")
    parser.add_argument("--ptxas", default="13.0", help="the ptxas release to assemble with (default 13.0)")
    args = parser.parse_args()
    ptxas = next((p.path for p in find_all_ptxas() if p.release == args.ptxas), None)
    print(f"per trip, one SM; clocks at the SM's rates (tensor {TENSOR_BF16_FLOP_PER_CLOCK} bf16 FLOP, ex2 "
          f"{EX2_PER_CLOCK}, issue {SCHEDULERS} warp-instructions a clock); ptxas {args.ptxas}")
    print(f"{'kernel':<36}{'regs':>5}{'spill':>6}{'SASS':>6}{'EX2':>5}{'HGMMA':>6}{'tensor':>8}{'ex2':>7}{'issue':>7}"
          f"{'ex2/tensor':>11}{'model':>7}")
    for name, spec in KERNELS.items():
        r = trip_row(name, spec, ptxas)
        model = f"{r['tensor'] / 2 + max(r['ex2'], r['tensor'] / 2):.0f}" if spec["kind"] == "forward" else "-"
        print(f"{name:<36}{r['regs']:>5}{r['spill']:>6}{r['SASS']:>6}{r['EX2']:>5}{r['HGMMA']:>6}{r['tensor']:>8.0f}"
              f"{r['ex2']:>7.0f}{r['issue']:>7.0f}{r['ex2'] / r['tensor']:>11.2f}{model:>7}")
    if args.csv:
        print(f"\nforward rows of {args.csv}: time per round of CTAs = F + trips x t (clocks at {CLOCK_HZ / 1e9:.2f} GHz)")
        for f in forward_fits(args.csv):
            print(f"d{f['head_dim']} causal={f['causal']!s:<5} BN {f['block_n']}: t {f['trip_us']:.3f} us "
                  f"({f['trip_clk']:.0f} clk), F {f['fixed_us']:.2f} us ({f['fixed_clk']:.0f} clk, "
                  f"{f['fixed_share_512']:.0%} of the 512 row's round)  [{f['rows']}]")


if __name__ == "__main__":
    main()
