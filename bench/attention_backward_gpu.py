"""Backward attention TFLOP/s on an H100/H200 (`python bench/attention.py --backward ...`): Tessera's three
backward kernels (`tessera.attention_backward`) against PyTorch's scaled_dot_product_attention backward with each
backend it offers, on the same grid as the forward.

FLOPs = 2.5 x the forward's (five matrix products instead of two): 10 * seq^2 * head_dim * heads * batch, halved
for causal. The timed region is the whole backward: Tessera's preprocess, main and postprocess kernels; PyTorch's
`o.backward(do)` of a graph built once (retain_graph), so neither side recomputes its forward. Every result is
first checked against the fp32 gradient (torch autograd of an fp32 attention) under Tessera's rule
(`tessera.reference`): the largest error of dq, dk and dv may be at most twice that of a straightforward bf16
computation (PyTorch's math backend in bf16) plus an absolute term; a wrong result is reported as WRONG and
never timed. Tessera's O and LSE come from its own forward (`tessera.attention(..., return_lse=True)`).
"""

from __future__ import annotations

from contextlib import contextmanager

from harness import (
    CHECK_SCORE_BYTES, Record, System, Unsupported, attention_grid, measure, print_header, print_row, report_problems,
    sdpa_systems_of,
)


def tessera_backward_system(torch, mma_order: str | None = None) -> System:
    """`tessera.attention_backward`; with `mma_order` ("program", `gpu_plan.BACKWARD_ORDERS`), its kernels through
    `passes.PROGRAM_ORDER_PIPELINE` (`convert-tile-to-sm90{mma-order=program}`) instead of the default pipeline,
    for the rows that time the wgmma issue orders (the runtime's `BACKWARD_PIPELINE` set around each call)."""
    import tessera
    import tessera.runtime.attention_backward as runtime
    from tessera.runtime.attention import UnsupportedKernel

    if mma_order not in (None, "program"):
        raise ValueError(f"mma_order must be None or 'program', got {mma_order!r}")

    @contextmanager
    def pipeline():
        default = runtime.BACKWARD_PIPELINE
        if mma_order is not None:
            runtime.BACKWARD_PIPELINE = "PROGRAM_ORDER_PIPELINE"
        try:
            yield
        finally:
            runtime.BACKWARD_PIPELINE = default

    def build(inputs):
        q, k, v, do, causal = inputs
        try:
            o, lse = tessera.attention(q, k, v, causal=causal, return_lse=True)
            with pipeline():
                tessera.attention_backward(q, k, v, o, lse, do, causal=causal)  # compile (or fetch) the kernels
        except (UnsupportedKernel, ValueError) as why:
            raise Unsupported(str(why).splitlines()[0]) from None

        def run():
            with pipeline():
                return tessera.attention_backward(q, k, v, o, lse, do, causal=causal)
        return run
    return System("Tessera" if mma_order is None else f"Tessera mma-order={mma_order}", build)


def sdpa_backward_systems(torch) -> list[System]:
    import torch.nn.functional as F

    def build_for(backend, sdpa_kernel):
        def build(inputs):
            q, k, v, do, causal = inputs
            leaves = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
            try:
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(*leaves, is_causal=causal)
            except RuntimeError as why:  # "No available kernel", a shape the backend refuses
                raise Unsupported(str(why).splitlines()[0]) from None

            def run():
                for x in leaves:
                    x.grad = None
                with sdpa_kernel(backend):
                    o.backward(do, retain_graph=True)
                return tuple(x.grad for x in leaves)
            return run
        return build
    return sdpa_systems_of(build_for)


def backward_check(torch, q, k, v, do, causal: bool):
    """(errors by name, tolerance, max |reference gradient|): the largest error of (dq, dk, dv) against the
    fp32 gradient; the tolerance is 2 x the error of PyTorch's math backend in bf16, plus the rule's absolute
    term scaled by the gradients' magnitude. The math backend materialises the scores, so the gradients are
    computed a few heads at a time (about CHECK_SCORE_BYTES of fp32 scores each: one head at seq 16k)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tessera.reference import ABSOLUTE_TOLERANCE

    batch, heads, seq_q, _ = q.shape
    chunk = max(1, CHECK_SCORE_BYTES // (batch * seq_q * k.shape[2] * 4))

    def gradients(dtype, part):
        leaves = [x[:, part].detach().to(dtype).requires_grad_(True) for x in (q, k, v)]
        with sdpa_kernel(SDPBackend.MATH):
            o = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        o.backward(do[:, part].to(dtype))
        return [x.grad.float() for x in leaves]

    reference = [torch.empty(x.shape, dtype=torch.float32, device=x.device) for x in (q, k, v)]
    magnitude = baseline = 0.0
    for start in range(0, heads, chunk):
        part = slice(start, start + chunk)
        exact, straightforward = gradients(torch.float32, part), gradients(q.dtype, part)
        for whole, r, s in zip(reference, exact, straightforward):
            whole[:, part] = r
            magnitude = max(magnitude, float(r.abs().max()))
            baseline = max(baseline, float((s - r).abs().max()))
        del exact, straightforward

    def check(outputs: dict):
        errors = {name: max(float(torch.nan_to_num((g.float() - r).abs(), nan=float("inf")).max())
                            for g, r in zip(grads, reference)) for name, grads in outputs.items()}
        return errors, 2 * baseline + ABSOLUTE_TOLERANCE * max(1.0, magnitude), magnitude
    return check


def run_backward(torch, args, env) -> list[Record]:
    """The backward rows of `bench/attention.py --backward`: same grid and table as the forward."""
    systems = [tessera_backward_system(torch)] + sdpa_backward_systems(torch)
    widths = print_header(systems)
    records: list[Record] = []
    for head_dim, heads, causal, seq, batch in attention_grid(args):
        config = dict(seq=seq, batch=batch, heads=heads, head_dim=head_dim, causal=causal, dtype="bf16",
                      direction="backward")
        flops = 2.5 * 4 * seq * seq * head_dim * heads * batch / (2 if causal else 1)
        generator = torch.Generator(device="cuda").manual_seed(seq * 1000 + head_dim + 7)
        q, k, v, do = (torch.randn(batch, heads, seq, head_dim, device="cuda", dtype=torch.bfloat16,
                                   generator=generator) for _ in range(4))
        check = backward_check(torch, q, k, v, do, causal)
        row = measure(torch, systems, (q, k, v, do, causal), config, flops, check, args)
        records += row
        print_row(f"bwd d{head_dim} {'causal' if causal else 'full'} seq {seq} (b{batch} h{heads})", row, widths)
        report_problems(row)
        del q, k, v, do
        torch.cuda.empty_cache()
    return records
