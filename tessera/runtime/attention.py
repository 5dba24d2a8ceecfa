"""`tessera.attention(q, k, v, causal=False, scale=None, return_lse=False, num_splits=1, level=None, bias=None)`:
attention on the GPU with a Tessera kernel, or the same kernels in one of Tessera's interpreters.

    o = softmax(q k^T * scale [+ bias] [+ causal mask]) v     q, o: [batch, heads, seq_q, head_dim]
                                                               k, v: [batch, heads, seq_k, head_dim]
                                                               bias: [batch | 1, heads | 1, seq_q, seq_k]

`scale` defaults to 1/sqrt(head_dim); causal masking is aligned bottom-right (query i sees keys
0 .. i + seq_k - seq_q), as in FlashAttention 2.1 and later. q, k and v are NumPy arrays (bf16 as
`ml_dtypes.bfloat16`, or float16) or PyTorch tensors (bfloat16 or float16; CUDA tensors are used in place),
and the output is of the same kind and type. With `return_lse=True` the call returns (o, lse), lse the f32
[batch, heads, seq_q] natural log of each row's softmax denominator, sum_j exp(scale q.k_j) (-inf for a row
that sees no key, whose o is 0). `num_splits` (1, an integer up to 256, or "auto" (or 0) for FlashAttention-3's
heuristic, `tessera.kernels.attention_split.choose_num_splits`) splits the key range over that many thread
blocks per query block (flash-decoding) and runs the combine kernel after them. `level=None` runs on the GPU;
`level="tile"`, `"target"` or `"ptx"` runs the very kernels the GPU would run (same builders, same options,
`tessera.passes.DEFAULT_PIPELINE`) in the Tile interpreter, the CTA simulator or the PTX executor, on the
CPU, and returns NumPy arrays (CPU tensors for PyTorch inputs). k and v may have heads_k heads, a divisor of
q's heads (GQA/MQA; decoding packs each group's query heads into one block's rows, PackGQA). With
`cu_seqlens_q=`, `cu_seqlens_k=`, `max_seqlen_q=`, `max_seqlen_k=` (and optionally `seqused_k=`) q, k and v
are packed [total_tokens, heads, head_dim] sequences (`tessera.runtime.serving`), with `return_lse` (lse then
[heads, total_q], FlashAttention-3's varlen layout) and `num_splits` as above.

The kernel for (head_dim, causal, dtype, scale) is compiled once and kept on disk (`tessera.runtime.cache`).
The arguments are checked before anything is compiled or launched, and before a GPU is looked for:
TypeError for what is not an array or tensor of real numbers, ValueError for shapes that disagree, masked
arrays and bad options (`causal`, `scale`, by the builders' rules), and `UnsupportedKernel` (a ValueError)
for what the kernels do not support. Then a GPU that runs sm_90a kernels is found (else `CudaUnavailable`),
and only then is the kernel, built with `tessera.passes.DEFAULT_PIPELINE`, compiled or fetched from the cache.
"""

from __future__ import annotations

import numpy as np

from tessera.runtime.attention_base import (  # noqa: F401 (DTYPES, LAYOUT, attention_config: names of this module)
    DTYPES, LAYOUT, UnsupportedKernel, attention_config, check_head_dim, check_tensor,
)
from tessera.runtime.compiler import CompiledKernel, compile_kernel
from tessera.runtime.launch import dtype_name, is_torch_tensor, usable_device
from tessera.runtime.no_backward import no_backward

def check_attention_arguments(q, k, v) -> tuple[int, str]:
    """(head_dim, dtype) of well-formed q, k, v. Otherwise, naming the argument and the rule: TypeError for
    what is not an array or tensor of real numbers (complex, bool, objects, strings), ValueError for masked
    arrays and shapes that disagree, UnsupportedKernel (a ValueError) for a type or head_dim no kernel takes."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        shape = check_tensor("attention", name, x)
        if len(shape) != 4:
            raise ValueError(f"attention: {name} must be 4-D {LAYOUT}, got shape {tuple(shape)}")
        if any(int(d) <= 0 for d in shape):
            raise ValueError(f"attention: {name} has an empty dimension: shape {tuple(shape)}")
    kinds = {is_torch_tensor(x) for x in (q, k, v)}
    if len(kinds) != 1:
        raise ValueError("attention: q, k and v must be all NumPy arrays or all PyTorch tensors")
    q_shape, k_shape, v_shape = (tuple(int(d) for d in x.shape) for x in (q, k, v))
    if not (q_shape[0] == k_shape[0] and k_shape[:2] == v_shape[:2] and q_shape[1] % k_shape[1] == 0):
        raise ValueError(f"attention: q, k and v must have the same batch, and k and v the same heads, a divisor "
                         f"of q's (GQA/MQA) {LAYOUT}, got shapes {q_shape}, {k_shape}, {v_shape}")
    if k_shape[2] != v_shape[2]:
        raise ValueError(f"attention: k and v must have the same sequence length, got {k_shape[2]} and {v_shape[2]}")
    if not q_shape[3] == k_shape[3] == v_shape[3]:
        raise ValueError(f"attention: q, k and v must have the same head_dim, got {q_shape[3]}, {k_shape[3]}, "
                         f"{v_shape[3]}")
    names = [dtype_name(x) for x in (q, k, v)]
    if len(set(names)) != 1:
        raise ValueError(f"attention: q, k and v must have one element type, got {', '.join(names)}")
    if names[0] not in DTYPES:
        raise UnsupportedKernel(f"attention: element type {names[0]} is not supported (supported: "
                                f"{', '.join(DTYPES)}; convert with .astype(ml_dtypes.bfloat16) or .to(torch.bfloat16))")
    if is_torch_tensor(q) and len({x.device for x in (q, k, v)}) != 1:
        raise ValueError(f"attention: q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    return q_shape[3], DTYPES[names[0]]


def check_bias_argument(bias, q, k) -> tuple[str, ...]:
    """The dimensions a well-formed `bias` is broadcast along ("batch" and/or "heads", where it has size 1) for
    checked q and k. The bias must be of q's kind and element type, 4-D [batch, heads, seq_q, seq_k] with 1
    allowed for batch and heads (PyTorch SDPA's attn_mask broadcasting); TypeError or ValueError naming `bias`
    and the rule otherwise (a boolean mask is refused: convert it to an additive one, 0 and -inf)."""
    shape = check_tensor("attention", "bias", bias)
    if is_torch_tensor(bias) != is_torch_tensor(q):
        raise ValueError("attention: bias must be of q's kind (all NumPy arrays or all PyTorch tensors)")
    (batch, heads, seq_q, _), seq_k = (int(d) for d in q.shape), int(k.shape[2])
    expected = f"[{batch} or 1, {heads} or 1, {seq_q}, {seq_k}] ([batch, heads, seq_q, seq_k], batch and heads " \
               "broadcast where 1)"
    if len(shape) != 4:
        raise ValueError(f"attention: bias must be 4-D {expected}, got shape {tuple(shape)}")
    shape = tuple(int(d) for d in shape)
    if shape[2:] != (seq_q, seq_k) or shape[0] not in (1, batch) or shape[1] not in (1, heads):
        raise ValueError(f"attention: bias must have shape {expected}, got {shape}")
    if dtype_name(bias) != dtype_name(q):
        raise ValueError(f"attention: bias must have q's element type {dtype_name(q)}, got {dtype_name(bias)} "
                         "(the kernel reads the bias in the type of q, k and v)")
    if is_torch_tensor(q) and bias.device != q.device:
        raise ValueError(f"attention: bias must be on q's device {q.device}, got {bias.device}")
    return tuple(name for name, size, full in (("batch", shape[0], batch), ("heads", shape[1], heads))
                 if size == 1 and full != 1)


def attention_kernel(q, k, v, causal: bool = False, scale: float | None = None) -> CompiledKernel:
    """The compiled kernel `attention` would run for these arguments (checked first)."""
    head_dim, dtype = check_attention_arguments(q, k, v)
    return compile_kernel(attention_config(head_dim, causal, dtype, scale))


def refuse_with_bias(grouped: bool, num_splits: object, cluster: object) -> None:
    """ValueError naming the option that a biased kernel does not combine with: GQA/MQA (k and v with fewer
    heads than q), num_splits other than 1 ("auto" is 1 with a bias) and cluster other than 1."""
    if grouped:
        raise ValueError("attention: bias is not supported with GQA/MQA (k and v with fewer heads than q) yet")
    if not (num_splits == 1 or num_splits == "auto"):
        raise ValueError(f"attention: bias is not supported with num_splits={num_splits!r} (split-KV); use 1 or \"auto\"")
    if cluster != 1:
        raise ValueError(f"attention: bias is not supported with cluster={cluster!r}; use 1")


def check_cluster_option(cluster: object) -> int:
    """`cluster` as the int the builders take (a NumPy integer read as one, as `num_splits` is), checked by the
    builders' rule before any other option reads it: TypeError for what is no int (True, 2.0, "2"), which
    `cluster != 1` alone would have taken for 1 or for a cluster, ValueError for sizes below 1."""
    from tessera.kernels.common import check_cluster

    if isinstance(cluster, np.integer):
        cluster = int(cluster)
    return check_cluster("attention: cluster", cluster, 1)[0]


def check_enable_gqa(where: str, enable_gqa, q, k) -> None:
    """FlexAttention's `enable_gqa` (its calls port unchanged): None or True allow k and v with fewer heads than q
    (Tessera finds GQA from the shapes); False refuses them by name, as flex_attention does. Heads are axis 1 of
    both layouts, [batch, heads, seq, head_dim] and packed [total, heads, head_dim]."""
    if enable_gqa is None or enable_gqa is True:
        return
    if enable_gqa is not False:
        raise TypeError(f"{where}: enable_gqa is True, False or None (GQA found from the shapes); got {enable_gqa!r}")
    heads, heads_k = (x.shape[1] if len(x.shape) > 1 else None for x in (q, k))
    if heads != heads_k:
        raise ValueError(f"{where}: enable_gqa=False, but q has {heads} heads and k {heads_k} (grouped-query "
                         "attention): pass enable_gqa=True, or leave it out")


@no_backward("attention")
def attention(q, k, v, causal: bool = False, scale: float | None = None, return_lse: bool = False,
              num_splits: int | str = 1, level: str | None = None, *, cu_seqlens_q=None, cu_seqlens_k=None,
              max_seqlen_q=None, max_seqlen_k=None, seqused_k=None, cluster: int = 1, bias=None, score_mod=None,
              mask_mod=None, descale_q=None, descale_k=None, descale_v=None, block_mask=None, enable_gqa=None):
    """softmax(q k^T * scale [+ bias] [+ bottom-right causal mask]) v, with its LSE when `return_lse`; on the GPU, or in
    the interpreter `level` names; see the module docstring. k and v may have fewer heads than q (GQA/MQA:
    heads a multiple of heads_k; query head h reads key head h // (heads // heads_k); decoding packs a
    group's heads into one block's rows, `tessera.runtime.serving.pack_gqa`). With `cu_seqlens_q` and
    `cu_seqlens_k` (and `max_seqlen_q`, `max_seqlen_k`, optionally `seqused_k`), q, k, v are packed
    [total_tokens, heads, head_dim] sequences: `tessera.runtime.serving.attention_varlen`. `cluster=2`: pairs
    of query blocks of a head share each K/V tile through TMA multicast (not with `causal`, split-KV, GQA or
    packed sequences: refused by name); where the query blocks are odd in number the launch falls back to
    clusters of one. `bias`: an additive bias [batch, heads, seq_q, seq_k] (batch and heads may be 1:
    broadcast) of q's element type, added to the scaled scores before the softmax (and the causal mask), as
    PyTorch SDPA adds a float attn_mask; not with packed sequences, split-KV, GQA or clusters (refused by
    name). `score_mod(score, b, h, q_idx, kv_idx)` / `mask_mod(b, h, q_idx, kv_idx)`: FlexAttention's modifiers
    (`tessera.runtime.flex`; not with bias, packed sequences, split-KV or clusters); `block_mask`, FlexAttention's
    (Tessera's or torch's `create_block_mask` for these lengths), stands for its mask_mod. `enable_gqa`:
    FlexAttention's flag, so its calls port unchanged: GQA needs no flag here (None or True), and False refuses
    k and v with fewer heads than q, as FlexAttention does (`check_enable_gqa`).
    FP8: q, k, v as `ml_dtypes.float8_e4m3fn` arrays or `torch.float8_e4m3fn` tensors, with `descale_q`,
    `descale_k`, `descale_v` f32 [batch, heads_k] (None: 1), return bf16 o (`tessera.runtime.attention_fp8`; on
    the GPU and every interpreter level, any seq_k; not with bias, score_mod/mask_mod/block_mask, packed
    sequences, split-KV or clusters: refused by name)."""
    from tessera.runtime.attention_fp8 import attention_fp8, is_fp8_call
    from tessera.runtime.attention_plan import (
        attention_plan, auto_for_zero, check_level, combine_lowering, run_in_interpreter,
    )

    num_splits = auto_for_zero(num_splits)
    cluster = check_cluster_option(cluster)
    check_enable_gqa("attention", enable_gqa, q, k)
    if is_fp8_call(q, k, v, (descale_q, descale_k, descale_v)):
        refused = [name for name, on in (
            ("bias", bias is not None),
            ("score_mod/mask_mod/block_mask", any(x is not None for x in (score_mod, mask_mod, block_mask))),
            ("packed sequences (cu_seqlens)", cu_seqlens_q is not None or cu_seqlens_k is not None),
            ("max_seqlen_q/max_seqlen_k/seqused_k", any(x is not None for x in (max_seqlen_q, max_seqlen_k, seqused_k))),
            (f"num_splits={num_splits!r}", not (num_splits == 1 or num_splits == "auto")),
            (f"cluster={cluster!r}", cluster != 1)) if on]
        if refused:
            raise ValueError(f"attention: FP8 attention (float8_e4m3fn q, k, v or descale_*) is not supported with "
                             f"{', '.join(refused)}")
        return attention_fp8(q, k, v, causal=causal, scale=scale, return_lse=return_lse, level=level,
                             descale_q=descale_q, descale_k=descale_k, descale_v=descale_v)

    if block_mask is not None:
        from tessera.runtime.flex import block_mask_mod

        mask_mod = block_mask_mod("attention", block_mask, mask_mod, q.shape[-2], k.shape[-2])
    if score_mod is not None or mask_mod is not None:
        from tessera.runtime.flex import attention_mods

        packed = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
        if bias is not None or any(x is not None for x in packed) or num_splits != 1 or cluster != 1:
            # seqused_k and max_seqlen_* alone were ignored: a mask_mod `kv_idx < used[b]` says the same
            raise ValueError("attention: score_mod/mask_mod are not supported with bias, packed sequences "
                             "(cu_seqlens_q/k, max_seqlen_q/k, seqused_k), num_splits != 1 or cluster != 1")
        head_dim, dtype = check_attention_arguments(q, k, v)
        check_head_dim(head_dim)
        check_level(level)
        return attention_mods(q, k, v, score_mod=score_mod, mask_mod=mask_mod, causal=causal, scale=scale,
                              return_lse=return_lse, level=level, head_dim=head_dim, dtype=dtype)

    if bias is not None and (cu_seqlens_q is not None or cu_seqlens_k is not None):
        raise ValueError("attention: bias is not supported with packed sequences (cu_seqlens)")

    if cluster != 1 and (cu_seqlens_q is not None or cu_seqlens_k is not None):
        raise ValueError("attention: cluster is not supported with packed sequences (cu_seqlens)")
    if cu_seqlens_q is not None or cu_seqlens_k is not None:
        from tessera.runtime.serving import attention_varlen

        if cu_seqlens_q is None or cu_seqlens_k is None or max_seqlen_q is None or max_seqlen_k is None:
            raise ValueError("attention: packed sequences need cu_seqlens_q, cu_seqlens_k, max_seqlen_q and "
                             "max_seqlen_k together")
        return attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k,
                                causal=causal, scale=scale, return_lse=return_lse, num_splits=num_splits,
                                level=level)
    if max_seqlen_q is not None or max_seqlen_k is not None or seqused_k is not None:
        raise ValueError("attention: max_seqlen_q, max_seqlen_k and seqused_k go with cu_seqlens_q and "
                         "cu_seqlens_k (packed sequences)")
    head_dim, dtype = check_attention_arguments(q, k, v)
    bias_broadcast = None if bias is None else check_bias_argument(bias, q, k)
    check_level(level)
    if bias is not None:
        refuse_with_bias(k.shape[1] != q.shape[1], num_splits, cluster)
    if cluster != 1:  # refuse what cannot be clustered (causal, a bad size) by name, before looking for a GPU
        from tessera.kernels import flash_attention

        if k.shape[1] != q.shape[1] or num_splits != 1:
            raise ValueError("attention: cluster is supported for num_splits=1 and as many key heads as query "
                             "heads only")
        flash_attention(head_dim=head_dim, causal=causal, dtype=dtype, cluster=cluster)
    from tessera.runtime.serving import pack_gqa

    (batch, heads, seq_q, _), heads_k = q.shape, k.shape[1]
    packed = pack_gqa(seq_q, heads // heads_k, causal)
    if packed:
        # PackGQA: the group's heads are consecutive, so [batch, heads, seq_q, D] is [batch, heads_k, group x
        # seq_q, D] without a copy, one block's rows; a single query row sees the whole key range causal or not.
        q = q.reshape(batch, heads_k, heads // heads_k * seq_q, head_dim)
        causal = causal and seq_q > 1
    plan = attention_plan(q.shape, k.shape, head_dim, causal, dtype, scale, return_lse, num_splits,
                          grouped=heads_k != q.shape[1], cluster=cluster, bias_broadcast=bias_broadcast)
    inputs = (q, k, v) if bias is None else (q, k, v, bias)
    if level is not None:
        results = run_in_interpreter(plan, *inputs, level=level)
    else:
        from tessera.runtime import entry

        usable_device(inputs)  # no GPU, no compile
        outputs = entry.launch(compile_kernel(plan.forward), *inputs)
        if plan.combine is not None:
            with combine_lowering():
                combine = compile_kernel(plan.combine)
            outputs = entry.launch(combine, *plan.partials(outputs))
        results = plan.results(outputs)
    if not packed:
        return results
    if return_lse:
        o, lse = results
        return o.reshape(batch, heads, seq_q, head_dim), lse.reshape(batch, heads, seq_q)
    return results.reshape(batch, heads, seq_q, head_dim)
