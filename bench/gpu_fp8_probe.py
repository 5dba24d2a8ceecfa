"""Which FP8 forward kernels finish on the GPU, each run in its own process under a time limit (about 25 s in all).

The FP8 forward hung on an H200 at every shape. The cause found on the CPU (tests/test_fp8_registers.py): the
setmaxnreg split 160/176/176 (head_dim 128; 112/200/200 at 256) needs 65536 registers of the 384 x 168 = 64512 the
CTA owns, so a consumer warpgroup's `setmaxnreg.inc` spins forever. The compiler now splits 152/176/176. Two runs
tell whether that was the whole story:

- "fixed": the FP8 forward at head_dim 64, 128 and 256 (1 x 1 x 128 x 128, non-causal) as `tessera.attention`
  compiles it now, checked by `reference.check_attention_fp8`: expected OK at each head_dim;
- "hung-split": the same head_dim 128 kernel with only its `setmaxnreg.dec` count put back to 160 (the PTX
  re-assembled by ptxas, nothing else changed): expected HANG. OK here would mean the split was not the cause.

    python bench/gpu_fp8_probe.py [--out DIR] [--level ptx]

`--level ptx` runs the same in the PTX executor (no GPU): "fixed" OK, "hung-split" a deadlock at its
`setmaxnreg.inc` (reported as HANG). Prints one line per result and writes `fp8_probe.json` to `--out`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

HEAD_DIMS = (64, 128, 256)
SHAPE = dict(batch=1, heads=1, seq=128)
LIMITS = {"fixed": 20, "hung-split": 12}
HUNG_DEC = 160


def _inputs(head_dim: int):
    import ml_dtypes
    import numpy as np

    rng = np.random.default_rng(head_dim)
    shape = (SHAPE["batch"], SHAPE["heads"], SHAPE["seq"], head_dim)
    q, k, v = ((rng.standard_normal(shape) * 3).astype(ml_dtypes.float8_e4m3fn) for _ in range(3))
    descales = [(rng.random((SHAPE["batch"], SHAPE["heads"])) * 2).astype(np.float32) for _ in range(3)]
    return q, k, v, descales


def _fixed(level):
    import tessera
    from tessera import reference

    for d in HEAD_DIMS:
        q, k, v, ds = _inputs(d)
        start = time.perf_counter()
        o = tessera.attention(q, k, v, level=level, descale_q=ds[0], descale_k=ds[1], descale_v=ds[2])
        ok = reference.check_attention_fp8(o, q, k, v, *ds, causal=False).ok
        print(f"fixed d{d}: {'OK' if ok else 'WRONG'} {time.perf_counter() - start:.2f} s", flush=True)


def _hung_split(level):
    import re

    from tessera import toolchain
    from tessera.runtime import entry
    from tessera.runtime.attention_fp8 import fp8_config, fp8_signature, kernel_v
    from tessera.runtime.compiler import compile_kernel

    config = fp8_config(128, False, None, False, False, level)
    kernel = compile_kernel(config)
    old = re.search(r"setmaxnreg\.dec\.sync\.aligned\.u32 (\d+);", kernel.ptx)
    ptx = kernel.ptx.replace(old.group(0), f"setmaxnreg.dec.sync.aligned.u32 {HUNG_DEC};")
    print(f"hung-split d128: setmaxnreg.dec {old.group(1)} -> {HUNG_DEC}", flush=True)
    q, k, v, ds = _inputs(128)
    v = kernel_v(v, fp8_signature(config))
    if level == "ptx":
        from tessera.interpreters.launch import prepare_arguments
        from tessera.interpreters.ptx import PtxDeadlockError
        from tessera.interpreters.ptx.launcher import launch_described

        arrays, sizes = prepare_arguments(fp8_signature(config), [q, k, v, *ds])
        try:
            launch_described(ptx, kernel.host, arrays, sizes, source="hung-split.ptx")
        except PtxDeadlockError as error:
            print(f"hung-split d128: deadlock in the executor: {str(error).splitlines()[1].strip()[:160]}", flush=True)
            sys.exit(3)  # what the GPU does, as a hang
        print("hung-split d128: OK", flush=True)
        return
    hung = dataclasses.replace(kernel, ptx=ptx, cubin=toolchain.compile_ptx(ptx).cubin, key=kernel.key + "-hung")
    entry.launch(hung, q, k, v, *ds)
    print("hung-split d128: OK", flush=True)


def _child(variant: str, level: str | None) -> None:
    (_fixed if variant == "fixed" else _hung_split)(level)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--level", choices=["ptx"], default=None)
    parser.add_argument("--child", choices=list(LIMITS), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args.child, args.level)
    results = {}
    for variant, limit in LIMITS.items():
        command = [sys.executable, __file__, "--child", variant] + (["--level", args.level] if args.level else [])
        start = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=limit if not args.level else None)
            lines = done.stdout.strip().splitlines()
            verdict = "OK" if done.returncode == 0 else ("HANG" if done.returncode == 3 else "FAIL")
            detail = lines + ([done.stderr.strip()[-600:]] if verdict == "FAIL" else [])
        except subprocess.TimeoutExpired as timeout:
            verdict = "HANG"
            detail = (timeout.stdout or b"").decode(errors="replace").strip().splitlines()
        results[variant] = {"verdict": verdict, "seconds": round(time.perf_counter() - start, 1), "lines": detail,
                            "expected": "OK" if variant == "fixed" else "HANG"}
        print(f"{variant}: {verdict} ({results[variant]['seconds']} s; expected {results[variant]['expected']})",
              *detail, sep="\n  ", flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fp8_probe.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
