"""Compile every configuration to sm_90a in one run and report what ptxas and the SASS say.

    python bench/compile.py [--only flash_attention] [--repeats 1]

For each configuration: the time from Tile IR to PTX (lowering, register allocation, printing) and from
PTX to cubin (ptxas), the registers per thread Tessera's allocator predicts (peak) and ptxas uses, spill
bytes, static shared memory, and the SASS of the main loop (the innermost loop holding HGMMA): its
instruction count and its HGMMA and MUFU.EX2 counts. Needs ptxas (and nvdisasm for the SASS columns;
`pip install tessera[ptx]`). For comparison (from the issue): Triton 3.x compiled the head_dim 128,
128x128-tile, TMA, non-causal FlashAttention forward for sm_90a in about 1.1 s, with 187 registers, 0
spills, 224 KB shared memory and a main loop of about 522 SASS instructions, 16 HGMMA and 66 MUFU.EX2.
"""

from __future__ import annotations

import argparse
import time

import tessera
from tessera.kernel_abi import is_target_kernel
from tessera.passes import PTX_PIPELINE, apply_pipeline
from tessera.ptx.module import print_ptx
from tessera.ptx.target import allocated_registers
from tessera.regalloc import allocate_registers
from tessera.toolchain import compile_ptx, disassemble, find_nvdisasm, innermost_loop

CONFIGS = [("flash_attention", dict(head_dim=d, causal=c)) for d in (64, 128) for c in (False, True)] + [
    ("two_pass_attention", dict(head_dim=128)), ("three_pass_attention", dict(head_dim=128)), ("gemm", {})]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="only configurations of this builder")
    args = parser.parse_args()
    sass = find_nvdisasm() is not None
    print(f"{'configuration':<42}{'tile->ptx s':>12}{'ptxas s':>9}{'peak':>6}{'regs':>6}{'spill':>7}"
          f"{'smem':>7}{'loop':>7}{'HGMMA':>7}{'EX2':>6}")
    for variant, config in CONFIGS:
        if args.only and variant != args.only:
            continue
        module = getattr(tessera.kernels, variant)(**config)
        start = time.perf_counter()
        lowered = module.clone()
        apply_pipeline(lowered, PTX_PIPELINE)
        ptx = print_ptx(lowered, registers=allocated_registers)
        t_ptx = time.perf_counter() - start
        peak = allocate_registers(next(op for op in lowered.walk() if is_target_kernel(op))).peak
        start = time.perf_counter()
        result = compile_ptx(ptx)
        t_cubin = time.perf_counter() - start
        entry = result.entry()
        loop_cols = ("-", "-", "-")
        if sass:
            loop = innermost_loop(disassemble(result.cubin), containing="HGMMA")
            if loop is not None:
                counts = loop.opcode_counts
                loop_cols = (len(loop.instructions), counts["HGMMA"], counts["MUFU.EX2"])
        name = f"{variant} " + " ".join(f"{k}={v}" for k, v in config.items())
        print(f"{name:<42}{t_ptx:>12.2f}{t_cubin:>9.2f}{peak:>6}{entry.registers:>6}{entry.spill_store_bytes:>7}"
              f"{entry.smem_bytes:>7}{loop_cols[0]:>7}{loop_cols[1]:>7}{loop_cols[2]:>6}")
        if not sass:
            print("  (no nvdisasm: install tessera[ptx] for the SASS columns)")
    print("smem is static shared memory; each kernel also asks for its sm90.kernel smem_bytes + 1023 dynamically.")


if __name__ == "__main__":
    main()
