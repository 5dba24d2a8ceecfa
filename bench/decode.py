"""Decoding attention against a paged KV cache: Tessera's `attention_with_kvcache` on a GPU, and on a CPU the
simulator's count of the bytes the kernel reads from global memory per query token against the ideal.

    python bench/decode.py [--batch 1 4 16 64] [--cache 1024 8192 131072] [--heads 32] [--heads-k 8]
                           [--head-dim 128] [--page-size 256] [--repeats 30]      (GPU: tokens/s, GB/s)
    python bench/decode.py --simulate [--level target|ptx|tile] [...]                (CPU: bytes per token)
    python bench/decode.py --grid                       (CPU: FA3's (seq_q, seq_k) grid at Tile level, GQA)
    python bench/decode.py --splits [--level tile]      (CPU: the grid through varlen and the paged cache,
                                                         num_splits 1/3/auto, with the LSE)
    python bench/decode.py --ptxas                      (CPU: the serving kernels under every ptxas found)

GPU: one decoding step (seq_q 1) for each batch and cache length, bf16, a random page permutation; tokens/s =
batch / time, bandwidth = K/V bytes of the used cache + q and o bytes / time. Beside Tessera: FlashAttention's
`flash_attn_with_kvcache` (flash-attn), FlashInfer's `BatchDecodeWithPagedKVCacheWrapper` and PyTorch's
scaled_dot_product_attention on the gathered cache, each where installed; every result is checked against
an fp32 computation under Tessera's tolerance rule before it is timed (CUDA events, L2 flushed, median).
Without a usable GPU it prints "no CUDA GPU: <why>" and exits 0.

--splits runs FA3's grid ((seq_q, seq_k) in (1, 128) .. (16, 20000), head_dim 64/128/256, heads 6 with heads_k
6/2/1, causal or not) through `tessera.attention(..., cu_seqlens_q=...)` (the whole grid as one packed batch,
with a sequence without queries, one without keys and causal rows that see no key) and through
`attention_with_kvcache` (each shape as a batch of two caches, seq_k and seq_k // 2 tokens, page_size 16, 128
and 256 in turn over a permuted page table), each with num_splits 1, 3 and "auto" and return_lse; it prints
the worst O error/tolerance (`reference.check_packed_attention`), the worst LSE error against float64
logsumexp (bound 1e-4), the largest difference between split 1 and split 3 over its tolerance, and exits 1
if any is outside its bound. head_dim 256 has no split kernel: num_splits 3 is refused by name there (shown).

--simulate runs the same kernel in an interpreter ("target": the CTA simulator, default; "ptx": the PTX
executor; "tile": the Tile interpreter's `tile.cp_async` windows) and counts the bytes its copies read from
global memory: TMA boxes (only the elements inside the tensor: TMA fetches nothing for the zero fill) or, for
a page_size that is no multiple of the key block, the gather's cp.async rows (16-byte chunks; rows past the
sequence read nothing, `tile.cp_async_gather` at Tile level); the
"tables B" column adds the CTA simulator's `ld.global` words (page table and sequence tables, counted per
thread: one broadcast load per warp in hardware). The ideal reads each K/V byte of the used cache once, plus q once. PackGQA is what brings a GQA
group to the ideal: unpacked, each of the group's query heads reads the key head's tiles again.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def paged_inputs(rng, batch, cache, heads, heads_k, head_dim, page_size, lib=np, device=None):
    """q [batch, 1, heads, D], caches with 3x the pages needed in a random permutation, the page table and
    the lengths (each sequence `cache` tokens)."""
    import ml_dtypes

    need = -(-cache // page_size)
    pages = 3 * need * batch
    table = rng.permutation(pages)[: batch * need].reshape(batch, need).astype(np.int32)
    bf16 = ml_dtypes.bfloat16
    q = rng.standard_normal((batch, 1, heads, head_dim)).astype(bf16)
    k = rng.standard_normal((pages, page_size, heads_k, head_dim)).astype(bf16)
    v = rng.standard_normal((pages, page_size, heads_k, head_dim)).astype(bf16)
    lengths = np.full(batch, cache, np.int32)
    return q, k, v, table, lengths


# region CPU: bytes read in the simulator


class ByteCounter:
    """Counts the bytes the simulators read from global memory, by wrapping their read paths."""

    def __init__(self):
        self.tma = 0
        self.gathered = 0
        self.loads = 0
        self._undo = []

    def __enter__(self):
        from tessera.interpreters.sm90 import global_memory, tma
        from tessera.interpreters import tile_memory

        counter = self
        read_box = tma.TensorMap.read_box

        def counted_box(tensor_map, coords):
            _, valid = tensor_map.spec.box_byte_offsets(coords)
            counter.tma += int(valid.sum()) * tensor_map.spec.element_bytes
            return read_box(tensor_map, coords)

        load_words = global_memory.GlobalMemory.load_words

        def counted_words(memory, cta, op, addresses, threads, nbytes=4):
            counter.loads += len(addresses) * nbytes
            return load_words(memory, cta, op, addresses, threads, nbytes)

        view_read = tile_memory.GlobalView.read

        def counted_view(view):
            coords, valid = view._coordinates()
            counter.tma += int(valid.sum()) * view.tensor.dtype.itemsize
            return view_read(view)

        load_bytes = global_memory.GlobalMemory.load_bytes

        def counted_bytes(memory, cta, op, addresses, threads, nbytes):
            counter.gathered += len(addresses) * nbytes
            return load_bytes(memory, cta, op, addresses, threads, nbytes)

        gathered_read = tile_memory.GatheredRows.read

        def counted_rows(rows):
            counter.gathered += rows.nbytes
            return gathered_read(rows)

        from tessera.interpreters.ptx import cp_async

        read_source = cp_async.read_cp_async_source

        def counted_source(m, inst, lanes, addresses, size):
            counter.gathered += len(lanes) * size
            return read_source(m, inst, lanes, addresses, size)

        from tessera.interpreters.ptx import bulk_copy, tma_boxes

        tma_lane = bulk_copy._tma_lane

        def counted_lane(m, inst, lane, map_address, coords, smem, load, *rest, **options):
            if load:
                spec = tma_boxes.tensor_map(m, inst, lane, map_address).spec
                _, valid = spec.box_byte_offsets(coords)
                counter.tma += int(valid.sum()) * spec.element_bytes
            return tma_lane(m, inst, lane, map_address, coords, smem, load, *rest, **options)

        loads_together = bulk_copy._tma_loads_together

        def counted_together(m, inst, lanes, maps, values, *rest):  # each CTA's copy of one box (else `_tma_lane`)
            if not loads_together(m, inst, lanes, maps, values, *rest):
                return False
            spec = tma_boxes.tensor_map(m, inst, int(lanes[0]), int(maps[0])).spec
            _, valid = spec.box_byte_offsets([int(v[0]) for v in values])
            counter.tma += len(lanes) * int(valid.sum()) * spec.element_bytes
            return True

        for owner, name, new in ((bulk_copy, "_tma_lane", counted_lane),
                                 (bulk_copy, "_tma_loads_together", counted_together),
                                 (tma.TensorMap, "read_box", counted_box),
                                 (global_memory.GlobalMemory, "load_words", counted_words),
                                 (global_memory.GlobalMemory, "load_bytes", counted_bytes),
                                 (tile_memory.GlobalView, "read", counted_view),
                                 (tile_memory.GatheredRows, "read", counted_rows),
                                 (cp_async, "read_cp_async_source", counted_source)):
            self._undo.append((owner, name, getattr(owner, name)))
            setattr(owner, name, new)
        return self

    def __exit__(self, *exc):
        for owner, name, old in reversed(self._undo):
            setattr(owner, name, old)


def simulate(args) -> None:
    import tessera.runtime.kvcache as kvcache

    level = args.level
    print(f"bytes read from global memory per query token, {level} level (ideal: each K/V byte of the used "
          f"cache once, plus q)")
    from tessera.kernels.attention_paged import paged_copy

    copy = paged_copy(args.head_dim, args.page_size)
    print(f"{'batch':>5} {'cache':>7} {'heads':>5} {'hk':>3} {'D':>4} {'page':>5} {'copy':>8} {'pack':>5} "
          f"{'read B/token':>13} {'ideal B/token':>14} {'ratio':>6} {'tables B':>9} {'s':>6}")
    rng = np.random.default_rng(0)
    for batch in args.batch:
        for cache in args.cache:
            for pack in (True, False):
                q, k, v, table, lengths = paged_inputs(rng, batch, cache, args.heads, args.heads_k, args.head_dim,
                                                       args.page_size)
                original = kvcache.pack_gqa
                if not pack:
                    kvcache.pack_gqa = lambda *a: False
                start = time.time()
                try:
                    with ByteCounter() as counter:
                        kvcache.attention_with_kvcache(q, k, v, cache_seqlens=lengths, page_table=table,
                                                       causal=True, level=level)
                finally:
                    kvcache.pack_gqa = original
                tokens = batch  # one query token per sequence
                ideal = (2 * cache * args.heads_k * args.head_dim * 2 * batch + q.nbytes) / tokens
                read = (counter.tma + counter.gathered) / tokens
                print(f"{batch:>5} {cache:>7} {args.heads:>5} {args.heads_k:>3} {args.head_dim:>4} "
                      f"{args.page_size:>5} {copy:>8} {'yes' if pack else 'no':>5} {read:>13.0f} {ideal:>14.0f} "
                      f"{read / ideal:>6.2f} {counter.loads:>9} {time.time() - start:>6.1f}", flush=True)


def grid(args) -> None:
    """FA3's (seq_q, seq_k) grid, (16, 20000) included, at Tile level with heads 6 and heads_k 6/2/1."""
    import tessera
    from tessera import reference
    from tessera.kernels import flash_attention

    import ml_dtypes

    rng = np.random.default_rng(0)
    shapes = [(1, 128), (1, 339), (3, 799), (64, 800), (16, 20000), (128, 128), (256, 512)]
    failures = 0
    for head_dim in (64, 128, 256):
        for causal in (False, True):
            module = flash_attention(head_dim, causal=causal, grouped=True)
            for heads_k in (6, 2, 1):
                for seq_q, seq_k in shapes:
                    q = rng.standard_normal((1, 6, seq_q, head_dim))
                    k, v = (rng.standard_normal((1, heads_k, seq_k, head_dim)) for _ in range(2))
                    start = time.time()
                    out = tessera.interpret(module, q, k, v)
                    g = 6 // heads_k
                    c = reference.check_attention(out, q, np.repeat(k, g, 1), np.repeat(v, g, 1),
                                                  ml_dtypes.bfloat16, causal=causal)
                    failures += not c.ok
                    print(f"d{head_dim} {'causal' if causal else 'full':>6} hk={heads_k} ({seq_q}, {seq_k}): {c} "
                          f"({time.time() - start:.1f} s)", flush=True)
    sys.exit(1 if failures else 0)


def splits_grid(args) -> None:
    """FA3's grid through varlen and the paged cache with num_splits 1, 3, "auto" and the LSE (module docstring)."""
    import tessera
    from tessera import reference

    import ml_dtypes

    bf16 = ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    shapes = [(1, 128), (1, 339), (3, 799), (64, 800), (16, 20000), (128, 128), (256, 512)]
    failures = 0
    worst_lse = 0.0

    def report(label, results, q, k, v, cq, ck, causal, seconds):
        nonlocal failures, worst_lse
        ratios, apart = [0.0, 0.0], 0.0
        for splits, (o, lse) in results.items():
            for b, found in enumerate(reference.check_packed_attention(o, lse, q, k, v, cq, ck, bf16, causal)):
                if found is None:
                    continue
                ratios = [max(r, c.max_error / c.tolerance) for r, c in zip(ratios, found)]
                worst_lse = max(worst_lse, found[1].max_error)
                if splits == 3 and 1 in results:
                    rows = slice(cq[b], cq[b + 1])
                    gap = np.abs(o[rows].astype(np.float64) - results[1][0][rows].astype(np.float64)).max()
                    apart = max(apart, gap / found[0].tolerance if rows.stop > rows.start else 0.0)
        bad = ratios[0] > 1 or ratios[1] > 1 or apart > 1
        failures += bad
        print(f"{label}: O err/tol {ratios[0]:.3f}, LSE err/tol {ratios[1]:.3f}, |split1 - split3|/tol {apart:.3f}"
              f" ({seconds:.1f} s){'  MISMATCH' if bad else ''}", flush=True)

    def runs(head_dim, call):
        results, notes = {}, []
        for splits in (1, 3, "auto"):
            try:
                results[splits] = call(splits)
            except ValueError as error:  # head_dim 256: no split kernel, refused by name
                notes.append(f"num_splits={splits} refused: {error}")
        return results, notes

    cu = lambda lengths: np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)  # noqa: E731
    for head_dim in (64, 128, 256):
        for causal in (False, True):
            for heads_k in (6, 2, 1):
                label = f"d{head_dim} {'causal' if causal else 'full':>6} hk={heads_k}"
                # varlen: the whole grid as one packed batch
                lengths_q, lengths_k = zip(*(shapes + [(0, 7), (1, 0), (5, 2)]))
                cq, ck = cu(lengths_q), cu(lengths_k)
                q = rng.standard_normal((cq[-1], 6, head_dim)).astype(bf16)
                k, v = (rng.standard_normal((ck[-1], heads_k, head_dim)).astype(bf16) for _ in range(2))
                start = time.time()
                results, notes = runs(head_dim, lambda splits: tessera.attention(
                    q, k, v, causal=causal, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=max(lengths_q),
                    max_seqlen_k=max(lengths_k), return_lse=True, num_splits=splits, level=args.level))
                report(f"varlen {label}", results, q, k, v, cq, ck, causal, time.time() - start)
                for note in notes:
                    print(f"    {note}")
                # paged: each shape as a batch of two caches
                for i, (seq_q, seq_k) in enumerate(shapes):
                    page_size = (16, 128, 256)[i % 3]
                    lengths = [seq_k, seq_k // 2]
                    need = [-(-n // page_size) for n in lengths]
                    pages = 3 * sum(need)
                    order = iter(rng.permutation(pages))
                    table = np.zeros((2, max(need)), np.int32)
                    for b, n in enumerate(need):
                        table[b, :n] = [next(order) for _ in range(n)]
                    k_cache, v_cache = (rng.standard_normal((pages, page_size, heads_k, head_dim)).astype(bf16)
                                        for _ in range(2))
                    qp = rng.standard_normal((2, seq_q, 6, head_dim)).astype(bf16)
                    start = time.time()

                    def paged(splits):
                        o, lse = tessera.attention_with_kvcache(
                            qp, k_cache, v_cache, cache_seqlens=np.array(lengths, np.int32), page_table=table,
                            causal=causal, num_splits=splits, return_lse=True, level=args.level)
                        return o.reshape(-1, 6, head_dim), lse.transpose(1, 0, 2).reshape(6, -1)

                    results, notes = runs(head_dim, paged)
                    rows = [(table[b, np.arange(n) // page_size] * page_size + np.arange(n) % page_size)
                            for b, n in enumerate(lengths)]
                    keys = [c.reshape(-1, heads_k, head_dim)[np.concatenate(rows)] for c in (k_cache, v_cache)]
                    report(f"paged{page_size} {label} ({seq_q}, {seq_k})", results, qp.reshape(-1, 6, head_dim), *keys,
                           cu([seq_q] * 2), cu(lengths), causal, time.time() - start)
                    for note in notes:
                        print(f"    {note}")
    print(f"worst LSE error {worst_lse:.2e} (bound {reference.LSE_TOLERANCE:g})")
    sys.exit(1 if failures else 0)


def ptxas_matrix(args) -> None:
    """The grouped, varlen and paged (pages of 16: the gather, and 256: TMA) kernels at head_dim 64/128/256, causal or not, the
    packed kernels also with the LSE and split-KV (3 parts; not at head_dim 256, which has no split kernel),
    assembled by every ptxas found: registers, spills, stack frame, warnings and diagnostics."""
    import tessera
    from tessera.kernels import flash_attention, flash_attention_paged, flash_attention_varlen
    from tessera.toolchain import compile_ptx, find_all_ptxas

    builders = {"gqa": lambda d, c: flash_attention(d, causal=c, grouped=True),
                "varlen": lambda d, c: flash_attention_varlen(d, causal=c),
                "varlen-lse": lambda d, c: flash_attention_varlen(d, causal=c, return_lse=True),
                "varlen-split3": lambda d, c: flash_attention_varlen(d, causal=c, num_splits=3) if d < 256 else None,
                "paged16": lambda d, c: flash_attention_paged(d, causal=c, page_size=16),
                "paged256": lambda d, c: flash_attention_paged(d, causal=c, page_size=256),
                "paged16-lse": lambda d, c: flash_attention_paged(d, causal=c, page_size=16, return_lse=True),
                "paged16-split3": lambda d, c: flash_attention_paged(d, causal=c, page_size=16, num_splits=3)
                if d < 256 else None,  # the gather's split kernel
                "paged256-split3": lambda d, c: flash_attention_paged(d, causal=c, page_size=256, num_splits=3)
                if d < 256 else None}  # head_dim 256 has no split kernel
    unclean = 0
    for head_dim in (64, 128, 256):
        for causal in (False, True):
            for name, build in builders.items():
                module = build(head_dim, causal)
                if module is None:
                    continue
                ptx = tessera.compile(module)
                for ptxas in find_all_ptxas():
                    result = compile_ptx(ptx, ptxas=ptxas.path)
                    e = result.entry()
                    bad = e.spill_store_bytes + e.spill_load_bytes + e.stack_frame_bytes + len(result.warnings) + \
                        len(result.log.diagnostics)
                    unclean += bad > 0
                    print(f"{name:>8} d{head_dim} {'causal' if causal else 'full':>6} {result.ptxas}: {e.registers} "
                          f"registers, spills {e.spill_store_bytes}/{e.spill_load_bytes} B, stack "
                          f"{e.stack_frame_bytes} B, {len(result.warnings)} warnings", flush=True)
    sys.exit(1 if unclean else 0)


# endregion
# region GPU


def gpu(args) -> None:
    from harness import L2_FLUSH_BYTES, require_gpu, time_ms

    torch = require_gpu()
    import tessera
    from tessera import reference_attention

    rng = np.random.default_rng(0)
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    systems = {"tessera": None}
    try:
        from flash_attn import flash_attn_with_kvcache  # noqa: F401

        systems["flash-attn"] = None
    except ImportError:
        pass
    try:
        import flashinfer  # noqa: F401

        systems["flashinfer"] = None
    except ImportError:
        pass
    systems["sdpa"] = None
    print(f"decoding, heads {args.heads}/{args.heads_k}, head_dim {args.head_dim}, page {args.page_size}: "
          "tokens/s and GB/s (K/V + q + o bytes / time)")
    print(f"{'batch':>5} {'cache':>7} " + "".join(f"{name:>24}" for name in systems))
    for batch in args.batch:
        for cache in args.cache:
            q, k, v, table, lengths = paged_inputs(rng, batch, cache, args.heads, args.heads_k, args.head_dim,
                                                   args.page_size)
            tq, tk, tv = (torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16).cuda() for x in (q, k, v))
            tt, tl = torch.from_numpy(table).cuda(), torch.from_numpy(lengths).cuda()
            group = args.heads // args.heads_k
            gathered_k = tk[tt.long()].reshape(batch, -1, args.heads_k, args.head_dim)[:, :cache]
            gathered_v = tv[tt.long()].reshape(batch, -1, args.heads_k, args.head_dim)[:, :cache]
            expected = reference_attention.attention(
                q.astype(np.float32).transpose(0, 2, 1, 3),
                np.repeat(gathered_k.float().cpu().numpy().transpose(0, 2, 1, 3), group, 1),
                np.repeat(gathered_v.float().cpu().numpy().transpose(0, 2, 1, 3), group, 1))
            runners = {"tessera": lambda: tessera.attention_with_kvcache(tq, tk, tv, cache_seqlens=tl,
                                                                         page_table=tt, causal=True)}
            if "flash-attn" in systems:
                from flash_attn import flash_attn_with_kvcache

                runners["flash-attn"] = lambda: flash_attn_with_kvcache(tq, tk, tv, cache_seqlens=tl,
                                                                        block_table=tt, causal=True)
            if "flashinfer" in systems:
                runners["flashinfer"] = flashinfer_runner(torch, tq, tk, tv, tt, tl, args)
            qh = tq.transpose(1, 2)
            kh = gathered_k.transpose(1, 2).repeat_interleave(group, 1)
            vh = gathered_v.transpose(1, 2).repeat_interleave(group, 1)
            runners["sdpa"] = lambda: torch.nn.functional.scaled_dot_product_attention(qh, kh, vh).transpose(1, 2)
            nbytes = 2 * batch * cache * args.heads_k * args.head_dim * 2 + 2 * q.nbytes
            cells = []
            for name in systems:
                try:
                    out = runners[name]()
                    torch.cuda.synchronize()
                    got = out.float().cpu().numpy().reshape(batch, 1, args.heads, args.head_dim).transpose(0, 2, 1, 3)
                    error = float(np.max(np.abs(got - expected)))
                    if error > 2e-2:
                        cells.append(f"WRONG ({error:.1e})")
                        continue
                    ms = time_ms(torch, runners[name], args.warmup, args.repeats, flush)
                    cells.append(f"{batch / (ms * 1e-3):>10.0f} t/s {nbytes / (ms * 1e-3) / 1e9:>7.0f} GB/s")
                except Exception as error:  # noqa: BLE001 - a failing system is reported, not fatal
                    cells.append(f"error: {type(error).__name__}")
            print(f"{batch:>5} {cache:>7} " + "".join(f"{c:>24}" for c in cells), flush=True)


def flashinfer_runner(torch, tq, tk, tv, tt, tl, args):
    import flashinfer

    batch = tq.shape[0]
    pages_per = (tl + args.page_size - 1) // args.page_size
    indptr = torch.zeros(batch + 1, dtype=torch.int32, device="cuda")
    indptr[1:] = torch.cumsum(pages_per, 0)
    indices = torch.cat([tt[b, : int(pages_per[b])] for b in range(batch)]).int()
    last = (tl - 1) % args.page_size + 1
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    wrapper.plan(indptr, indices, last.int(), args.heads, args.heads_k, args.head_dim, args.page_size,
                 data_type=torch.bfloat16)
    return lambda: wrapper.run(tq[:, 0], (tk, tv))


# endregion


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", action="store_true", help="count simulated global-memory bytes (CPU)")
    parser.add_argument("--grid", action="store_true", help="FA3's grid at Tile level (CPU)")
    parser.add_argument("--ptxas", action="store_true", help="the serving kernels under every ptxas (CPU)")
    parser.add_argument("--splits", action="store_true",
                        help="FA3's grid through varlen and the paged cache, num_splits 1/3/auto, LSE (CPU)")
    parser.add_argument("--level", choices=("target", "ptx", "tile"), default="target")
    parser.add_argument("--batch", type=int, nargs="+")
    parser.add_argument("--cache", type=int, nargs="+")
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--heads-k", type=int, default=None)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--page-size", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    if args.grid:
        grid(args)
    if args.ptxas:
        ptxas_matrix(args)
    if args.splits:
        args.level = args.level if "--level" in sys.argv else "tile"
        splits_grid(args)
    if args.simulate:
        args.batch = args.batch or [1, 4]
        args.cache = args.cache or [1000]
        args.heads = args.heads or 8
        args.heads_k = args.heads_k or 2
        args.page_size = args.page_size or 128
        simulate(args)
        return
    args.batch = args.batch or [1, 4, 16, 64]
    args.cache = args.cache or [1024, 8192, 32768, 131072]
    args.heads = args.heads or 32
    args.heads_k = args.heads_k or 8
    args.page_size = args.page_size or 256
    gpu(args)


if __name__ == "__main__":
    main()
