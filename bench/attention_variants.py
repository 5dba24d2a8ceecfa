"""Block sparsity and main-loop cost of FlexAttention-style mask_mod kernels (issue 29).

Rows:
- the fraction of (query block, key block) pairs each mask leaves to the kernel (`tessera.variants.block_mask`) at
  seq 16384 with 128 x 128 blocks, and that of a sliding window of 1024 relative to causal's;
- SASS instructions of a steady trip of the main loops (loops holding HGMMA) of the dense kernel and of the block-sparse kernel
  (its full-block loop, then its partial-block loop) at head_dim 64 and 128, and per key (instructions / BN):
  the full-block loop costs what the dense loop costs;
- the partial-block cost per mod: SASS instructions per key of the partial loop minus the full loop's, for
  each mask_mod and score_mod (head_dim 64, BN 64); a score_mod runs in both loops, so its row is the full
  loop's extra over the dense loop (needs ptxas and nvdisasm); the masks written with integer // and %
  (block-diagonal, chunked-local, dilated) among them;
- the backward with modifiers (`--backward` alone): the pairs its work lists visit at 16k; per mod at head_dim
  64 and 128 the blocks `tessera.attention_backward` takes (`runtime.flex.warp_specialized_first`: 128 x 128 at
  head_dim 64, the keys-on-rows 64 x 128 at 128, where the modifier fits them warp-specialized), the consumer
  warpgroups' registers (the allocator's count), ptxas spills, the full-block loop's SASS per key against the
  dense warp-specialized kernel's at the same blocks, and the partial-block cost per key of a mask_mod (the
  score_mod's over the dense loop); the newer rows: a soft-cap by a power of two (its division a multiply),
  ALiBi with its slope computed in the hook (`2 ** (-8 * (h + 1) / H)`), T5's buckets, soft-cap + ALiBi,
  symmetric ALiBi under a per-head window array, and a score rounded to eighths (`np.round`).

- a 64-token call at Tile level repeated (`--repeated` alone): the call with modifiers against one without,
  with nothing kept between calls and with the traces and kernels kept (`trace.trace_mod`, `runtime.flex`), and
  the share of tracing and of building the kernel in a call with nothing kept.
- a 64-token call at levels "target" and "ptx" repeated (`--repeated-levels` alone): for a dense and a causal call
  without modifiers and with a score_mod and a causal mask_mod, the first call's CPU seconds, a repeated call's
  with its lowering kept (`tessera.lowering.kept`) and one lowered afresh (`unkept_lowering()`, as every call
  was before), and where the one lowered afresh goes: building the kernel, lowering it
  (`tessera.passes.apply_pipeline`), printing and parsing its PTX, the rest (checks, register allocation, the
  interpreter's run); then `tessera.attention_backward` dense and with the score_mod the same way.

Run: .venv/bin/python bench/attention_variants.py [--backward | --repeated | --repeated-levels]
"""

from __future__ import annotations

import numpy as np

import tessera
from tessera.sass import disassemble, loop_trip, sass_loops, trip_loops
from tessera.variants.block_mask import create_block_mask
from tessera.kernels import flash_attention

SEQ = 16384


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < 1024)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < 2048) | (q_idx >= kv_idx)


DOC = np.repeat(np.arange(8), 2048)
SLOPES = np.array([0.5])
TABLE = np.linspace(-1, 1, 63).reshape(1, 63)


def documents(b, h, q_idx, kv_idx):
    return DOC[q_idx] == DOC[kv_idx]


def softcap(score, b, h, q_idx, kv_idx):
    return 30.0 * np.tanh(score / 30.0)


def alibi(score, b, h, q_idx, kv_idx):
    return score + SLOPES[h] * (kv_idx - q_idx)


def relative_table(score, b, h, q_idx, kv_idx):
    return score + TABLE[h, np.clip(q_idx - kv_idx + 31, 0, 62)]


def block_diagonal(b, h, q_idx, kv_idx):
    return q_idx // 128 == kv_idx // 128


def chunked_local(b, h, q_idx, kv_idx):
    return (q_idx // 1000 == kv_idx // 1000) & (kv_idx <= q_idx)


def dilated(b, h, q_idx, kv_idx):
    return ((q_idx - kv_idx) % 4 == 0) & (q_idx >= kv_idx)


def softcap32(score, b, h, q_idx, kv_idx):  # a power-of-two cap: the division is a multiply
    return 32.0 * np.tanh(score / 32.0)


def softcap_alibi(score, b, h, q_idx, kv_idx):
    return 30.0 * np.tanh(score / 30.0) + SLOPES[h] * (kv_idx - q_idx)


def rounded(score, b, h, q_idx, kv_idx):  # the score rounded to eighths (tile.rint: cvt.rni.f32.f32)
    return np.round(score * 8) / 8


HEADS = 1
WIDTHS = np.array([1024])
BUCKET_BIAS = np.linspace(-1, 1, 32).reshape(1, 32)


def alibi_formula(score, b, h, q_idx, kv_idx):  # symmetric ALiBi, its slope computed in the hook
    return score - 2 ** (-8 * (h + 1) / HEADS) * abs(q_idx - kv_idx)


def head_window(b, h, q_idx, kv_idx):  # a window read from a per-head array
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WIDTHS[h])


def t5_bias(score, b, h, q_idx, kv_idx):  # T5's log-spaced relative-position buckets
    relative = kv_idx - q_idx
    n = np.abs(relative)
    with np.errstate(divide="ignore", invalid="ignore"):
        large = 8 + (np.log(n / 8) / np.log(128 / 8) * 8).astype(np.int32)
    bucket = (relative > 0).astype(np.int32) * 16 + np.where(n < 8, n, np.minimum(large, 15))
    return score + BUCKET_BIAS[h, bucket]


def main_loop_trips(module) -> list[int]:
    """SASS instructions of a steady trip of each main loop (`tessera.sass.loop_trip`: a path through the loop, so
    the dense forward's loop, which the PTX printer folds and re-enters at its P.V, counts a whole trip), the
    smallest loop first: a block-sparse kernel's full-block loop, then its partial-block loop."""
    text = disassemble(tessera.compile(module, target="cubin").cubin)
    return [len(loop_trip(text, loop=loop)) for loop in trip_loops(text)]


def main() -> None:
    visited = {}
    for mask in (causal, sliding_window, prefix_lm, block_diagonal, chunked_local, dilated):
        bm = create_block_mask(mask, 1, 1, SEQ, SEQ, 128, 128)
        visited[mask.__name__] = bm.visited_fraction()
        kinds = np.bincount(bm.kinds.ravel(), minlength=3)
        print(f"{mask.__name__:15s} seq {SEQ}: visited {bm.visited_fraction():.4f} of the blocks "
              f"(empty {kinds[0]}, partial {kinds[1]}, full {kinds[2]})")
    print(f"sliding window 1024 / causal work: {visited['sliding_window'] / visited['causal']:.4f}")
    for d, bn in ((64, 64), (64, 128), (128, 64), (128, 128)):
        dense = main_loop_trips(flash_attention(d, block_n=bn))
        try:
            sparse = main_loop_trips(flash_attention(d, block_n=bn, mask_mod=sliding_window, block_sparse=True))
        except Exception as error:  # the refusal (e.g. two loops' K/V rings exceed shared memory), by name
            sparse = f"refused: {str(error).splitlines()[0][:160]}"
        print(f"head_dim {d} BN {bn}: SASS per main-loop trip: dense {dense}, block-sparse (full, partial) {sparse}")
        if not isinstance(sparse, str):
            print(f"    per key: dense {min(dense) / bn:.2f}, full blocks {sparse[0] / bn:.2f}, "
                  f"partial blocks {sparse[1] / bn:.2f}")
    d, bn = 64, 64
    dense = min(main_loop_trips(flash_attention(d, block_n=bn)))
    for mask in (causal, sliding_window, prefix_lm, documents, chunked_local, dilated):
        full, partial = main_loop_trips(flash_attention(d, block_n=bn, mask_mod=mask, block_sparse=True))
        print(f"mask_mod {mask.__name__:15s}: partial-block cost {(partial - full) / bn:.2f} SASS/key "
              f"(full {full / bn:.2f}, dense {dense / bn:.2f})")
    score_mods(d, bn, dense)
    backward()


def score_mods(d: int, bn: int, dense: int, mods=None) -> None:
    for mod in mods or (softcap, softcap32, alibi, alibi_formula, relative_table, t5_bias, rounded):
        loops = main_loop_trips(flash_attention(d, block_n=bn, score_mod=mod))
        print(f"score_mod {mod.__name__:14s}: {(min(loops) - dense) / bn:.2f} SASS/key over the dense loop")


def window_deterministic(b, h, q_idx, kv_idx):
    return sliding_window(b, h, q_idx, kv_idx)


def consumer_registers(module) -> int | str:
    """The consumer warpgroups' register peak of the main kernel under the default pipeline's first rung
    (warp-specialized, two stages; the allocator's count, per thread), or the refusal."""
    from xdsl.dialects import scf
    from xdsl.utils.exceptions import DiagnosticException

    from tessera.dialects import sm90
    from tessera.ir import make_context
    from tessera.passes import SPECIALIZED_PIPELINE, parse_pipeline
    from tessera.regalloc import region_peaks

    module = module.clone()
    try:
        parse_pipeline(SPECIALIZED_PIPELINE).apply(make_context(), module)
    except DiagnosticException as error:
        return str(getattr(error, "summary", error))[:70]
    for op in module.walk():
        if isinstance(op, scf.IfOp) and isinstance(op.true_region.block.first_op, sm90.SetMaxNRegOp):
            return region_peaks(_kernel_of(op), op)[1].registers
    return "not warp-specialized"


def _kernel_of(op):
    while op is not None and op.name != "func.func":
        op = op.parent_op()
    return op


def backward(variants=None, head_dims=(64, 128)) -> None:
    """The warp-specialized backward with modifiers at the blocks `tessera.attention_backward` takes
    (`runtime.flex.warp_specialized_first`): the blocks its work lists skip; per mod the blocks taken, the
    consumer warpgroups' registers, the full-block loop's SASS per key against the dense warp-specialized
    kernel's at the same blocks, and the partial-block (mask_mod) or whole-loop (score_mod) cost per key;
    ptxas registers and spills at head_dim 128."""
    from tessera import passes
    from tessera.runtime import flex

    spilled = {}

    def loops(module) -> list[int]:
        result = tessera.compile(module, target="cubin", pipeline=passes.DEFAULT_PIPELINE)
        spilled[id(module)] = any(entry.spills for entry in result.entries.values())
        text = disassemble(result.cubin)
        return sorted(len(loop.instructions) for loop in sass_loops(text) if loop.opcode_counts["HGMMA"])

    visited = {}
    for mask in (causal, sliding_window, documents):
        bm = create_block_mask(mask, 1, 1, SEQ, SEQ, 64, 64)
        full, partial = bm.backward_inputs(1)[0].sum(axis=(0, 1, 2))
        visited[mask.__name__] = (full + partial) / bm.kinds.size
        print(f"backward {mask.__name__:15s} seq {SEQ}, 64 x 64: visits {visited[mask.__name__]:.4f} of the "
              f"(key block, query block) pairs (full {full}, partial {partial})")
    print(f"backward sliding window 1024 / causal work: {visited['sliding_window'] / visited['causal']:.4f}")
    dense = {}
    if variants is None:  # every row; a subset: backward([(alibi, documents)], head_dims=(64,))
        variants = [(None, m) for m in (causal, sliding_window, window_deterministic, prefix_lm, documents,
                                        chunked_local, dilated)] + [(m, None) for m in (softcap, alibi, relative_table)]
        variants += [(softcap, sliding_window), (alibi, documents), (softcap32, None), (alibi_formula, None),
                     (t5_bias, None), (softcap_alibi, None), (alibi_formula, head_window), (rounded, None)]
    for d in head_dims:
        for score_mod, mask_mod in variants:
            names = "+".join(f.__name__ for f in (score_mod, mask_mod) if f is not None)
            options = dict(score_mod=score_mod, mask_mod=mask_mod, causal=False, scale=None, level="ptx", head_dim=d,
                           dtype="bf16", deterministic=mask_mod is window_deterministic)
            kernels, _, refused, taken = flex.warp_specialized_first(None, *flex.backward_kernels(None, **options),
                                                                    **options)
            c = kernels.config.attention
            blocks = (d, c.block_m, c.block_n, kernels.head_split)
            if blocks not in dense:
                from tessera.kernels import attention_backward
                dense_main = attention_backward(d, block_m=c.block_m, block_n=c.block_n).main
                dense[blocks] = loops(dense_main)[0] if kernels.head_split == 1 and not options["deterministic"] else None
            registers = consumer_registers(kernels.main)
            looped = loops(kernels.main)
            spills = spilled[id(kernels.main)]
            keys = c.block_n
            row = (f"backward d{d} {names:22s} {c.block_m} x {c.block_n}"
                   f"{' head_split ' + str(kernels.head_split) if kernels.head_split > 1 else ''} ({taken}): "
                   f"consumers {registers} registers, spills {spills}")
            base = dense[blocks]
            if base is not None:
                row += f"; full loop {looped[0] / keys:.2f} SASS/key (dense {base / keys:.2f})"
                if mask_mod is not None and len(looped) > 1:
                    row += f", partial-block cost {(looped[1] - looped[0]) / keys:.2f}"
                elif mask_mod is None:
                    row += f", score_mod cost {(looped[0] - base) / keys:.2f}"
            print(row, flush=True)


def repeated_calls(calls: int = 8) -> None:
    """A 64-token `tessera.attention` call at Tile level repeated (1 x 2 heads x 64 x 64, bf16): causal without
    modifiers, then relative_table + causal as score_mod / mask_mod with nothing kept (no fingerprints: each call
    traces its modifiers where it needs them and builds the kernel, as before they were kept) and kept
    (`trace.trace_mod`, `runtime.flex._kept`), and how much of the call with nothing kept is tracing and building
    the kernel (time inside `trace._trace` and `flash_attention`, tracing not counted in building). Ratios from
    this one run."""
    import time

    import ml_dtypes

    import tessera.kernels
    from tessera.runtime import flex
    from tessera.variants import trace

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 64, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    table = np.linspace(-1, 1, 63).reshape(1, 63).repeat(2, axis=0)

    def relative(score, b, h, q_idx, kv_idx):
        return score + table[h, np.clip(q_idx - kv_idx + 31, 0, 62)]

    spent = {"trace": 0.0, "build": 0.0}

    def timed(name, fn):
        def call(*args, **kwargs):
            start, traced = time.perf_counter(), spent["trace"]
            try:
                return fn(*args, **kwargs)
            finally:  # building includes its own traces: counted once, as tracing
                spent[name] += time.perf_counter() - start - (spent["trace"] - traced if name == "build" else 0.0)
        return call

    def per_call(run) -> float:
        run()
        start = time.perf_counter()
        for _ in range(calls):
            run()
        return (time.perf_counter() - start) / calls

    real = trace._trace, tessera.kernels.flash_attention, trace.fingerprint, flex.fingerprint
    dense = per_call(lambda: tessera.attention(q, k, v, causal=True, level="tile"))
    mods = lambda: tessera.attention(q, k, v, level="tile", score_mod=relative, mask_mod=causal)  # noqa: E731
    try:  # nothing kept: no fingerprint, as before traces and kernels were kept
        trace._trace, tessera.kernels.flash_attention = timed("trace", real[0]), timed("build", real[1])
        trace.fingerprint = flex.fingerprint = lambda fn: None
        dropped = per_call(mods)
        tracing, building = spent["trace"] / (calls + 1), spent["build"] / (calls + 1)
    finally:
        trace._trace, tessera.kernels.flash_attention, trace.fingerprint, flex.fingerprint = real
    kept = per_call(mods)
    print(f"64-token call at Tile level, {calls} calls: with mods, nothing kept / dense {dropped / dense:.2f}, "
          f"kept / dense {kept / dense:.2f}, kept / nothing kept {kept / dropped:.2f}")
    print(f"    of a call with mods and nothing kept: tracing {tracing / dropped:.0%}, building the kernel "
          f"{building / dropped:.0%}, the rest (checks, block mask, verifying and interpreting) "
          f"{1 - (tracing + building) / dropped:.0%}")


def repeated_levels() -> None:
    """`--repeated-levels` (module docstring): CPU seconds of this process (time.process_time), one run."""
    import time
    from contextlib import nullcontext

    import ml_dtypes

    import tessera.interpreters.ptx.parse as ptx_parse
    import tessera.kernels
    import tessera.passes
    import tessera.ptx.module as ptx_module
    from tessera.lowering.kept import unkept_lowering

    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((1, 2, 64, 64)).astype(ml_dtypes.bfloat16) for _ in range(4))
    o, lse = tessera.attention(q, k, v, return_lse=True, level="tile")  # the backward's inputs (no mods: any O)

    def causal_mask(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    parts = {"build": (tessera.kernels, "flash_attention"), "lower": (tessera.passes, "apply_pipeline"),
             "print PTX": (ptx_module, "print_ptx"), "parse PTX": (ptx_parse, "parse_ptx")}
    spent = dict.fromkeys(parts, 0.0)

    def timed(name, fn):
        def call(*args, **kwargs):
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.process_time() - start
        return call

    real = {name: getattr(owner, attr) for name, (owner, attr) in parts.items()}
    calls = (("dense", {}), ("causal", dict(causal=True)), ("score_mod", dict(score_mod=softcap)),
             ("causal mask_mod", dict(mask_mod=causal_mask)))
    try:
        for name, (owner, attr) in parts.items():
            setattr(owner, attr, timed(name, real[name]))
        for level in ("target", "ptx"):
            rows = [(label, lambda kwargs=kwargs: tessera.attention(q, k, v, level=level, **kwargs))
                    for label, kwargs in calls]
            rows += [(f"backward {label}", lambda kwargs=kwargs: tessera.attention_backward(
                q, k, v, o, lse, do, level=level, **kwargs)) for label, kwargs in calls[::2]]
            for label, call in rows:
                times = []
                for keep in (True, True, False):
                    for part in spent:
                        spent[part] = 0.0
                    start = time.process_time()
                    with nullcontext() if keep else unkept_lowering():
                        call()
                    times.append(time.process_time() - start)
                first, again, afresh = times
                shares = ", ".join(f"{part} {spent[part]:.2f}" for part in spent)
                print(f"{level:6} {label:25} first {first:5.2f} s; repeated {again:5.2f} s kept, {afresh:5.2f} s lowered "
                      f"afresh ({afresh / again:.1f}x): {shares}, rest {afresh - sum(spent.values()):.2f}", flush=True)
    finally:
        for name, (owner, attr) in parts.items():
            setattr(owner, attr, real[name])


if __name__ == "__main__":
    import sys

    if "--backward" in sys.argv:
        backward()
    elif "--repeated-levels" in sys.argv:
        repeated_levels()
    elif "--repeated" in sys.argv:
        repeated_calls()
    else:
        main()
