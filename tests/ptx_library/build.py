"""Build NVIDIA's library kernels (CUTLASS 3, FlashAttention-3) to PTX with nvcc, from outside Tessera, and record
how their own host code launches them.

    .venv/bin/pip install nvidia-cuda-nvcc nvidia-cuda-cccl      # nvcc 13.x, its front end and the CCCL headers
    git clone https://github.com/NVIDIA/cutlass /path/cutlass     # and Dao-AILab/flash-attention for FA3
    .venv/bin/python tests/ptx_library/build.py --cutlass /path/cutlass [--flash-attention /path/fa] [NAME ...]

For each configuration (`CONFIGS`; NAME picks some) it compiles one instantiation per file from src/ with
`nvcc -std=c++17 -gencode arch=compute_90a,code=compute_90a -DNDEBUG` into tests/ptx_library/build/NAME/:
  kernel.ptx    the device code (only PTX: ptxas does not run);
  describe      a host program that runs the library's host code on the CPU (`to_underlying_arguments`, the
                grid, the block, the shared memory) with a recording `cuTensorMapEncodeTiled`, and prints the
                launch description as JSON (see src/*.cu): `describe M N K L SMS` (GEMM) or
                `describe B H S D SMS` (attention).
tests/test_ptx_library.py runs what is built here against NumPy and skips what is not (the PTX is large and
generated, so it is not committed). Each build takes about a minute of one core.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

HERE = Path(__file__).parent
BUILD = HERE / "build"

CONFIGS = {
    # CUTLASS 3 warp-specialized GEMMs, D = A B^T, f16 in, f32 accumulate and out (src/cutlass_gemm.cu)
    "cutlass_cooperative_128x128x64": dict(source="cutlass_gemm.cu", SCHEDULE="Cooperative", TILE="128,128,64"),
    "cutlass_cooperative_256x128x64_cluster2x1": dict(source="cutlass_gemm.cu", SCHEDULE="Cooperative",
                                                      TILE="256,128,64", CLUSTER="2,1"),
    "cutlass_pingpong_64x128x64": dict(source="cutlass_gemm.cu", SCHEDULE="Pingpong", TILE="64,128,64"),
    "cutlass_pingpong_128x128x64_cluster1x2": dict(source="cutlass_gemm.cu", SCHEDULE="Pingpong",
                                                   TILE="128,128,64", CLUSTER="1,2"),
    # ... e4m3 x e4m3 with f32 accumulation (promoted from the wgmma accumulator every few k-blocks), D = alpha A B^T
    # + beta C
    "cutlass_fp8_cooperative_128x128x128": dict(source="cutlass_gemm.cu", SCHEDULE="Cooperative", TILE="128,128,128",
                                                ELEMENT_AB=2),
    # ... bf16 in and out, the epilogue visitor tree D = ReLU(alpha A B^T + beta C + bias[m]) stored through TMA
    "cutlass_bf16_bias_relu_pingpong_64x128x64": dict(source="cutlass_gemm.cu", SCHEDULE="Pingpong",
                                                      TILE="64,128,64", ELEMENT_AB=1, ELEMENT_D=1, BIAS_RELU=1),
    # ... the stream-K scheduler: split-K and stream-K units whose partial tiles meet in a global workspace
    # (locks spun on with ld.acquire, partials added by the last unit)
    "cutlass_streamk_cooperative_128x128x64": dict(source="cutlass_gemm.cu", SCHEDULE="Cooperative",
                                                   TILE="128,128,64", STREAM_K=1),
    # ... the cp.async GMMA mainloop (what CUTLASS picks for operands TMA cannot load): cp.async producers completing
    # each stage through cp.async.mbarrier.arrive, wgmma consumers, no proxy fence between them
    "cutlass_cpasync_cooperative_128x128x64": dict(source="cutlass_gemm.cu", SCHEDULE="Cooperative",
                                                   TILE="128,128,64", CPASYNC=1),
    # FlashAttention-3 forward, f16, its own tile sizes for the head dim (src/fa3_fwd.cu)
    "fa3_fwd_hdim64": dict(source="fa3_fwd.cu", needs="flash-attention", HDIM=64, IS_CAUSAL=0),
    "fa3_fwd_hdim128": dict(source="fa3_fwd.cu", needs="flash-attention", HDIM=128, IS_CAUSAL=0),
    "fa3_fwd_hdim128_causal": dict(source="fa3_fwd.cu", needs="flash-attention", HDIM=128, IS_CAUSAL=1),
    "fa3_fwd_hdim128_cluster2": dict(source="fa3_fwd.cu", needs="flash-attention", HDIM=128, IS_CAUSAL=0,
                                     CLUSTER_M=2),
    # ... e4m3 in with descale factors, bf16 out (V transposed in shared memory by the producer warps)
    "fa3_fwd_fp8_hdim128": dict(source="fa3_fwd.cu", needs="flash-attention", HDIM=128, IS_CAUSAL=0, IS_FP8=1),
    # ... tanh soft-capping of the scores
    "fa3_fwd_hdim128_softcap": dict(source="fa3_fwd.cu", needs="flash-attention", HDIM=128, IS_CAUSAL=0,
                                    HAS_SOFTCAP=1),
    # ... a sliding window (local attention: left and right bounds, the dynamic persistent scheduler)
    "fa3_fwd_hdim64_local": dict(source="fa3_fwd.cu", needs="flash-attention", HDIM=64, IS_CAUSAL=0, IS_LOCAL=1),
    # ... grouped-query attention with the query heads of one K/V head packed into the M tile
    "fa3_fwd_hdim64_packgqa": dict(source="fa3_fwd.cu", needs="flash-attention", HDIM=64, IS_CAUSAL=0, PACK_GQA=1),
    # FlashAttention-3 backward, f16, not causal, launched as its host code does: preprocess, main kernel,
    # postprocess (src/fa3_bwd_run.cu; tests/library_backward.py runs it)
    "fa3_bwd_hdim64": dict(source="fa3_bwd_run.cu", needs="flash-attention", HDIM=64, IS_CAUSAL=0),
    "fa3_bwd_hdim128": dict(source="fa3_bwd_run.cu", needs="flash-attention", HDIM=128, IS_CAUSAL=0),
    # FlashAttention-3 backward, f16, causal and not (src/fa3_bwd.cu): device code only, for bench/backward_sass.py
    "backward_fa3_hdim64": dict(source="fa3_bwd.cu", needs="flash-attention", HDIM=64, IS_CAUSAL=0),
    "backward_fa3_hdim128": dict(source="fa3_bwd.cu", needs="flash-attention", HDIM=128, IS_CAUSAL=0),
}


def nvcc_home() -> Path:
    """The CUDA 13 toolkit of the nvidia-cuda-nvcc wheel in this interpreter's environment."""
    home = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cu13"
    if not (home / "bin" / "nvcc").exists():
        sys.exit(f"build.py: no nvcc in {home}: pip install nvidia-cuda-nvcc nvidia-cuda-cccl")
    return home


def defines(config: dict) -> list[str]:
    if "HDIM" in config:
        return [f"-DHDIM={config['HDIM']}", f"-DIS_CAUSAL={config['IS_CAUSAL']}",
                f"-DCLUSTER_M={config.get('CLUSTER_M', 1)}",
                *(f"-D{key}={config[key]}" for key in ("IS_LOCAL", "HAS_SOFTCAP", "PACK_GQA", "IS_FP8") if key in config)]
    m, n, k = config["TILE"].split(",")
    cm, cn = config.get("CLUSTER", "1,1").split(",")
    flags = [f"-DTILE_M={m}", f"-DTILE_N={n}", f"-DTILE_K={k}", f"-DCLUSTER_M={cm}", f"-DCLUSTER_N={cn}"]
    if "SCHEDULE" in config:
        flags += [f"-DSCHEDULE={config['SCHEDULE']}",
                  f"-DSCHEDULE_IS_COOPERATIVE={int(config['SCHEDULE'] == 'Cooperative')}"]
    flags += [f"-D{key}={config[key]}" for key in ("ELEMENT_AB", "ELEMENT_D", "BIAS_RELU", "STREAM_K", "CPASYNC")
              if key in config]
    return flags


def build(name: str, config: dict, cutlass: Path, flash_attention: Path | None) -> None:
    home = nvcc_home()
    out = BUILD / name
    out.mkdir(parents=True, exist_ok=True)
    includes = [HERE / "src", cutlass / "include", cutlass / "tools" / "util" / "include", home / "include" / "cccl",
                home / "include"]
    if config.get("needs") == "flash-attention":
        if flash_attention is None:
            print(f"{name}: skipped (no --flash-attention)")
            return
        # shim/ first: FA3's launch records the launch instead (see src/shim/)
        includes[:0] = [HERE / "src" / "shim", flash_attention / "hopper"]
    keep = out / "keep"
    keep.mkdir(exist_ok=True)
    command = [str(home / "bin" / "nvcc"), "-std=c++17", "-gencode", "arch=compute_90a,code=compute_90a", "-DNDEBUG",
               "-DCUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL", "--expt-relaxed-constexpr", "-w",
               *defines(config), *(f"-I{p}" for p in includes), "--keep", "--keep-dir", str(keep),
               f"-L{home / 'lib'}", "-o", str(out / "describe"), str(HERE / "src" / config["source"])]
    env = dict(os.environ, PATH=f"{home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    print(f"{name}: {' '.join(command)}", flush=True)
    try:
        subprocess.run(command, check=True, env=env)
    except subprocess.CalledProcessError:
        print(f"{name}: nvcc failed", flush=True)
        return
    ptx = keep / (Path(config["source"]).stem + ".ptx")
    ptx.replace(out / "kernel.ptx")
    for leftover in keep.iterdir():
        leftover.unlink()
    keep.rmdir()
    print(f"{name}: {out / 'kernel.ptx'} ({(out / 'kernel.ptx').stat().st_size} bytes)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"configurations (default: all): {', '.join(CONFIGS)}")
    parser.add_argument("--cutlass", type=Path, required=True, help="a checkout of github.com/NVIDIA/cutlass")
    parser.add_argument("--flash-attention", type=Path, help="a checkout of github.com/Dao-AILab/flash-attention")
    args = parser.parse_args(argv)
    for name in args.names or CONFIGS:
        if name not in CONFIGS:
            parser.error(f"unknown configuration {name}")
        build(name, CONFIGS[name], args.cutlass, args.flash_attention)
    return 0


if __name__ == "__main__":
    sys.exit(main())
