"""`tessera.attention_backward(q, k, v, o, lse, do, ...)`: the gradients of attention, on the GPU or interpreted.

    dq, dk, dv = tessera.attention_backward(q, k, v, o, lse, do, causal=False, scale=None,
                                            deterministic=False, level=None, dlse=None)

q, o, do, dq: [batch, heads, seq_q, head_dim]; k, v, dk, dv: [batch, heads_k, seq_k, head_dim] with heads_k
dividing heads (GQA; heads_k = heads without it); lse: [batch, heads, seq_q], the forward's log-sum-exp in
natural log (f32; -inf for a row that sees no key). q, k, v, o and do share one element type, bf16
(`ml_dtypes.bfloat16`) or float16, which is the kernels' and the gradients'. `scale` defaults to
1/sqrt(head_dim); causal masking is aligned bottom-right, as in the forward. `dlse`: the loss's gradient in
the forward's LSE output, where the loss reads it ([batch, heads, seq_q], float; `with_lse_gradient`).

It runs the three kernels of `tessera.kernels.attention_backward` (preprocess, main, postprocess):
- `level=None`: on the GPU (`tessera.runtime`, like `tessera.attention`): each kernel compiled with the
  default pipeline, cached, and launched; NumPy arrays or PyTorch tensors (CUDA tensors used in place);
- `level="tile"`: in the Tile IR interpreter (`tessera.interpreters.launch.run_grid`);
- `level="target"` / `"ptx"`: lowered by the default pipeline and run in the CTA simulator / the PTX
  executor (`tessera.launch`), the very kernels the GPU runs.

Arguments are checked first (TypeError/ValueError naming the argument, `UnsupportedKernel` for a head_dim or
type no kernel takes), before a GPU is looked for (`CudaUnavailable` without one) or anything is compiled.
A kernel that a level cannot run yet (its ops are not lowered) is refused by `BackwardNotLowered`, naming the
kernel and the lowering's own diagnostic.
"""

from __future__ import annotations

import numpy as np

from tessera.runtime.attention_base import DTYPES, LAYOUT, UnsupportedKernel, check_tensor, with_lse_gradient
from tessera.runtime.compiler import remembered
from tessera.runtime.no_backward import no_backward

LEVELS = (None, "tile", "target", "ptx")
"""Where `attention_backward` runs: the GPU (None) or one of `tessera.LEVELS`."""
WHERE = "attention_backward"


BACKWARD_PIPELINE = "DEFAULT_PIPELINE"
"""The `tessera.passes` pipeline the backward's kernels are lowered with: the default one (the main kernel
warp-specialized where it fits, at head_dim 128; elsewhere the fallback ladder of `tessera.lowering.fallback`
takes the largest configuration that fits and names it in a warning and the kernel's `sm90.pipeline_note`)."""


def _pipeline() -> str:
    from tessera import passes

    return getattr(passes, BACKWARD_PIPELINE)


class BackwardNotLowered(NotImplementedError):
    """A level below Tile IR was asked for, and the default pipeline does not lower a backward kernel yet."""


def _dtype_name(x) -> str:
    from tessera.runtime.launch import dtype_name

    return dtype_name(x)


def check_backward_arguments(q, k, v, o, lse, do, causal, scale, deterministic, level):
    """The `tessera.kernels.BackwardConfig` for well-formed arguments (see the module docstring); otherwise
    TypeError / ValueError / UnsupportedKernel naming the argument and the rule."""
    from tessera.runtime.launch import is_torch_tensor

    if level not in LEVELS or isinstance(level, bool):
        raise ValueError(f"{WHERE}: level must be None (the GPU), 'tile', 'target' or 'ptx'; got {level!r}")
    shapes = {}
    for name, x in (("q", q), ("k", k), ("v", v), ("o", o), ("lse", lse), ("do", do)):
        shape = check_tensor(WHERE, name, x)
        rank = 3 if name == "lse" else 4
        if len(shape) != rank:
            layout = "[batch, heads, seq_q]" if name == "lse" else LAYOUT
            raise ValueError(f"{WHERE}: {name} must be {rank}-D {layout}, got shape {tuple(shape)}")
        if any(int(d) <= 0 for d in shape):
            raise ValueError(f"{WHERE}: {name} has an empty dimension: shape {tuple(shape)}")
        shapes[name] = tuple(int(d) for d in shape)
    if len({is_torch_tensor(x) for x in (q, k, v, o, lse, do)}) != 1:
        raise ValueError(f"{WHERE}: q, k, v, o, lse and do must be all NumPy arrays or all PyTorch tensors")
    batch, heads, seq_q, head_dim = shapes["q"]
    for name in ("o", "do"):
        if shapes[name] != shapes["q"]:
            raise ValueError(f"{WHERE}: {name} must have q's shape {shapes['q']} {LAYOUT}, got {shapes[name]}")
    if shapes["lse"] != (batch, heads, seq_q):
        raise ValueError(f"{WHERE}: lse must be [batch, heads, seq_q] = {(batch, heads, seq_q)}, got {shapes['lse']}")
    if shapes["k"] != shapes["v"]:
        raise ValueError(f"{WHERE}: k and v must have one shape {LAYOUT}, got {shapes['k']} and {shapes['v']}")
    k_batch, heads_k, _, k_dim = shapes["k"]
    if k_batch != batch or k_dim != head_dim:
        raise ValueError(f"{WHERE}: k and v must have q's batch ({batch}) and head_dim ({head_dim}), got shape "
                         f"{shapes['k']}")
    if heads % heads_k:
        raise ValueError(f"{WHERE}: k and v have {heads_k} heads, which must divide q's {heads} heads (GQA)")
    names = {name: _dtype_name(x) for name, x in (("q", q), ("k", k), ("v", v), ("o", o), ("do", do))}
    if len(set(names.values())) != 1:
        raise ValueError(f"{WHERE}: q, k, v, o and do must have one element type, got "
                         + ", ".join(f"{n} {t}" for n, t in names.items()))
    if names["q"] not in DTYPES:
        raise UnsupportedKernel(f"{WHERE}: element type {names['q']} is not supported (supported: "
                                f"{', '.join(DTYPES)})")
    if _dtype_name(lse) not in ("float32", "float64"):
        raise ValueError(f"{WHERE}: lse must be float32 (the forward's log-sum-exp), got {_dtype_name(lse)}")
    return backward_config(head_dim, causal, DTYPES[names["q"]], scale, deterministic)


def backward_config(head_dim: int, causal, dtype: str, scale, deterministic):
    """The checked `tessera.kernels.BackwardConfig` of the backward's kernels ("bf16"/"f16" `dtype`):
    UnsupportedKernel for a head_dim no backward kernel takes, ValueError naming the option no kernel combines
    (deterministic=True at head_dim 192). `tessera.runtime.autograd` asks before its forward runs."""
    from tessera.kernels.attention_backward_config import HEAD_DIMS

    if head_dim not in HEAD_DIMS:
        raise UnsupportedKernel(f"{WHERE}: head_dim {head_dim} is not supported by the backward kernels "
                                f"(supported: {', '.join(map(str, HEAD_DIMS))})")
    if isinstance(scale, np.floating | np.integer):
        scale = float(scale)
    try:
        return _checked_config(head_dim, causal, dtype, scale, deterministic)
    except ValueError as error:
        raise ValueError(f"{WHERE}: {error}") from None


@remembered
def _checked_config(head_dim, causal, dtype, scale, deterministic):
    from tessera.kernels import BackwardConfig

    return BackwardConfig.checked(head_dim, causal, dtype, scale, deterministic=deterministic)


def check_lse_gradient(dlse, lse, as_tensor: bool):
    """`dlse` as the backward's paths take it (`with_lse_gradient`): None, or f32 of lse's shape, a contiguous
    tensor on lse's device where the kernels' launches take and give tensors (`as_tensor`: PyTorch inputs on the
    GPU path), else a NumPy array. TypeError / ValueError naming `dlse` otherwise."""
    from tessera.runtime.launch import is_torch_tensor, torch_to_numpy

    if dlse is None:
        return None
    shape = check_tensor(WHERE, "dlse", dlse)
    if tuple(int(d) for d in shape) != tuple(int(d) for d in lse.shape):
        raise ValueError(f"{WHERE}: dlse must have lse's shape {tuple(lse.shape)} [batch, heads, seq_q], got "
                         f"{tuple(shape)}")
    if is_torch_tensor(dlse) != is_torch_tensor(lse):
        raise ValueError(f"{WHERE}: dlse must be a NumPy array or a PyTorch tensor as lse is")
    if _dtype_name(dlse) not in ("float32", "float64", "bfloat16", "float16"):
        raise TypeError(f"{WHERE}: dlse must hold floating-point numbers, got {_dtype_name(dlse)}")
    if as_tensor:
        dlse = dlse.detach() if dlse.device == lse.device else dlse.detach().to(lse.device)
        return dlse.float().contiguous()
    return np.asarray(torch_to_numpy(dlse.cpu()) if is_torch_tensor(dlse) else dlse, np.float32)


def _builder_options(config) -> dict:
    c = config.attention
    return dict(head_dim=c.head_dim, causal=c.causal, dtype=c.dtype, scale=c.scale, block_m=c.block_m,
                block_n=c.block_n, deterministic=config.deterministic)


@np.errstate(all="ignore")  # as `tessera.launch` (api.run_interpreted): an inf in dO is a value, not an error
def run_interpreted(config, q, k, v, o, lse, do, level: str = "tile", order_seed: int | None = None, dlse=None):
    """(dq, dk, dv) as NumPy arrays of the kernels' element type, the three kernels run at `level` ("tile",
    "target" or "ptx"). At Tile level, `order_seed` runs each kernel's blocks in a random permutation of the
    grid (seeded), as a GPU may schedule them. `dlse`: `with_lse_gradient`'s. NumPy's floating-point warnings
    are off while they run: the Tile IR interpreter is called here directly, not through `tessera.launch`, and
    under -W error its own arithmetic on an inf or NaN (a loss whose dO holds inf) was an exception from inside
    the interpreter."""
    from tessera import api
    from tessera.interpreters.launch import prepare_arguments, run_grid
    from tessera.runtime.compiler import KernelConfig, built_module

    kernels = built_module(KernelConfig.of("attention_backward", **_builder_options(config)))  # lowered once a level
    lse = np.asarray(lse, np.float32)
    if level != "tile":
        return _run_lowered(kernels, q, k, v, o, lse, do, level, dlse)
    rng = np.random.default_rng(order_seed) if order_seed is not None else None

    def run(module, inputs, initial=None, **launch):
        sig = api.find_kernel(module)
        arguments, sizes = prepare_arguments(sig, inputs, launch)
        for index, array in (initial or {}).items():
            arguments[index] = array
        total = int(np.prod(sig.grid_size(sizes)))
        run_grid(sig, module, arguments, sizes, order=None if rng is None else rng.permutation(total))
        return [a for a, arg in zip(arguments, sig.args) if arg.role == "out"]

    dpsum, lse2, dq_accum = run(kernels.preprocess, [o, do, lse])
    dq_accum, dk, dv = run(kernels.main, [q, k, v, do, lse2, with_lse_gradient(dpsum, dlse)], initial={6: dq_accum})
    (dq,) = run(kernels.postprocess, [dq_accum], seq_q=q.shape[2])  # dq_accum's rows are padded
    return dq, dk, dv


def _run_lowered(kernels, q, k, v, o, lse, do, level: str, dlse=None):
    """The three kernels lowered by the default pipeline and run at `level`; BackwardNotLowered naming the
    kernel and the lowering's diagnostic when a pass of the pipeline refuses one (a `DiagnosticException`,
    how passes refuse what they do not lower). Any other exception is a bug, not a refusal, and propagates."""
    from xdsl.utils.exceptions import DiagnosticException

    from tessera import api
    from tessera.runtime import entry

    lowered = []
    for module in kernels.modules:
        name = api.find_kernel(module).name
        try:
            lowered.append(api.compile(module, target="target", pipeline=_pipeline()))
        except DiagnosticException as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BackwardNotLowered(
                f"{WHERE}: level '{level}' needs kernel @{name} lowered to Target IR, and the default pipeline "
                f"does not lower it yet: {first}") from None
    pipeline = _pipeline()
    dpsum, lse2, _ = entry.launch(kernels.preprocess, o, do, lse, level=level, pipeline=pipeline)
    dq_accum, dk, dv = entry.launch(kernels.main, q, k, v, do, lse2, with_lse_gradient(dpsum, dlse), level=level,
                                    pipeline=pipeline)
    dq = entry.launch(kernels.postprocess, dq_accum, level=level, pipeline=pipeline, seq_q=q.shape[2])
    return dq, dk, dv


@no_backward("attention_backward")
def attention_backward(q, k, v, o, lse, do, causal: bool = False, scale: float | None = None,
                       deterministic: bool = False, level: str | None = None, bias=None, score_mod=None,
                       mask_mod=None, block_mask=None, captured_grads=None, dlse=None):
    """(dq, dk, dv) of attention; see the module docstring. A forward with an additive `bias` has no backward
    here yet: `bias` other than None is refused by name (the kernels would recompute P without it).
    `score_mod`/`mask_mod`/`block_mask`: those of the forward (`tessera.runtime.flex`).

    `captured_grads` (True, or names of arrays the score_mod reads): (dq, dk, dv, grads), grads a dict of the
    gradients of those captured float arrays (f32, each its array's shape; by the name the function calls it,
    `tessera.runtime.captured_gradients.captured_gradient_names`), added by atomic scatter-adds in the main
    kernel (in no fixed order: not with `deterministic=True`), at every level: on the GPU (level None) the main
    kernel adds them into f32 outputs the launch zero-fills (`tile.scatter_add` lowers to red.global.add.f32;
    NumPy arrays, or tensors on q's device for PyTorch inputs).

    `dlse` (lse's shape and kind): the loss's gradient in the forward's LSE output, where the loss reads it too;
    its part of the gradients is added (`with_lse_gradient`), at every level, with modifiers too."""
    from tessera.runtime.launch import is_torch_tensor

    as_tensor = level is None and is_torch_tensor(q)  # the GPU path's launches give tensors of q's kind
    if block_mask is not None:
        from tessera.runtime.flex import block_mask_mod

        mask_mod = block_mask_mod("attention_backward", block_mask, mask_mod, q.shape[-2], k.shape[-2])
    if score_mod is not None or mask_mod is not None:
        from tessera.runtime.flex import attention_backward_mods

        if bias is not None:
            raise ValueError("attention_backward: score_mod/mask_mod are not supported with bias")
        config = check_backward_arguments(q, k, v, o, lse, do, causal, scale, deterministic, level)
        dlse = check_lse_gradient(dlse, lse, as_tensor)
        c = config.attention
        names = {}
        if captured_grads is not None and captured_grads is not False:
            from tessera.runtime.captured_gradients import captured_gradient_names

            names = captured_gradient_names(WHERE, score_mod, mask_mod, captured_grads)
            if config.deterministic:
                raise ValueError(f"{WHERE}: captured_grads is not supported with deterministic=True: the gradients "
                                 "of captured arrays are added by atomic scatter-adds, in no fixed order")
        grads = attention_backward_mods(q, k, v, o, lse, do, score_mod=score_mod, mask_mod=mask_mod, causal=causal,
                                        scale=scale, level=level, head_dim=c.head_dim, dtype=c.dtype,
                                        pipeline=_pipeline(), deterministic=config.deterministic,
                                        captured_grads=tuple(names.values()), dlse=dlse)
        if not names:
            return grads
        dq, dk, dv, dcaptured = grads
        return dq, dk, dv, dict(zip(names, dcaptured))
    if captured_grads is not None and captured_grads is not False:
        raise ValueError(f"{WHERE}: captured_grads needs a score_mod (the gradients are those of the arrays it reads)")
    if bias is not None:
        raise ValueError("attention_backward: bias is not supported: the backward kernels recompute P without a "
                         "bias and give no dBias (the forward takes one: tessera.attention(..., bias=))")
    config = check_backward_arguments(q, k, v, o, lse, do, causal, scale, deterministic, level)
    dlse = check_lse_gradient(dlse, lse, as_tensor)
    from tessera.runtime.launch import numpy_to_torch, torch_to_numpy

    if level is not None:
        torch_in = is_torch_tensor(q)
        arrays = [torch_to_numpy(x.cpu()) if torch_in else np.asarray(x) for x in (q, k, v, o, lse, do)]
        grads = run_interpreted(config, *arrays, level=level, dlse=dlse)
        return tuple(numpy_to_torch(g) for g in grads) if torch_in else grads
    return _run_gpu(config, q, k, v, o, lse, do, dlse)


def kernel_configs(config) -> list:
    """The `KernelConfig`s of the three kernels (preprocess, main, postprocess) that the GPU runs for `config` (a
    `BackwardConfig`), with the backward's pipeline: the kernel cache's keys."""
    return list(_kernel_configs(config, _pipeline()))


@remembered
def _kernel_configs(config, pipeline: str) -> tuple:
    from tessera.runtime.compiler import KernelConfig

    options = _builder_options(config)
    return tuple(KernelConfig.of(f"attention_backward_{part}", pipeline, **options)
                 for part in ("preprocess", "main", "postprocess"))


def _run_gpu(config, q, k, v, o, lse, do, dlse=None):
    """The three kernels on the GPU, compiled (or fetched from the cache) with the default pipeline; `dlse`:
    `with_lse_gradient`'s."""
    from tessera.runtime.compiler import compile_kernel
    from tessera.runtime.launch import is_torch_tensor, usable_device

    usable_device((q, k, v, o, lse, do))  # no GPU, no compile
    pre, main, post = (compile_kernel(kernel_config) for kernel_config in kernel_configs(config))
    if is_torch_tensor(q) and q.is_cuda:
        return _run_torch(pre, main, post, q, k, v, o, lse.float(), do, dlse)
    lse = lse.float() if is_torch_tensor(lse) else np.asarray(lse, np.float32)
    # NumPy arrays and CPU tensors: `run` allocates every output and scratch buffer zeroed, as the main
    # kernel's dq_accum (added into) and semaphores need.
    from tessera.runtime import entry

    dpsum, lse2, _ = entry.launch(pre, o, do, lse)
    dq_accum, dk, dv = entry.launch(main, q, k, v, do, lse2, with_lse_gradient(dpsum, dlse))
    return entry.launch(post, dq_accum, seq_q=q.shape[2]), dk, dv


def _run_torch(pre, main, post, q, k, v, o, lse, do, dlse=None):
    """The three kernels on CUDA tensors, on torch's current stream (`launch_on_tensors`), with no zero fill but
    the deterministic kernel's semaphores (which count from 0): the preprocess writes every element of dPsum,
    LSE2 and dq_accum, padding rows included (dq_accum = 0: `padded_rows`), the main kernel adds into that
    dq_accum and stores every block of dK and dV (`finish_main`, after its loops, whether or not a query block
    saw the key block), and the postprocess writes every element of dQ."""

    from tessera.runtime.launch import SCRATCH, launch_on_tensors

    dpsum, lse2, dq_accum = launch_on_tensors(pre, o, do, lse.contiguous(), zeroed=False)
    dq_accum, dk, dv = launch_on_tensors(main, q, k, v, do, lse2, with_lse_gradient(dpsum, dlse), into={6: dq_accum},
                                         zeroed=SCRATCH)
    (dq,) = launch_on_tensors(post, dq_accum, zeroed=False, seq_q=q.shape[2])
    return dq, dk, dv
