"""The simulator-fidelity table of the GPU session: the same PTX on the GPU and in Tessera's PTX executor, on
the same inputs, compared in units in the last place (ULP) of each output's type, and each against a
float64 reference.

Two kinds of case:
- one compiled kernel (`flash_attention` forward, its cluster-2 form, GEMM): `compile_kernel(config)` gives
  the PTX text; the GPU runs it (`tessera.runtime.launch.run`) and the PTX executor runs that very text as
  the runtime launches it (`launch_described`, the host description's grid, block, tensor maps and
  parameters);
- a chain of kernels behind one entry point (backward: preprocess, main, postprocess; split-KV: split and
  combine; paged decoding; packed variable-length sequences), or one entry point's own host work (FP8: V
  rearranged into the kernel's layout, descales): the entry point with `level=None` (GPU) and `level="ptx"`,
  which lowers the same builders through the same pipeline and runs the printed PTX.
The GPU side records which kernels it compiled, so a case whose kernels differ from `case_configs` (the
session's compile list) says so (`planned: false`). The executor side is run ahead, on a machine without a
GPU (`python bench/gpu_session.py --prepare`, bench/gpu_prepared.py), and carried to the GPU session.

ULP distance: the integers that order the floats of a type (sign-magnitude to two's complement, -0 = +0)
subtracted; a NaN on one side only counts as infinitely far.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

ULP_BITS = {2: np.uint16, 4: np.uint32}


@dataclass(frozen=True)
class Case:
    """One row of the table: `kind` names how it runs (see the module docstring), `params` its shapes."""

    name: str
    kind: str
    params: dict = field(hash=False)
    seed: int = 0


def cases() -> list[Case]:
    ragged = dict(batch=1, heads=2, seq_q=200, seq_k=333)  # neither a multiple of the 128-row blocks
    found = [Case(f"forward-d{d}{'-causal' if causal else ''}", "forward", dict(ragged, head_dim=d, causal=causal), seed)
             for seed, (d, causal) in enumerate((d, c) for d in (64, 128, 256) for c in (False, True))]
    found += [
        Case("forward-varlen-d128", "varlen", dict(heads=2, head_dim=128, cu_seqlens_q=(0, 77, 200),
                                                   cu_seqlens_k=(0, 150, 333), causal=True), 10),
        Case("backward-d64-causal", "backward", dict(batch=1, heads=2, seq_q=150, seq_k=190, head_dim=64, causal=True), 11),
        Case("backward-d128", "backward", dict(batch=1, heads=2, seq_q=130, seq_k=257, head_dim=128, causal=False), 12),
        Case("split-kv-d128", "split", dict(batch=2, heads=2, seq_q=3, seq_k=700, head_dim=128, num_splits=3), 13),
        Case("paged-decode-d64", "paged", dict(batch=2, heads=4, heads_k=2, head_dim=64, pages=6, page_size=256,
                                               page_table=((3, 1), (0, 5)), cache_seqlens=(300, 77)), 14),
        Case("cluster2-d128", "cluster", dict(batch=1, heads=2, seq_q=256, seq_k=300, head_dim=128, causal=False), 15),
        Case("gemm-odd-k", "gemm", dict(M=300, N=200, K=77), 16),
        Case("gemm-odd-mn", "gemm", dict(M=333, N=136, K=200), 17),
        Case("fp8-gqa-d128-causal", "fp8", dict(batch=1, heads=2, heads_k=1, seq_q=200, seq_k=336, head_dim=128,
                                                causal=True), 18),
        # FlashAttention-3's other head dims (128 x 128 key blocks at 96, 128 x 112 at 192; the d192 backward's
        # main kernel split over two thread blocks a key block): never run on a GPU
        Case("forward-d96-causal", "forward", dict(ragged, head_dim=96, causal=True), 19),
        Case("forward-d192", "forward", dict(ragged, head_dim=192, causal=False), 20),
        Case("backward-d96", "backward", dict(batch=1, heads=2, seq_q=130, seq_k=257, head_dim=96, causal=False), 21),
        Case("backward-d192-causal", "backward", dict(batch=1, heads=2, seq_q=150, seq_k=190, head_dim=192,
                                                      causal=True), 22),
        # mask-causal-by-mma: the third query block sees key 0 (its diagonal added by the tensor core, -2^100
        # from a shared table, exactly -2^100 in the accumulator), the first two do not (the select, rows of
        # zeros): both paths of one kernel, never run on a GPU
        Case("forward-d128-causal-table", "forward", dict(batch=1, heads=2, seq_q=333, seq_k=200, head_dim=128,
                                                          causal=True), 23),
    ]
    return found


QUICK = ("forward-d64-causal", "backward-d64-causal", "split-kv-d128", "paged-decode-d64", "cluster2-d128",
         "gemm-odd-k", "gemm-odd-mn")
"""`--quick`: one case per kernel builder and launch path."""


def case_named(name: str) -> Case:
    return next(c for c in cases() if c.name == name)


# region Inputs and the kernels they need


def inputs(case: Case) -> dict[str, np.ndarray]:
    """The case's inputs, from its seed: bf16 arrays (and int32 tables), the same on every machine."""
    from tessera import reference_attention
    from tessera.numerics import BF16

    p, rng = case.params, np.random.default_rng(case.seed)

    def normal(*shape):
        return rng.standard_normal(shape).astype(BF16)

    if case.kind == "gemm":
        return {"a": normal(p["M"], p["K"]), "b": normal(p["K"], p["N"])}
    if case.kind == "varlen":
        total_q, total_k = p["cu_seqlens_q"][-1], p["cu_seqlens_k"][-1]
        return {"q": normal(total_q, p["heads"], p["head_dim"]), "k": normal(total_k, p["heads"], p["head_dim"]),
                "v": normal(total_k, p["heads"], p["head_dim"]),
                "cu_seqlens_q": np.array(p["cu_seqlens_q"], np.int32), "cu_seqlens_k": np.array(p["cu_seqlens_k"], np.int32)}
    if case.kind == "paged":
        cache = (p["pages"], p["page_size"], p["heads_k"], p["head_dim"])
        return {"q": normal(p["batch"], 1, p["heads"], p["head_dim"]), "k_cache": normal(*cache), "v_cache": normal(*cache),
                "cache_seqlens": np.array(p["cache_seqlens"], np.int32), "page_table": np.array(p["page_table"], np.int32)}
    b, h, d = p["batch"], p["heads"], p["head_dim"]
    if case.kind == "fp8":  # e4m3 q, k, v (GQA) and f32 descales, as FlashAttention-3's tests draw them
        from tessera.numerics import F8E4M3

        hk = p["heads_k"]
        arrays = {n: (rng.standard_normal((b, heads, p[seq], d)) * 3).astype(F8E4M3)
                  for n, heads, seq in (("q", h, "seq_q"), ("k", hk, "seq_k"), ("v", hk, "seq_k"))}
        return {**arrays, **{n: (rng.random((b, hk)) * 2).astype(np.float32) for n in FP8_DESCALES}}
    arrays = {"q": normal(b, h, p["seq_q"], d), "k": normal(b, h, p["seq_k"], d), "v": normal(b, h, p["seq_k"], d)}
    if case.kind == "backward":
        arrays["do"] = normal(b, h, p["seq_q"], d)
        arrays["o"] = reference_attention.attention(arrays["q"], arrays["k"], arrays["v"], p["causal"]).astype(BF16)
        arrays["lse"] = reference_attention.attention_lse(arrays["q"], arrays["k"], p["causal"]).astype(np.float32)
    return arrays


FP8_DESCALES = ("descale_q", "descale_k", "descale_v")


def case_configs(case: Case, arrays: dict | None = None) -> list:
    """The KernelConfigs the case runs (what the session compiles ahead)."""
    from gpu_plan import backward_configs, forward_config

    from tessera.kernels import AttentionConfig
    from tessera.runtime.attention import attention_config
    from tessera.runtime.attention_plan import attention_plan
    from tessera.runtime.compiler import KernelConfig
    from tessera.runtime.gemm import check_gemm_arguments

    p = case.params
    if case.kind == "forward":
        return [forward_config(p["head_dim"], p["causal"])]
    if case.kind == "fp8":
        from tessera.runtime.attention_fp8 import fp8_config

        return [fp8_config(p["head_dim"], p["causal"], None, p["heads_k"] != p["heads"], False, None)]
    if case.kind == "cluster":
        return [attention_config(p["head_dim"], False, "bf16", cluster=2)]
    if case.kind == "gemm":
        arrays = arrays if arrays is not None else inputs(case)
        return [check_gemm_arguments(arrays["a"], arrays["b"])]
    if case.kind == "backward":
        return backward_configs(p["head_dim"], p["causal"])
    if case.kind == "split":
        q_shape = (p["batch"], p["heads"], p["seq_q"], p["head_dim"])
        plan = attention_plan(q_shape, (p["batch"], p["heads"], p["seq_k"], p["head_dim"]), p["head_dim"], False,
                              "bf16", None, True, p["num_splits"])
        return [plan.forward, plan.combine]
    checked = AttentionConfig.checked(p["head_dim"], p["causal"] if case.kind == "varlen" else False, "bf16", None)
    if case.kind == "paged":
        return [KernelConfig.of("flash_attention_paged", head_dim=p["head_dim"], causal=False, dtype="bf16",
                                scale=checked.scale, page_size=p["page_size"])]
    return [KernelConfig.of("flash_attention_varlen", head_dim=p["head_dim"], causal=checked.causal, dtype="bf16",
                            scale=checked.scale)]


# endregion

# region Running a case


def execute_ptx(kernel, *arrays) -> tuple[np.ndarray, ...]:
    """The outputs of `kernel` (a `CompiledKernel`) on NumPy inputs, its PTX text run in the PTX executor as
    the runtime launches it on a GPU."""
    import tessera
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.ptx.launcher import launch_described

    module = getattr(tessera.kernels, kernel.config.builder)(**dict(kernel.config.options))
    sig = tessera.find_kernel(module)
    arguments, sizes = prepare_arguments(sig, arrays)
    launch_described(kernel.ptx, kernel.host, arguments, sizes, source=f"<ptx of {kernel.name}>")
    return tuple(a for a, arg in zip(arguments, sig.args) if arg.role == "out")


def run(case: Case, arrays: dict, level: str | None) -> dict[str, np.ndarray]:
    """The case's outputs on the GPU (`level` None) or in the PTX executor (`level` "ptx")."""
    import tessera

    p = case.params
    if case.kind in ("forward", "cluster", "gemm"):
        from tessera.runtime.compiler import compile_kernel
        from tessera.runtime.launch import run as run_on_gpu

        (config,) = case_configs(case, arrays)
        kernel = compile_kernel(config)
        operands = (arrays["a"], arrays["b"]) if case.kind == "gemm" else (arrays["q"], arrays["k"], arrays["v"])
        (out,) = (run_on_gpu(kernel, *operands),) if level is None else execute_ptx(kernel, *operands)
        return {"c" if case.kind == "gemm" else "o": out}
    if case.kind == "fp8":
        return {"o": tessera.attention(arrays["q"], arrays["k"], arrays["v"], causal=p["causal"], level=level,
                                       **{n: arrays[n] for n in FP8_DESCALES})}
    if case.kind == "backward":
        grads = tessera.attention_backward(*(arrays[n] for n in ("q", "k", "v", "o", "lse", "do")),
                                           causal=p["causal"], level=level)
        return dict(zip(("dq", "dk", "dv"), grads))
    if case.kind == "split":
        o, lse = tessera.attention(arrays["q"], arrays["k"], arrays["v"], num_splits=p["num_splits"], return_lse=True,
                                   level=level)
        return {"o": o, "lse": lse}
    if case.kind == "paged":
        return {"o": tessera.attention_with_kvcache(arrays["q"], arrays["k_cache"], arrays["v_cache"],
                                                    cache_seqlens=arrays["cache_seqlens"],
                                                    page_table=arrays["page_table"], level=level)}
    cu_q, cu_k = arrays["cu_seqlens_q"], arrays["cu_seqlens_k"]
    return {"o": tessera.attention(arrays["q"], arrays["k"], arrays["v"], causal=p["causal"], cu_seqlens_q=cu_q,
                                   cu_seqlens_k=cu_k, max_seqlen_q=int(np.diff(cu_q).max()),
                                   max_seqlen_k=int(np.diff(cu_k).max()), level=level)}


def reference(case: Case, arrays: dict) -> dict[str, np.ndarray]:
    """The float64 results the case's outputs approximate."""
    from tessera import reference_attention, reference_backward, reference_fp8, reference_gemm

    p = case.params
    if case.kind == "gemm":
        return {"c": reference_gemm.gemm(arrays["a"], arrays["b"])}
    if case.kind == "backward":
        return dict(zip(("dq", "dk", "dv"), reference_backward.attention_backward(arrays["q"], arrays["k"], arrays["v"], arrays["do"],
                                                                    p["causal"])))
    if case.kind == "fp8":
        return {"o": reference_fp8.attention_fp8(arrays["q"], arrays["k"], arrays["v"], *(arrays[n] for n in FP8_DESCALES),
                                       causal=p["causal"])}
    if case.kind == "split":
        return {"o": reference_attention.attention(arrays["q"], arrays["k"], arrays["v"]), "lse": reference_attention.attention_lse(arrays["q"], arrays["k"])}
    if case.kind == "paged":  # each sequence's keys gathered through its pages, key heads shared by their group
        q, size, o = arrays["q"], p["page_size"], []
        for b, length in enumerate(p["cache_seqlens"]):
            rows = [page * size + i for page in p["page_table"][b] for i in range(size)][:length]
            keys = [arrays[name].reshape(-1, p["heads_k"], p["head_dim"])[rows] for name in ("k_cache", "v_cache")]
            k, v = (np.repeat(x.transpose(1, 0, 2)[None], p["heads"] // p["heads_k"], axis=1) for x in keys)
            o.append(reference_attention.attention(q[b:b + 1].transpose(0, 2, 1, 3), k, v).transpose(0, 2, 1, 3))
        return {"o": np.concatenate(o)}
    if case.kind == "varlen":  # each packed sequence on its own, [total, heads, D]
        cu_q, cu_k, o = p["cu_seqlens_q"], p["cu_seqlens_k"], []
        for i in range(len(cu_q) - 1):
            q, k, v = (arrays[n][s:e].transpose(1, 0, 2)[None] for n, s, e in
                       (("q", cu_q[i], cu_q[i + 1]), ("k", cu_k[i], cu_k[i + 1]), ("v", cu_k[i], cu_k[i + 1])))
            o.append(reference_attention.attention(q, k, v, p["causal"])[0].transpose(1, 0, 2))
        return {"o": np.concatenate(o)}
    return {"o": reference_attention.attention(arrays["q"], arrays["k"], arrays["v"], p.get("causal", False))}


def executor_side(name: str) -> dict:
    """The PTX executor's outputs of the case `name` and its seconds (a process-pool job: inputs rebuilt
    from the seed)."""
    case = case_named(name)
    start = time.perf_counter()
    try:
        outputs = run(case, inputs(case), "ptx")
    except Exception as error:  # noqa: BLE001 - a failing case is a row of the table, not the end of the stage
        return {"name": name, "error": f"{type(error).__name__}: {str(error).strip().splitlines()[0]}"}
    return {"name": name, "outputs": {k: np.asarray(v) for k, v in outputs.items()},
            "seconds": time.perf_counter() - start}


# endregion

# region Comparing


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise distance between two float arrays of one 16- or 32-bit type, in units in the last place of
    that type (inf where exactly one side is NaN, 0 where both are)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.dtype.itemsize not in ULP_BITS:
        raise ValueError(f"ULP distance needs one 16- or 32-bit float type, got {a.dtype} and {b.dtype}")
    sign = 1 << (8 * a.dtype.itemsize - 1)

    def ordered(x):
        bits = np.ascontiguousarray(x).view(ULP_BITS[x.dtype.itemsize]).astype(np.int64)
        return np.where(bits & sign, -(bits & (sign - 1)), bits)

    distance = np.abs(ordered(a) - ordered(b)).astype(np.float64)
    nan_a, nan_b = np.isnan(a.astype(np.float32)), np.isnan(b.astype(np.float32))
    distance[nan_a != nan_b] = np.inf
    distance[nan_a & nan_b] = 0
    return distance


def _max_error(x, ref) -> float:
    diff = np.abs(np.asarray(x, np.float64) - ref)
    finite = np.isfinite(ref)
    diff = np.where(finite, diff, np.where(np.asarray(x, np.float64) == ref, 0.0, np.inf))
    return float(np.nan_to_num(diff, nan=np.inf).max()) if diff.size else 0.0


def compare(gpu: dict, ptx: dict, ref: dict | None) -> dict:
    """Per output: its type, the largest ULP distance GPU vs executor, how many elements differ, the largest
    absolute difference, and each side's largest error against the float64 reference."""
    table = {}
    for name, g in gpu.items():
        g, x = np.asarray(g), np.asarray(ptx[name])
        ulps = ulp_distance(g, x)
        row = {"dtype": str(g.dtype), "elements": int(g.size), "max_ulp": float(ulps.max()) if ulps.size else 0.0,
               "differing": int(np.count_nonzero(ulps)), "max_abs_diff": _max_error(g, x.astype(np.float64))}
        if ref is not None and name in ref:
            row["gpu_error"] = _max_error(g, ref[name])
            row["ptx_error"] = _max_error(x, ref[name])
        table[name] = row
    return table


# endregion
