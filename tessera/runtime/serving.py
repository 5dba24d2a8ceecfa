"""Attention for serving engines, shaped like FlashAttention's Python API: packed variable-length batches
(`attention_varlen`, which `tessera.attention(..., cu_seqlens_q=...)` calls) and the pieces the KV-cache API
(`tessera.runtime.kvcache`) shares with it: argument checks that name the argument, and running one of
`tessera.kernels`' builders on the GPU (`level=None`) or in an interpreter (`level="tile"`, `"target"`,
`"ptx"`: the same kernel, run by `tessera.interpret`).

    o = attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=None,
                         causal=False, scale=None, return_lse=False, num_splits=1, level=None)

q: [total_q, heads, head_dim]; k, v: [total_k, heads_k, head_dim] with heads % heads_k == 0 (query head h
reads key head h // (heads // heads_k)); cu_seqlens_q, cu_seqlens_k: int32 [batch + 1], non-decreasing,
sequence b's rows [cu_seqlens[b], cu_seqlens[b + 1]); seqused_k (optional, int32 [batch]): how many of
sequence b's keys count. o: [total_q, heads, head_dim], each sequence attending only to its own keys (causal
masks aligned bottom-right per sequence); rows no sequence covers are 0. With `return_lse=True` the call
returns (o, lse), lse the f32 [heads, total_q] natural log of each row's softmax denominator
(FlashAttention-3's varlen layout; -inf for a row that sees no key, whose o is 0, and for rows no sequence
covers). `num_splits` (1, an integer up to 256, or "auto": FlashAttention-3's heuristic,
`attention_split.choose_num_splits`, for batch x heads blocks of max_seqlen_q rows against max_seqlen_k keys)
splits each sequence's key range over that many thread blocks, whose partial results, in a scratch buffer
[num_splits, heads, total_q, ...], the combine kernel (`attention_combine`) merges.

The kernel's grid is ceildiv(max_seqlen_q, 128) query blocks per sequence (FlashAttention-3's), so
max_seqlen_q must be at least every sequence's length: that is checked on the host from cu_seqlens_q (a
CUDA tensor's values are copied to the host for it, the one synchronisation of the call; a value too small
would leave rows uncomputed).

The kernel (`tessera.kernels.attention_varlen`) takes head-major tensors: q, k, v are passed as transposed
views ([heads, total, head_dim]; a tensor map reads them through their strides, no copy on a GPU), the output
is made head-major and transposed back. Decoding batches (max_seqlen_q x group <= 128 rows, and
max_seqlen_q 1 or not causal: `pack_gqa`) are packed as FlashAttention-3's PackGQA: q is copied into
[heads_k, group x total_q, head_dim], sequence b's rows [group cu[b], group cu[b + 1]) holding its group's
query heads one after the other, so that one block reads each K/V tile once for the whole group. Values of index tables are checked where the host can read them
(NumPy arrays and CPU tensors); a CUDA tensor's are not read (that would synchronise), as in FlashAttention.
"""

from __future__ import annotations

import numpy as np

from tessera.index_tables import check_interval, check_longest, host_values

LEVELS = (None, "tile", "target", "ptx")
"""Where a serving kernel runs: None on the GPU, or in one of `tessera.interpret`'s interpreters."""


PACK_ROWS = 128
"""The query rows of one block (`DEFAULT_BLOCK_M`): PackGQA applies while seq_q x group fits in them."""


def pack_gqa(seq_q: int, group: int, causal: bool) -> bool:
    """Whether to pack a group's query heads into one block's rows (see the module docstring)."""
    return group > 1 and seq_q * group <= PACK_ROWS and (seq_q == 1 or not causal)


def is_torch(x) -> bool:
    from tessera.runtime.launch import is_torch_tensor

    return is_torch_tensor(x)


def check_level(where: str, level) -> None:
    if level not in LEVELS:
        raise ValueError(f"{where}: level must be None (the GPU), 'tile', 'target' or 'ptx'; got {level!r}")


def check_values(where: str, names: tuple[str, ...], arrays: tuple, rank: int, layout: str,
                 packed: bool = True) -> tuple[tuple[int, ...], ...]:
    """Shapes of real arrays/tensors of rank `rank` with no empty dimension but the first when `packed` (a
    packed tensor may hold no token; a batch or a cache of pages may not); TypeError/ValueError naming the
    argument otherwise."""
    from tessera.runtime.attention_base import check_tensor

    shapes = []
    for name, x in zip(names, arrays):
        shape = check_tensor(where, name, x)
        if len(shape) != rank:
            raise ValueError(f"{where}: {name} must be {rank}-D {layout}, got shape {tuple(shape)}")
        if any(int(d) <= 0 for d in shape[1 if packed else 0:]):
            raise ValueError(f"{where}: {name} has an empty dimension: shape {tuple(shape)}")
        shapes.append(tuple(int(d) for d in shape))
    return tuple(shapes)


def check_one_kind(where: str, named: dict) -> None:
    """ValueError naming the arguments unless the given ones (None skipped) are all NumPy arrays or all PyTorch
    tensors: the output takes q's kind, and a table of the other kind would be read as the wrong one."""
    given = {name: x for name, x in named.items() if x is not None}
    if len({is_torch(x) for x in given.values()}) > 1:
        kinds = ", ".join(f"{name} {'a PyTorch tensor' if is_torch(x) else type(x).__name__}" for name, x in given.items())
        raise ValueError(f"{where}: {', '.join(given)} must be all NumPy arrays or all PyTorch tensors, got {kinds}")


def element_type(where: str, named: dict) -> str:
    """The builders' dtype name ("bf16", "f16") shared by the arrays of `named`; ValueError naming them."""
    from tessera.runtime.attention_base import DTYPES, UnsupportedKernel
    from tessera.runtime.launch import dtype_name

    names = {name: dtype_name(x) for name, x in named.items()}
    if len(set(names.values())) != 1:
        raise ValueError(f"{where}: {', '.join(names)} must have one element type, got "
                         + ", ".join(f"{n} {t}" for n, t in names.items()))
    dtype = next(iter(names.values()))
    if dtype not in DTYPES:
        raise UnsupportedKernel(f"{where}: element type {dtype} is not supported (supported: {', '.join(DTYPES)})")
    return DTYPES[dtype]


def check_head_dim(where: str, head_dim: int) -> None:
    from tessera.kernels import HEAD_DIMS
    from tessera.runtime.attention_base import UnsupportedKernel

    if head_dim not in HEAD_DIMS:
        raise UnsupportedKernel(f"{where}: head_dim {head_dim} is not supported (supported: "
                                f"{', '.join(map(str, HEAD_DIMS))})")


def check_groups(where: str, heads: int, heads_k: int, q: str, k: str) -> None:
    if heads % heads_k:
        raise ValueError(f"{where}: the heads of {q} ({heads}) must be a multiple of the heads of {k} ({heads_k}) "
                         "(GQA/MQA: query head h reads key head h // (heads // heads_k))")


def check_table(where: str, name: str, x, length: int | None = None, rank: int = 1) -> np.ndarray | None:
    """An int32 table of `rank` dimensions (the first of size `length` when given): its host values or None."""
    from tessera.runtime.launch import dtype_name

    if x is None or isinstance(x, bool) or not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"{where}: {name} must be an int32 NumPy array or PyTorch tensor, got {type(x).__name__}")
    if isinstance(x, np.ma.MaskedArray):
        raise ValueError(f"{where}: {name} is a masked array")
    if dtype_name(x) != "int32":
        raise ValueError(f"{where}: {name} must hold int32, got {dtype_name(x)}")
    shape = tuple(int(d) for d in x.shape)
    if len(shape) != rank:
        raise ValueError(f"{where}: {name} must be {rank}-D, got shape {shape}")
    if length is not None and shape[0] != length:
        raise ValueError(f"{where}: {name} must have {length} entries along its first dimension, got shape {shape}")
    return host_values(x)


def check_cu_seqlens(where: str, name: str, x, batch_plus_one: int | None, total: int) -> np.ndarray | None:
    """cu_seqlens: int32 [batch + 1], non-decreasing, from >= 0 to <= total (checked where readable)."""
    values = check_table(where, name, x, batch_plus_one)
    if int(x.shape[0]) < 2:
        raise ValueError(f"{where}: {name} must have batch + 1 >= 2 entries, got {int(x.shape[0])}")
    if values is not None:  # each entry from the one before it (0 for the first) to the packed rows
        previous = np.concatenate([[0], values[:-1]]).astype(np.int64)
        check_interval(where, lambda b: f"{name}[{b}]", values, previous, total,
                       f"{name} being non-decreasing from >= 0 and ending within the {total} packed rows")
    return values


def check_max_seqlen(where: str, name: str, value, cu: np.ndarray | None) -> None:
    """`value` an int >= 0 and at least every sequence's length in `cu` (host values, or None)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"{where}: {name} must be an int >= 0, got {value!r}")
    if cu is not None:
        check_longest(where, name, int(value), np.diff(cu.astype(np.int64)))


def zeros_like(x):
    return np.zeros_like(x) if isinstance(x, np.ndarray) else x.new_zeros(x.shape)


def head_major(x):
    """[total, heads, D] -> [heads, total, D], a view (transpose)."""
    return x.transpose(1, 0, 2) if isinstance(x, np.ndarray) else x.transpose(0, 1)


def token_major(o):
    """[heads, total, D] -> a contiguous [total, heads, D]."""
    if isinstance(o, np.ndarray):
        return np.ascontiguousarray(o.transpose(1, 0, 2))
    return o.transpose(0, 1).contiguous()


def run_kernel(where: str, builder: str, options: dict, inputs: list, level, sizes: dict | None = None):
    """Run `tessera.kernels.<builder>(**options)` on `inputs` (its inputs in order) with the launch sizes
    `sizes` on the GPU (`level` None) or in an interpreter; returns its output or outputs."""
    if level is None:
        from tessera.runtime import entry
        from tessera.runtime.compiler import KernelConfig, compile_kernel
        from tessera.runtime.launch import usable_device

        usable_device(inputs)  # no GPU, no compile
        return entry.launch(compile_kernel(KernelConfig.of(builder, **options)), *inputs, **(sizes or {}))
    from tessera.runtime import entry
    from tessera.runtime.compiler import KernelConfig, built_module
    from tessera.runtime.launch import numpy_to_torch, torch_to_numpy

    torch_in = any(is_torch(x) for x in inputs)
    arrays = [torch_to_numpy(x.cpu()) if is_torch(x) else np.asarray(x) for x in inputs]
    out = entry.launch(built_module(KernelConfig.of(builder, **options)), *arrays, level=level, **(sizes or {}))
    if not torch_in:
        return out
    return tuple(numpy_to_torch(o) for o in out) if isinstance(out, tuple) else numpy_to_torch(out)


def run_packed(where: str, builder: str, options: dict, inputs: list, o_shape: tuple[int, int, int],
               starts, ends, max_rows: int, num_splits: int, return_lse: bool, level, paged: tuple[str, ...] = (),
               row_axis: int = 2, pages: int | None = None):
    """Run a packed kernel (`flash_attention_varlen` or `flash_attention_paged`, `options` without the LSE
    and split options) whose output O is `o_shape` [heads, total, D] with sequence z's rows [starts[z],
    ends[z]) and at most `max_rows` rows a sequence (its launch size max_seqlen_q); with num_splits > 1
    the split kernel writes its partial results [S x heads, total, ...] and `attention_combine` merges them,
    read as [S, 1, heads, total, ...]. In an interpreter the serving checks watch every output's rows (and
    the caches named in `paged`, as `sequence_checks` takes them), and at Tile level the blocks run in a
    permuted order (`_any_block_order`). Returns (o [heads, total, D], lse [heads, total] f32 or None)."""
    from tessera.runtime.attention_plan import combine_lowering

    heads, total, d = o_shape
    s = num_splits
    options = dict(options, **({"return_lse": True} if return_lse and s == 1 else {}),
                   **({"num_splits": s} if s > 1 else {}))
    if s > 1:
        checked = {"O_partial": ((s * heads, total, d), 4), "LSE_partial": ((s * heads, total, 1), 4)}
    else:
        checked = {"O": (o_shape, 2), **({"LSE": ((heads, total, 1), 4)} if return_lse else {})}
    with sequence_checks(level, starts, ends, checked, *paged, row_axis=row_axis, pages=pages), \
            _any_block_order(level):
        out = run_kernel(where, builder, options, inputs, level, {"max_seqlen_q": max_rows})
    if s > 1:
        o_partial, lse_partial = out
        combine = {"head_dim": d, "num_splits": s, "dtype": options["dtype"],
                   **({"return_lse": True} if return_lse else {})}
        parts = [o_partial.reshape(s, 1, heads, total, d), lse_partial.reshape(s, 1, heads, total, 1)]
        with combine_lowering():
            out = run_kernel(where, "attention_combine", combine, parts, level)
        out = tuple(x[0] for x in out) if return_lse else out[0]
    if not return_lse:
        return out, None
    o, lse = out
    return o, lse.reshape(heads, total)


def _any_block_order(level):
    """At Tile level, the packed kernel's blocks run in a seeded random order (`permuted_blocks`): its
    sequences' blocks must not depend on running after one another, as on a GPU."""
    from contextlib import nullcontext

    from tessera.interpreters.launch import permuted_blocks

    return permuted_blocks() if level == "tile" else nullcontext()


def _diff(a, b):
    return b - a


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=None,
                     causal: bool = False, scale: float | None = None, return_lse: bool = False,
                     num_splits: int | str = 1, level=None):
    """Attention over packed sequences; see the module docstring."""
    where = "attention"
    check_level(where, level)
    layout = "[total_tokens, heads, head_dim]"
    q_shape, k_shape, v_shape = check_values(where, ("q", "k", "v"), (q, k, v), 3, layout)
    if k_shape != v_shape:
        raise ValueError(f"{where}: k and v must have one shape {layout}, got {k_shape} and {v_shape}")
    if q_shape[2] != k_shape[2]:
        raise ValueError(f"{where}: q and k must have the same head_dim, got {q_shape[2]} and {k_shape[2]}")
    check_groups(where, q_shape[1], k_shape[1], "q", "k")
    check_head_dim(where, q_shape[2])
    dtype = element_type(where, {"q": q, "k": k, "v": v})
    check_one_kind(where, {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
                           "seqused_k": seqused_k})
    cu_q = check_cu_seqlens(where, "cu_seqlens_q", cu_seqlens_q, None, q_shape[0])
    cu_k = check_cu_seqlens(where, "cu_seqlens_k", cu_seqlens_k, int(cu_seqlens_q.shape[0]), k_shape[0])
    cu_q = readable(cu_seqlens_q).astype(np.int64) if cu_q is None else cu_q  # the grid needs the longest
    check_max_seqlen(where, "max_seqlen_q", max_seqlen_q, cu_q)
    check_max_seqlen(where, "max_seqlen_k", max_seqlen_k, cu_k)
    if not isinstance(return_lse, bool):
        raise ValueError(f"{where}: return_lse must be True or False; got {return_lse!r}")
    batch = int(cu_seqlens_q.shape[0]) - 1
    if seqused_k is not None:
        used = check_table(where, "seqused_k", seqused_k, batch)
        if used is not None and cu_k is not None:
            check_interval(where, lambda b: f"seqused_k[{b}]", used, 0, np.diff(cu_k.astype(np.int64)),
                           lambda b: f"between 0 and sequence {b}'s length in cu_seqlens_k")
    from tessera.kernels import AttentionConfig
    from tessera.runtime.attention_plan import resolve_num_splits

    heads, heads_k, head_dim = q_shape[1], k_shape[1], q_shape[2]
    group = heads // heads_k
    packed = pack_gqa(int(max_seqlen_q), group, causal)
    rows, q_heads = (group * int(max_seqlen_q), heads_k) if packed else (int(max_seqlen_q), heads)
    # (at least one row and key: an empty launch still checks num_splits, and launches nothing)
    splits = resolve_num_splits(num_splits, batch, q_heads, max(rows, 1), max(int(max_seqlen_k), 1), head_dim,
                                causal, where)
    checked = AttentionConfig.checked(head_dim, causal, dtype, scale, return_lse=return_lse, num_splits=splits)
    if q_shape[0] == 0 or k_shape[0] == 0 or rows == 0:  # nothing to launch: no query, or no key for any
        o = q * 0 if q_shape[0] == 0 else zeros_like(q)
        return (o, no_keys_lse(q, heads, q_shape[0])) if return_lse else o
    seqlen_k = seqused_k if seqused_k is not None else _diff(cu_seqlens_k[:-1], cu_seqlens_k[1:])
    if isinstance(seqlen_k, np.ndarray):
        seqlen_k = seqlen_k.astype(np.int32)
    tables = [cu_seqlens_q[:-1], cu_seqlens_q[1:], cu_seqlens_k[:-1], seqlen_k]
    options = {"head_dim": checked.head_dim, "causal": checked.causal, "dtype": checked.dtype, "scale": checked.scale}
    covered = (int(cu_q[0]), int(cu_q[-1]))  # the rows some sequence covers
    if packed:
        token_rows = packed_rows(cu_seqlens_q, group, q_shape[0])
        tables[:2] = [group * cu_seqlens_q[:-1], group * cu_seqlens_q[1:]]
        options["causal"] = False  # packing happens for causal attention only when every query row is the last
        inputs = [pack_heads(q, token_rows, heads_k), head_major(k), head_major(v), *tables]
        shape = (heads_k, group * q_shape[0], head_dim)
        o, lse = run_packed(where, "flash_attention_varlen", options, inputs, shape, tables[0], tables[1], rows,
                            splits, return_lse, level)
        o = unpack_heads(o, token_rows, q_shape)
        if not return_lse:
            return o
        lse = unpack_heads(lse[..., None], token_rows, (q_shape[0], heads, 1), float("-inf"))
        return o, token_major(lse)[:, :, 0]  # [total, heads, 1] -> [heads, total]
    inputs = [head_major(q), head_major(k), head_major(v), *tables]
    o, lse = run_packed(where, "flash_attention_varlen", options, inputs, (heads, q_shape[0], head_dim), tables[0],
                        tables[1], rows, splits, return_lse, level)
    clear_uncovered(o, lse, *covered)
    return (token_major(o), lse) if return_lse else token_major(o)


def no_keys_lse(like, heads: int, total: int):
    """The LSE [heads, total] f32 of rows that see no key: -inf, of the kind of `like` (NumPy or PyTorch)."""
    if isinstance(like, np.ndarray):
        return np.full((heads, total), -np.inf, np.float32)
    import torch

    return like.new_full((heads, total), float("-inf"), dtype=torch.float32)


def clear_uncovered(o, lse, first: int, last: int) -> None:
    """Rows outside [first, last) of a head-major output, which no sequence covers and no block writes (the GPU
    allocates outputs without clearing them): O = 0 and LSE = -inf, in place."""
    for x, value in ((o, 0), (lse, float("-inf"))):
        if x is not None:
            x[:, :first] = value
            x[:, last:] = value


def packed_rows(cu_seqlens, group: int, total: int):
    """PackGQA for packed sequences: (tokens, rows), the tokens that some sequence covers and, for each, the
    row [n, group] of query head i of its group in the packed Q: sequence b owns rows [group cu[b], group
    cu[b + 1]), head i of the group its i-th run of len_b rows, so one block's rows hold the group's heads."""
    lib = np if isinstance(cu_seqlens, np.ndarray) else __import__("torch")
    cu = cu_seqlens.astype(np.int64) if lib is np else cu_seqlens.long()
    lengths = cu[1:] - cu[:-1]
    arange = np.arange if lib is np else (lambda n: lib.arange(n, device=cu.device))
    sequence = np.repeat(arange(len(lengths)), lengths) if lib is np else \
        lib.repeat_interleave(arange(len(lengths)), lengths)
    tokens = cu[0] + arange(int(lengths.sum()))
    position = tokens - cu[sequence]
    heads = arange(group)
    rows = group * cu[sequence][:, None] + heads[None, :] * lengths[sequence][:, None] + position[:, None]
    return tokens, rows


def pack_heads(q, rows, heads_k: int):
    """q [total, heads, D] -> Q [heads_k, group x total, D] with q[t, g group + i] at Q[g, rows[t, i]]."""
    tokens, index = rows
    total, heads, d = q.shape
    group = heads // heads_k
    if isinstance(q, np.ndarray):
        packed = np.zeros((heads_k, group * total, d), q.dtype)
        packed[:, index.reshape(-1)] = q[tokens].reshape(-1, heads_k, group, d).transpose(1, 0, 2, 3).reshape(
            heads_k, -1, d)
        return packed
    packed = q.new_zeros((heads_k, group * total, d))
    packed[:, index.reshape(-1)] = q[tokens].reshape(-1, heads_k, group, d).permute(1, 0, 2, 3).reshape(heads_k, -1, d)
    return packed


def unpack_heads(o, rows, q_shape, fill: float = 0.0):
    """The inverse of `pack_heads` for the output: [heads_k, group x total, D] -> [total, heads, D] (rows of
    tokens no sequence covers are `fill`: 0 for O, -inf for the LSE)."""
    tokens, index = rows
    total, heads, d = q_shape
    heads_k = o.shape[0]
    gathered = o[:, index]  # [heads_k, n, group, D]
    if isinstance(o, np.ndarray):
        out = np.full(q_shape, fill, o.dtype)
        out[tokens] = gathered.transpose(1, 0, 2, 3).reshape(-1, heads, d)
        return out
    out = o.new_full(q_shape, fill)
    out[tokens] = gathered.permute(1, 0, 2, 3).reshape(-1, heads, d)
    return out


def readable(x) -> np.ndarray:
    """The values of a table, copied to the host if need be (for the interpreters)."""
    return x.cpu().numpy() if is_torch(x) else np.asarray(x)


def sequence_checks(level, starts, ends, outputs: dict[str, tuple[tuple[int, ...], int]], *paged: str,
                    row_axis: int = 2, pages: int | None = None):
    """In an interpreter, the `serving_checks` of the packed outputs `outputs` ({name: (shape [heads, total,
    ...], element bytes)}) whose sequence z owns rows [starts[z], ends[z]) of dimension 1, and of the paged
    caches named in `paged` (pages along dimension 0, `pages` of them, their rows along `row_axis`); on the
    GPU nothing."""
    from contextlib import nullcontext

    from tessera.interpreters.serving_checks import PagedCache, SequenceRows, checking

    if level is None:
        return nullcontext()
    starts, ends = readable(starts).astype(np.int64), readable(ends).astype(np.int64)
    rows = [SequenceRows(name, 1, starts, ends, shape, size) for name, (shape, size) in outputs.items()]
    return checking(*rows, *(PagedCache(name, row_axis=row_axis, pages=pages) for name in paged))
