"""What the remote mbarrier arrive of the clustered kernels costs in SASS, and what the one cheaper form the PTX ISA
documents for it would save: docs/performance.md ("GEMM") and `memory_model.MBARRIER_ARRIVE_SCOPE` reason with it.

    python bench/remote_arrive.py

For each clustered configuration (the GEMM's "-cluster2" schedules, the default GEMM in 2 x 1 clusters, the flash
forward at head_dim 128 in clusters of two under bench/pipeline.py's full pipeline), under every ptxas found: the
registers, spills and ptxas warnings (codes; C7514 is its serialized-wgmma advisory), the main loop's
(`tessera.sass.trip_loops`: the innermost HGMMA loop, or the loop around it where the printer's fold re-enters it)
SASS instructions and its MEMBAR / ERRBAR / CGAERRBAR / FENCE.VIEW.ASYNC.S, and the kernel's MEMBAR.ALL.GPU; once
for the PTX Tessera prints (`mbarrier.arrive.release.cluster.shared::cluster.b64`) and once with every such arrive
replaced by `fence.release.sync_restrict::shared::cta.cluster` + `mbarrier.arrive.relaxed.cluster.shared::cluster
.b64` under `.version 8.6` (`memory_model.MBARRIER_RELEASE_FENCE`; a text substitution: Tessera does not print
it, since PTX ISA 8.6 needs ptxas 12.8 or newer). Counts, not times: about half a minute.
"""

from __future__ import annotations

import re

from pipeline import spec

import tessera
from tessera.runtime.gemm import gemm_config
from tessera.sass import disassemble, opcode_counts, parse_sass, trip_loops
from tessera.toolchain import compile_ptx, find_all_ptxas

RELEASE_CLUSTER = re.compile(r"mbarrier\.arrive\.release\.cluster\.shared::cluster\.b64 _, \[(%r\d+)\];")
FENCED_RELAXED = ("fence.release.sync_restrict::shared::cta.cluster;\n\t"
                  r"mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [\1];")
COUNTED = ("MEMBAR", "ERRBAR", "CGAERRBAR", "FENCE.VIEW.ASYNC.S")


def configurations():
    """(name, PTX) of each clustered configuration."""
    for name in ("128x256-cluster2", "128x256-cluster2-pingpong"):
        config = gemm_config(schedule=name)
        yield f"gemm {name}", tessera.compile(tessera.kernels.gemm(**dict(config.options)), target="ptx",
                                              pipeline=config.pipeline)
    yield "gemm 128x128, cluster 2x1", tessera.compile(tessera.kernels.gemm(cluster=(2, 1)), target="ptx")
    flash = spec(2, overlap=True, peel=True, specialize=True, cluster=2).removesuffix(",allocate-registers")
    yield "flash d128, cluster 2", tessera.compile(tessera.kernels.flash_attention(head_dim=128, cluster=2),
                                                   target="ptx", pipeline=flash)


def fenced_relaxed(ptx: str) -> str:
    """`ptx` with each remote arrive in MBARRIER_RELEASE_FENCE's form, at the PTX ISA version it needs."""
    return RELEASE_CLUSTER.sub(FENCED_RELAXED, ptx.replace(".version 8.0", ".version 8.6", 1))


def row(ptx: str, ptxas: str) -> str:
    result = compile_ptx(ptx, ptxas=ptxas)
    entry = result.entry()
    sass = disassemble(result.cubin)
    loop = trip_loops(sass)[0]
    counts = " ".join(f"{c} {loop.opcode_counts.get(c, 0)}" for c in COUNTED)
    gpu = opcode_counts(parse_sass(sass)).get("MEMBAR.ALL.GPU", 0)
    advisories = ",".join(d.code or d.severity for d in result.warnings) or "clean"
    return (f"{entry.registers} registers, spill {entry.spill_store_bytes} B, ptxas {advisories}; "
            f"loop {len(loop.instructions)} SASS ({counts}); kernel MEMBAR.ALL.GPU {gpu}")


def main() -> None:
    ptxases = find_all_ptxas()
    for name, ptx in configurations():
        print(f"{name}: {len(RELEASE_CLUSTER.findall(ptx))} remote arrives in the PTX", flush=True)
        for ptxas in ptxases:
            print(f"  ptxas {ptxas.release}, .release.cluster:      {row(ptx, ptxas.path)}")
            print(f"  ptxas {ptxas.release}, fence + .relaxed (8.6): {row(fenced_relaxed(ptx), ptxas.path)}",
                  flush=True)


if __name__ == "__main__":
    main()
