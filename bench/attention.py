"""Forward attention TFLOP/s on an H100/H200: Tessera against PyTorch's scaled_dot_product_attention with each
backend it offers (flash, cuDNN, efficient), FlexAttention where PyTorch has it and, when Triton is installed,
a Triton fused attention kernel,
on the FlashAttention-3 paper's grid (its Figure 5): sequence length 512 to 16k with batch * seq = 16k
tokens, hidden size 2048 (heads = 2048 / head_dim) for head_dim 64, 128 and 256, causal and not, bf16.

    python bench/attention.py [--seq 512 1024 ...] [--head-dim 64 128 256] [--causal both|yes|no]
                              [--repeats 30] [--warmup 5] [--out bench/results] [--backward]

`--backward` times the backward instead (bench/attention_backward_gpu.py: Tessera's three kernels against
PyTorch's SDPA backward backends, FLOPs 2.5x the forward's), head_dim 64 and 128.

`--fp8` times the FP8 forward instead (e4m3 q, k, v, descales of 1, bf16 O; sequence lengths
`gpu_plan.FP8_SEQS` unless --seq is given): "Tessera FP8" as `tessera.attention` runs it on CUDA tensors (V
rearranged on the device into the layout the kernel's ABI asks for, then the kernel), "Tessera FP8 kernel"
the kernel alone on V already in that layout, and cuDNN's FP8 attention through PyTorch's SDPA where this
PyTorch has one (refused by name otherwise); FlashAttention-3's published FP8 figures (its Figure 7,
`gpu_plan.FA3_FP8_TFLOPS`) are printed beside them, not measured. Every output is checked first by
`tessera.reference.check_attention_fp8` (float64 attention of the dequantized inputs) on a slice: batch 0,
the first `FP8_CHECK_HEADS` heads, the last `FP8_CHECK_ROWS` query rows (the last rows keep the bottom-right
causal alignment).

FLOPs = 4 * seq^2 * head_dim * heads * batch, halved for causal. Every result is first checked against an
fp32 PyTorch computation under Tessera's tolerance rule (`tessera.reference`: at most twice the error of a
straightforward bf16 computation, plus 1e-3); a wrong result is reported as WRONG and never timed. A
configuration a system does not support (this file's Triton kernel at head_dim 256, say) is reported as such. Timing: CUDA
events around each launch after warm-up, L2 flushed (a 256 MiB memset) before each, median of the repeats.
Writes a table (stdout), `attention.json` and `attention.png` (TFLOP/s against sequence length, one line per
system, one panel per head_dim and mask; needs matplotlib) into --out. Without a usable GPU it prints
"no CUDA GPU: <why>" and exits 0. bench/gemm.py uses the harness of this file.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from harness import (
    CAUSAL_CHOICES, CHECK_SCORE_BYTES, Record, System, Unsupported, compile_strictly, environment, first_compiled_call,
    measure, plot, print_header, print_row, report_problems, require_gpu, attention_grid, sdpa_systems_of,
    write_results,
)

SEQS = (512, 1024, 2048, 4096, 8192, 16384)
HEAD_DIMS = (64, 128, 256)
FP8_CHECK_HEADS, FP8_CHECK_ROWS = 2, 64
"""The slice of every FP8 output `fp8_check` compares with float64 (the whole would be seq^2 float64 scores)."""


# region Attention systems


def tessera_system(torch, cluster: int = 1, tile: str | None = None) -> System:
    """Tessera's forward as `tessera.attention` runs it ("Tessera"), in clusters of `cluster` query blocks, or
    with `tile` (`gpu_plan.FORWARD_TILES`: "Tessera <tile>")."""
    from tessera.runtime.attention import UnsupportedKernel, attention_config, check_attention_arguments
    from tessera.runtime.compiler import compile_kernel
    from tessera.runtime.launch import prepare_torch

    def build(inputs):
        q, k, v, causal = inputs
        try:
            head_dim, dtype = check_attention_arguments(q, k, v)
            if cluster != 1 and causal:
                raise UnsupportedKernel("clusters share K/V only without causal (the members' key ranges differ)")
            if tile is not None:
                import gpu_plan

                kernel = compile_kernel(gpu_plan.forward_config(head_dim, causal, tile=tile))
            else:
                kernel = compile_kernel(attention_config(head_dim, causal, dtype, None, cluster=cluster))
        except UnsupportedKernel as why:
            raise Unsupported(str(why)) from None
        launch, (o,) = prepare_torch(kernel, q, k, v)

        def run():
            launch()
            return o
        return run
    return System(f"Tessera {tile}" if tile else "Tessera" if cluster == 1 else f"Tessera cluster {cluster}", build)


def sdpa_systems(torch) -> list[System]:
    import torch.nn.functional as F

    def build_for(backend, sdpa_kernel):
        def build(inputs):
            q, k, v, causal = inputs

            def run():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            try:
                run()
            except RuntimeError as why:  # "No available kernel", a shape the backend refuses
                raise Unsupported(str(why).splitlines()[0]) from None
            return run
        return build
    return sdpa_systems_of(build_for)


def triton_system(torch, autotune: bool = True) -> System | None:
    """The Triton kernel of bench/triton_attention.py, autotuned over its tile shapes (without autotuning,
    as under Triton's interpreter, TRITON_INTERPRET=1, which cannot time: the first shape)."""
    import triton_attention

    loaded = triton_attention.load()
    if loaded is None:
        return None
    triton, attention_forward = loaded
    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n}, num_warps=w, num_stages=s)
               for m, n, w, s in triton_attention.TILES]
    tuned = triton.autotune(configs=configs, key=["seq", "HEAD_DIM", "CAUSAL"])(attention_forward) if autotune \
        else None
    fixed = configs[0]

    def build(inputs):
        q, k, v, causal = inputs
        b, h, s, d = q.shape
        if k.shape[2] != s or d not in triton_attention.HEAD_DIMS or not all(x.is_contiguous() for x in (q, k, v)):
            raise Unsupported("this Triton kernel takes contiguous inputs, seq_q = seq_k and head_dim "
                              + " or ".join(map(str, triton_attention.HEAD_DIMS)))
        o = torch.empty_like(q)
        scale_log2 = 1.4426950408889634 / math.sqrt(d)

        def run():
            grid = lambda meta: (triton.cdiv(s, meta["BLOCK_M"]), b * h)  # noqa: E731
            if tuned is not None:
                tuned[grid](q, k, v, o, scale_log2, s, HEAD_DIM=d, CAUSAL=causal)
            else:
                attention_forward[grid(fixed.kwargs)](q, k, v, o, scale_log2, s, HEAD_DIM=d, CAUSAL=causal,
                                                      **fixed.kwargs)
            return o
        return run
    return System("Triton", build)


def flex_system(torch, backend: str = "inductor") -> System | None:
    """PyTorch's FlexAttention (`torch.nn.attention.flex_attention`, compiled by `harness.compile_strictly` with
    `backend`: every row runs compiled or is refused, never eager), the causal mask as a block mask (bottom-right
    aligned, as the others); None where this PyTorch has none."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    compiled = compile_strictly(torch, flex_attention, backend)

    def build(inputs):
        q, k, v, causal = inputs
        seq_q, seq_k = q.shape[2], k.shape[2]
        mask = None
        if causal:
            offset = seq_k - seq_q
            mask = create_block_mask(lambda b, h, i, j: j <= i + offset, None, None, seq_q, seq_k, device=q.device)
        return first_compiled_call(torch, lambda: compiled(q, k, v, block_mask=mask))
    return System("FlexAttention", build)


def tessera_fp8_systems(torch) -> list[System]:
    """Tessera's FP8 forward on CUDA e4m3 tensors: "Tessera FP8" (V rearranged into the kernel's layout,
    `attention_fp8.kernel_v`, then the kernel: what `tessera.attention` does) and "Tessera FP8 kernel" (the
    kernel alone, V given in its layout)."""
    from tessera.runtime.attention_fp8 import check_key_length, fp8_config, fp8_signature, kernel_v
    from tessera.runtime.attention_base import UnsupportedKernel
    from tessera.runtime.compiler import compile_kernel
    from tessera.runtime.launch import prepare_torch

    def system(name: str, rearrange: bool) -> System:
        def build(inputs):
            q, k, v, causal = inputs
            config = fp8_config(q.shape[3], causal, None, k.shape[1] != q.shape[1], False, None)
            sig = fp8_signature(config)
            try:
                check_key_length(sig, k.shape[2], None)
            except UnsupportedKernel as why:
                raise Unsupported(str(why)) from None
            kernel = compile_kernel(config)
            vt = kernel_v(v, sig)
            ones = torch.ones(k.shape[:2], dtype=torch.float32, device=q.device)
            launch, (o,) = prepare_torch(kernel, q, k, vt, ones, ones, ones)

            moved = rearrange and vt.data_ptr() != v.data_ptr()  # V as it is where the kernel takes it so

            def run():
                if moved:
                    kernel_v(v, sig, out=vt)
                launch()
                return o
            return run
        return System(name, build)
    return [system("Tessera FP8", True), system("Tessera FP8 kernel", False)]


def cudnn_fp8_system(torch) -> System:
    """cuDNN's FP8 attention through `torch.nn.functional.scaled_dot_product_attention` on e4m3 tensors (the
    cuDNN backend); Unsupported, naming PyTorch's refusal, where this PyTorch has none."""
    import torch.nn.functional as F

    def build(inputs):
        q, k, v, causal = inputs
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
        except ImportError:
            raise Unsupported(f"PyTorch {torch.__version__} has no torch.nn.attention.sdpa_kernel") from None

        def run():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # seq_q == seq_k: no alignment
        try:
            run()
        except (RuntimeError, TypeError, NotImplementedError) as why:
            first = str(why).strip().splitlines()[0] if str(why).strip() else type(why).__name__
            raise Unsupported(f"PyTorch {torch.__version__} SDPA (cuDNN) takes no float8_e4m3fn inputs: {first}") \
                from None
        return run
    return System("cuDNN FP8 (SDPA)", build)


def fp8_check(torch, q, k, v, causal: bool):
    """`check(outputs)` of the FP8 rows: each output's slice (batch 0, FP8_CHECK_HEADS heads, the last
    FP8_CHECK_ROWS query rows) under `tessera.reference.check_attention_fp8` (descales of 1). Returns
    (errors by name, tolerance, max |slice of the first output|)."""
    from tessera.reference import check_attention_fp8
    from tessera.runtime.launch import torch_to_numpy

    heads, rows = min(FP8_CHECK_HEADS, q.shape[1]), min(FP8_CHECK_ROWS, q.shape[2])
    q8 = torch_to_numpy(q[:1, :heads, -rows:].cpu())
    k8, v8 = (torch_to_numpy(x[:1, :heads].cpu()) for x in (k, v))

    def check(outputs: dict):
        errors, tolerance, magnitude = {}, 0.0, 0.0
        for name, o in outputs.items():
            got = o[:1, :heads, -rows:].float().cpu().numpy()
            comparison = check_attention_fp8(got, q8, k8, v8, causal=causal)
            errors[name], tolerance = comparison.max_error, comparison.tolerance
            magnitude = magnitude or float(np.abs(got).max())
        return errors, tolerance, magnitude
    return check


def fp8_inputs(torch, row: dict, generator):
    """(q, k, v) e4m3 CUDA tensors of a benchmark row: standard normal values rounded to e4m3."""
    shape = (row["batch"], row["heads"], row["seq"], row["head_dim"])
    return tuple(torch.randn(*shape, device="cuda", generator=generator).to(torch.float8_e4m3fn) for _ in range(3))


def run_fp8(torch, args) -> list[Record]:
    """The FP8 forward rows (`--fp8`): measured systems, then FA3's published figure of the row, if any."""
    import gpu_plan

    systems = tessera_fp8_systems(torch) + [cudnn_fp8_system(torch)]
    widths = print_header(systems)
    print(f"{'':<34}" + "".join(f"{'':>{w}}" for w in widths) + "  FA3 paper (Fig. 7)")
    records: list[Record] = []
    masks = CAUSAL_CHOICES[args.causal]
    for row in gpu_plan.fp8_rows(args.head_dim, masks, args.seq or gpu_plan.FP8_SEQS, args.tokens, args.hidden):
        generator = torch.Generator(device="cuda").manual_seed(row["seq"] * 1000 + row["head_dim"])
        q, k, v = fp8_inputs(torch, row, generator)
        row_records = measure(torch, systems, (q, k, v, row["causal"]), row, gpu_plan.attention_flops(row),
                              fp8_check(torch, q, k, v, row["causal"]), args)
        records += row_records
        published = gpu_plan.fa3_fp8_tflops(row)
        print_row(f"d{row['head_dim']} {'causal' if row['causal'] else 'full'} seq {row['seq']} (b{row['batch']} "
                  f"h{row['heads']})", row_records, widths)
        print(f"{'':<34}" + "".join(f"{'':>{w}}" for w in widths) + f"  {published or 'not published'}")
        report_problems(row_records)
        del q, k, v
        torch.cuda.empty_cache()
    return records


def attention_check(torch, q, k, v, causal: bool):
    """(errors by name, tolerance, max |reference|) of outputs: max |out - ref| against an fp32 reference,
    and the tolerance 2 * (error of a straightforward bf16 computation) + ABSOLUTE_TOLERANCE, computed a few
    heads at a time."""
    from tessera.reference import ABSOLUTE_TOLERANCE

    b, h, sq, d = q.shape
    sk = k.shape[2]
    scale = 1.0 / math.sqrt(d)
    visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if causal:  # bottom-right aligned: query i sees keys 0 .. i + sk - sq
        visible = torch.arange(sk, device=q.device)[None, :] <= torch.arange(sq, device=q.device)[:, None] + (sk - sq)
    flat = [x.reshape(b * h, x.shape[2], d) for x in (q, k, v)]
    chunk = max(1, CHECK_SCORE_BYTES // (sq * sk * 4))

    def softmax(scores):
        p = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        return torch.nan_to_num(p, nan=0.0)  # a query that sees no key gives zeros

    def check(outputs: dict):
        errors = dict.fromkeys(outputs, 0.0)
        baseline, magnitude = 0.0, 0.0
        flat_out = {name: o.reshape(b * h, sq, d) for name, o in outputs.items()}
        for i in range(0, b * h, chunk):
            qs, ks, vs = (x[i:i + chunk].float() for x in flat)
            scores = qs @ ks.transpose(1, 2) * scale
            ref = softmax(scores) @ vs
            rounded = softmax(scores.to(q.dtype).float()).to(q.dtype).float()
            straightforward = (rounded @ vs).to(q.dtype).float()
            baseline = max(baseline, _max_abs(torch, straightforward - ref))
            magnitude = max(magnitude, float(ref.abs().max()))
            for name, o in flat_out.items():
                errors[name] = max(errors[name], _max_abs(torch, o[i:i + chunk].float() - ref))
        return errors, 2 * baseline + ABSOLUTE_TOLERANCE, magnitude
    return check


def _max_abs(torch, x) -> float:
    return float(torch.nan_to_num(x.abs(), nan=float("inf")).max())


# endregion


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, nargs="+", help="sequence lengths (default 512 to 16k; --fp8: "
                                                           "gpu_plan.FP8_SEQS)")
    parser.add_argument("--head-dim", type=int, nargs="+", default=list(HEAD_DIMS), help="head dimensions")
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--cluster", type=int, nargs="+", default=[1],
                        help="Tessera's cluster sizes (query blocks sharing K/V by TMA multicast; non-causal only)")
    parser.add_argument("--tokens", type=int, default=16384, help="batch * seq (default 16k)")
    parser.add_argument("--hidden", type=int, default=2048, help="heads * head_dim (default 2048)")
    parser.add_argument("--repeats", type=int, default=30, help="timed runs per system (median reported)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results", help="folder for JSON and PNG")
    parser.add_argument("--backward", action="store_true",
                        help="time the backward (dq, dk, dv; FLOPs 2.5x the forward's) against PyTorch's SDPA "
                             "backward backends instead (bench/attention_backward_gpu.py)")
    parser.add_argument("--fp8", action="store_true",
                        help="time the FP8 (e4m3) forward against cuDNN's through SDPA and FA3's published figures")
    args = parser.parse_args()
    torch = require_gpu()
    env = environment(torch)
    if args.fp8:
        print_environment(env)
        write_table(args, env, "attention_fp8", run_fp8(torch, args), f"Forward attention, FP8 e4m3, {env['device']}")
        return
    args.seq = args.seq or list(SEQS)
    if args.backward:
        from attention_backward_gpu import run_backward

        print_environment(env)
        write_table(args, env, "attention_backward", run_backward(torch, args, env),
                    f"Backward attention, bf16, {env['device']}")
        return

    systems = [tessera_system(torch, c) for c in args.cluster] + sdpa_systems(torch)
    systems += [s for s in (triton_system(torch), flex_system(torch)) if s is not None]
    print_environment(env)
    widths = print_header(systems)
    records: list[Record] = []
    for head_dim, heads, causal, seq, batch in attention_grid(args):
        config = dict(seq=seq, batch=batch, heads=heads, head_dim=head_dim, causal=causal, dtype="bf16")
        flops = 4 * seq * seq * head_dim * heads * batch / (2 if causal else 1)
        generator = torch.Generator(device="cuda").manual_seed(seq * 1000 + head_dim)
        q, k, v = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16,
                               generator=generator) for _ in range(3))
        check = attention_check(torch, q, k, v, causal)
        row = measure(torch, systems, (q, k, v, causal), config, flops, check, args)
        records += row
        print_row(f"d{head_dim} {'causal' if causal else 'full'} seq {seq} (b{batch} h{heads})", row, widths)
        report_problems(row)
        del q, k, v
        torch.cuda.empty_cache()
    write_table(args, env, "attention", records, f"Forward attention, bf16, {env['device']}")


def print_environment(env: dict) -> None:
    print(f"{env['device']}: torch {env['torch']} (CUDA {env['cuda']}), tessera {env['tessera']}, {env['ptxas']}")


def write_table(args, env: dict, name: str, records: list[Record], title: str) -> None:
    """Write the table's records as `name`.json under --out and plot them by sequence length, one panel per
    (head_dim, causal), printing where each went."""
    print(f"results: {write_results(args.out, name, env, args, records)}")
    picture = plot(args.out, name, records, lambda c: (c["head_dim"], c["causal"]),
                   lambda p: f"head_dim {p[0]}, {'causal' if p[1] else 'no mask'}", lambda c: c["seq"],
                   "sequence length", title)
    if picture is not None:
        print(f"plot: {picture}")


if __name__ == "__main__":
    main()
