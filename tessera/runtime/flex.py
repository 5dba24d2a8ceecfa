"""`tessera.attention(..., score_mod=, mask_mod=)` and `tessera.attention_backward(..., score_mod=, mask_mod=)`:
FlexAttention-style modifiers (`tessera.variants.trace`), on the GPU or in the interpreters.

The forward builds `flash_attention(score_mod=, mask_mod=, block_sparse=True)` (block-sparse whenever there is a
mask_mod, the block lists from `tessera.variants.block_mask.create_block_mask` on the host) and runs it at `level`; the
backward runs `attention_backward(score_mod=, mask_mod=, block_sparse=True)`'s three kernels (with the
work lists, `BlockMask.backward_inputs`, whenever there is a mask_mod), warp-specialized where the registers
allow (`BACKWARD_PIPELINE`; `WARP_SPECIALIZED_FIRST`: at head_dim 64 the dense kernel's 128 x 128 blocks, at
head_dim 128 its keys-on-rows 64 x 128 blocks, then one thread block per key block, where that lowers
warp-specialized, else the builder's default with a warning). `level=None` compiles the very modules the interpreters run (`compile_module`:
the kernel cache keys them by their text; the captured arrays and lists are inputs, so new values need no new
compile) and launches them like the dense kernels (`tessera.launch`; the backward's three as the dense backward's,
`runtime.launch.launch_on_tensors` zero-filling only what is added into: `_backward_on_gpu`); the captured arrays
and block lists go to the device beside q, k and v (tensors on q's device for PyTorch inputs): the block lists once
per kept kernel, sizes and device for CUDA tensors, the captured arrays' current values on every call
(`device_inputs`).

Kernels and block masks are kept by the modifiers' traces' keys (`tessera.variants.trace.modifier_key`: their
structure and the digests of just the arrays whose contents the trace used), so that a training step that changes
a learned table in place (read at traced indices) neither traces, builds, compiles nor proves its reads again: the
launch passes the table's new values.

Before anything is built, every read of a captured array is proved inside its array for the launch's batch, heads,
seq_q and seq_k (`tessera.variants.index_ranges.check_index_ranges`): a read that leaves it is refused by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable
from contextlib import nullcontext

import numpy as np

from tessera.lowering.kept import mark_built
from tessera.runtime.attention_base import with_lse_gradient
from tessera.variants.trace import modifier_key, trace_mod, tracer_settings
from tessera.variants.block_mask import create_block_mask
from tessera.variants.index_ranges import check_index_ranges


SPARSE_BACKWARD_HEAD_DIMS = (64, 128)
"""Head dims whose block-sparse backward (`attention_backward(block_sparse=True)`) lowers below Tile IR: both,
each main-kernel thread block walking its work list (`BlockMask.backward_inputs`)."""


BACKWARD_PIPELINE = "DEFAULT_PIPELINE"
"""The `tessera.passes` pipeline of the backward with modifiers below Tile IR and on the GPU: the default one,
warp-specialized with two stages (a producer warpgroup walks the work list, issuing the Q/dO refills; one
consumer warpgroup at 64 x 64 blocks, two at 128 x 128 and 64 x 128, `WARP_SPECIALIZED_FIRST`), falling back down its ladder with a warning naming the rung where the
registers do not fit (`tessera.lowering.fallback`)."""


_FITS: dict[Hashable, str | None] = {}


def warp_specialized_refusal(module) -> str | None:
    """None when `module`'s kernels lower with the default pipeline's first rung (warp-specialized, two stages; in
    its form with the wgmma groups in the builder's order where the default order's registers do not fit:
    `tessera.lowering.fallback.first_rung_refusal`) without falling back; else the refusal in a few words (a
    register budget's, or any other refusal of that configuration, such as its shared memory). Remembered by the
    module's text, and by the key the module was kept under (`_kept`, `tessera.lowering.kept.kept_key`), so that a
    repeated call with modifiers does not print its kernels again (the main kernel's text: about 40 ms at head_dim
    64); a kept module built again for new contents of an array whose contents its trace used (a table read at a
    constant index: the kept key holds those contents, the text may not) is printed, not lowered again (0.2 s at
    head_dim 64, 128 x 128 blocks). A learned table read at traced indices keeps the module itself (`_kept`)."""
    from tessera.ir import make_context
    from tessera.lowering.fallback import first_rung_refusal
    from tessera.lowering.kept import kept_key
    from tessera.passes import fallback_ladder, parse_pipeline, without_cyclic_gc

    kept = kept_key(module)
    if kept is not None and ("kept", kept) in _FITS:
        return _FITS[("kept", kept)]
    text = str(module)
    if text not in _FITS:
        if len(_FITS) >= 64:  # a bounded memory: the texts hold whole kernels
            _FITS.clear()
        with without_cyclic_gc():
            error = first_rung_refusal(module, fallback_ladder(),
                                       lambda spec, m: parse_pipeline(spec).apply(make_context(), m))
        _FITS[text] = None if error is None else (getattr(error, "summary", None) or str(error).split(";")[0]).strip()
    if kept is not None:
        _FITS[("kept", kept)] = _FITS[text]
    return _FITS[text]


def block_mask_mod(where: str, block_mask, mask_mod, seq_q: int, seq_k: int):
    """The mask_mod of a call given FlexAttention's `block_mask=` (a `BlockMask` of
    `tessera.variants.create_block_mask`, or of torch's `create_block_mask`: both remember their mask_mod and
    lengths) and perhaps `mask_mod=`: the block mask's, whose blocks are made again at the kernel's (kept, as for
    a mask_mod); a ValueError naming what is wrong where the block mask has no mask_mod, another than `mask_mod`,
    or lengths other than the call's (its blocks would be another mask's: FlexAttention refuses those too)."""
    fn = getattr(block_mask, "mask_mod", None)
    if fn is None or not callable(fn):
        raise ValueError(f"{where}: block_mask must be a BlockMask made by create_block_mask (it names its "
                         f"mask_mod); got {type(block_mask).__name__} without one")
    if mask_mod is not None and mask_mod is not fn:
        raise ValueError(f"{where}: block_mask was made from another mask_mod than mask_mod=; give one of them")
    lengths = getattr(block_mask, "seq_lengths", None) or (getattr(block_mask, "seq_q", None),
                                                             getattr(block_mask, "seq_k", None))
    if tuple(lengths) != (seq_q, seq_k):
        raise ValueError(f"{where}: block_mask was made for seq_q {lengths[0]}, seq_k {lengths[1]}; the call has "
                         f"seq_q {seq_q}, seq_k {seq_k}: make it with create_block_mask for these lengths")
    return fn


def _captured(score_mod, mask_mod) -> list[np.ndarray]:
    """The arrays the modifiers read, in the kernels' argument order (each once), with their current values
    (`Trace.kernel_inputs`: a learned table changed in place since the trace, its new values)."""
    arrays: dict[str, np.ndarray] = {}
    for fn, kind in ((score_mod, "score_mod"), (mask_mod, "mask_mod")):
        if fn is not None:
            trace = trace_mod(fn, kind)
            for captured, values in zip(trace.arrays, trace.kernel_inputs()):  # the kernel input's type
                arrays.setdefault(captured.name, values)
    return list(arrays.values())


def _captured_beside(q, score_mod, mask_mod) -> list:
    """`as_inputs_of(q, _captured(score_mod, mask_mod))`, except that a learned table (`Trace.learned`) that is
    already a float32, contiguous tensor on q's CUDA device is passed as it is (the kernel only reads it, through
    its address; a tensor that requires grad too, as q may): no copy to the host and
    back on every call (a [batch, heads, seq_q, seq_k] bias is gigabytes at 16k tokens), and the kernel reads
    its current values."""
    found: dict[str, object] = {}
    for fn, kind in ((score_mod, "score_mod"), (mask_mod, "mask_mod")):
        if fn is not None:
            trace = trace_mod(fn, kind)
            for captured in trace.arrays:
                if captured.name not in found:
                    source = trace.learned(captured)
                    found[captured.name] = source if _on_device_as_is(source, q) else \
                        as_inputs_of(q, [trace.kernel_input(captured)])[0]
    return list(found.values())


def _on_device_as_is(source, q) -> bool:
    """Whether `source` is a tensor the kernel reads as it is beside q: float32, contiguous, on q's device."""
    from tessera.runtime.launch import is_torch_tensor

    return is_torch_tensor(source) and source.device == q.device and source.is_contiguous() and \
        str(source.dtype) == "torch.float32"


def as_inputs_of(q, arrays: list[np.ndarray]) -> list:
    """Captured arrays and block lists as inputs beside q: tensors on q's device when q is a PyTorch tensor."""
    from tessera.runtime.launch import is_torch_tensor

    from tessera.runtime.launch import _torch

    if not is_torch_tensor(q):
        return arrays
    import torch

    hosts = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    if not q.is_cuda:
        return hosts
    # through the runtime's torch (`launch._torch`), as the outputs are allocated: bench/fake_cuda.py's on the CPU
    return [_torch().empty(tuple(h.shape), dtype=h.dtype, device=q.device).copy_(h) for h in hosts]


_ON_DEVICE: dict[tuple, tuple[object, list]] = {}
"""The block lists of kept kernels on CUDA devices (`device_inputs`), by (the kernel module's id, the sizes, the
device), beside the module (which the entry holds: its id names no other): at most 64, all dropped when full."""


def device_inputs(module, q, sizes: tuple, score_mod, mask_mod, lists: Callable[[], list[np.ndarray]]) -> list:
    """The inputs `module` takes after its tensors: the modifiers' captured arrays with their current values
    (`_captured_beside`: on every call, as a learned table changes between calls without the kernel changing),
    then `as_inputs_of(q, lists())`, the block lists, which on a CUDA device are kept where `module` is kept
    (`_kept`: by the modifiers' keys, which hold the contents of every array of a mask_mod), by `sizes` (what the
    lists depend on beside the module) and q's device: a repeated call on the GPU neither makes the lists nor
    copies them to the device (a synchronous copy from pageable memory) again. Made afresh for a module not kept
    or q elsewhere. The tensors kept are shared and only read (kernel inputs)."""
    from tessera.lowering.kept import kept_key
    from tessera.runtime.launch import is_torch_tensor

    captured = _captured_beside(q, score_mod, mask_mod)
    if kept_key(module) is None or not (is_torch_tensor(q) and q.is_cuda):
        return captured + as_inputs_of(q, lists())
    key = (id(module), sizes, q.device)
    found = _ON_DEVICE.get(key)
    if found is None or found[0] is not module:
        if len(_ON_DEVICE) >= 64:
            _ON_DEVICE.clear()
        found = _ON_DEVICE[key] = (module, as_inputs_of(q, lists()))
    return captured + found[1]


def forget_device_inputs() -> None:
    """Drop every kept device input (`device_inputs`)."""
    _ON_DEVICE.clear()


def _numpy(x) -> np.ndarray:
    from tessera.runtime.launch import is_torch_tensor, torch_to_numpy

    return torch_to_numpy(x.detach().cpu()) if is_torch_tensor(x) else np.asarray(x)


_BUILT: dict[Hashable, object] = {}
"""Kernels built from modifiers, kept by the modifiers' keys and the builder's options (`_kept`): at most 64, all
dropped when full."""


def _kept(build: Callable, builder: str, score_mod, mask_mod, **options):
    """`build()`, kept in `_BUILT` by `builder`, `options`, the tracer's settings and the
    `tessera.variants.trace.modifier_key` of each modifier (its code and the values it reads, arrays by their
    identity, and by their contents where the trace used them: a learned table read at traced indices changed
    in place keeps its kernels), so that a repeated call neither traces nor builds; built anew where a modifier's
    key cannot be told. What is kept is shared: not to be changed. The Tile IR modules built (the kernel, or a
    backward's three) are marked kept (`tessera.lowering.kept.mark_kept`): the interpreters lower each once."""
    prints = tuple(None if fn is None else modifier_key(fn, kind)
                   for fn, kind in ((score_mod, "score_mod"), (mask_mod, "mask_mod")))
    if any(p is None and fn is not None for p, fn in zip(prints, (score_mod, mask_mod))):
        return build()
    key = (builder, prints, tracer_settings(),
           tuple((name, type(v).__name__, repr(v)) for name, v in sorted(options.items())))
    if key not in _BUILT:
        if len(_BUILT) >= 64:
            _BUILT.clear()
        _BUILT[key] = mark_built(build(), key)  # lowered once per level (`tessera.lowering.kept`)
    return _BUILT[key]


_COMPILED: dict[tuple, tuple[object, object]] = {}
"""The compiled kernels of kept modules (`_compiled`), by (the module's id, pipeline, spilling allowed), beside the
module itself (an id is only trusted while that module is the one kept)."""


def _compiled(module, pipeline: str | None = None):
    """`compile_module` of `module` (one kernel) with `pipeline` (default: the default pipeline), kept beside it: a
    repeated GPU call with a kept module (`_kept`) neither prints nor hashes its text (`compile_module`'s key,
    40 ms at head_dim 64) nor verifies it again (`entry.launch` of a module)."""
    from tessera import api
    from tessera.lowering.fallback import spilling_allowed
    from tessera.runtime.compiler import compile_module

    key = (id(module), pipeline, spilling_allowed())
    kept = _COMPILED.get(key)
    if kept is None or kept[0] is not module:
        if len(_COMPILED) >= 64:
            _COMPILED.clear()
        name = api.find_kernel(module).name
        compiled = compile_module(module, name) if pipeline is None else compile_module(module, name, pipeline)
        # without the module's launch checks (`runtime.variant_launch`): this path proved the reads for the
        # launch's sizes (`check_index_ranges`) and made the lists for them; checking again would copy the lists
        # back from the GPU on every call
        compiled = dataclasses.replace(compiled, module=None)
        kept = _COMPILED[key] = (module, compiled)
    return kept[1]


def kept_block_mask(mask_mod, batch: int, heads: int, seq_q: int, seq_k: int, block_m: int, block_n: int):
    """`create_block_mask` for these sizes, kept as kernels are (`_kept`): a repeated call evaluates the mask on
    the host once (a causal mask at 16k tokens: 2.3 s a call on a 2-core machine). Shared: not to be changed."""
    sizes = dict(batch=batch, heads=heads, seq_q=seq_q, seq_k=seq_k, block_m=block_m, block_n=block_n)
    return _kept(lambda: create_block_mask(mask_mod, **sizes), "create_block_mask", None, mask_mod, **sizes)


def forward_module(q, k, *, score_mod, mask_mod, causal: bool, scale, return_lse: bool, head_dim: int, dtype: str,
                   block_n: int | None = None):
    """The forward kernel `attention_mods` runs for these arguments (at every level, the GPU's included), built
    once per modifiers and options (`_kept`)."""
    from tessera.kernels import flash_attention

    options = dict(causal=causal, dtype=dtype, scale=scale, block_n=block_n, grouped=k.shape[1] != q.shape[1],
                   return_lse=return_lse, block_sparse=mask_mod is not None)
    return _kept(lambda: flash_attention(head_dim, score_mod=score_mod, mask_mod=mask_mod, **options),
                 "flash_attention", score_mod, mask_mod, head_dim=head_dim, **options)


BLOCK_N_FALLBACK = (64, 32)
"""Key blocks a forward with modifiers is rebuilt with, in order, when no configuration of the default pipeline
fits the head_dim's default (`DEFAULT_BLOCK_N`): a modifier's [BM, BN] tiles add to the score tile's
(soft-cap + ALiBi + a relative-position table: 333 registers a thread warp-specialized at head_dim 64, BN 128,
and no configuration fits; at BN 64 one does)."""


def attention_mods(q, k, v, *, score_mod, mask_mod, causal: bool, scale, return_lse: bool, level,
                   head_dim: int, dtype: str, block_n: int | None = None):
    """(O[, LSE]) of softmax(mask_mod(score_mod(scale Q K^T))) V at `level` (module docstring). Below Tile
    IR and on the GPU, a kernel no configuration of the default pipeline fits is rebuilt with smaller key
    blocks (`BLOCK_N_FALLBACK`, with a warning) unless `block_n` is given; only the last key block tried may
    take the default pipeline's spilling rung (`tessera.lowering.fallback`), with its warning."""
    from tessera.runtime.launch import usable_device

    (batch, heads, seq_q, _), seq_k = q.shape, k.shape[2]
    check_index_ranges(score_mod, mask_mod, batch=batch, heads=heads, seq_q=seq_q, seq_k=seq_k)
    if level is None:
        usable_device((q, k, v))  # no GPU, no compile (CudaUnavailable names level= as the alternative)
    out = _with_block_n_fallback(
        lambda bn: _forward(q, k, v, score_mod, mask_mod, causal, scale, return_lse, level, head_dim, dtype, bn),
        head_dim, block_n, level)
    if return_lse:
        o, lse = out
        return o, lse[..., 0]
    return out


def _with_block_n_fallback(attempt, head_dim: int, block_n: int | None, level):
    """`attempt(bn)` for the head_dim's default key block (or `block_n`), then, below Tile IR and on the GPU,
    for each of `BLOCK_N_FALLBACK` below it while no configuration fits (with a warning); spilling allowed
    only for the last key block tried."""
    from tessera.ir.diagnostics import warn
    from tessera.kernels.attention_config import DEFAULT_BLOCK_N
    from tessera.lowering.fallback import NoConfigurationFitsError, without_spilling

    first = DEFAULT_BLOCK_N[head_dim] if block_n is None else block_n
    tries = [first] + ([bn for bn in BLOCK_N_FALLBACK if bn < first] if block_n is None and level != "tile" else [])
    for i, bn in enumerate(tries):
        try:  # spilling only for the last key block, once every rung that may fit without it is refused
            with nullcontext() if i + 1 == len(tries) else without_spilling():
                return attempt(bn)
        except NoConfigurationFitsError as error:
            if i + 1 == len(tries):
                raise
            tried = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
            warn(f"attention: the kernel with score_mod/mask_mod at block_n {bn} fits no configuration of the "
                 f"default pipeline (single-stage: {tried[-1].split(': ', 1)[-1][:80] if tried else 'registers'}"
                 f"...); rebuilt with block_n {tries[i + 1]}")


def compiled_forward(q, k, *, score_mod, mask_mod, causal: bool, scale, return_lse: bool, head_dim: int,
                     dtype: str, block_n: int | None = None):
    """(the compiled kernel, its key block) that `attention_mods` launches on the GPU for these arguments (the
    same `BLOCK_N_FALLBACK`, through the same kernel cache), compiled here without a GPU: what a GPU session
    compiles ahead (bench/gpu_variants.py), and with `forward_inputs`, a launch without the per-call host work
    (tracing, the block mask) to time."""
    from tessera import api
    from tessera.runtime.compiler import compile_module

    def attempt(bn):
        module = forward_module(q, k, score_mod=score_mod, mask_mod=mask_mod, causal=causal, scale=scale,
                                return_lse=return_lse, head_dim=head_dim, dtype=dtype, block_n=bn)
        return compile_module(module, api.find_kernel(module).name), bn
    return _with_block_n_fallback(attempt, head_dim, block_n, None)


def forward_inputs(q, k, score_mod, mask_mod, block_n: int, block_mask=None, captured: bool = True) -> list:
    """The inputs the forward kernel with modifiers takes after q, k and v: the captured arrays (not with
    `captured` False), then (with a mask_mod) the block lists of `block_mask` (default: `create_block_mask` for
    q's and k's shapes with the kernel's blocks; one given must have them), as NumPy arrays (`as_inputs_of` puts
    them beside q)."""
    from tessera.kernels.attention_config import DEFAULT_BLOCK_M

    (batch, heads, seq_q, _), seq_k = q.shape, k.shape[2]
    extra = _captured(score_mod, mask_mod) if captured else []
    if mask_mod is not None:
        if block_mask is None:
            block_mask = kept_block_mask(mask_mod, batch, heads, seq_q, seq_k, DEFAULT_BLOCK_M, block_n)
        if (block_mask.block_m, block_mask.block_n) != (DEFAULT_BLOCK_M, block_n) or \
                block_mask.kinds.shape[:2] != (batch, heads):
            raise ValueError(f"forward_inputs: the block mask has {block_mask.block_m} x {block_mask.block_n} blocks "
                             f"for {block_mask.kinds.shape[:2]} (batch, heads); the kernel takes {DEFAULT_BLOCK_M} x "
                             f"{block_n} for {(batch, heads)}")
        extra += block_mask.inputs()
    return extra


def _forward(q, k, v, score_mod, mask_mod, causal, scale, return_lse, level, head_dim, dtype, block_n):
    from tessera import api
    from tessera.runtime import entry
    from tessera.runtime.launch import is_torch_tensor, numpy_to_torch

    module = forward_module(q, k, score_mod=score_mod, mask_mod=mask_mod, causal=causal, scale=scale,
                            return_lse=return_lse, head_dim=head_dim, dtype=dtype, block_n=block_n)
    if level is None:  # the reads were proved in bounds for these sizes (`attention_mods`)
        extra = device_inputs(module, q, (*q.shape[:3], *k.shape[1:3]), score_mod, mask_mod,
                              lambda: forward_inputs(q, k, None, mask_mod, block_n, captured=False))
        return entry.launch(_compiled(module), q, k, v, *extra)
    extra = forward_inputs(q, k, score_mod, mask_mod, block_n)
    out = api.interpret(module, *(_numpy(x) for x in (q, k, v)), *extra, level=level)
    if not is_torch_tensor(q):
        return out
    return tuple(numpy_to_torch(x) for x in out) if return_lse else numpy_to_torch(out)


def backward_kernels(q, *, score_mod, mask_mod, causal: bool, scale, level, head_dim: int, dtype: str,
                     deterministic: bool = False, head_split: int | None = None, blocks: tuple | None = None,
                     captured_grads: tuple[str, ...] = ()):
    """The backward's three kernels `attention_backward_mods` runs at `level` (None: the GPU), and whether they
    read the block lists; `blocks` (BM, BN), default the builder's (`MODS_BLOCKS`); `captured_grads` the
    builder's (kernel input names whose gradients the main kernel adds into outputs after dV)."""
    from tessera.kernels import attention_backward

    sparse = mask_mod is not None and (level == "tile" or head_dim in SPARSE_BACKWARD_HEAD_DIMS)
    block_m, block_n = blocks or (None, None)
    options = dict(causal=causal, dtype=dtype, scale=scale, block_sparse=sparse, deterministic=deterministic,
                   head_split=head_split, block_m=block_m, block_n=block_n, captured_grads=tuple(captured_grads))
    return _kept(lambda: attention_backward(head_dim, score_mod=score_mod, mask_mod=mask_mod, **options),
                 "attention_backward", score_mod, mask_mod, head_dim=head_dim, **options), sparse


WARP_SPECIALIZED_FIRST = {
    64: (("with 128 x 128 blocks", dict(blocks=(128, 128))),),
    128: (("with the dense kernel's keys-on-rows 64 x 128 blocks", dict(blocks=(64, 128), head_split=1)),
          ("as one thread block per key block", dict(head_split=1))),
}
"""By head_dim, what `tessera.attention_backward` with modifiers tries, in order, before the builder's default
(`MODS_BLOCKS`, `MODS_HEAD_SPLIT`) below Tile level and on the GPU: the first whose main kernel lowers
warp-specialized (`warp_specialized_refusal`) is taken, else the default with a warning naming each refusal. At
head_dim 64 the dense kernel's 128 x 128 blocks (two consumer warpgroups of 240 registers: soft-cap, document
masking, a sliding window, deterministic or not, ALiBi with or without document masking, a relative-position
table, a soft-cap with a window and symmetric ALiBi under a per-head window array fit: `kv_idx - q_idx` and
what is made of it are computed on the thread's 34 distinct offsets, `compute-distinct-lanes`, a compare of it
with a constant or a per-head bound is one setp a register; soft-cap + ALiBi too, its bias added to the
soft-capped score 8 registers at a time from the thread's scalar; and T5's buckets, 223 registers, the
distance's magnitude re-created where `np.where(n < 8, n, ...)` reads it after the logarithm's conversion,
`rematerialize-constants`); at head_dim 128 the dense kernel's keys-on-rows 64 x 128 blocks (two consumer
warpgroups: a sliding window, a soft-cap, ALiBi, with document masking or not, T5's buckets, fit), then one
thread block per key block at 64 x 64 (no extra S and dP products) instead of the head split. (Each: its name
in the warning and the keywords of `backward_kernels`.)"""

DEFAULT_NAMES = {64: "with 64 x 64 blocks", 128: "with head_split=2"}
"""What the builder's default is called in `WARP_SPECIALIZED_FIRST`'s warning, by head_dim."""


def _shape(kernels) -> tuple[int, int, int]:
    """(BM, BN, head split) of a backward's main kernel."""
    c = kernels.config.attention
    return c.block_m, c.block_n, kernels.head_split


HEAD_SPLIT_FALLBACK = 2
"""The main kernel's head split (`attention_backward(head_split=)`) a backward with modifiers is rebuilt with,
with a warning naming it, when its registers do not fit without one below Tile level and on the GPU (at
head_dim 64: soft-cap + ALiBi + three gathered tables, a key bias and a key-weighted tanh of the score with a
document window needs 275 registers a consumer thread at 64 x 64; split, each of two thread blocks holds 32 of
dK's and dV's 64 columns)."""


def warp_specialized_first(q, kernels, sparse: bool, **options):
    """(kernels, sparse, refused, taken): the first of `WARP_SPECIALIZED_FIRST[head_dim]` whose main kernel
    lowers warp-specialized, else the builder's default `kernels` (and its `sparse`); the refusals of those
    tried before it ("name (why)"), and the name of what is taken. `options` are `backward_kernels`'."""
    head_dim = options["head_dim"]
    refused, taken = [], DEFAULT_NAMES.get(head_dim, "the builder's default")
    for name, keywords in WARP_SPECIALIZED_FIRST.get(head_dim, ()):
        tried, tried_sparse = backward_kernels(q, **keywords, **options)
        if _shape(tried) == _shape(kernels):  # the default itself (deterministic=True has no head split)
            return kernels, sparse, refused, name
        refusal = warp_specialized_refusal(tried.main)
        if refusal is None:
            return tried, tried_sparse, refused, name
        refused.append(f"{name} ({refusal[:120]})")
    return kernels, sparse, refused, taken


def attention_backward_mods(q, k, v, o, lse, do, *, score_mod, mask_mod, causal: bool, scale, level,
                            head_dim: int, dtype: str, pipeline: str, deterministic: bool = False,
                            captured_grads: tuple[str, ...] = (), dlse=None):
    """(dq, dk, dv) of `attention_mods` at `level`, from its O and LSE ([batch, heads, seq_q]) (and the loss's
    gradient in that LSE, `dlse`: `runtime.attention_base.with_lse_gradient`), and with
    `captured_grads` (kernel input names, `runtime.captured_gradients`) a fourth item, the list of their gradients
    (f32, each its array's shape, at every level and on the GPU); `pipeline` is
    ignored: the backward with modifiers is lowered with `BACKWARD_PIPELINE` below Tile level and on the GPU.
    `deterministic`: the dQ additions of a query block in key-block order (with the block lists, each key block waits for its rank among the
    blocks that visit the query block, `BlockMask.transposed_ranks`). Below Tile level and on the GPU the main
    kernel of `WARP_SPECIALIZED_FIRST` is taken where it lowers warp-specialized, else the builder's default
    with a warning; a main kernel whose registers fit no configuration is rebuilt with `HEAD_SPLIT_FALLBACK`,
    with a warning. Only the last kernels tried (the head split's) may take the default pipeline's spilling rung
    (`tessera.lowering.fallback`), with its warning: spilling is never chosen over a rung that fits."""
    from tessera.ir.diagnostics import warn
    from tessera.lowering.fallback import NoConfigurationFitsError, without_spilling
    from tessera.regalloc import RegisterBudgetError
    from tessera.runtime.launch import usable_device

    (batch, heads, seq_q, _), seq_k = q.shape, k.shape[2]
    check_index_ranges(score_mod, mask_mod, batch=batch, heads=heads, seq_q=seq_q, seq_k=seq_k)
    if level is None:
        usable_device((q, k, v, o, lse, do))  # no GPU, no compile
    options = dict(score_mod=score_mod, mask_mod=mask_mod, causal=causal, scale=scale, level=level,
                   head_dim=head_dim, dtype=dtype, deterministic=deterministic, captured_grads=tuple(captured_grads))
    kernels, sparse = backward_kernels(q, **options)
    if level != "tile":
        kernels, sparse, refused, taken = warp_specialized_first(q, kernels, sparse, **options)
        if refused:
            warn(f"attention_backward: the main kernel with score_mod/mask_mod at head_dim {head_dim} does not fit "
                 f"warp-specialized {'; nor '.join(refused)}; built {taken}")
    last = level == "tile" or deterministic or kernels.head_split >= HEAD_SPLIT_FALLBACK
    try:  # spilling (the default pipeline's last rung) only where no head split is left to try
        with nullcontext() if last else without_spilling():
            return _backward(kernels, sparse, q, k, v, o, lse, do, dlse=dlse, **options)
    except RegisterBudgetError as error:
        if last:
            raise
        summary = getattr(error, "summary", None) or str(error)
        if isinstance(error, NoConfigurationFitsError):  # the last rung's refusal: single-stage's registers
            summary = str(error).strip().splitlines()[-1].split(": ", 1)[-1]
        summary = summary.split(";")[0].strip()
        warn(f"attention_backward: the main kernel with score_mod/mask_mod at head_dim {head_dim} does not fit "
             f"the registers ({summary[:120]}); rebuilt with head_split={HEAD_SPLIT_FALLBACK} ({HEAD_SPLIT_FALLBACK} "
             "thread blocks per key block, each holding a slice of dK and dV; both compute S and dP)")
    kernels, sparse = backward_kernels(q, head_split=HEAD_SPLIT_FALLBACK, **options)
    return _backward(kernels, sparse, q, k, v, o, lse, do, dlse=dlse, **options)


def _backward(kernels, sparse, q, k, v, o, lse, do, *, score_mod, mask_mod, level, deterministic,
              captured_grads=(), dlse=None, **_):
    """`attention_backward_mods` with these kernels."""
    from tessera import api
    from tessera.runtime.launch import is_torch_tensor, numpy_to_torch

    def lists() -> list[np.ndarray]:
        if not sparse:
            return []
        c = kernels.config.attention
        (batch, heads, seq_q, _), seq_k = q.shape, k.shape[2]
        mask = kept_block_mask(mask_mod, batch, heads, seq_q, seq_k, c.block_m, c.block_n)
        return mask.backward_inputs(k.shape[1], ranks=deterministic)
    from tessera import passes

    pipeline = getattr(passes, BACKWARD_PIPELINE)
    if level is None:
        extra = device_inputs(kernels.main, q, (*q.shape[:3], *k.shape[1:3]), score_mod, mask_mod, lists)
        shapes = {a.name: a.array.shape for a in trace_mod(score_mod, "score_mod").arrays} if captured_grads else {}
        return _backward_on_gpu(kernels, q, k, v, o, lse, do, extra, pipeline,
                                tuple(shapes[name] for name in captured_grads), dlse)
    extra = _captured(score_mod, mask_mod) + lists()
    torch_in = is_torch_tensor(q)
    q, k, v, o, do = (_numpy(x) for x in (q, k, v, o, do))
    pipeline = None if level == "tile" else pipeline
    dpsum, lse2, _ = api.interpret(kernels.preprocess, o, do, _numpy(lse).astype(np.float32), level=level,
                                   pipeline=pipeline)
    dq_accum, dk, dv, *dcaptured = api.interpret(kernels.main, q, k, v, do, lse2, with_lse_gradient(dpsum, dlse),
                                                 *extra, level=level, pipeline=pipeline)
    grads = (api.interpret(kernels.postprocess, dq_accum, level=level, pipeline=pipeline, seq_q=q.shape[2]), dk, dv)
    if torch_in:
        grads, dcaptured = tuple(numpy_to_torch(g) for g in grads), [numpy_to_torch(g) for g in dcaptured]
    return (*grads, dcaptured) if captured_grads else grads


def _backward_on_gpu(kernels, q, k, v, o, lse, do, extra, pipeline: str, captured_shapes: tuple = (), dlse=None):
    """The three kernels compiled with `pipeline` (through the kernel cache, keyed by each module's text, and
    kept beside the kept modules: `_compiled`), the main one taking `extra` (`device_inputs`) after its tensors,
    launched as the dense backward launches its own (`runtime.attention_backward._run_torch`) on CUDA tensors:
    nothing zero-filled but the deterministic kernel's semaphores and the gradients of captured arrays
    (`captured_shapes`: the shape of each output after dV, f32, which the main kernel adds into with
    `tile.scatter_add`, a red.global.add.f32 per element read); the preprocess writes every element of dPsum, LSE2
    and dq_accum (0, its padding rows too), the main kernel adds into that dq_accum and stores every block of dK
    and dV (`finish_main`, whether its work list is empty or not), the postprocess writes every element of dQ
    (tests/test_launch_plan.py, on NaN-filled outputs). Other arrays: `entry.launch`, every output and scratch
    buffer allocated zeroed. Returns (dq, dk, dv), and the captured arrays' gradients (a list) as a fourth item
    when there are any. `dlse`: `runtime.attention_base.with_lse_gradient`'s."""
    from tessera.runtime.launch import SCRATCH, _torch, is_torch_tensor, launch_on_tensors

    pre, main, post = (_compiled(m, pipeline) for m in kernels.modules)
    if is_torch_tensor(q) and q.is_cuda:
        accum = 6 + len(extra)  # the main kernel's arguments: Q, K, V, dO, LSE2, dPsum, `extra`, dQaccum, dK, dV, ...
        dpsum, lse2, dq_accum = launch_on_tensors(pre, o, do, lse.float().contiguous(), zeroed=False)
        torch = _torch()
        added = {accum + 3 + i: torch.zeros(shape, dtype=torch.float32, device=q.device)
                 for i, shape in enumerate(captured_shapes)}
        dq_accum, dk, dv, *dcaptured = launch_on_tensors(main, q, k, v, do, lse2, with_lse_gradient(dpsum, dlse),
                                                         *extra, into={accum: dq_accum, **added}, zeroed=SCRATCH)
        (dq,) = launch_on_tensors(post, dq_accum, zeroed=False, seq_q=q.shape[2])  # dq_accum's rows are padded
        return (dq, dk, dv, dcaptured) if captured_shapes else (dq, dk, dv)
    from tessera.runtime import entry

    lse = lse.float() if is_torch_tensor(lse) else np.asarray(lse, np.float32)

    def launch(kernel, *inputs, **sizes):
        out = entry.launch(kernel, *inputs, **sizes)
        return list(out) if isinstance(out, tuple) else [out]
    dpsum, lse2, _ = launch(pre, o, do, lse)
    dq_accum, dk, dv, *dcaptured = launch(main, q, k, v, do, lse2, with_lse_gradient(dpsum, dlse), *extra)
    (dq,) = launch(post, dq_accum, seq_q=q.shape[2])  # dq_accum's rows are padded
    return (dq, dk, dv, dcaptured) if captured_shapes else (dq, dk, dv)
