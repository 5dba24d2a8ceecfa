"""The Triton baseline of the attention benchmarks: a FlashAttention-2-style forward kernel (online softmax
over key blocks, exp2, key blocks past the diagonal skipped under the causal mask), written here after the
Triton tutorial's fused attention, for contiguous [batch, heads, seq, head_dim] inputs with seq_q = seq_k.

bench/attention.py times it on a GPU (autotuned over `CONFIGS`); bench/compile.py compiles it for sm_90a
without one (`compile_for_sm90a`), to set Triton's compile time and SASS beside Tessera's. Both import
Triton only through `load()`, which returns None when it is not installed.
"""

from __future__ import annotations

import functools
import os
import tempfile
import time
from dataclasses import dataclass

TILES = ((128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3))
"""(BLOCK_M, BLOCK_N, num_warps, num_stages) tried by the autotuner; the first is the one compiled alone."""
HEAD_DIMS = (64, 128)
"""Head dims this kernel is run at (its [BLOCK_M, head_dim] f32 accumulator does not fit at 256)."""


@functools.cache
def load():
    """(triton, the jitted kernel), or None when Triton is not installed."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def attention_forward(Q, K, V, O, scale_log2, seq, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
        start_m = tl.program_id(0)
        base = tl.program_id(1).to(tl.int64) * seq * HEAD_DIM
        rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_N)
        dims = tl.arange(0, HEAD_DIM)
        q = tl.load(Q + base + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < seq, other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        end = seq
        if CAUSAL:  # key blocks past the block's last query are all masked
            end = tl.minimum((start_m + 1) * BLOCK_M, seq)
        for start_n in range(0, end, BLOCK_N):
            keys = start_n + cols
            k = tl.load(K + base + keys[None, :] * HEAD_DIM + dims[:, None], mask=keys[None, :] < seq, other=0.0)
            s = tl.dot(q, k) * scale_log2
            visible = keys[None, :] < seq
            if CAUSAL:
                visible = visible & (keys[None, :] <= rows[:, None])
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + base + keys[:, None] * HEAD_DIM + dims[None, :], mask=keys[:, None] < seq, other=0.0)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_new
        o = acc / l_i[:, None]
        tl.store(O + base + rows[:, None] * HEAD_DIM + dims[None, :], o.to(O.dtype.element_ty), mask=rows[:, None] < seq)

    return triton, attention_forward


@dataclass(frozen=True)
class TritonCompile:
    """One cold compile of the kernel for sm_90a: wall seconds (Triton's passes, LLVM and its ptxas), the
    PTX, the cubin and the shared memory Triton asks for; `cpu` is the CPU seconds of the compile (this
    process's, all threads, `time.process_time`) and `ptxas_cpu` those of the child processes it waited for
    (its ptxas), which load on the machine does not inflate as it does wall seconds."""

    seconds: float
    ptx: str
    cubin: bytes
    shared_bytes: int
    version: str
    cpu: float = 0.0
    ptxas_cpu: float = 0.0


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children (`resource.RUSAGE_CHILDREN`)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def compile_for_sm90a(head_dim: int, causal: bool, dtype: str = "bf16", tile: tuple = TILES[1],
                      ptxas: str | None = None) -> TritonCompile:
    """Compile the kernel for sm_90a (no GPU needed) with a fresh Triton cache, so the time is a cold
    compile. `tile` is (BLOCK_M, BLOCK_N, num_warps, num_stages); `ptxas` replaces Triton's own ptxas
    (TRITON_PTXAS_PATH), so that two compilers can be timed with one assembler."""
    loaded = load()
    if loaded is None:
        raise RuntimeError("Triton is not installed (pip install triton)")
    triton, kernel = loaded
    from triton.backends.compiler import GPUTarget

    block_m, block_n, warps, stages = tile
    element = {"bf16": "*bf16", "f16": "*fp16"}[dtype]
    signature = {"Q": element, "K": element, "V": element, "O": element, "scale_log2": "fp32", "seq": "i32",
                 "HEAD_DIM": "constexpr", "CAUSAL": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr"}
    constexprs = {"HEAD_DIM": head_dim, "CAUSAL": causal, "BLOCK_M": block_m, "BLOCK_N": block_n}
    # As a launch with 16-byte aligned tensors specializes it (what lets Triton vectorize its loads).
    attrs = {(kernel.arg_names.index(name),): [["tt.divisibility", 16]] for name in ("Q", "K", "V", "O")}
    source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, said out loud
    settings = {"TRITON_CACHE_DIR": None, "TRITON_PTXAS_PATH": ptxas}
    saved = {name: os.environ.get(name) for name in settings}
    with tempfile.TemporaryDirectory(prefix="triton-cache-") as cache:
        settings["TRITON_CACHE_DIR"] = cache
        os.environ.update({name: value for name, value in settings.items() if value is not None})
        try:
            start, cpu, children = time.perf_counter(), time.process_time(), children_cpu()
            # PTX ISA 8.5, which CUDA 12.4 and later assemble (Triton's default is its own ptxas' newest).
            compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                                      options={"num_warps": warps, "num_stages": stages, "ptx_version": 85})
            seconds = time.perf_counter() - start
            ptxas_cpu = children_cpu() - children
            cpu = time.process_time() - cpu + ptxas_cpu
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    return TritonCompile(seconds, compiled.asm["ptx"], compiled.asm["cubin"], compiled.metadata.shared,
                         triton.__version__, cpu, ptxas_cpu)
