"""The GPU runtime (tessera.runtime, tessera.attention) and the GPU benchmarks.

On a CPU: the cuTensorMapEncodeTiled arguments of Tessera's kernels against values worked out here from the
kernels' documented tiles and the driver's enums, the parameter buffer, the launch shape, the cache key and
cache entries, the argument checks of tessera.attention, the driver's errors (with a fake driver), a whole
launch through a fake driver that runs the loaded PTX on the parameter bytes in the PTX executor, that `import tessera` loads no CUDA,
and that the benchmarks exit 0 without a GPU. On an H100/H200 (skipped elsewhere, saying why): tessera.attention
and the GEMM against the NumPy references.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.interpreters.ptx import TensorMapArg
from tessera.interpreters.ptx import launch as ptx_launch
from tessera.interpreters.ptx.parse import parse_ptx
from tessera.numerics import BF16, F16, F32
from tessera.reference import check_attention, check_gemm
from tessera.runtime import CudaError, CudaUnavailable, cuda_unavailable_reason
from tessera.runtime import launch as launch_module
from tessera.runtime.arguments import TensorView, kernel_tensors, pack_parameters
from tessera.runtime.attention import UnsupportedKernel, attention_config, check_attention_arguments
from tessera.runtime.cache import KernelCache, cache_key
from tessera.runtime.compiler import (
    CUBIN_FILE,
    PTX_FILE,
    TARGET_FILE,
    KernelConfig,
    compile_kernel,
    forget_compiled,
    kernel_key,
    ptxas_version,
    tessera_version,
)
from tessera.runtime.driver import Driver
from tessera.runtime.gemm import gemm_config
from tessera.runtime.launch import check_inputs, launch_shape, run
from tessera.runtime.tensor_maps import tensor_map_arguments
from tessera.sm90.facts import (
    TENSOR_MAP_BYTES,
    TensorMapDataType,
    TensorMapFloatOOBFill,
    TensorMapInterleave,
    TensorMapL2Promotion,
    TensorMapSpec,
    TensorMapSwizzle,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from fake_cuda import FakeCudaApi, FakeResult  # noqa: E402 - bench/ is not a package
GPU_REASON = cuda_unavailable_reason()
needs_gpu = pytest.mark.gpu  # skipped without a GPU by tests/conftest.py; bench/gpu_session.py runs these
needs_no_gpu = pytest.mark.skipif(GPU_REASON is None, reason="a GPU is present; this checks the no-GPU behaviour")

# From cuda.h (CUDA 12/13), typedef enum CUtensorMapDataType_enum / CUtensorMapSwizzle_enum, written down here
# rather than taken from tessera.sm90 so that these tests check it.
CU_TENSOR_MAP_DATA_TYPE_FLOAT16, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 6, 7, 9
CU_TENSOR_MAP_SWIZZLE_128B = 3
BLOCK_M = BLOCK_N = 128  # the attention kernels' tiles (tessera.kernels.attention: BM = BN = 128)
SWIZZLE_SPAN = 128  # bytes: the inner box of a 128B-swizzled map is 128 bytes


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Every test compiles into one throwaway cache, never the user's."""
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernel-cache"))


def cuda_bindings():
    try:
        from cuda.bindings import driver
    except ImportError:
        pytest.skip("cuda-bindings not installed (pip install cuda-bindings)")
    return driver


def compiled(config: KernelConfig):
    return compile_kernel(config)


# region Tensor-map arguments


def test_flash_attention_tensor_maps_are_the_encode_arguments():
    kernel = compiled(attention_config(128, False, "bf16"))
    b, h, sq, sk, d = 2, 3, 1000, 700, 128
    q, k = np.zeros((b, h, sq, d), BF16), np.zeros((b, h, sk, d), BF16)
    sizes, views = check_inputs(kernel.host, [q, k, k])
    assert sizes == dict(batch=b, heads=h, seq_q=sq, seq_k=sk)
    views = {s: TensorView.contiguous(0x7000_0000 + 0x100_0000 * s, v.shape, v.dtype) for s, v in views.items()}
    maps = tensor_map_arguments(kernel.host, sizes, views)
    assert list(maps) == ["Q_map128", "K_map128", "V_map128"]
    inner_box = SWIZZLE_SPAN // 2  # bf16 elements in one swizzle span
    for name, source, seq, rows in (("Q_map128", 0, sq, BLOCK_M), ("K_map128", 1, sk, BLOCK_N), ("V_map128", 2, sk, BLOCK_N)):
        assert maps[name].positional() == (
            CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, 0x7000_0000 + 0x100_0000 * source,
            (d, seq, h, b), (d * 2, seq * d * 2, h * seq * d * 2), (inner_box, rows, 1, 1), (1, 1, 1, 1),
            0, CU_TENSOR_MAP_SWIZZLE_128B, 0, 0)


def test_gemm_tensor_maps_are_the_encode_arguments():
    kernel = compiled(gemm_config("f16"))
    m, kk, n = 300, 136, 200
    sizes, views = check_inputs(kernel.host, [np.zeros((m, kk), F16), np.zeros((kk, n), F16)])
    assert sizes == dict(M=m, K=kk, N=n)
    maps = tensor_map_arguments(kernel.host, sizes, views)
    # A [M, K]: 128 rows of BK = 64 f16 (128 bytes); B [K, N]: BK = 64 rows of 64 f16 (128 bytes).
    assert maps["A_map128"].positional() == (CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, 0, (kk, m), (kk * 2,), (64, 128),
                                             (1, 1), 0, CU_TENSOR_MAP_SWIZZLE_128B, 0, 0)
    assert maps["B_map64"].positional() == (CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, 0, (n, kk), (n * 2,), (64, 64),
                                            (1, 1), 0, CU_TENSOR_MAP_SWIZZLE_128B, 0, 0)


def test_strided_inputs_put_their_strides_in_the_map():
    """q as the [batch, heads, seq, head_dim] view of a [batch, seq, heads, head_dim] buffer, as PyTorch
    code often holds it; an extent-1 batch may carry any stride."""
    kernel = compiled(attention_config(128, False, "bf16"))
    b, h, s, d = 1, 4, 256, 128
    sizes, views = check_inputs(kernel.host, [np.zeros((b, h, s, d), BF16)] * 3)
    views[0] = TensorView(0x10000, (b, h, s, d), (12345, d * 2, h * d * 2, 2), BF16)
    args = tensor_map_arguments(kernel.host, sizes, views)["Q_map128"]
    assert args.global_dims == (d, s, h, b)
    assert args.global_strides == (h * d * 2, d * 2, h * s * d * 2)


@pytest.mark.parametrize("view,message", [
    (TensorView(0x10008, (1, 2, 64, 64), (16384, 8192, 128, 2), BF16), "globalAddress must be 16-byte aligned"),
    (TensorView(0x10000, (1, 2, 64, 64), (32768, 16384, 256, 4), BF16), "innermost dimension must be contiguous"),
    (TensorView(0x10000, (1, 2, 64, 64), (16384, 8192, 136, 2), BF16), "globalStrides must be multiples of 16"),
])
def test_maps_the_driver_would_refuse_name_the_rule(view, message):
    kernel = compiled(attention_config(64, True, "bf16"))
    sizes, views = check_inputs(kernel.host, [np.zeros((1, 2, 64, 64), BF16)] * 3)
    views[0] = view
    with pytest.raises(ValueError, match=f"flash_attention_d64_bf16_causal: tensor map Q_map128 .*{message}"):
        tensor_map_arguments(kernel.host, sizes, views)


def test_host_checks_name_the_tensor_and_the_rule():
    kernel = compiled(gemm_config("bf16"))
    # the kernel's promise (tile.divisible) is checked before the driver's rules would refuse the 600-byte rows
    with pytest.raises(ValueError, match=r"@gemm_bf16 promises \(tile.divisible\) that K is a multiple of 8, got K = 300"):
        check_inputs(kernel.host, [np.zeros((64, 300), BF16), np.zeros((300, 64), BF16)])
    with pytest.raises(ValueError, match=r"input tensor 1 \(B_map64\), dimension 0 \(K\): 'K' is 64 elsewhere, got 32"):
        check_inputs(kernel.host, [np.zeros((64, 64), BF16), np.zeros((32, 64), BF16)])
    with pytest.raises(ValueError, match=r"input tensor 0 \(A_map128\) must be bfloat16, got float16"):
        check_inputs(kernel.host, [np.zeros((64, 64), F16), np.zeros((64, 64), BF16)])
    with pytest.raises(ValueError, match=r"takes 2 inputs"):
        check_inputs(kernel.host, [np.zeros((64, 64), BF16)])


def test_tensor_map_enums_match_the_cuda_bindings():
    driver = cuda_bindings()
    from tessera.sm90 import facts

    names = [(facts.TensorMapDataType, driver.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_", {}),
             (facts.TensorMapSwizzle, driver.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_",
              {"B32": "32B", "B64": "64B", "B128": "128B"}),
             (facts.TensorMapInterleave, driver.CUtensorMapInterleave, "CU_TENSOR_MAP_INTERLEAVE_",
              {"B16": "16B", "B32": "32B"}),
             (facts.TensorMapL2Promotion, driver.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_", {}),
             (facts.TensorMapFloatOOBFill, driver.CUtensorMapFloatOOBfill, "CU_TENSOR_MAP_FLOAT_OOB_FILL_", {})]
    for ours, theirs, prefix, renamed in names:
        for member in ours:
            assert int(getattr(theirs, prefix + renamed.get(member.name, member.name))) == int(member), member


# endregion

# region Parameters and launch shape


def test_parameter_buffer_holds_each_parameter_in_order():
    kernel = compiled(attention_config(128, False, "bf16"))
    host = kernel.host
    sizes, views = check_inputs(host, [np.zeros((2, 3, 100, 128), BF16), np.zeros((2, 3, 70, 128), BF16),
                                       np.zeros((2, 3, 70, 128), BF16)])
    views[3] = TensorView.contiguous(0x1234_5000, views[3].shape, BF16)
    maps = {name: bytes([i]) * 128 for i, name in enumerate(("Q_map128", "K_map128", "V_map128"))}
    buffer = pack_parameters(host, sizes, views, maps)
    assert [p.name for p in host.params] == ["Q_map128", "K_map128", "V_map128", "O_ptr", "batch", "heads", "seq_q",
                                             "seq_k"]
    got = [buffer.value_bytes(i) for i in range(len(host.params))]
    assert got[:3] == [b"\0" * 128, b"\1" * 128, b"\2" * 128]
    assert got[3] == (0x1234_5000).to_bytes(8, "little")
    assert got[4:] == [v.to_bytes(4, "little") for v in (2, 3, 100, 70)]
    pointers = (ctypes.c_void_p * len(host.params)).from_address(buffer.address)
    assert [ctypes.string_at(p, len(g)) for p, g in zip(pointers, got)] == got


@pytest.mark.parametrize("config", [attention_config(128, True, "f16"), gemm_config("bf16")], ids=str)
def test_parameter_buffer_matches_the_ptx_entry(config):
    """The values packed for each parameter have the size and order the PTX entry declares."""
    import re

    kernel = compiled(config)
    entry = re.search(rf"\.visible \.entry {kernel.name}\((.*?)\)", kernel.ptx, re.S)
    assert entry, f"no entry {kernel.name} in the PTX"
    declared = re.findall(r"\.param (\.align 64 \.b8 param_(\w+)\[128\]|\.u64 param_(\w+)|\.u32 param_(\w+))",
                          entry.group(1))
    kinds = {".align": "tensormap", ".u64": "pointer", ".u32": "size"}
    assert [(kinds[d[0].split()[0]], d[1] or d[2] or d[3]) for d in declared] == [
        (p.kind, p.name) for p in kernel.host.params]
    sizes = {p.size: 8 for p in kernel.host.params if p.kind == "size"}
    views = {t.source: TensorView.contiguous(0, t.dims.evaluate(sizes), t.dtype) for t in kernel_tensors(kernel.host)}
    buffer = pack_parameters(kernel.host, sizes, views, {p.name: bytes(128) for p in kernel.host.params})
    assert [len(buffer.value_bytes(i)) for i in range(len(declared))] == [
        {"tensormap": 128, "pointer": 8, "size": 4}[p.kind] for p in kernel.host.params]


def test_launch_shape_is_the_grid_of_the_sizes():
    kernel = compiled(attention_config(64, True, "bf16"))
    grid, block, cluster, smem = launch_shape(kernel.host, dict(batch=3, heads=5, seq_q=1000, seq_k=10))
    assert grid == (math.ceil(1000 / BLOCK_M), 5, 3)
    assert block == kernel.host.block and cluster == (1, 1, 1) and smem == kernel.host.dynamic_smem_bytes
    with pytest.raises(ValueError, match=r"dimension y must be in \[1, 65535\]"):
        launch_shape(kernel.host, dict(batch=1, heads=70000, seq_q=128, seq_k=128))


# endregion

# region Cache


def test_cache_key_is_stable_and_changes_with_each_component():
    config = {"builder": "gemm", "options": {"dtype": "bf16"}, "pipeline": "p"}
    key = cache_key(config, "0.1.0+abc", "ptxas 13.0.88")
    assert key == cache_key(dict(reversed(config.items())), "0.1.0+abc", "ptxas 13.0.88")
    assert len({key, cache_key({**config, "options": {"dtype": "f16"}}, "0.1.0+abc", "ptxas 13.0.88"),
                cache_key({**config, "pipeline": "q"}, "0.1.0+abc", "ptxas 13.0.88"),
                cache_key(config, "0.1.1+abc", "ptxas 13.0.88"),
                cache_key(config, "0.1.0+abc", "ptxas 12.9.86"),
                cache_key(config, "0.1.0+abc", "none")}) == 6
    assert kernel_key(KernelConfig.of("gemm", dtype="bf16")) == kernel_key(KernelConfig.of("gemm", dtype="bf16"))
    assert kernel_key(attention_config(64, scale=None)) == kernel_key(attention_config(64, scale=1 / math.sqrt(64)))
    assert kernel_key(attention_config(64, scale=0.5)) != kernel_key(attention_config(64))
    assert tessera_version().startswith(tessera.__version__ + "+")
    assert ptxas_version() == "none" or ptxas_version().startswith("ptxas ")


def test_the_key_holds_the_spill_configuration(tmp_path):
    """A kernel compiled where the default pipeline may take its spilling rung is not the kernel of the same
    module inside `without_spilling()`, where no configuration fits it: the key differs (in this process and on
    disk), so the caller trying rungs of its own gets the refusal, not the spilling kernel from the cache."""
    import warnings

    from tessera.ir.diagnostics import TesseraWarning
    from tessera.lowering.fallback import NoConfigurationFitsError, without_spilling
    from tessera.runtime.compiler import compile_module

    key = kernel_key(gemm_config("bf16"))
    with without_spilling():
        assert kernel_key(gemm_config("bf16")) != key
    path = ROOT / "tests" / "user_kernels" / "gemm_glu_wide.mlir"
    module = tessera.parse_module(path.read_text(), str(path))
    cache = KernelCache(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TesseraWarning)
        spilling = compile_module(module, "gemm_glu_wide", cache=cache)
    assert spilling.host.pipeline_note.startswith("compiled single-stage spilling past 255 registers")
    with pytest.raises(NoConfigurationFitsError, match="no configuration of the default pipeline fits"), \
            without_spilling():
        compile_module(module, "gemm_glu_wide", cache=cache)
    forget_compiled()


def test_cache_hits_misses_and_corrupted_entries(tmp_path):
    cache = KernelCache(tmp_path)
    config = gemm_config("bf16")
    forget_compiled()
    first = compile_kernel(config, cache)
    assert not first.from_cache
    entry = cache.path(first.key)
    assert (entry / PTX_FILE).read_text() == first.ptx
    assert json.loads((entry / "manifest.json").read_text())["tessera"] == tessera_version()

    forget_compiled()
    hit = compile_kernel(config, cache)
    assert hit.from_cache and hit.ptx == first.ptx and hit.cubin == first.cubin
    assert hit.host.as_dict(dict(M=200, N=320, K=64)) == first.host.as_dict(dict(M=200, N=320, K=64))

    for corrupt in (lambda: (entry / PTX_FILE).write_text("garbage"),
                    lambda: (entry / "manifest.json").unlink(),
                    lambda: _rewrite_with_hash(entry, TARGET_FILE, b"builtin.module {}")):
        corrupt()
        forget_compiled()
        again = compile_kernel(config, cache)
        assert not again.from_cache and again.ptx == first.ptx
        forget_compiled()
        assert compile_kernel(config, cache).from_cache
    assert [p.name for p in tmp_path.iterdir()] == [first.key]  # no staging folders left behind
    if first.cubin is not None:
        assert (entry / CUBIN_FILE).read_bytes() == first.cubin
    forget_compiled()


def _rewrite_with_hash(entry: Path, name: str, data: bytes) -> None:
    """Replace a file and its manifest hash: an entry the hashes call intact, whose content is wrong."""
    import hashlib

    (entry / name).write_bytes(data)
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["files"][name] = hashlib.sha256(data).hexdigest()
    (entry / "manifest.json").write_text(json.dumps(manifest))


def test_cache_store_is_atomic_and_keeps_the_first_entry(tmp_path):
    cache = KernelCache(tmp_path)
    cache.store("k" * 64, {"a.txt": b"first"}, {"config": {}})
    cache.store("k" * 64, {"a.txt": b"second"}, {"config": {}})
    files, manifest = cache.load("k" * 64)
    assert files == {"a.txt": b"first"} and manifest["key"] == "k" * 64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k" * 64]
    assert cache.load("x" * 64) is None
    cache.clear()
    assert list(tmp_path.iterdir()) == []


def test_cache_directory_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "here"))
    assert KernelCache().directory == tmp_path / "here"
    monkeypatch.delenv("TESSERA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert KernelCache().directory == tmp_path / "xdg" / "tessera"


# endregion

# region tessera.attention's argument checks


def q_like(shape=(1, 2, 64, 64), dtype=BF16):
    return np.zeros(shape, dtype)


@pytest.mark.parametrize("args,error,message", [
    ((q_like((2, 64, 64)), q_like(), q_like()), ValueError, r"q must be 4-D \[batch, heads, seq, head_dim\], got shape \(2, 64, 64\)"),
    ((q_like(), q_like((2, 2, 64, 64)), q_like()), ValueError, "same batch, and k and v the same heads"),
    ((q_like(), q_like((1, 3, 64, 64)), q_like((1, 3, 64, 64))), ValueError, "a divisor of q's"),
    ((q_like(), q_like((1, 1, 64, 64)), q_like()), ValueError, "k and v the same heads"),
    ((q_like(), q_like((1, 2, 64, 64)), q_like((1, 2, 32, 64))), ValueError, "k and v must have the same sequence length, got 64 and 32"),
    ((q_like(), q_like(), q_like((1, 2, 64, 128))), ValueError, "same head_dim, got 64, 64, 128"),
    ((q_like(), q_like(), q_like(dtype=F16)), ValueError, "one element type, got bfloat16, bfloat16, float16"),
    ((q_like(dtype=F32),) * 3, UnsupportedKernel, "element type float32 is not supported"),
    ((q_like((1, 2, 64, 80)),) * 3, UnsupportedKernel, r"head_dim 80 is not supported .*\(supported: 64, 96, 128, 192, 256\)"),
    ((q_like((1, 2, 0, 64)),) * 3, ValueError, "q has an empty dimension"),
    (([[1.0]], q_like(), q_like()), TypeError, "q must be a NumPy array or a PyTorch tensor, got list"),
])
def test_attention_refuses_bad_arguments_by_name(args, error, message):
    with pytest.raises(error, match=message):
        tessera.attention(*args)


def test_attention_refuses_bad_options_by_name():
    with pytest.raises(ValueError, match="scale must be a positive finite number"):
        tessera.attention(q_like(), q_like(), q_like(), scale=-1.0)
    with pytest.raises(ValueError, match="causal must be True or False"):
        tessera.attention(q_like(), q_like(), q_like(), causal="yes")
    assert check_attention_arguments(q_like(), q_like((1, 2, 7, 64)), q_like((1, 2, 7, 64))) == (64, "bf16")


@needs_no_gpu
def test_attention_without_a_gpu_says_so():
    with pytest.raises(CudaUnavailable, match="CUDA"):
        tessera.attention(q_like(), q_like(), q_like())


def test_attention_and_gemm_compile_nothing_without_a_gpu(monkeypatch):
    """With a driver that finds no device, the entry points refuse before any kernel is built or pass run."""
    import tessera.runtime.attention as attention_module
    import tessera.runtime.gemm as gemm_module
    from xdsl.passes import PassPipeline

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled without a GPU")

    no_device = FakeCuda(fail={"cuInit": FakeResult.CUDA_ERROR_NO_DEVICE})
    monkeypatch.setattr(launch_module, "get_driver", lambda: Driver(no_device))
    monkeypatch.setattr(attention_module, "compile_kernel", no_compile)
    monkeypatch.setattr(gemm_module, "compile_kernel", no_compile)
    monkeypatch.setattr(PassPipeline, "apply", no_compile)
    with pytest.raises(CudaUnavailable, match="no CUDA device"):
        tessera.attention(q_like(), q_like(), q_like(), causal=True)
    a = np.zeros((64, 64), BF16)
    with pytest.raises(CudaUnavailable, match="no CUDA device"):
        gemm_module.gemm(a, a)
    with pytest.raises(UnsupportedKernel):  # bad arguments are still refused first, by name
        tessera.attention(q_like((1, 2, 64, 80)), q_like((1, 2, 64, 80)), q_like((1, 2, 64, 80)))


def test_import_tessera_loads_no_cuda_and_no_torch():
    script = ("import sys, tessera, tessera.runtime, tessera.runtime.launch, tessera.runtime.attention; "
              "tessera.attention; "
              "bad = [m for m in sys.modules if m.split('.')[0] in ('cuda', 'torch', 'triton')]; "
              "assert not bad, bad")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


# endregion

# region Driver errors


class FakeCuda(FakeCudaApi):
    """The driver functions the runtime calls, on the CPU (`bench/fake_cuda.py`), whose launches run: a launch
    reads its parameter buffer by the PTX entry's parameter list (as the driver does) and runs the kernel's PTX
    in the PTX executor, so what runs is the text and the bytes a GPU gets. `fail` maps a call name to the
    CUresult it returns; `refuse_cubin` makes module loads of a cubin fail."""

    def __init__(self, kernels=(), **options):
        super().__init__(**options)
        self.kernels = {k.name: k for k in kernels}

    def run(self, config, function, parameters, grid, block):
        kernel = self.kernels[function]
        entry = parse_ptx(kernel.ptx).entries[function]
        pointers = (ctypes.c_void_p * len(entry.params)).from_address(parameters)
        args = [self._argument(param, ctypes.string_at(pointer, param.element_bytes * param.count))
                for param, pointer in zip(entry.params, pointers)]
        self.launches[-1].args = args
        results = ptx_launch(kernel.ptx, function, grid, block, args, shared_bytes=config.sharedMemBytes)
        for arg, written in zip(args, results):
            if isinstance(arg, np.ndarray):
                arg[...] = written

    def _argument(self, param, raw: bytes):
        """A parameter's bytes as the PTX executor takes them: a tensor map (its 128 bytes hold the index of
        the recorded encode call) with the allocation it addresses, a device pointer as its allocation, else
        the integer the bytes hold."""
        value = int.from_bytes(raw[:8], "little")
        if param.type == "b8" and param.count == TENSOR_MAP_BYTES:
            data_type, _, address, dims, strides, box, element_strides, interleave, swizzle, l2, oob = self.maps[value]
            base, array = self._allocation(address)
            spec = TensorMapSpec(TensorMapDataType(data_type), tuple(dims), tuple(strides), tuple(box),
                                 tuple(element_strides), TensorMapSwizzle(swizzle), TensorMapFloatOOBFill(oob),
                                 TensorMapInterleave(interleave), TensorMapL2Promotion(l2))
            return TensorMapArg(array, spec, address - base)
        found = self._allocation(value, required=False) if len(raw) == 8 else None
        if found is not None:
            base, array = found
            assert value == base, "Tessera passes whole allocations"
            return array
        return int.from_bytes(raw, "little")

    def _allocation(self, address: int, required: bool = True):
        for base, array in self.memory.items():
            if base <= address < base + max(array.nbytes, 1):
                return base, array
        assert not required, f"address {address:#x} is in no allocation"
        return None


def test_driver_errors_name_the_call_the_kernel_and_the_error():
    fake = FakeCuda(fail={"cuFuncSetAttribute": FakeResult.CUDA_ERROR_INVALID_VALUE})
    driver = Driver(fake)
    with pytest.raises(CudaError) as caught:
        driver.call("cuFuncSetAttribute", "f", "max_dynamic_smem", 1 << 20, kernel="flash_attention_d128_bf16")
    error = caught.value
    assert str(error) == ("cuFuncSetAttribute failed for kernel flash_attention_d128_bf16: "
                          "CUDA_ERROR_INVALID_VALUE (1): invalid argument")
    assert (error.call, error.kernel, error.code, error.name) == (
        "cuFuncSetAttribute", "flash_attention_d128_bf16", 1, "CUDA_ERROR_INVALID_VALUE")


def test_driver_errors_are_named_without_the_driver_library():
    """When cuGetErrorName itself cannot run (no libcuda), the bindings' CUresult enum names the error."""
    class Bare:
        CUresult = FakeResult

        def cuGetErrorName(self, code):
            raise RuntimeError("libcuda.so not found")

        def cuMemAlloc(self, n):
            return (FakeResult.CUDA_ERROR_INVALID_VALUE,)

    with pytest.raises(CudaError, match=r"^cuMemAlloc failed: CUDA_ERROR_INVALID_VALUE \(1\): no description"):
        Driver(Bare()).alloc(16)


def test_missing_driver_device_or_architecture_is_cuda_unavailable():
    class NoLibrary(FakeCuda):
        def cuInit(self, flags):
            raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found via system search')

    with pytest.raises(CudaUnavailable, match=r"no CUDA driver: RuntimeError: .* \(the bindings are installed; they "
                                              r"call the NVIDIA driver \(libcuda.so.1\), which pip does not install"):
        Driver(NoLibrary()).device()
    with pytest.raises(CudaUnavailable, match="no CUDA device: cuInit returned CUDA_ERROR_NO_DEVICE"):
        Driver(FakeCuda(fail={"cuInit": FakeResult.CUDA_ERROR_NO_DEVICE})).device()
    with pytest.raises(CudaUnavailable, match=r"device 0 \(Fake H100\) has compute capability 8.0; .*sm_90a"):
        Driver(FakeCuda(capability=(8, 0))).device()
    with pytest.raises(CudaUnavailable, match="no CUDA device 1: the driver sees 1 device"):
        Driver(FakeCuda()).device(1)


def test_missing_bindings_are_cuda_unavailable(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_cuda(name, *args, **kwargs):
        if name == "cuda" or name.startswith("cuda."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cuda)
    with pytest.raises(CudaUnavailable) as caught:
        Driver().device()
    # What installs them (tessera-compiler is not on PyPI: its `cuda` extra only installs from a checkout), and the
    # driver they need, which pip cannot install.
    assert str(caught.value) == (
        "the CUDA driver bindings are not installed: pip install cuda-bindings, or from a Tessera checkout "
        "pip install '.[cuda]'; they call the NVIDIA driver (libcuda.so.1), which pip does not install: "
        "cuda-bindings 13.x needs driver 580.65.06 or later, 12.x driver 525.60.13 or later (pip install "
        "'cuda-bindings>=12.8,<13' for an older driver)")


def test_the_install_hint_names_what_the_cuda_extra_installs():
    import tomllib

    from tessera.runtime.driver import INSTALL_HINT

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert [r.split(">")[0] for r in pyproject["project"]["optional-dependencies"]["cuda"]] == ["cuda-bindings"]
    assert "pip install cuda-bindings" in INSTALL_HINT and "pip install '.[cuda]'" in INSTALL_HINT
    assert "tessera-compiler" not in INSTALL_HINT  # not a PyPI distribution


def test_launch_config_sets_clusters_only_when_asked():
    driver = Driver(FakeCuda())
    plain = driver.launch_config((8, 4, 2), (384, 1, 1), (1, 1, 1), 1000, 0x42)
    assert (plain.gridDimX, plain.gridDimY, plain.gridDimZ, plain.blockDimX, plain.sharedMemBytes, plain.hStream,
            plain.numAttrs) == (8, 4, 2, 384, 1000, 0x42, 0)
    clustered = driver.launch_config((8, 4, 2), (384, 1, 1), (2, 1, 1), 1000, 0)
    (attribute,) = clustered.attrs
    assert clustered.numAttrs == 1 and attribute.id == 4
    assert (attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z) == (2, 1, 1)


def test_bindings_take_the_runtime_arguments():
    """With the real cuda-bindings and no driver library, the calls get past the bindings' argument
    conversion (a TypeError there would mean the runtime builds its arguments wrongly) and fail only for
    want of libcuda."""
    cuda_bindings()
    if GPU_REASON is None:
        pytest.skip("a driver is present: the GPU tests exercise the calls")
    kernel = compiled(attention_config(64, False, "bf16"))
    sizes, views = check_inputs(kernel.host, [np.zeros((1, 1, 128, 64), BF16)] * 3)
    arguments = tensor_map_arguments(kernel.host, sizes, views)["Q_map128"]
    driver = Driver()
    for attempt in (lambda: driver.encode_tensor_map(arguments, kernel.name),
                    lambda: driver.launch(driver.api.CUfunction(), kernel.name,
                                          driver.launch_config((2, 1, 1), (384, 1, 1), (2, 1, 1), 1024, 0), 0),
                    lambda: driver._load_image(b"\x7fELF", kernel.name, "test")):
        with pytest.raises(Exception) as caught:
            attempt()
        assert not isinstance(caught.value, (TypeError, ValueError, AttributeError)), caught.value


# endregion

# region A whole launch through the fake driver


@pytest.fixture
def fake_gpu(monkeypatch):
    def install(*kernels, **options):
        fake = FakeCuda(kernels, **options)
        monkeypatch.setattr(launch_module, "get_driver", lambda: Driver(fake))
        return fake
    return install


def test_attention_runs_through_the_driver_calls(fake_gpu, rng):
    b, h, sq, sk, d = 1, 2, 130, 200, 64
    q = rng.standard_normal((b, h, sq, d)).astype(BF16)
    k, v = (rng.standard_normal((b, h, sk, d)).astype(BF16) for _ in range(2))
    kernel = compiled(attention_config(d, True, "bf16"))
    fake = fake_gpu(kernel)
    o = tessera.attention(q, k, v, causal=True)
    assert o.dtype == BF16 and o.shape == q.shape
    assert check_attention(o, q, k, v, BF16, causal=True).ok
    (launch,) = fake.launches
    assert launch.grid == (math.ceil(sq / BLOCK_M), h, b) and launch.block == kernel.host.block
    assert launch.smem == kernel.host.dynamic_smem_bytes and launch.attributes == 0
    assert ("cuFuncSetAttribute", ("flash_attention_d64_bf16_causal", "max_dynamic_smem", launch.smem)) in fake.calls
    names = [name for name, _ in fake.calls]
    assert names.count("cuTensorMapEncodeTiled") == 3 and names.count("cuMemAlloc") == names.count("cuMemFree") == 4
    assert names.index("cuLaunchKernelEx") < names.index("cuStreamSynchronize") < names.index("cuMemcpyDtoH")


@pytest.mark.parametrize("shape_q, seq_k, causal, scale", [
    ((2, 3, 1, 64), 70, False, None),      # one query row per block, six blocks over y and z
    ((1, 2, 131, 128), 1, True, 0.3),      # one key; under the causal mask rows 0-129 see none (zeros)
    ((1, 1, 40, 64), 300, True, None),     # causal with seq_k > seq_q: bottom-right alignment
], ids=["seq_q=1", "seq_k=1-causal", "causal-bottom-right"])
def test_odd_shapes_run_through_the_driver_calls(fake_gpu, rng, shape_q, seq_k, causal, scale):
    """Shapes at the edges of the grid and the masks, end to end: runtime, parameter bytes, tensor maps
    and the PTX, against NumPy."""
    b, h, sq, d = shape_q
    q = rng.standard_normal(shape_q).astype(BF16)
    k, v = (rng.standard_normal((b, h, seq_k, d)).astype(BF16) for _ in range(2))
    fake_gpu(compiled(attention_config(d, causal, "bf16", scale)))
    o = tessera.attention(q, k, v, causal=causal, scale=scale)
    assert check_attention(o, q, k, v, BF16, causal=causal, scale=scale).ok


def test_head_dim_256_runs_through_the_driver_calls(fake_gpu, rng):
    q, k, v = (rng.standard_normal((1, 1, 70, 256)).astype(F16) for _ in range(3))
    kernel = compiled(attention_config(256, False, "f16"))
    assert dict(kernel.config.options)["block_n"] == 48
    fake_gpu(kernel)
    assert check_attention(tessera.attention(q, k, v), q, k, v, F16).ok


def test_gemm_runs_through_the_driver_calls(fake_gpu, rng):
    from tessera.runtime.gemm import gemm

    a = rng.standard_normal((130, 72)).astype(BF16)
    b = rng.standard_normal((72, 136)).astype(BF16)
    fake_gpu(compiled(gemm_config("bf16")))
    c = gemm(a, b)
    assert c.dtype == F32 and check_gemm(c, a, b, BF16).ok


def test_gemm_of_any_shape_runs_without_tma(fake_gpu, rng):
    """K = 7 and N = 63 (14- and 126-byte rows): no tensor map can read them, so the runtime picks the any-shape
    kernel, whose host description says A and B are copied with ld.global, and it runs right end to end."""
    from tessera.runtime.gemm import check_gemm_arguments, gemm

    a = rng.standard_normal((65, 7)).astype(BF16)
    b = rng.standard_normal((7, 63)).astype(BF16)
    config = check_gemm_arguments(a, b)
    assert config == gemm_config("bf16", aligned=False)
    kernel = compiled(config)
    assert kernel.host.copies == {0: "ld.global", 1: "ld.global"}
    fake = fake_gpu(kernel)
    c = gemm(a, b)
    assert c.dtype == F32 and c.shape == (65, 63) and check_gemm(c, a, b, BF16).ok
    assert "cuTensorMapEncodeTiled" not in [name for name, _ in fake.calls]


def test_gemm_transposed_batched_with_epilogue_runs_through_the_driver_calls(fake_gpu, rng):
    """TN layout (a stored [K, M]), a batch of 2, alpha, beta with c, and a bias, through the full pipeline's
    TMA kernel (M, N, K multiples of 8)."""
    from tessera.runtime.gemm import check_gemm_arguments, gemm

    a = rng.standard_normal((2, 40, 24)).astype(BF16)  # [batch, K, M]
    b = rng.standard_normal((2, 40, 16)).astype(BF16)  # [batch, K, N]
    c = rng.standard_normal((2, 24, 16)).astype(F32)
    bias = rng.standard_normal(16).astype(F32)
    options = dict(transpose_a=True, alpha=0.5, beta=2.0, c=c, bias=bias)
    kernel = compiled(check_gemm_arguments(a, b, **options))
    assert kernel.host.kernel == "gemm_bf16_tn_batched_bias_scaled" and kernel.host.copies == {0: "tma", 1: "tma"}
    fake = fake_gpu(kernel)
    out = gemm(a, b, **options)
    assert out.shape == (2, 24, 16)
    assert check_gemm(out, a, b, BF16, transpose_a=True, alpha=0.5, beta=2.0, c=c, bias=bias).ok
    (launch,) = fake.launches
    assert launch.grid == (1, 1, 2)


@pytest.mark.parametrize("call, message", [
    (lambda a, b: dict(a=a, b=b[:7]), r"gemm: a is \[M, K\] and b is \[K, N\]: .* K differ \(8 and 7\)"),
    (lambda a, b: dict(a=a, b=b, transpose_b=True), r"a is \[M, K\] and b is \[N, K\]: .*K differ"),
    (lambda a, b: dict(a=a, b=b, transpose_a=1), r"gemm: transpose_a must be True or False, got 1"),
    (lambda a, b: dict(a=a, b=b, beta=2.0), r"gemm: beta = 2.0 scales c, but no c was given"),
    (lambda a, b: dict(a=a, b=b, c=np.zeros((4, 16), F32), beta=0.0), r"c is given but beta is 0"),
    (lambda a, b: dict(a=a, b=b, c=np.zeros((4, 15), F32)), r"gemm: c must be \[4, 16\]"),
    (lambda a, b: dict(a=a, b=b, c=np.zeros((4, 16), BF16)), r"gemm: c must be float32"),
    (lambda a, b: dict(a=a, b=b, bias=np.zeros(4, F32)), r"gemm: bias must be \[N\] = \[16\]"),
    (lambda a, b: dict(a=a[None], b=b), r"both 2-D, or both 3-D"),
    (lambda a, b: dict(a=a, b=b, alpha=float("nan")), r"alpha must be a finite number"),
], ids=["k-mismatch", "k-mismatch-nt", "flag-type", "beta-without-c", "c-without-beta", "c-shape", "c-dtype",
        "bias-shape", "rank", "alpha-nan"])
def test_gemm_arguments_are_checked_by_name(call, message):
    from tessera.runtime.gemm import check_gemm_arguments

    a, b = np.zeros((4, 8), BF16), np.zeros((8, 16), BF16)
    kwargs = call(a, b)
    with pytest.raises(ValueError, match=message):
        check_gemm_arguments(kwargs.pop("a"), kwargs.pop("b"), **kwargs)


def test_a_refused_cubin_falls_back_to_the_ptx(fake_gpu, rng):
    kernel = compiled(gemm_config("bf16"))
    assert kernel.cubin is not None, "no cubin: the test command installs ptxas (the ptx extra)"
    fake = fake_gpu(kernel, refuse_cubin=True)
    a, b = (rng.standard_normal((64, 64)).astype(BF16) for _ in range(2))
    run(kernel, a, b)
    assert [args for name, args in fake.calls if name == "cuModuleLoadData"] == [("cubin",), ("ptx",)]


def test_launch_errors_name_the_kernel(fake_gpu, rng):
    kernel = compiled(gemm_config("bf16"))
    fake_gpu(kernel, fail={"cuLaunchKernelEx": FakeResult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES})
    a, b = (rng.standard_normal((64, 64)).astype(BF16) for _ in range(2))
    with pytest.raises(CudaError, match=r"cuLaunchKernelEx failed for kernel gemm_bf16: "
                                        r"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES \(701\): too many resources .*\n"
                                        r"  grid \(1, 1, 1\), block \(384, 1, 1\)"):
        run(kernel, a, b)


def test_a_kernel_needing_more_shared_memory_than_the_device_has_is_refused(fake_gpu, rng):
    kernel = compiled(gemm_config("bf16"))
    fake = fake_gpu(kernel)
    fake.attributes["smem"] = 1024
    a, b = (rng.standard_normal((64, 64)).astype(BF16) for _ in range(2))
    with pytest.raises(CudaError, match=rf"gemm_bf16: .*needs {kernel.host.dynamic_smem_bytes} bytes of dynamic "
                                        r"shared memory, device 0 \(Fake H100\) allows 1024"):
        run(kernel, a, b)


def test_torch_cpu_tensors_come_back_as_tensors(fake_gpu, rng):
    torch = pytest.importorskip("torch", reason="PyTorch not installed")
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 1, 64, 64)).astype(np.float32)).to(torch.bfloat16)
               for _ in range(3))
    fake_gpu(compiled(attention_config(64, False, "bf16")))
    o = tessera.attention(q, k, v)
    assert isinstance(o, torch.Tensor) and o.dtype == torch.bfloat16 and o.shape == q.shape
    as_numpy = [x.float().numpy() for x in (q, k, v, o)]
    assert check_attention(as_numpy[3], *as_numpy[:3], BF16).ok


# endregion

# region Benchmarks without a GPU


@needs_no_gpu
@pytest.mark.parametrize("script", ["attention.py", "gemm.py"])
def test_gpu_benchmarks_exit_0_without_a_gpu(script):
    result = subprocess.run([sys.executable, str(ROOT / "bench" / script)], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("no CUDA GPU: "), result.stdout


# endregion

# region On the GPU


@needs_gpu
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("shape", [(2, 3, 256, 256), (1, 2, 1000, 700), (1, 1, 1, 513)])
def test_attention_on_the_gpu(head_dim, causal, dtype, shape, rng):
    b, h, sq, sk = shape
    q = rng.standard_normal((b, h, sq, head_dim)).astype(dtype)
    k, v = (rng.standard_normal((b, h, sk, head_dim)).astype(dtype) for _ in range(2))
    o = tessera.attention(q, k, v, causal=causal)
    comparison = check_attention(o, q, k, v, dtype, causal=causal)
    assert comparison.ok, comparison


@needs_gpu
def test_gemm_on_the_gpu(rng):
    from tessera.runtime.gemm import gemm

    a = rng.standard_normal((1000, 520)).astype(BF16)
    b = rng.standard_normal((520, 264)).astype(BF16)
    comparison = check_gemm(gemm(a, b), a, b, BF16)
    assert comparison.ok, comparison


@needs_gpu
def test_attention_on_torch_cuda_tensors_in_place(rng):
    torch = pytest.importorskip("torch", reason="PyTorch not installed")
    b, s, h, d = 2, 300, 4, 128
    # [batch, seq, heads, head_dim] storage, viewed as [batch, heads, seq, head_dim]: strided tensor maps.
    qkv = [torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2) for _ in range(3)]
    o = tessera.attention(*qkv, causal=True, scale=0.1)
    torch.cuda.synchronize()
    assert o.is_cuda and o.dtype == torch.bfloat16 and o.shape == qkv[0].shape
    host = [x.float().cpu().numpy() for x in (*qkv, o)]
    comparison = check_attention(host[3], *host[:3], BF16, causal=True, scale=0.1)
    assert comparison.ok, comparison


# endregion


@needs_gpu
@pytest.mark.parametrize("head_dim, heads_k, causal", [(128, 2, True), (64, 4, False)], ids=["d128-gqa-causal", "d64"])
def test_attention_backward_on_torch_cuda_tensors_twice(rng, head_dim, heads_k, causal):
    """The backward on CUDA tensors, twice on one signature: the second call planned (`tessera.runtime.launch_plan`)
    and its buffers, none zero-filled (`attention_backward._run_torch`), cut from memory freed full of NaN; both
    against the float64 gradient."""
    torch = pytest.importorskip("torch", reason="PyTorch not installed")
    from tessera.reference import check_attention_backward

    b, h, sq, sk = 1, 4, 300, 200
    q = torch.randn(b, h, sq, head_dim, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, heads_k, sk, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    do = torch.randn_like(q)
    o, lse = tessera.attention(q, k, v, causal=causal, return_lse=True)
    inputs = [x.float().cpu().numpy() for x in (q, k, v, o, do)]
    for _ in range(2):
        grads = tessera.attention_backward(q, k, v, o, lse, do, causal=causal)
        comparisons = check_attention_backward([g.float().cpu().numpy() for g in grads], *inputs, BF16, causal)
        assert all(c.ok for c in comparisons), comparisons
        del grads
        torch.full((64 << 20,), float("nan"), device="cuda")  # freed at once: the next call's buffers reuse it
