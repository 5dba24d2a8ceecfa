"""Probes of Hopper's arithmetic for the next GPU session (the `probes` stage of bench/gpu_session.py), each a
small kernel on crafted inputs whose raw output bits are recorded:

- wgmma (bf16 -> f32, m64nNk16): Tessera's GEMM kernel on inputs built to pin the tensor-core model of
  `tessera.sm90.wgmma_numerics` the way Fasi et al. (2021) and Khattak & Mikaitis (2025) built theirs: K = 32,
  two blocks chained, block 0 setting the accumulator c (one product c x 1) and block 1 a pattern of products
  per row (a big term and k small ones, a cancelling pair, negative terms) scaled per column by 2^-gap
  (gap = the column index), so each element shows whether terms 2^-gap below the block's largest survive
  (extra alignment bits), how partial units round (truncation, both signs), whether c takes part in the
  alignment, and what the cut leaves after c cancels the big term (normalisation after alignment); then
  random blocks (normal, and normal with exponents spread over +-20) as the papers' semi-exhaustive check.
  Compared with the model chained over the blocks (`chained_gemm`) and with the executor's exact default
  (each block rounded to nearest once).
- ex2.approx.ftz.f32: a Tile IR kernel (`tile.exp2`) over a dense set of inputs (consecutive f32 from
  1.0 and from -1.0, an even sweep of [-130, 130), and the special values), against the correctly rounded
  2^x the executor computes: the hardware's algorithm is not documented (PTX ISA: within 2 ulp), these bits
  are what a bit-exact model would have to reproduce.

- NaN bits: a Tile IR kernel (`_NAN_KERNEL`) takes f32 NaNs of several payloads and signs (quiet,
  signalling, all ones) through an f32 add, max.NaN, and the casts to bf16, e4m3 and e5m2 (`cvt.rn(.satfinite)`),
  and records each output's bits per input: the simulators give f32 arithmetic the canonical NaN 0x7fffffff
  (`tessera.sm90.nan`, from NVIDIA's documents) and the casts the sign-keeping NaN of ml_dtypes' conversion, which
  no document settles; the stage records both sides (`nan`: the GPU's and the PTX executor's bits, equal or not).

`run_probes(out, level)` writes out/probes.npz (inputs, GPU bits, predictions) and returns the summary the
stage records; level None runs on the GPU, "ptx" (the dry run, the test) runs the same kernels in the PTX
executor with the "hopper" wgmma numerics, where the wgmma probe must match the model everywhere (the kernel's
K loop is the chain `chained_gemm` assumes) and ex2 must be correctly rounded.

    python bench/gpu_probes.py --out /tmp/probes --dry-run
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

EX2_ROWS = 1024
"""Rows of 64 inputs the GPU run covers (65,536 inputs, 16 programs); the dry run takes `DRY_EX2_ROWS`."""
DRY_EX2_ROWS = 64
SEED = 20261130


def _bf16(x, exact: bool = False) -> np.ndarray:
    """x as bf16; with `exact`, ValueError if that rounds any value (a crafted probe measures the block, not
    the input's rounding)."""
    from tessera.numerics import BF16

    x = np.asarray(x, np.float64)
    rounded = x.astype(BF16)
    if exact and not np.array_equal(rounded.astype(np.float64), x):
        raise ValueError("a crafted probe input is not a bf16 value")
    return rounded


def crafted_wgmma() -> tuple[np.ndarray, np.ndarray]:
    """A [64, 32], B [32, 64] (bf16): row m's pattern times column n's scale 2^-n (see the module docstring)."""
    a, b = np.zeros((64, 32)), np.zeros((32, 64))
    b[0, :] = 1.0  # block 0: c = a[m, 0]
    b[16, :] = 1.0  # block 1: the big term, unscaled
    b[17:32, :] = 2.0 ** -np.arange(64)[None, :]  # the small terms, 2^-gap
    for m in range(16):  # 1 + k 2^-gap, k = m + 1 small terms: where do they stop counting?
        a[m, 16], a[m, 17:18 + m] = 1.0, 1.0
    for m in range(16, 32):  # c = 1 and k small terms: c sets the alignment
        a[m, 0], a[m, 17:18 + (m - 16)] = 1.0, 1.0
    for m in range(32, 48):  # c = -(1 - 2^-8), 1 and k small terms: what the cut at 2^-25 leaves after cancelling
        a[m, 0], a[m, 16], a[m, 17:18 + (m - 32)] = -(1.0 - 2.0**-8), 1.0, 1.0
    for m in range(48, 64):  # negative c and small terms of -1.5: truncation toward zero below zero
        a[m, 0], a[m, 17:18 + (m - 48) % 15] = -1.0 - 2.0**-7 * (m - 48), -1.5
    return _bf16(a, exact=True), _bf16(b, exact=True)


def random_wgmma(spread: int) -> tuple[np.ndarray, np.ndarray]:
    """A [128, 64], B [64, 128] (bf16): normal values, times 2^e with e uniform in [-spread, spread]."""
    rng = np.random.default_rng(SEED + spread)

    def draw(*shape):
        return _bf16(rng.standard_normal(shape) * 2.0 ** rng.integers(-spread, spread + 1, shape))

    return draw(128, 64), draw(64, 128)


def wgmma_cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {"crafted": crafted_wgmma(), "random": random_wgmma(0), "random-spread20": random_wgmma(20)}


def ex2_inputs(rows: int) -> np.ndarray:
    """[rows, 64] f32: the special values, then three quarters consecutive f32 from 1.0 and from -1.0 and an
    even sweep of [-130, 130), in equal parts."""
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 127.0, 127.999, 128.0, -126.0, -126.5,
                        -127.0, -149.0, -150.0, 0.5, -0.5, 2.0**-24, -(2.0**-24), 1.0], np.float32)
    part = (rows * 64 - len(special)) // 3
    up = (np.arange(part, dtype=np.uint32) + np.float32(1.0).view(np.uint32)).view(np.float32)
    down = (np.arange(part, dtype=np.uint32) + np.float32(-1.0).view(np.uint32)).view(np.float32)
    sweep = np.linspace(-130.0, 130.0, rows * 64 - len(special) - 2 * part, endpoint=False).astype(np.float32)
    return np.concatenate([special, up, down, sweep]).reshape(rows, 64)


_EX2_KERNEL = """\
builtin.module {
  func.func @ex2_probe(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
      %O: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>, tile.role = "out"})
      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %r = tile.exp2 %x : !tile.tile<64x64xf32, register>
    %ow = tile.view %O[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    tile.store_global %r, %ow : !tile.tile<64x64xf32, register>, !tile.tile<64x64xf32, global>
    func.return
  }
}
"""
"""A Tile IR kernel: 2^x of each element of an [M, 64] f32 input, 64 rows per program (`tile.exp2` lowers to
`ex2.approx.ftz.f32`, docs/tile-elementwise.md)."""


_NAN_OUTPUTS = (("add", "f32"), ("max", "f32"), ("bf16", "bf16"), ("e4m3", "f8E4M3FN"), ("e5m2", "f8E5M2"))
"""The NaN probe's outputs: (name, element type), in the kernel's argument order after X."""

NAN_INPUTS = (0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7FA00000, 0x7FC12345, 0xFFFFFFFF)
"""f32 NaN bit patterns: the default quiet NaN of either sign, signalling NaNs, the canonical NaN, payloads."""

_NAN_KERNEL = """\
builtin.module {
  func.func @nan_probe(
      %X: !tile.tile<?x64xf32, global> {tile.dims = #tile.dims<M, 64>},
""" + "".join(f"""      %{name.upper()}: !tile.tile<?x64x{ty}, global> {{tile.dims = #tile.dims<M, 64>, tile.role = "out"}}{
    ',' if k + 1 < len(_NAN_OUTPUTS) else ')'}
""" for k, (name, ty) in enumerate(_NAN_OUTPUTS)) + """      attributes {tile.kernel = {kind = "custom"}, tile.grid = #tile.dims<ceildiv(M, 64)>} {
    %c0 = arith.constant 0 : index
    %c64 = arith.constant 64 : index
    %b = tile.program_id x : index
    %m0 = arith.muli %b, %c64 : index
    %xw = tile.view %X[%m0, %c0] : !tile.tile<?x64xf32, global> -> !tile.tile<64x64xf32, global>
    %x = tile.load %xw : !tile.tile<64x64xf32, global> -> !tile.tile<64x64xf32, register>
    %one = tile.fill 1.0 : !tile.tile<64x64xf32, register>
    %zero = tile.fill 0.0 : !tile.tile<64x64xf32, register>
    %add = tile.add %x, %one : !tile.tile<64x64xf32, register>
    %max = tile.element_max %x, %zero : !tile.tile<64x64xf32, register>
    %bf16 = tile.cast %x : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xbf16, register>
    %e4m3 = tile.cast %x : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xf8E4M3FN, register>
    %e5m2 = tile.cast %x : !tile.tile<64x64xf32, register> -> !tile.tile<64x64xf8E5M2, register>
""" + "".join(f"""    %{name}_w = tile.view %{name.upper()}[%m0, %c0] : !tile.tile<?x64x{ty}, global> -> !tile.tile<64x64x{ty}, global>
    tile.store_global %{name}, %{name}_w : !tile.tile<64x64x{ty}, register>, !tile.tile<64x64x{ty}, global>
""" for name, ty in _NAN_OUTPUTS) + """    func.return
  }
}
"""
"""A Tile IR kernel: each f32 input through an add, a max.NaN and the casts to bf16, e4m3 and e5m2 (`NAN_INPUTS`
in the first columns of every row, normal values elsewhere), 64 rows per program."""


def nan_bits(level: str | None) -> dict:
    """{input bits: {output: its bits}} of the NaN probe at `level` (None: the GPU), as hex strings."""
    import tessera
    from tessera.ir import parse_module

    x = np.random.default_rng(SEED).standard_normal((64, 64)).astype(np.float32)
    x[:, :len(NAN_INPUTS)] = np.array(NAN_INPUTS, np.uint32).view(np.float32)
    outputs = tessera.launch(parse_module(_NAN_KERNEL), x, level=level)
    table = {}
    for k, bits in enumerate(NAN_INPUTS):
        row = {}
        for (name, _), out in zip(_NAN_OUTPUTS, outputs):
            out = np.asarray(out)
            column = out[:, k].view({4: np.uint32, 2: np.uint16, 1: np.uint8}[out.dtype.itemsize])
            row[name] = sorted({f"{int(v):0{2 * out.dtype.itemsize}x}" for v in column})
        table[f"{bits:08x}"] = row
    return table


def ex2_module():
    from tessera.ir import parse_module

    return parse_module(_EX2_KERNEL)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Signed f32 ULP distances got - want (int64; NaN on both sides 0)."""
    def ordered(x):
        bits = x.view(np.uint32).astype(np.int64)
        return np.where(bits & 0x80000000, -(bits & 0x7FFFFFFF), bits)

    distance = ordered(got) - ordered(want)
    return np.where(np.isnan(got) & np.isnan(want), 0, distance)


def _wgmma_summary(name, gpu, model, exact) -> dict:
    differ = np.flatnonzero(gpu.view(np.uint32) != model.view(np.uint32))
    return {"case": name, "elements": int(gpu.size), "equal_to_model": int(gpu.size - differ.size),
            "equal_to_exact": int(np.count_nonzero(gpu.view(np.uint32) == exact.view(np.uint32))),
            "first_differences": [{"index": int(i), "got": f"{int(gpu.reshape(-1)[i].view(np.uint32)):08x}",
                                   "model": f"{int(model.reshape(-1)[i].view(np.uint32)):08x}"}
                                  for i in differ[:8]]}


def run_probes(out: Path, level: str | None, ex2_rows: int = EX2_ROWS) -> dict:
    """Both probes at `level` (None: the GPU; "ptx": the PTX executor with the "hopper" wgmma numerics);
    writes out/probes.npz and returns the summary."""
    import tessera
    from tessera.interpreters.ptx.tensor_core_numerics import wgmma_numerics
    from tessera.sm90.wgmma_numerics import chained_gemm

    out.mkdir(parents=True, exist_ok=True)
    arrays, summary = {}, {"level": level or "gpu", "wgmma": [], "seconds": {}}
    start = time.perf_counter()
    for name, (a, b) in wgmma_cases().items():
        with wgmma_numerics("hopper"):
            got = np.asarray(tessera.gemm(a, b, level=level), np.float32)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        model = chained_gemm(a64, b64.T, None, "bf16", "f32").astype(np.float32)
        exact = np.zeros(got.shape, np.float32)  # the executor's default: each block exact, rounded once
        for k in range(0, a.shape[1], 16):
            exact = (exact.astype(np.float64) + a64[:, k:k + 16] @ b64[k:k + 16]).astype(np.float32)
        arrays.update({f"{name}_a": a.view(np.uint16), f"{name}_b": b.view(np.uint16),
                       f"{name}_d": got.view(np.uint32), f"{name}_model": model.view(np.uint32)})
        summary["wgmma"].append(_wgmma_summary(name, got, model, exact))
    summary["seconds"]["wgmma"] = time.perf_counter() - start
    start = time.perf_counter()
    x = ex2_inputs(ex2_rows)
    got = np.asarray(tessera.launch(ex2_module(), x, level=level), np.float32)
    with np.errstate(all="ignore"):
        x_ftz = np.where(np.abs(x) < np.finfo(np.float32).tiny, np.float32(0), x)
        rounded = np.exp2(x_ftz.astype(np.float64)).astype(np.float32)
        rounded = np.where(np.abs(rounded) < np.finfo(np.float32).tiny, np.float32(0), rounded)
    ulps = _ulps(got.reshape(-1), rounded.reshape(-1))
    values, counts = np.unique(np.clip(ulps, -3, 3), return_counts=True)
    arrays.update({"ex2_x": x.view(np.uint32), "ex2_d": got.view(np.uint32)})
    summary["ex2"] = {"inputs": int(x.size), "correctly_rounded": int(np.count_nonzero(ulps == 0)),
                      "ulp_histogram": {int(v): int(c) for v, c in zip(values, counts)},
                      "max_ulp": int(np.abs(ulps).max())}
    summary["seconds"]["ex2"] = time.perf_counter() - start
    start = time.perf_counter()
    got, executor = nan_bits(level), nan_bits("ptx")
    summary["nan"] = {"bits": got, "executor": executor, "equal": got == executor}
    summary["seconds"]["nan"] = time.perf_counter() - start
    np.savez_compressed(out / "probes.npz", **arrays)
    return summary


def probes_stage(writer, out: Path, dry: bool, quick: bool, no_gpu: str | None) -> None:
    """The session's `probes` stage: out/probes/probes.npz and the summary in the stage's record; dry, the
    executor's run (with `quick`, only the plan: tests/test_gpu_probes.py runs the dry run); `no_gpu`: why
    there is no GPU (the stage is skipped, saying so)."""
    writer.set("plan", {name: [list(a.shape), list(b.shape)] for name, (a, b) in wgmma_cases().items()}
               | {"ex2_inputs": (DRY_EX2_ROWS if dry else EX2_ROWS) * 64})
    if dry and quick:
        return
    if not dry and no_gpu is not None:
        writer.set("skipped", f"no GPU: {no_gpu}")
        return
    summary = run_probes(out / "probes", "ptx" if dry else None, DRY_EX2_ROWS if dry else EX2_ROWS)
    for key, value in summary.items():
        writer.set(key, value)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true", help="run the kernels in the PTX executor (no GPU)")
    args = parser.parse_args(argv)
    if not args.dry_run:
        from tessera.runtime import cuda_unavailable_reason

        reason = cuda_unavailable_reason()
        if reason is not None:
            raise SystemExit(f"no CUDA GPU: {reason} (--dry-run runs the probes in the PTX executor)")
    summary = run_probes(args.out, "ptx" if args.dry_run else None,
                         DRY_EX2_ROWS if args.dry_run else EX2_ROWS)
    (args.out / "probes.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
