"""Attention for serving engines, shaped like FlashAttention's Python API: packed variable-length batches
(`attention_varlen`, which `tessera.attention(..., cu_seqlens_q=...)` calls) and the pieces the KV-cache API
(`tessera.runtime.kvcache`) shares with it: argument checks that name the argument, and running one of
`tessera.kernels`' builders on the GPU (`level=None`) or in an interpreter (`level="tile"`, `"target"`,
`"ptx"`: the same kernel, run by `tessera.interpret`).

    o = attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=None,
                         causal=False, scale=None, level=None)

q: [total_q, heads, head_dim]; k, v: [total_k, heads_k, head_dim] with heads % heads_k == 0 (query head h
reads key head h // (heads // heads_k)); cu_seqlens_q, cu_seqlens_k: int32 [batch + 1], non-decreasing,
sequence b's rows [cu_seqlens[b], cu_seqlens[b + 1]); seqused_k (optional, int32 [batch]): how many of
sequence b's keys count. o: [total_q, heads, head_dim], each sequence attending only to its own keys (causal
masks aligned bottom-right per sequence); rows no sequence covers are 0.

The kernel (`tessera.kernels.attention_varlen`) takes head-major tensors: q, k, v are passed as transposed
views ([heads, total, head_dim]; a tensor map reads them through their strides, no copy on a GPU), the output
is made head-major and transposed back. Decoding batches (max_seqlen_q x group <= 128 rows, and
max_seqlen_q 1 or not causal: `kvcache.pack_gqa`) are packed as FlashAttention-3's PackGQA: q is copied into
[heads_k, group x total_q, head_dim], sequence b's rows [group cu[b], group cu[b + 1]) holding its group's
query heads one after the other, so that one block reads each K/V tile once for the whole group. Values of index tables are checked where the host can read them
(NumPy arrays and CPU tensors); a CUDA tensor's are not read (that would synchronise), as in FlashAttention.
"""

from __future__ import annotations

import numpy as np

LEVELS = (None, "tile", "target", "ptx")
"""Where a serving kernel runs: None on the GPU, or in one of `tessera.interpret`'s interpreters."""


def is_torch(x) -> bool:
    from tessera.runtime.launch import is_torch_tensor

    return is_torch_tensor(x)


def check_level(where: str, level) -> None:
    if level not in LEVELS:
        raise ValueError(f"{where}: level must be None (the GPU), 'tile', 'target' or 'ptx'; got {level!r}")


def check_values(where: str, names: tuple[str, ...], arrays: tuple, rank: int, layout: str) -> tuple[tuple[int, ...], ...]:
    """Shapes of real arrays/tensors of rank `rank` with no empty dimension but the first (a packed tensor may
    hold no token); TypeError/ValueError naming the argument otherwise."""
    from tessera.runtime.attention import check_tensor

    shapes = []
    for name, x in zip(names, arrays):
        shape = check_tensor(where, name, x)
        if len(shape) != rank:
            raise ValueError(f"{where}: {name} must be {rank}-D {layout}, got shape {tuple(shape)}")
        if any(int(d) <= 0 for d in shape[1:]):
            raise ValueError(f"{where}: {name} has an empty dimension: shape {tuple(shape)}")
        shapes.append(tuple(int(d) for d in shape))
    return tuple(shapes)


def element_type(where: str, named: dict) -> str:
    """The builders' dtype name ("bf16", "f16") shared by the arrays of `named`; ValueError naming them."""
    from tessera.runtime.attention import DTYPES, UnsupportedKernel
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
    from tessera.runtime.attention import UnsupportedKernel

    if head_dim not in HEAD_DIMS:
        raise UnsupportedKernel(f"{where}: head_dim {head_dim} is not supported (supported: "
                                f"{', '.join(map(str, HEAD_DIMS))})")


def check_groups(where: str, heads: int, heads_k: int, q: str, k: str) -> None:
    if heads % heads_k:
        raise ValueError(f"{where}: the heads of {q} ({heads}) must be a multiple of the heads of {k} ({heads_k}) "
                         "(GQA/MQA: query head h reads key head h // (heads // heads_k))")


def host_values(x) -> np.ndarray | None:
    """The values of an index table the host can read (NumPy, CPU tensor), else None (a CUDA tensor)."""
    if is_torch(x):
        return None if x.is_cuda else x.numpy()
    return np.asarray(x)


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
    if values is not None:
        if values[0] < 0 or np.any(np.diff(values) < 0):
            raise ValueError(f"{where}: {name} must be non-decreasing from >= 0, got {values.tolist()}")
        if values[-1] > total:
            raise ValueError(f"{where}: {name} ends at {int(values[-1])}, past the {total} packed rows")
    return values


def check_max_seqlen(where: str, name: str, value, cu: np.ndarray | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise ValueError(f"{where}: {name} must be an int >= 0, got {value!r}")
    if cu is not None and len(cu) > 1 and int(np.max(np.diff(cu))) > value:
        raise ValueError(f"{where}: {name} = {value} is smaller than the longest sequence "
                         f"({int(np.max(np.diff(cu)))})")


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


def run_kernel(where: str, builder: str, options: dict, inputs: list, level):
    """Run `tessera.kernels.<builder>(**options)` on `inputs` (its inputs in order) on the GPU (`level` None) or
    in an interpreter; returns its output (head-major [heads, total_q, D])."""
    if level is None:
        from tessera.runtime.compiler import KernelConfig, compile_kernel
        from tessera.runtime.launch import run, usable_device

        usable_device(inputs)  # no GPU, no compile
        return run(compile_kernel(KernelConfig.of(builder, **options)), *inputs)
    import tessera
    from tessera.runtime.launch import numpy_to_torch, torch_to_numpy

    torch_in = any(is_torch(x) for x in inputs)
    arrays = [torch_to_numpy(x.cpu()) if is_torch(x) else np.asarray(x) for x in inputs]
    module = getattr(tessera.kernels, builder)(**options)
    out = tessera.interpret(module, *arrays, level=level)
    return numpy_to_torch(out) if torch_in else out


def _diff(a, b):
    return b - a


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=None,
                     causal: bool = False, scale: float | None = None, level=None):
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
    cu_q = check_cu_seqlens(where, "cu_seqlens_q", cu_seqlens_q, None, q_shape[0])
    cu_k = check_cu_seqlens(where, "cu_seqlens_k", cu_seqlens_k, int(cu_seqlens_q.shape[0]), k_shape[0])
    check_max_seqlen(where, "max_seqlen_q", max_seqlen_q, cu_q)
    check_max_seqlen(where, "max_seqlen_k", max_seqlen_k, cu_k)
    batch = int(cu_seqlens_q.shape[0]) - 1
    if seqused_k is not None:
        used = check_table(where, "seqused_k", seqused_k, batch)
        if used is not None and cu_k is not None and (np.any(used < 0) or np.any(used > np.diff(cu_k))):
            raise ValueError(f"{where}: seqused_k must lie between 0 and each sequence's length in cu_seqlens_k, "
                             f"got {used.tolist()} for lengths {np.diff(cu_k).tolist()}")
    if q_shape[0] == 0 or k_shape[0] == 0:  # nothing to launch: no query, or no key for any (rows of 0)
        return q * 0 if q_shape[0] == 0 else zeros_like(q)
    from tessera.kernels import AttentionConfig

    checked = AttentionConfig.checked(q_shape[2], causal, dtype, scale)
    seqlen_k = seqused_k if seqused_k is not None else _diff(cu_seqlens_k[:-1], cu_seqlens_k[1:])
    if isinstance(seqlen_k, np.ndarray):
        seqlen_k = seqlen_k.astype(np.int32)
    tables = [cu_seqlens_q[:-1], cu_seqlens_q[1:], cu_seqlens_k[:-1], seqlen_k]
    options = {"head_dim": checked.head_dim, "causal": checked.causal, "dtype": checked.dtype, "scale": checked.scale}
    from tessera.runtime.kvcache import pack_gqa

    group = q_shape[1] // k_shape[1]
    if pack_gqa(int(max_seqlen_q), group, causal):
        rows = packed_rows(cu_seqlens_q, group, q_shape[0])
        tables[:2] = [group * cu_seqlens_q[:-1], group * cu_seqlens_q[1:]]
        options["causal"] = False  # packing happens for causal attention only when every query row is the last
        inputs = [pack_heads(q, rows, k_shape[1]), head_major(k), head_major(v), *tables]
        shape = (k_shape[1], group * q_shape[0], q_shape[2])
        with sequence_checks(level, tables[0], tables[1], shape):
            o = run_kernel(where, "flash_attention_varlen", options, inputs, level)
        return unpack_heads(o, rows, q_shape)
    inputs = [head_major(q), head_major(k), head_major(v), *tables]
    with sequence_checks(level, tables[0], tables[1], (q_shape[1], q_shape[0], q_shape[2])):
        o = run_kernel(where, "flash_attention_varlen", options, inputs, level)
    return token_major(o)


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


def unpack_heads(o, rows, q_shape):
    """The inverse of `pack_heads` for the output: [heads_k, group x total, D] -> [total, heads, D] (rows of
    tokens no sequence covers are 0, as the kernel leaves them)."""
    tokens, index = rows
    total, heads, d = q_shape
    heads_k = o.shape[0]
    gathered = o[:, index]  # [heads_k, n, group, D]
    if isinstance(o, np.ndarray):
        out = np.zeros(q_shape, o.dtype)
        out[tokens] = gathered.transpose(1, 0, 2, 3).reshape(-1, heads, d)
        return out
    out = o.new_zeros(q_shape)
    out[tokens] = gathered.permute(1, 0, 2, 3).reshape(-1, heads, d)
    return out


def readable(x) -> np.ndarray:
    """The values of a table, copied to the host if need be (for the interpreters)."""
    return x.cpu().numpy() if is_torch(x) else np.asarray(x)


def sequence_checks(level, starts, ends, o_shape: tuple[int, ...], *paged: str, row_axis: int = 2,
                    pages: int | None = None):
    """In an interpreter, the `serving_checks` of a packed output O of `o_shape` ([heads, total_q, D], 16-bit)
    whose sequence z owns rows [starts[z], ends[z]), and of the paged caches named in `paged` (pages along
    dimension 0, `pages` of them, their rows along `row_axis`); on the GPU nothing."""
    from contextlib import nullcontext

    from tessera.interpreters.serving_checks import PagedCache, SequenceRows, checking

    if level is None:
        return nullcontext()
    rows = SequenceRows("O", 1, readable(starts).astype(np.int64), readable(ends).astype(np.int64), o_shape, 2)
    return checking(rows, *(PagedCache(name, row_axis=row_axis, pages=pages) for name in paged))
