"""The attention backward's main kernel, compiled, as ptxas and the SASS see it: registers, spills, HGMMA, and
the main loop (the innermost loop holding HGMMA: one query block of a key block's loop), ours and
FlashAttention-3's Hopper backward side by side, each under every ptxas found.

    python bench/backward_sass.py [--head-dim 64 128] [--causal both|yes|no] [--deterministic] [--fa3]
                                  [--ptxas 13.0 ...] [--mma-order first-read program]

Ours: the main kernel through
  "single"  the single-stage pipeline (`passes.PTX_PIPELINE`): 256 threads at block 128 x 128 and at 64 x 128
            (keys on the rows: two consumer warpgroups), 128 at 64 x 64;
  "ws"      the default pipeline named (`passes.DEFAULT_PIPELINE`, so that it does not fall back): two-stage Q/dO
            rings filled by a TMA producer warpgroup, setmaxnreg budgets (overlap-softmax leaves the loop alone),
with dQ added by `red.global.add.f32` or `cp.reduce.async.bulk` (`convert-tile-to-sm90{atomic-add=...}`), and
by the default `atomic-add=auto` (its row's dQ column says which it took: `auto=bulk`, `auto=red`); a
configuration that does not fit is printed with its refusal. Blocks (block_m x block_n, `BLOCKS`): 128 x 128 at
head_dim 64; at 128 the 64 x 64 kernel and the 64 x 128 one with keys on the rows of its register tiles (S^T, dP^T,
dK, dV and dQ^T all 128 rows: FlashAttention-3's two consumer warpgroups of 64 keys each); "--block BMxBN" picks one.

FA3 (--fa3): its Hopper backward built with nvcc from the wheels by `tests/ptx_library/build.py
backward_fa3_hdimN` (FA3's own tiles: hdim 64 128 x 128; hdim 128 80 x 128, causal 64 x 128; two consumer
warpgroups and a producer; about half an hour of one core for the build), its main kernels without local
masks, softcap, varlen or the deterministic mode (`FA3_VARIANT`) assembled here; a row per kernel. Its dQ
reduction (cp.reduce.async.bulk) is issued by a producer warp, outside the consumers' loop measured.

`--mma-order`: the wgmma issue orders to compile each of ours with (`convert-tile-to-sm90{mma-order=...}`,
`passes/convert_tile_to_sm90/mma_order.py`; default the pass's, "first-read": FlashAttention-3's placement, two
drains a trip); "program" is the builder's order (four at head_dim 128); column `order`, `waits` the loop's
`WARPGROUP.DEPBAR` (wgmma.wait_group) count and `drains` those that wait for every group (`0x0`).

Columns: `loop` SASS instructions in the loop (static: each once), `/key` loop / block_n, `/64x64` loop per
64 x 64 block of (query, key) work (loop x 4096 / (block_m block_n): the fair figure between different tiles).
Needs ptxas and nvdisasm (`.[ptx]`).
"""

from __future__ import annotations

import argparse
import re
import warnings
from pathlib import Path

from harness import CAUSAL_CHOICES

import tessera
from tessera import passes
from tessera.dialects.sm90_reductions import BulkReduceAddOp
from tessera.passes.convert_tile_to_sm90.mma_order import MMA_ORDERS
from tessera.kernels import attention_backward
from tessera.toolchain import compile_ptx, find_all_ptxas
from tessera.sass import disassemble, innermost_loop, parse_sass

BLOCKS = {64: [(128, 128)], 128: [(64, 64), (64, 128)]}
"""(block_m, block_n) measured by head_dim."""

PIPELINES = {"single": passes.PTX_PIPELINE, "ws": passes.DEFAULT_PIPELINE}

FA3_BUILD = Path(__file__).resolve().parent.parent / "tests" / "ptx_library" / "build"
FA3_TILES = {64: {False: (128, 128), True: (128, 128)}, 128: {False: (80, 128), True: (64, 128)}}
"""(kBlockM, kBlockN) of FA3's sm90 backward by head dim and causal (run_mha_bwd_hdimN in
hopper/flash_bwd_launch_template.h)."""

COLUMNS = ("kernel", "ptxas", "head_dim", "causal", "dQ", "order", "block", "threads", "registers", "spill", "loop",
           "/key", "/64x64", "HGMMA", "RED", "UBLKRED", "BAR", "waits", "drains")


def _counts(loop) -> dict:
    counts = loop.opcode_counts
    counts = {op: sum(v for k, v in counts.items() if k.startswith(op)) for op in ("HGMMA", "RED", "UBLKRED", "BAR")}
    waits = [i for i in loop.instructions if i.mnemonic.startswith("WARPGROUP.DEPBAR")]
    return {**counts, "waits": len(waits), "drains": sum(i.operands.replace(" ", "").endswith(",0x0") for i in waits)}


def _row(kernel, ptxas, head_dim, causal, mode, bm, bn, threads, function, loop, order="-") -> dict:
    return {"kernel": kernel, "ptxas": ptxas, "head_dim": head_dim, "causal": causal, "dQ": mode, "order": order,
            "block": f"{bm}x{bn}",
            "threads": threads, "registers": function.registers,
            "spill": function.spill_store_bytes + function.spill_load_bytes, "loop": len(loop),
            "/key": f"{len(loop) / bn:.2f}", "/64x64": f"{len(loop) * 4096 / (bm * bn):.0f}", **_counts(loop)}


def measure(head_dim: int, causal: bool, mode: str, kind: str, ptxas: str | None = None,
            block: tuple[int, int] = (64, 64), deterministic: bool = False, order: str = "first-read"):
    """Our main kernel through pipeline `kind` with dQ by `mode` and the wgmma issue order `order`: a row, or the
    refusal's text."""
    bm, bn = block
    pipeline = PIPELINES[kind].replace("convert-tile-to-sm90",
                                       f"convert-tile-to-sm90{{atomic-add={mode} mma-order={order}}}")
    main = attention_backward(head_dim=head_dim, causal=causal, block_m=bm, block_n=bn,
                              deterministic=deterministic).main
    name = f"{kind} d{head_dim} {bm}x{bn} causal={causal}{' deterministic' if deterministic else ''} {mode} {order}"
    try:
        lowered = tessera.compile(main, target="target", pipeline=pipeline)
    except Exception as error:  # a register budget refusal: print it as the row
        return f"{name}: refused: {str(error).splitlines()[0][:160]}"
    fn = next(op for op in lowered.walk() if "sm90.kernel" in op.attributes)
    if "sm90.pipeline_note" in fn.attributes:  # atomic-add=red is the default spec, which falls back
        return f"{name}: {fn.attributes['sm90.pipeline_note'].data[:160]}"
    threads = fn.attributes["sm90.kernel"].data["threads"].value.data
    if mode == "auto":  # which one auto took
        mode += "=bulk" if any(isinstance(op, BulkReduceAddOp) for op in lowered.walk()) else "=red"
    result = compile_ptx(tessera.compile(main, target="ptx", pipeline=pipeline), ptxas=ptxas)
    (function,) = result.log.functions.values()
    loop = innermost_loop(disassemble(result.cubin), containing="HGMMA")
    return _row(kind, result.ptxas.release, head_dim, causal, mode, bm, bn, threads, function, loop, order)


FA3_PTX_VERSION = "8.0"
"""The PTX ISA version FA3's module is declared with when assembled here (see fa3_rows)."""

FA3_VARIANT = re.compile(r"Sm90ELb(?P<causal>[01])ELb0ELb0ELb0ELb0E.*CollectiveEpilogueBwdI")
"""FA3's main kernels measured: `CollectiveMainloopBwdSm90<..., Is_causal, Is_local = false, Has_softcap = false,
Varlen = false, Deterministic = false, ...>` with the epilogue without GQA (in the mangled name, the five bools after
the arch tag)."""


def _entries(ptx: str) -> tuple[str, dict[str, str]]:
    """The module header (everything before the first entry) and each `.entry`'s text by name."""
    starts = [m.start() for m in re.finditer(r"^(?:\.visible )?\.entry ", ptx, re.M)]
    entries = {}
    for start, end in zip(starts, starts[1:] + [len(ptx)]):
        text = ptx[start:end]
        entries[re.match(r"(?:\.visible )?\.entry (\w+)", text).group(1)] = text
    return ptx[: starts[0]] if starts else ptx, entries


def fa3_rows(head_dim: int, ptxas: str | None = None) -> list:
    """A row per FA3 backward main kernel (`FA3_VARIANT`) of the build for `head_dim`, or a line saying how to
    build it. Only those kernels are assembled (the build holds every variant FA3's dispatch instantiates)."""
    ptx = FA3_BUILD / f"backward_fa3_hdim{head_dim}" / "kernel.ptx"
    if not ptx.exists():
        return [f"FA3 d{head_dim}: not built: tests/ptx_library/build.py --cutlass CUTLASS --flash-attention FA "
                f"backward_fa3_hdim{head_dim}"]
    header, entries = _entries(ptx.read_text())
    chosen = {name: text for name, text in entries.items() if FA3_VARIANT.search(name)}
    if not chosen:
        return [f"FA3 d{head_dim}: no main kernel matches {FA3_VARIANT.pattern}"]
    # nvcc from the newest wheel writes its newest PTX ISA version; sm_90a's instructions are all in 8.0 (the
    # version Tessera targets), so the older ptxas take the module declared as 8.0
    header = re.sub(r"^\.version \d+\.\d+", f".version {FA3_PTX_VERSION}", header, count=1, flags=re.M)
    result = compile_ptx(header + "".join(chosen.values()), ptxas=ptxas, source_name=str(ptx))
    sass = disassemble(result.cubin)
    rows = []
    for name, text in chosen.items():
        loop = innermost_loop([i for i in parse_sass(sass) if i.function == name], containing="HGMMA")
        if loop is None:
            continue
        causal = FA3_VARIANT.search(name).group("causal") == "1"
        bm, bn = FA3_TILES[head_dim][causal]
        threads = re.search(r"\.maxntid\s+(\d+)", text)
        rows.append(_row("FA3", result.ptxas.release, head_dim, causal, "bulk", bm, bn,
                         threads.group(1) if threads else "?", result.log.functions[name], loop))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dim", type=int, nargs="+", default=[64, 128], choices=sorted(BLOCKS))
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--block", help="block_m x block_n of ours, e.g. 64x128 (default: each of BLOCKS)")
    parser.add_argument("--fa3", action="store_true", help="also FA3's backward (tests/ptx_library/build.py)")
    parser.add_argument("--deterministic", action="store_true", help="our kernels with deterministic=True")
    parser.add_argument("--ptxas", nargs="+", help="releases of ptxas to use (default: every one found), e.g. 13.0")
    parser.add_argument("--mma-order", nargs="+", default=["first-read"], choices=MMA_ORDERS,
                        help="wgmma issue orders of ours (convert-tile-to-sm90{mma-order=...})")
    parser.add_argument("--dq", nargs="+", default=["red", "bulk", "auto"], choices=("red", "bulk", "auto"),
                        help="dQ reductions of ours (convert-tile-to-sm90{atomic-add=...})")
    args = parser.parse_args()
    causals = CAUSAL_CHOICES[args.causal]
    print(" ".join(f"{c:>9}" for c in COLUMNS))
    warnings.simplefilter("ignore")
    tools = [t for t in find_all_ptxas() if args.ptxas is None or t.release in args.ptxas]
    for tool in tools or [None]:
        path = None if tool is None else tool.path
        for head_dim in args.head_dim:
            rows = []
            blocks = BLOCKS[head_dim] if args.block is None else [tuple(int(x) for x in args.block.split("x"))]
            for block in blocks:
                for causal in causals:
                    for kind in PIPELINES:
                        for mode in args.dq:
                            if args.deterministic and mode == "bulk":
                                continue  # the semaphores keep auto at red, and bulk is no faster there
                            for order in args.mma_order:
                                rows.append(measure(head_dim, causal, mode, kind, path, block, args.deterministic,
                                                    order))
            if args.fa3:
                rows += fa3_rows(head_dim, path)
            for row in rows:
                print(row if isinstance(row, str) else " ".join(f"{str(row[c]):>9}" for c in COLUMNS), flush=True)


if __name__ == "__main__":
    main()
