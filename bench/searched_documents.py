"""Document masks searched in the mod (`np.searchsorted(offsets, q_idx, side="right")`, issue 29): registers,
warp specialization, ptxas and SASS against the same mask written over host-computed document ids.

Rows, for 9 documents (10 offsets: unrolled compares, `searches.UNROLLED_SEARCH_MAX`) and 300 (301 offsets: a
binary search of 9 steps with gathers), causal inside each document, and the ids mask `doc_ids[q_idx] ==
doc_ids[kv_idx]` as the baseline:

- the forward at head_dim 64 and 128 (the default BN): whether the default pipeline's first rung
  (warp-specialized, two stages) takes it, the consumer warpgroups' registers (the allocator's count), ptxas's
  registers and spills under every ptxas found (12.9, 13.0, 13.5), and the partial-block loop's SASS per key
  (ptxas 13.0; its extra over the full-block loop is the mask's cost);
- the backward's main kernel at the blocks `tessera.attention_backward` takes (`runtime.flex.warp_specialized_first`):
  the same columns.

Run: .venv/bin/python bench/searched_documents.py
"""

from __future__ import annotations

import numpy as np

import tessera
from tessera import toolchain
from tessera.kernels import flash_attention
from tessera.runtime import flex

NINE = np.array([0, 13, 13, 40, 41, 77, 120, 121, 160, 200])
MANY = np.cumsum(np.random.default_rng(4).integers(0, 30, 301))  # 300 documents (some empty) over ~4.4k tokens
DOC_IDS = np.searchsorted(MANY, np.arange(MANY[-1] + 1), side="right")


def nine_documents(b, h, q_idx, kv_idx):
    return (np.searchsorted(NINE, q_idx, side="right") == np.searchsorted(NINE, kv_idx, side="right")) \
        & (q_idx >= kv_idx)


def many_documents(b, h, q_idx, kv_idx):
    return (np.searchsorted(MANY, q_idx, side="right") == np.searchsorted(MANY, kv_idx, side="right")) \
        & (q_idx >= kv_idx)


def document_ids(b, h, q_idx, kv_idx):
    return (DOC_IDS[q_idx] == DOC_IDS[kv_idx]) & (q_idx >= kv_idx)


def ptxas_columns(module, pipeline=None) -> str:
    """ptxas registers / spills of `module`'s kernels under each ptxas found."""
    ptx = tessera.compile(module, target="ptx", **({"pipeline": pipeline} if pipeline else {}))
    cells = []
    for tool in toolchain.find_all_ptxas():
        entries = toolchain.compile_ptx(ptx, ptxas=tool.path).entries.values()
        registers = max(e.registers or 0 for e in entries)
        spills = " SPILLS" if any(e.spills for e in entries) else ""
        cells.append(f"{'.'.join(map(str, tool.version[:2]))}: {registers}{spills}")
    return ", ".join(cells)


def loops_per_key(module, keys: int, pipeline=None) -> str:
    result = tessera.compile(module, target="cubin", **({"pipeline": pipeline} if pipeline else {}))
    text = toolchain.disassemble(result.cubin)
    sizes = sorted(len(loop.instructions) for loop in toolchain.sass_loops(text) if loop.opcode_counts["HGMMA"])
    return "/".join(f"{n / keys:.2f}" for n in sizes)


def main() -> None:
    from attention_variants import consumer_registers  # noqa: PLC0415 - a sibling bench script

    from tessera import passes
    from tessera.kernels.attention_config import DEFAULT_BLOCK_N

    for mask in (nine_documents, many_documents, document_ids):
        for d in (64, 128):
            module = flash_attention(d, mask_mod=mask, block_sparse=True)
            fits = flex.warp_specialized_refusal(module)
            bn = DEFAULT_BLOCK_N[d]
            print(f"forward  d{d} {mask.__name__:15s} BN {bn}: warp-specialized {fits is None}"
                  f"{'' if fits is None else ' (' + fits[:80] + ')'}, consumers {consumer_registers(module)} "
                  f"registers; ptxas {ptxas_columns(module)}; SASS/key full/partial {loops_per_key(module, bn)}",
                  flush=True)
        for d in (64, 128):
            options = dict(score_mod=None, mask_mod=mask, causal=False, scale=None, level="ptx", head_dim=d,
                           dtype="bf16", deterministic=False)
            kernels, _, refused, taken = flex.warp_specialized_first(None, *flex.backward_kernels(None, **options),
                                                                    **options)
            c = kernels.config.attention
            print(f"backward d{d} {mask.__name__:15s} {c.block_m} x {c.block_n} ({taken}): consumers "
                  f"{consumer_registers(kernels.main)} registers; ptxas "
                  f"{ptxas_columns(kernels.main, passes.DEFAULT_PIPELINE)}; SASS/key full/partial "
                  f"{loops_per_key(kernels.main, c.block_n, passes.DEFAULT_PIPELINE)}", flush=True)


if __name__ == "__main__":
    main()
