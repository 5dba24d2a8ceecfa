"""The attention backward's main kernel, compiled, as ptxas and the SASS see it: registers, spills, HGMMA, and
the main loop (the innermost loop holding HGMMA: one query block of a key block's loop) with dQ added by
`red.global.add.f32` or by `cp.reduce.async.bulk` (`convert-tile-to-sm90{atomic-add=...}`), and P, dS stored
to shared memory by stmatrix or st.shared (`store-shared=...`).

    python bench/backward_sass.py [--head-dim 64 128] [--causal both|yes|no]

The backward goes through the single-stage pipeline (`passes.PTX_PIPELINE`; warp-specialize refuses it), with
block_m = block_n (128 at head_dim 64, 64 at 128: the lowering needs one row count for every register tile).
Static counts: each SASS instruction of the loop once. Needs ptxas and nvdisasm (`.[ptx]`).
"""

from __future__ import annotations

import argparse

import tessera
from tessera import passes
from tessera.kernels import attention_backward
from tessera.toolchain import disassemble, innermost_loop

BLOCKS = {64: 128, 128: 64}
"""block_m = block_n by head_dim."""


def measure(head_dim: int, causal: bool, mode: str, store: str = "st_shared") -> dict:
    options = f"atomic-add={mode} store-shared={store}"
    pipeline = passes.PTX_PIPELINE.replace("convert-tile-to-sm90", f"convert-tile-to-sm90{{{options}}}")
    block = BLOCKS[head_dim]
    main = attention_backward(head_dim=head_dim, causal=causal, block_m=block, block_n=block).main
    result = tessera.compile(main, target="cubin", pipeline=pipeline)
    (function,) = result.log.functions.values()
    loop = innermost_loop(disassemble(result.cubin), containing="HGMMA")
    counts = loop.opcode_counts
    return {"head_dim": head_dim, "causal": causal, "dQ": mode, "P,dS": store, "registers": function.registers,
            "spill": function.spill_store_bytes + function.spill_load_bytes, "loop": len(loop),
            "HGMMA": sum(v for k, v in counts.items() if k.startswith("HGMMA")),
            "RED": sum(v for k, v in counts.items() if k.startswith("RED")),
            "STS": sum(v for k, v in counts.items() if k.startswith("STS")),
            "STSM": sum(v for k, v in counts.items() if k.startswith("STSM")),
            "BAR": sum(v for k, v in counts.items() if k.startswith("BAR")),
            "warnings": len(result.log.diagnostics)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dim", type=int, nargs="+", default=[64, 128], choices=sorted(BLOCKS))
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    args = parser.parse_args()
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    columns = ("head_dim", "causal", "dQ", "P,dS", "registers", "spill", "loop", "HGMMA", "RED", "STS", "STSM", "BAR",
               "warnings")
    print(" ".join(f"{c:>9}" for c in columns))
    for head_dim in args.head_dim:
        for causal in causals:
            for mode, store in (("red", "st_shared"), ("bulk", "st_shared"), ("red", "stmatrix"), ("bulk", "stmatrix")):
                row = measure(head_dim, causal, mode, store)
                print(" ".join(f"{str(row[c]):>9}" for c in columns), flush=True)


if __name__ == "__main__":
    main()
