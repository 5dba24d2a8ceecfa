"""Kernels the race detector is tried on beyond the warp-specialized flash kernel (tests/race_seeds.py seeds
them; tests/test_ptx_race_matrix.py and bench/races.py run them): Tessera's GEMM (any-shape: st.shared, proxy
fence, wgmma; and the default pipeline: TMA producer, consumer warpgroups), Tessera's flash attention in
clusters of two (multicast TMA, remote releases) and split over the keys (split-KV, partial outputs), and Triton's PTX (a TMA matmul, the tutorial flash
attention forward with cp.async). `KERNELS[name]()` gives `(text, run)`: the unseeded PTX and `run(text)`,
which launches a text and returns whether the output matches NumPy; a hazard propagates."""

from __future__ import annotations

import warnings
from functools import lru_cache

import numpy as np

import tessera
from tessera import find_kernel, reference
from tessera.host import describe
from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx.launcher import launch_described


@lru_cache(maxsize=None)
def _tessera(builder: str, pipeline_name: str | None, **kw):
    from tessera import passes

    module = getattr(tessera.kernels, builder)(**kw)
    pipeline = None if pipeline_name is None else getattr(passes, pipeline_name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = tessera.compile(module, target="target", pipeline=pipeline)
        text = tessera.compile(module, target="ptx", pipeline=pipeline)
    return find_kernel(module), describe(lowered)[0], text


def _launch(compiled, text, inputs):
    sig, host, _ = compiled
    arrays, sizes = prepare_arguments(sig, inputs)
    launch_described(text, host, arrays, sizes, source="seeded.ptx")
    return arrays


def _gemm(pipeline_name, shape, **kw):
    def make():
        compiled = _tessera("gemm", pipeline_name, **kw)

        def run(text):
            rng = np.random.default_rng(0)
            a, b = rng.standard_normal(shape[:2]), rng.standard_normal(shape[1:])
            arrays = _launch(compiled, text, [a, b])
            return reference.check_gemm(arrays[2], arrays[0], arrays[1], arrays[0].dtype).ok
        return compiled[2], run
    return make


def _flash_cluster():
    compiled = _tessera("flash_attention", None, head_dim=64, dtype="bf16", cluster=2)

    def run(text):
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal((1, 1, n, 64)) for n in (256, 300, 300))
        arrays = _launch(compiled, text, [q, k, v])
        return reference.check_attention(arrays[3], *arrays[:3], arrays[0].dtype, causal=False).ok
    return compiled[2], run


def _split_kv():
    """The split-KV kernel (3 parts of the keys, partial O and LSE), combined in NumPy."""
    compiled = _tessera("flash_attention", None, head_dim=64, dtype="bf16", causal=True, num_splits=3)

    def run(text):
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal((1, 1, n, 64)) for n in (3, 700, 700))
        arrays = _launch(compiled, text, [q, k, v])
        o_parts, lse_parts = (x.reshape((3, 1) + x.shape[1:]).astype(np.float64) for x in arrays[3:5])
        lse = np.logaddexp.reduce(lse_parts, axis=0)
        o = (np.exp(lse_parts - lse) * o_parts).sum(axis=0)
        return reference.check_attention(o, *arrays[:3], arrays[0].dtype, causal=True).ok
    return compiled[2], run


def _triton(name):
    def make():
        import test_ptx_external as external

        text = external.source(name)

        def run(seeded):
            rng = np.random.default_rng(0)
            threads, shared = external.header_launch(seeded)
            hidden = [np.zeros(0, np.uint8), np.zeros(0, np.uint8)]
            if name == "triton_matmul_tma":
                m, n, k = 128, 64, 192
                a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((n, k)).astype(np.float16)
                c = np.zeros((m, n), np.float16)
                args = [*external.descriptor_args(a), *external.descriptor_args(b), *external.descriptor_args(c), k]
                out = tessera.interpreters.ptx.launch(seeded, "matmul_tma_kernel", (m // 64, n // 64, 1),
                                                      (threads, 1, 1), [*args, *hidden], shared_bytes=shared,
                                                      source="seeded.ptx")
                exact = a.astype(np.float64) @ b.astype(np.float64).T
                return bool(np.allclose(out[10].astype(np.float64), exact, rtol=2e-3, atol=2e-3))
            z, h, n, d = 1, 2, 128, 64
            q, k, v = (rng.standard_normal((z, h, n, d)).astype(np.float16) for _ in range(3))
            strides = [h * n * d, n * d, d]
            out = tessera.interpreters.ptx.launch(
                seeded, "_attn_fwd", (n // 64, z * h, 1), (threads, 1, 1),
                [q, k, v, np.float32(0.5), np.zeros(z * h * n, np.float32), np.zeros_like(q), *strides * 4, z, h,
                 *hidden], shared_bytes=shared, source="seeded.ptx")
            s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2) * 0.5
            s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            expected = p / p.sum(-1, keepdims=True) @ v.astype(np.float64)
            return bool(np.allclose(out[5].astype(np.float64), expected, rtol=1e-2, atol=1e-2))
        return text, run
    return make


KERNELS = {
    "tessera gemm (any shape, st.shared + fence.proxy.async)": _gemm("PTX_PIPELINE", (70, 40, 24), dtype="bf16",
                                                                      aligned=False),
    "tessera gemm (default pipeline)": _gemm(None, (256, 128, 128), dtype="bf16"),
    "tessera flash attention, clusters of 2": _flash_cluster,
    "tessera split-KV attention (3 parts)": _split_kv,
    "triton matmul (TMA)": _triton("triton_matmul_tma"),
    "triton flash attention forward (cp.async)": _triton("triton_attention_fwd"),
}
"""name -> () -> (PTX text, run(text) -> output matches NumPy)."""
