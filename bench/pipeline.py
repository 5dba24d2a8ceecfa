"""What each pipelining option does to the flash attention kernel, alone and together, in one run.

    python bench/pipeline.py [--head-dim 128] [--block-n 128] [--causal] [--stages 2] [--ptxas-all] [--fp8]

For each variant: the pass pipeline's options, the threads, the shared memory (bytes the kernel places,
before the 1023 added to align the base), the register budgets per role (producer/consumer setmaxnreg,
derived by warp-specialize from the allocator's pressure; "-" when not specialized), ptxas's registers
(at launch) and spills, the SASS of a trip of the main loop (`tessera.sass.loop_trip`: a path through the SASS
from the loop's header back to it, the shortest that issues every MMA, over the waits' retries; with
peel-masked-iterations the masked trips after a slash: with `branch=true`, the default, one loop whose
trips branch over the masks, "steady/masked" the instructions of a trip that skips them and of one that
runs them; split, the steady loop's trip and the masked tail loop's) and the same per key (divided by
block_n: FlashAttention-3's hd128 loop is 606 / 176 = 3.44 under ptxas 13.0; the default block_n is the
flash builder's, `FLASH_BLOCK_N`: 176 at head_dim 128), the steady trip's HGMMA and EX2 counts, and the most
wgmma groups in flight at once in the loop's Target IR (committed and not yet retired by a wait_group), and
ptxas's warnings and informational diagnostics (codes; "none" when it printed none: e.g. C7513 would say that
ptxas serialized the wgmmas, C7512 that it spilled).
Since compile17 the printer runs the last trip's P.V in the loop (tessera/ptx/fold_epilogue.py), re-entering
it at the P.V: the smallest loop holding HGMMA is then the inner loop its re-entry label heads, without the
score mma, and the trip is counted in the loop around it (`tessera.sass.trip_loops`; docs/compile-time.md,
compile15 and compile17).
The cluster rows (flash attention with clusters of two query blocks sharing K/V, GEMM 2x1 sharing B, both by
TMA multicast) add the traffic counter of the CTA simulator: the bytes each CTA's TMA copies read from global
memory, by tensor, on a small problem (`--no-traffic` skips those runs).
`--ptxas-all` measures the default variant's loops under every ptxas found (`find_all_ptxas`), each a row, and
the same without `hoist-invariant-descriptors` ("descs per trip": Q's k-step descriptors and the K/V rings'
descriptors re-computed on every trip), with the masked tail split off, and with the first trip peeled
(`overlap-softmax{fold=false}`).
`--fp8` measures the e4m3 kernel instead (k32 e4m3 wgmma, P packed to e4m3 in registers, its FP8_BLOCK_N keys
per iteration): V^T given in P8 key order (`v_transposed="p8"`) under the single-stage and default variants,
and V as it is (the default, `v_transposed=False`), transposed in shared memory by the producer warpgroup,
under the default variant (rows "..., V transposed in-kernel"; the single-stage kernel has no producer), with
the SASS of the producer's transpose loop (its instructions and PRMT/LDS/STS per key block).
Triton's kernel for the same attention, measured by the same tools, is in `python bench/compile.py` (with
Triton installed). Needs ptxas and nvdisasm
(`pip install nvidia-cuda-nvcc nvidia-cuda-nvdisasm`, or `pip install '.[ptx]'` in a checkout); without them only the Target IR columns are printed.
"""

from __future__ import annotations

import argparse

import tessera
from tessera.dialects import sm90
from tessera.kernel_abi import TARGET_KERNEL_ATTR, is_target_kernel
from tessera.kernels import AttentionConfig
from tessera.kernels.attention import FLASH_BLOCK_N
from tessera.kernels.attention_fp8 import FP8_BLOCK_N
from tessera.passes import apply_pipeline
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers
from tessera.toolchain import compile_ptx, find_all_ptxas, find_nvdisasm, find_ptxas
from tessera.sass import (MMA_OPCODES, disassemble, loop_trip, opcode_counts, parse_sass, sass_loops,
                          trip_loops)
from xdsl.dialects import scf

LOWER = "convert-tile-to-sm90,canonicalize,cse,rematerialize-constants"
VARIANTS = {
    "1 stage, no specialization": dict(stages=1),
    "pipelined": dict(),
    "+ overlap-softmax": dict(overlap=True),
    "+ peel-masked-iterations": dict(peel=True),
    "+ warp-specialize": dict(specialize=True),
    "+ ping-pong": dict(specialize=True, pingpong=True),
    "full pipeline (default)": dict(overlap=True, peel=True, specialize=True),
    "full, descriptors per trip": dict(overlap=True, peel=True, specialize=True, hoist=False),
    "full, masked tail split off": dict(overlap=True, peel="split", specialize=True),
    "full, masks selected": dict(overlap=True, peel=True, specialize=True, mask_mma=False),
    "full, causal masks selected": dict(overlap=True, peel=True, specialize=True, causal_mma=False),
    "full, first trip peeled": dict(overlap="peel", peel=True, specialize=True),
    "all": dict(overlap=True, peel=True, specialize=True, pingpong=True),
    "full pipeline, cluster 2": dict(overlap=True, peel=True, specialize=True, cluster=2),
}
PTXAS_ALL = {"full pipeline (default)": "full pipeline", "full, descriptors per trip": "descs per trip",
             "full, masked tail split off": "masked tail split", "full, first trip peeled": "first trip peeled",
             "full, masks selected": "masks selected", "full, causal masks selected": "causal selected"}
"""The variants `--ptxas-all` measures under every ptxas (row labels): the default, the default without
`hoist-invariant-descriptors` (Q's k-step and the rings' descriptors re-computed on every trip), and the default
with the masked trips in a loop of their own (`peel-masked-iterations` without `branch=true`), and the default
with `overlap-softmax{fold=false}` (trip 0 peeled before the loop; the default runs it in the loop, the previous
trip's P.V update under a branch: three of its loop's instructions, an empty wgmma group and the branch over it,
run on the first trip only), and the default without `mask-by-mma` (the masked trip's bounds mask selected per
score, 88 FSEL at 176 keys, where the default adds it with one more wgmma), and the default without
`mask-causal-by-mma` (a causal kernel's diagonal selected per score, where the default adds it with four more
wgmmas per warpgroup; the other kernels' rows are the default's), measured in the same run."""
TRAFFIC_SIZES = {"batch": 1, "heads": 1, "seq_q": 256, "seq_k": 512}
"""The problem the traffic counter runs in the CTA simulator: one cluster of two query blocks, four key blocks."""


PEEL = {True: "peel-masked-iterations{branch=true}", "split": "peel-masked-iterations"}
"""The `peel` option of `spec`: the default's one loop branching over its masks, or the split-off tail loop."""


def spec(stages: int, overlap=False, peel=False, specialize=False, pingpong=False, cluster=1, hoist=True,
         mask_mma=True, causal_mma=True) -> str:
    overlap_pass = "overlap-softmax{fold=false}" if overlap == "peel" else "overlap-softmax"
    tile = [f"assign-swizzle,pipeline-loops{{stages={stages}}}"] + ([overlap_pass] if overlap else []) + (
        [PEEL[peel]] if peel else []) + (["mask-by-mma"] if peel is True and mask_mma else []) + (
        ["mask-causal-by-mma"] if peel is True and causal_mma else [])
    target = [LOWER] + ([f"warp-specialize{{pingpong={str(pingpong).lower()}}}"] if specialize else [])
    target += ["multicast-cluster-copies"] if cluster != 1 else []
    target += ["hoist-invariant-descriptors"] if specialize and hoist else []
    return ",".join(tile + target + ["allocate-registers"])


def traffic_per_cta(tile_module, module, shapes) -> dict[str, int]:
    """TMA bytes per CTA by tensor (the CTA simulator's traffic counter, averaged over the CTAs) of `module`, the
    Target IR of the Tile IR kernel `tile_module`, on random inputs of `shapes`."""
    import numpy as np

    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.sm90.launch import run_target_kernel
    from tessera.kernel_abi import kernels, signature

    kernel = next(op for op in module.walk() if is_target_kernel(op))
    rng = np.random.default_rng(0)
    sig = signature(kernels(tile_module)[0])
    arguments, sizes = prepare_arguments(sig, [rng.standard_normal(s).astype(np.float32) for s in shapes], {})
    traffic: dict = {}
    run_target_kernel(kernel, arguments, sizes, traffic=traffic)
    total: dict[str, int] = {}
    for per_map in traffic.values():
        for name, nbytes in per_map.items():
            total[name] = total.get(name, 0) + nbytes
    return {name.split("_map")[0]: nbytes // len(traffic) for name, nbytes in sorted(total.items())}


def resources(module, ptxas: str | None = None) -> tuple:
    """(registers, spill bytes, main-loop SASS sizes, HGMMA, EX2, diagnostics) from ptxas (`ptxas`, or the one
    `find_ptxas` finds) and nvdisasm ("-" for what a missing tool cannot say)."""
    regs = spill = loop = hgmma = ex2 = diagnostics = "-"
    if find_ptxas() is not None:
        result = compile_ptx(print_ptx(module, registers=allocated_registers), ptxas=ptxas)
        entry = result.entry()
        regs, spill = entry.registers, entry.spill_store_bytes
        diagnostics = ",".join(d.code or d.severity for d in result.log.diagnostics) or "none"
        if find_nvdisasm() is not None:
            code = parse_sass(disassemble(result.cubin))
            loops = trip_loops(code)
            if loops:
                loop = "/".join(_trip_sizes(code, lp) for lp in loops)
                counts = opcode_counts(loop_trip(code, loop=loops[0]))  # the HGMMA column counts QGMMA too
                hgmma = sum(counts[o] for o in MMA_OPCODES)
                ex2 = counts["MUFU.EX2"]
    return regs, spill, loop, hgmma, ex2, diagnostics


def _trip_sizes(code, loop) -> str:
    """"563/701" for a loop whose trips may branch over the masks (peel-masked-iterations{branch=true}): the
    instructions of a steady trip, then of a masked one (`loop_trip`); "572" where both are the same path."""
    steady, masked = (len(loop_trip(code, masked=masked, loop=loop)) for masked in (False, True))
    return f"{steady}/{masked}" if masked != steady else str(steady)


def transpose_loops(module) -> str:
    """The SASS loops of the producer's in-kernel V transpose (those with PRMT): instructions, PRMT, LDS, STS."""
    if find_ptxas() is None or find_nvdisasm() is None:
        return "-"
    cubin = compile_ptx(print_ptx(module, registers=allocated_registers)).cubin
    loops = [lp for lp in sass_loops(disassemble(cubin)) if lp.opcode_counts["PRMT"]]
    innermost = [lp for lp in loops if not any(lp.contains(o) for o in loops if o is not lp)]
    return ", ".join(f"{len(lp.instructions)} ({lp.opcode_counts['PRMT']} PRMT, {lp.opcode_counts['LDS']} LDS, "
                     f"{lp.opcode_counts['STS']} STS)" for lp in innermost) or "none"


def per_key(loop: str, block_n: int) -> str:
    """"3.37/4.21" for loops "593/741" over block_n = 176 keys per iteration ("-" without SASS)."""
    return "-" if loop == "-" else "/".join(f"{int(n) / block_n:.2f}" for n in loop.split("/"))


def groups_in_flight(kernel) -> int:
    """The most wgmma groups committed and not yet retired at one point of any loop body (waits never cross
    control flow in Tessera's lowering; an scf.if that commits on one path, overlap-softmax's update of the
    previous trip, counts as that path's commits: the other retires every group)."""
    most = 0
    for op in kernel.walk():
        if not isinstance(op, scf.ForOp):
            continue
        pending = 0
        for inner in op.body.block.ops:
            commits = 1 if isinstance(inner, sm90.WgmmaCommitGroupOp) else 0
            if isinstance(inner, scf.IfOp) and inner.false_region.blocks:
                commits = max(sum(isinstance(o, sm90.WgmmaCommitGroupOp) for o in r.block.ops) for r in inner.regions)
            if commits:
                pending += commits
                most = max(most, pending)
            elif isinstance(inner, sm90.WgmmaWaitGroupOp):
                pending = min(pending, inner.pending.value.data)
    return most


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--block-n", type=int, default=None, help="keys per iteration (default: the builder's)")
    parser.add_argument("--ptxas-all", action="store_true", help="the default variant under every ptxas found")
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--stages", type=int, default=2)
    parser.add_argument("--no-traffic", action="store_true", help="skip the CTA-simulator runs of the traffic counter")
    parser.add_argument("--fp8", action="store_true", help="the e4m3 kernel (single-stage and default variants)")
    args = parser.parse_args()
    tile = AttentionConfig.checked(args.head_dim, args.causal)
    block_n = args.block_n or (FP8_BLOCK_N[args.head_dim] if args.fp8 else FLASH_BLOCK_N[args.head_dim])
    fp8_forms = ({"dtype": "e4m3", "v_transposed": "p8"}, {"dtype": "e4m3"}) if args.fp8 else ({},)
    print(f"flash attention head_dim={args.head_dim} causal={args.causal} {'e4m3' if args.fp8 else 'bf16'}, "
          f"{tile.block_m}x{block_n} tiles, stages={args.stages}")
    print(f"{'variant':<30}{'threads':>8}{'smem':>8}{'prod/cons':>11}{'regs':>6}{'spill':>6}{'loop SASS':>16}"
          f"{'per key':>12}{'HGMMA':>7}{'EX2':>5}{'groups':>8}  ptxas diagnostics")
    traffic_rows = []
    for name, options in VARIANTS.items():
        options = {"stages": args.stages, **options}
        if args.causal and options.get("cluster", 1) != 1:
            continue  # refused by name: the members' key ranges differ
        if args.fp8 and name not in ("1 stage, no specialization", "full pipeline (default)"):
            continue
        for fp8 in fp8_forms:
            if args.fp8 and "v_transposed" not in fp8 and name != "full pipeline (default)":
                continue  # the in-kernel V transpose needs the producer warpgroup
            label = name if "v_transposed" in fp8 or not args.fp8 else "full, V transposed in-kernel"
            traffic_rows += variant_rows(args, label, options, block_n, fp8)
    if not args.fp8:
        gemm_rows(args)
    if traffic_rows:
        print(f"\nTMA bytes per CTA from global memory (CTA simulator's traffic counter, {TRAFFIC_SIZES}):")
        for name, per_tensor in traffic_rows:
            print(f"  {name:<30}" + "  ".join(f"{t} {b}" for t, b in per_tensor.items()))


def variant_rows(args, name: str, options: dict, block_n: int, fp8: dict) -> list:
    """Print the rows of one variant (`name`, pass options, the kernel's FP8 options); its traffic rows."""
    traffic_rows = []
    module = tessera.kernels.flash_attention(head_dim=args.head_dim, causal=args.causal,
                                             cluster=options.get("cluster", 1), block_n=block_n, **fp8)
    tile_module = module.clone()
    apply_pipeline(module, spec(**options))
    kernel = next(op for op in module.walk() if is_target_kernel(op))
    info = kernel.attributes[TARGET_KERNEL_ATTR].data
    budgets = [op.count.value.data for op in kernel.walk() if isinstance(op, sm90.SetMaxNRegOp)]
    roles = f"{budgets[0]}/{budgets[1]}" if budgets else "-"
    ptxas_runs = [(p.release, p.path) for p in find_all_ptxas()] if (
        args.ptxas_all and name in PTXAS_ALL) else [("", None)]
    for release, path in ptxas_runs:
        regs, spill, loop, hgmma, ex2, diagnostics = resources(module, path)
        label = f"{PTXAS_ALL[name]}, ptxas {release}" if release else name
        print(f"{label:<30}{info['threads'].value.data:>8}{info['smem_bytes'].value.data:>8}{roles:>11}{regs:>6}"
              f"{spill:>6}{loop:>16}{per_key(loop, block_n):>12}{hgmma:>7}{ex2:>5}{groups_in_flight(kernel):>8}  "
              f"{diagnostics}")
    if args.fp8 and "v_transposed" not in fp8:
        print(f"{'':<30}the producer's transpose loop(s), SASS per {block_n} keys: {transpose_loops(module)}")
    if name in ("full pipeline (default)", "full pipeline, cluster 2") and not (args.no_traffic or args.fp8):
        s = TRAFFIC_SIZES
        shapes = [(s["batch"], s["heads"], s[n], args.head_dim) for n in ("seq_q", "seq_k", "seq_k")]
        traffic_rows.append((name, traffic_per_cta(tile_module, module, shapes)))
    return traffic_rows


def gemm_rows(args) -> None:
    """The default GEMM (128x128x64 tiles) with clusters of 1 and 2x1 (B multicast): resources and traffic."""
    print("\ngemm bf16 128x128x64, default pipeline")
    print(f"{'variant':<30}{'threads':>8}{'smem':>8}{'regs':>6}{'spill':>6}{'loop SASS':>16}{'HGMMA':>7}  traffic per "
          "CTA (M=N=256, K=512)")
    for name, cluster in (("cluster 1", (1, 1)), ("cluster 2x1 (B multicast)", (2, 1))):
        tile_module = tessera.kernels.gemm(cluster=cluster)
        module = tessera.compile(tile_module, target="target")
        kernel = next(op for op in module.walk() if is_target_kernel(op))
        info = kernel.attributes[TARGET_KERNEL_ATTR].data
        regs, spill, loop, hgmma, _, _ = resources(module)
        traffic = "-" if args.no_traffic else "  ".join(
            f"{t} {b}" for t, b in traffic_per_cta(tile_module, module, [(256, 512), (512, 256)]).items())
        print(f"{name:<30}{info['threads'].value.data:>8}{info['smem_bytes'].value.data:>8}{regs:>6}{spill:>6}"
              f"{loop:>16}{hgmma:>7}  {traffic}")

if __name__ == "__main__":
    main()
