"""A seeded sweep of shapes nobody picked, through the public entry points at Tile level, against float64 NumPy.

Each family draws its cases from `random.Random(seed)` over the lengths where kernels change behaviour (1, 2,
a tile's edge minus and plus one, 1000), GQA ratios, batches, splits, pages and layouts, and checks the result
with `tessera.reference`'s rules. `cases(family, seed, count)` lists the drawn cases (plain dicts, printable:
a failure names its seed and case), `run(family, case, seed, level)` runs one and returns a message per failed
check (empty when it passed); `level` "target" or "ptx" runs the same case in the CTA simulator or the PTX
executor. `tests/test_shape_sweep.py` runs a default slice and, under `-m slow`, the whole sweep
(docs/testing.md); `python tests/shape_sweep.py [--seed N] [--count N] [--level L] [family ...]` prints it,
a case a line.
"""

from __future__ import annotations

import random
import sys

import ml_dtypes
import numpy as np

import tessera
import tessera.kernels
from tessera import reference, reference_gemm

SEQ = (1, 2, 63, 65, 127, 129, 191, 1000)
"""Sequence lengths: one and two rows, either side of the 64- and 128-row tiles, 191 and one long sequence."""
HEAD_DIMS = (64, 128, 256)
"""The head_dims the sweep draws from (96 and 192, which the kernels take too, are tests/test_head_dims_96_192.py's)."""
GEMM_SIZES = (1, 7, 64, 65, 200, 1000)
DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}


def _long(r: random.Random, limit: int = 1000) -> int:
    """A sequence length from SEQ, the long one drawn rarely (it costs the most)."""
    return r.choice([s for s in SEQ if s < limit]) if r.random() < 0.85 else limit


def _attention_case(r: random.Random) -> dict:
    heads_k = r.choice((1, 1, 2))
    group = r.choice((1, 2, 4, 8))
    case = dict(batch=r.randint(1, 3), heads=heads_k * group, heads_k=heads_k, seq_q=_long(r), seq_k=_long(r),
                head_dim=r.choice(HEAD_DIMS), causal=r.random() < 0.5, dtype=r.choice(tuple(DTYPES)),
                num_splits=r.choice((1, 1, 2, 3, 16)))
    if case["head_dim"] == 256:
        case["num_splits"] = 1  # split-KV at 256 is refused by name (the partial O does not fit): REFUSALS
    if case["seq_q"] * case["seq_k"] * case["heads"] * case["batch"] > 3_000_000:
        case["seq_q"] = r.choice(SEQ[:4])
    return case


def _decode_case(r: random.Random) -> dict:
    case = _attention_case(r)
    case.update(seq_q=r.randint(1, 8), seq_k=_long(r), num_splits=r.choice((1, 2, 5, 40)))
    if case["head_dim"] == 256:
        case["num_splits"] = 1
    return case


def _lengths(r: random.Random, batch: int) -> list[int]:
    """Per-sequence lengths with zero-length sequences and, now and then, one long one."""
    lengths = [r.choice((0, 0) + SEQ[:-1]) for _ in range(batch)]
    if r.random() < 0.3:
        lengths[r.randrange(batch)] = 1000
    return lengths


def _varlen_case(r: random.Random) -> dict:
    batch = r.randint(1, 4)
    heads_k = r.choice((1, 2))
    return dict(lengths_q=_lengths(r, batch), lengths_k=_lengths(r, batch), heads=heads_k * r.choice((1, 2, 4, 8)),
                heads_k=heads_k, head_dim=r.choice(HEAD_DIMS[:2]), causal=r.random() < 0.5,
                dtype=r.choice(tuple(DTYPES)), num_splits=r.choice((1, 1, 3)))


def _paged_case(r: random.Random) -> dict:
    batch = r.randint(1, 3)
    heads_k = r.choice((1, 2))
    case = dict(batch=batch, seq_q=r.randint(1, 8), heads=heads_k * r.choice((1, 2, 4, 8)), heads_k=heads_k,
                head_dim=r.choice(HEAD_DIMS), page_size=r.choice((1, 3, 16, 48, 100, 128, 256)),
                lengths=[r.choice((0, 1, 63, 65, 129, 191, 300)) for _ in range(batch)],
                seq_new=r.choice((0, 0, 1, 3)), causal=r.random() < 0.5, dtype=r.choice(tuple(DTYPES)),
                num_splits=r.choice((1, 1, 3)), paged=r.random() < 0.8)
    if case["head_dim"] == 256:
        case["num_splits"] = 1
    return case


def _gemm_case(r: random.Random) -> dict:
    return dict(m=r.choice(GEMM_SIZES), n=r.choice(GEMM_SIZES), k=r.choice(GEMM_SIZES),
                transpose_a=r.random() < 0.5, transpose_b=r.random() < 0.5, dtype=r.choice(tuple(DTYPES)),
                batch=r.choice((None, None, 2)), epilogue=r.random() < 0.3)


def _fp8_case(r: random.Random) -> dict:
    heads_k = r.choice((1, 2))
    return dict(batch=r.randint(1, 2), heads=heads_k * r.choice((1, 2, 4)), heads_k=heads_k, seq_q=_long(r),
                seq_k=_long(r), head_dim=r.choice(HEAD_DIMS), causal=r.random() < 0.5)


def _backward_case(r: random.Random) -> dict:
    heads_k = r.choice((1, 2))
    return dict(batch=r.randint(1, 2), heads=heads_k * r.choice((1, 2, 4)), heads_k=heads_k, seq_q=_long(r),
                seq_k=_long(r), head_dim=r.choice(HEAD_DIMS[:2]), causal=r.random() < 0.5,
                dtype=r.choice(tuple(DTYPES)))


def _multipass_case(r: random.Random) -> dict:
    case = dict(builder=r.choice(("two_pass_attention", "three_pass_attention")), batch=r.randint(1, 2),
                heads=r.choice((1, 3)), seq_q=_long(r), seq_k=_long(r), head_dim=r.choice(HEAD_DIMS),
                causal=r.random() < 0.5, dtype=r.choice(tuple(DTYPES)))
    if case["seq_q"] * case["seq_k"] * case["heads"] * case["batch"] > 1_000_000:
        case["seq_q"] = r.choice(SEQ[:4])
    return case


def _draw(x: tuple[int, ...], rng: np.random.Generator, dtype) -> np.ndarray:
    return rng.standard_normal(x).astype(dtype)


def _check(name: str, comparison) -> list[str]:
    return [] if comparison.ok else [f"{name}: {comparison}"]


def run_attention(case: dict, rng: np.random.Generator, level: str = "tile") -> list[str]:
    """tessera.attention (dense, GQA, split-KV) with its LSE against float64."""
    dtype = DTYPES[case["dtype"]]
    b, h, hk, sq, sk, d = (case[n] for n in ("batch", "heads", "heads_k", "seq_q", "seq_k", "head_dim"))
    q, k, v = _draw((b, h, sq, d), rng, dtype), _draw((b, hk, sk, d), rng, dtype), _draw((b, hk, sk, d), rng, dtype)
    o, lse = tessera.attention(q, k, v, causal=case["causal"], return_lse=True, num_splits=case["num_splits"],
                               level=level)
    kk, vv = (np.repeat(x, h // hk, axis=1) for x in (k, v))
    return (_check("o", reference.check_attention(o, q, kk, vv, dtype, causal=case["causal"]))
            + _check("lse", reference.check_lse(lse, q, kk, dtype, causal=case["causal"])))


def run_varlen(case: dict, rng: np.random.Generator, level: str = "tile") -> list[str]:
    """Packed sequences (cu_seqlens) with zero-length sequences, against each sequence's own reference."""
    dtype = DTYPES[case["dtype"]]
    h, hk, d = case["heads"], case["heads_k"], case["head_dim"]
    cu_q, cu_k = (np.concatenate([[0], np.cumsum(case[n])]).astype(np.int32) for n in ("lengths_q", "lengths_k"))
    q = _draw((int(cu_q[-1]), h, d), rng, dtype)
    k, v = _draw((int(cu_k[-1]), hk, d), rng, dtype), _draw((int(cu_k[-1]), hk, d), rng, dtype)
    o, lse = tessera.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(case["lengths_q"]),
                               max_seqlen_k=max(case["lengths_k"]), causal=case["causal"], return_lse=True,
                               num_splits=case["num_splits"], level=level)
    messages = []
    for b, result in enumerate(reference.check_packed_attention(o, lse, q, k, v, cu_q, cu_k, dtype,
                                                                 causal=case["causal"])):
        if result is not None:
            messages += _check(f"sequence {b} o", result[0]) + _check(f"sequence {b} lse", result[1])
    return messages


def run_paged(case: dict, rng: np.random.Generator, level: str = "tile") -> list[str]:
    """attention_with_kvcache through a permuted page table (pages not dividing the length), appending k_new,
    against float64 attention on each sequence's gathered keys."""
    dtype = DTYPES[case["dtype"]]
    b, sq, h, hk, d, page = (case[n] for n in ("batch", "seq_q", "heads", "heads_k", "head_dim", "page_size"))
    lengths, seq_new = np.array(case["lengths"], np.int32), case["seq_new"]
    keys = [int(n) + seq_new for n in lengths]
    if case["paged"]:
        max_pages = max(1, -(-max(keys) // page))
        order = rng.permutation(b * max_pages + 2).astype(np.int32)  # two spare pages nobody's table names
        table = order[: b * max_pages].reshape(b, max_pages)
        shape = (b * max_pages + 2, page, hk, d)
    else:
        table, shape = None, (b, max(max(keys), 1), hk, d)
    k_cache, v_cache = _draw(shape, rng, dtype), _draw(shape, rng, dtype)
    q = _draw((b, sq, h, d), rng, dtype)
    k_new, v_new = (_draw((b, seq_new, hk, d), rng, dtype) for _ in range(2)) if seq_new else (None, None)

    def gathered(cache: np.ndarray, s: int, new) -> np.ndarray:
        rows = cache[table[s]].reshape(-1, hk, d) if table is not None else cache[s]
        rows = rows[: lengths[s]]
        return np.concatenate([rows, new[s]]) if new is not None else rows

    expect = [(gathered(k_cache, s, k_new), gathered(v_cache, s, v_new)) for s in range(b)]
    o, lse = tessera.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths, page_table=table,
                                            k_new=k_new, v_new=v_new, causal=case["causal"],
                                            num_splits=case["num_splits"], return_lse=True, level=level)
    messages = []
    for s, (ks, vs) in enumerate(expect):
        qh = q[s].transpose(1, 0, 2)[None]
        kh, vh = (np.repeat(x.transpose(1, 0, 2)[None], h // hk, axis=1) for x in (ks, vs))
        oh = o[s].transpose(1, 0, 2)[None]
        if ks.shape[0] == 0:
            empty = np.all(np.asarray(oh, np.float64) == 0) and np.all(np.isneginf(lse[s]))
            messages += [] if empty else [f"sequence {s}: no key, but O != 0 or LSE != -inf"]
            continue
        messages += _check(f"sequence {s} o", reference.check_attention(oh, qh, kh, vh, dtype, causal=case["causal"]))
        messages += _check(f"sequence {s} lse", reference.check_lse(lse[s][None], qh, kh, dtype, causal=case["causal"]))
    return messages


def run_gemm(case: dict, rng: np.random.Generator, level: str = "tile") -> list[str]:
    """tessera.gemm in every layout, batched or not, with and without the alpha/beta/bias epilogue."""
    dtype = DTYPES[case["dtype"]]
    epilogue = dict(alpha=0.5, beta=-1.5) if case["epilogue"] else {}
    inputs, options = reference_gemm.gemm_operands(rng, case["m"], case["n"], case["k"], transpose_a=case["transpose_a"],
                                              transpose_b=case["transpose_b"], batch=case["batch"], **epilogue)
    a, b = (x.astype(dtype) for x in inputs[:2])
    extra = dict(c=inputs[2], bias=inputs[3], **epilogue) if epilogue else {}
    out = tessera.gemm(a, b, transpose_a=case["transpose_a"], transpose_b=case["transpose_b"], level=level, **extra)
    return _check("c", reference.check_gemm(out, a, b, dtype, **options))


def run_fp8(case: dict, rng: np.random.Generator, level: str = "tile") -> list[str]:
    """FP8 (e4m3) attention with descales, GQA and odd lengths, O and LSE by the FP8 rules."""
    e4m3 = ml_dtypes.float8_e4m3fn
    b, h, hk, sq, sk, d = (case[n] for n in ("batch", "heads", "heads_k", "seq_q", "seq_k", "head_dim"))
    q = (rng.standard_normal((b, h, sq, d)) * 3).astype(e4m3)
    k, v = ((rng.standard_normal((b, hk, sk, d)) * 3).astype(e4m3) for _ in range(2))
    dq, dk, dv = ((rng.random((b, hk)) * 2).astype(np.float32) for _ in range(3))
    o, lse = tessera.attention(q, k, v, causal=case["causal"], descale_q=dq, descale_k=dk, descale_v=dv,
                               return_lse=True, level=level)
    return (_check("o", reference.check_attention_fp8(o, q, k, v, dq, dk, dv, causal=case["causal"]))
            + _check("lse", reference.check_lse_fp8(lse, q, k, dq, dk, causal=case["causal"])))


def run_backward(case: dict, rng: np.random.Generator, level: str = "tile") -> list[str]:
    """attention_backward (dropout-free) on the forward's own O and LSE, dQ/dK/dV by the backward's rule."""
    dtype = DTYPES[case["dtype"]]
    b, h, hk, sq, sk, d = (case[n] for n in ("batch", "heads", "heads_k", "seq_q", "seq_k", "head_dim"))
    q, do = _draw((b, h, sq, d), rng, dtype), _draw((b, h, sq, d), rng, dtype)
    k, v = _draw((b, hk, sk, d), rng, dtype), _draw((b, hk, sk, d), rng, dtype)
    o, lse = tessera.attention(q, k, v, causal=case["causal"], return_lse=True, level=level)
    grads = tessera.attention_backward(q, k, v, o, lse, do, causal=case["causal"], level=level)
    dq, dk, dv = reference.check_attention_backward(grads, q, k, v, o, do, dtype, causal=case["causal"])
    return _check("dq", dq) + _check("dk", dk) + _check("dv", dv)


def run_multipass(case: dict, rng: np.random.Generator, level: str = "tile") -> list[str]:
    """The two- and three-pass kernel builders through tessera.launch (their scratch buffers sized by it)."""
    dtype = DTYPES[case["dtype"]]
    b, h, sq, sk, d = (case[n] for n in ("batch", "heads", "seq_q", "seq_k", "head_dim"))
    q, k, v = _draw((b, h, sq, d), rng, dtype), _draw((b, h, sk, d), rng, dtype), _draw((b, h, sk, d), rng, dtype)
    module = getattr(tessera.kernels, case["builder"])(head_dim=d, causal=case["causal"], dtype=case["dtype"])
    o = tessera.launch(module, q, k, v, level=level)
    o = o[0] if isinstance(o, tuple) else o
    return _check("o", reference.check_attention(o, q, k, v, dtype, causal=case["causal"]))


FAMILIES = {
    "attention": (_attention_case, run_attention),
    "decode": (_decode_case, run_attention),
    "varlen": (_varlen_case, run_varlen),
    "paged": (_paged_case, run_paged),
    "gemm": (_gemm_case, run_gemm),
    "fp8": (_fp8_case, run_fp8),
    "backward": (_backward_case, run_backward),
    "multipass": (_multipass_case, run_multipass),
}


def cases(family: str, seed: int, count: int) -> list[dict]:
    """`count` cases of `family` drawn from `seed` (the same list on every machine)."""
    r = random.Random(f"{family}:{seed}")
    return [FAMILIES[family][0](r) for _ in range(count)]


def run(family: str, case: dict, seed: int = 0, level: str = "tile") -> list[str]:
    """Run one case at `level` ("tile", "target", "ptx"); the messages of the checks it failed."""
    return FAMILIES[family][1](case, np.random.default_rng(seed), level)


def cost(case: dict) -> int:
    """A rough size of a case (the product of its sizes, lists summed): the default slice takes small ones."""
    size = 1
    for value in case.values():
        if isinstance(value, list):
            value = sum(value) + 1
        if isinstance(value, int) and not isinstance(value, bool):
            size *= max(value, 1)
    return size


def main(argv: list[str]) -> int:
    import argparse
    import time

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--level", default="tile", choices=("tile", "target", "ptx"))
    parser.add_argument("families", nargs="*", default=list(FAMILIES))
    args = parser.parse_args(argv)
    print(f"seed {args.seed}")
    failed = 0
    for family in args.families:
        for i, case in enumerate(cases(family, args.seed, args.count)):
            start = time.perf_counter()
            try:
                messages = run(family, case, args.seed, args.level)
            except Exception as error:  # a traceback is a finding too: print it as one
                messages = [f"{type(error).__name__}: {error}"]
            failed += bool(messages)
            print(f"{family}[{i}] {'FAIL' if messages else 'ok'} {time.perf_counter() - start:.2f}s {case}"
                  + "".join(f"\n    {m}" for m in messages), flush=True)
    print(f"{failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
