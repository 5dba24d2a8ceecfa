"""Which kernels one `tessera.attention` call runs (the forward kernel, and with split-KV the combine kernel),
and running them in an interpreter (`level=`).

A plan is data: the `KernelConfig` of each kernel (builder name and options, compiled on the GPU path through
`tessera.runtime.compiler`), and how the outputs of one feed the next. The interpreter path builds the same
kernels from the same configurations (`tessera.kernels.<builder>(**options)`, once per configuration:
`compiler.built_module`, whose lowerings the interpreters keep) and runs them with
`tessera.launch(..., level=level)`, whose default pipeline is the GPU's, so a CPU answer is the GPU's
kernel's answer.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass

import numpy as np

from tessera.runtime.attention_base import attention_config
from tessera.runtime.compiler import KernelConfig

LEVELS = ("tile", "target", "ptx")
"""The interpreters `level=` names (`tessera.LEVELS`); None is the GPU."""


def check_level(level: object) -> None:
    """ValueError naming the rule unless `level` is None or one of `LEVELS`."""
    if level is not None and (not isinstance(level, str) or level not in LEVELS):
        raise ValueError(f"attention: level must be None (the GPU) or one of {', '.join(map(repr, LEVELS))}; "
                         f"got {level!r}")


def auto_for_zero(num_splits: object) -> object:
    """`num_splits` with FlashAttention's 0 read as "auto" (its flash_attn_func, varlen and kvcache entry points
    all take 0 for the heuristic): every serving entry point calls this first, so 0 and "auto" are one option
    from then on (a bias, a score_mod, FP8 accept or refuse them alike)."""
    if isinstance(num_splits, int | np.integer) and not isinstance(num_splits, bool) and num_splits == 0:
        return "auto"
    return num_splits


def resolve_num_splits(num_splits: object, batch: int, heads: int, seq_q: int, seq_k: int, head_dim: int,
                       causal: bool, where: str = "attention") -> int:
    """The split count: `num_splits` itself (an integer 1 .. MAX_SPLITS), or for "auto" FlashAttention-3's
    heuristic (`choose_num_splits`) for `batch` x `heads` rows of seq_q queries (the kernel's: a PackGQA
    launch has heads_k heads of group x seq_q rows) against seq_k keys, which never splits a head_dim the
    split kernel refuses. ValueError naming num_splits (and `where`) otherwise."""
    from tessera.kernels.attention_config import SPLIT_HEAD_DIMS, check_num_splits
    from tessera.kernels.attention_split import choose_num_splits

    if isinstance(num_splits, str):
        if num_splits != "auto":
            raise ValueError(f"{where}: num_splits must be an integer or \"auto\"; got {num_splits!r}")
        if head_dim not in SPLIT_HEAD_DIMS:
            return 1
        return choose_num_splits(batch, heads, seq_q, seq_k, head_dim, causal)
    if isinstance(num_splits, np.integer):
        num_splits = int(num_splits)
    try:
        return check_num_splits(num_splits)
    except ValueError as e:
        raise ValueError(f"{where}: {e} (or \"auto\")") from None


@dataclass(frozen=True)
class AttentionPlan:
    """The kernels of one call: `forward` (writing O [and LSE], or with num_splits > 1 the partial results),
    then `combine` (None without split-KV) merging the parts."""

    forward: KernelConfig
    combine: KernelConfig | None
    num_splits: int
    return_lse: bool

    def partials(self, outputs) -> tuple:
        """The split kernel's outputs O_partial [S x batch, heads, seq_q, D] and LSE_partial [S x batch, ...]
        as the combine kernel's inputs [S, batch, heads, seq_q, ...]: the same memory (a reshape, no copy for
        contiguous arrays and tensors)."""
        o_partial, lse_partial = outputs
        s = self.num_splits
        return tuple(x.reshape((s, x.shape[0] // s) + tuple(x.shape[1:])) for x in (o_partial, lse_partial))

    def results(self, outputs):
        """What `tessera.attention` returns: o, or (o, lse) with lse [batch, heads, seq_q] (the kernels' LSE
        column [batch, heads, seq_q, 1] without its unit dimension)."""
        if not self.return_lse:
            return outputs
        o, lse = outputs
        return o, lse.reshape(tuple(lse.shape[:-1]))


def attention_plan(q_shape, k_shape, head_dim: int, causal: bool, dtype: str, scale: float | None,
                   return_lse: bool, num_splits: object, grouped: bool = False, cluster: int = 1,
                   bias_broadcast: tuple[str, ...] | None = None) -> AttentionPlan:
    """The plan for checked arguments; ValueError naming the option for a bad `return_lse` or `num_splits`.
    `grouped`: k and v have fewer heads than q (the forward kernel's `grouped` option, GQA/MQA).
    `bias_broadcast`: None without a bias, else the dimensions the bias is broadcast along (the kernel's
    fourth input; one split: "auto" never splits a biased kernel)."""
    if not isinstance(return_lse, bool):
        raise ValueError(f"attention: return_lse must be True or False; got {return_lse!r}")
    batch, heads, seq_q, _ = (int(d) for d in q_shape)
    splits = 1 if bias_broadcast is not None else \
        resolve_num_splits(num_splits, batch, heads, seq_q, int(k_shape[2]), head_dim, causal)
    forward = attention_config(head_dim, causal, dtype, scale, return_lse=return_lse, num_splits=splits,
                               cluster=cluster, bias_broadcast=bias_broadcast)
    if grouped:
        forward = KernelConfig.of(forward.builder, forward.pipeline, **dict(forward.options), grouped=True)
    combine = None
    if splits > 1:
        options = {"return_lse": True} if return_lse else {}
        combine = KernelConfig.of("attention_combine", head_dim=head_dim, num_splits=splits, dtype=dtype, **options)
    return AttentionPlan(forward, combine, splits, return_lse)


@contextlib.contextmanager
def combine_lowering():
    """Lowering the combine kernel: it reads its inputs into registers and copies nothing into shared memory,
    so warp-specialize has no producer to make and says so; that is by design, and not repeated to users."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*warp-specialize: no ring refills")
        yield


def run_in_interpreter(plan: AttentionPlan, q, k, v, *bias, level: str):
    """Run the plan's kernels in the interpreter `level` on NumPy arrays (PyTorch tensors go through NumPy and
    come back as CPU tensors), returning what the GPU path returns. `bias`: the forward kernel's Bias input,
    when it takes one."""
    from tessera.runtime import entry
    from tessera.runtime.compiler import built_module
    from tessera.runtime.launch import is_torch_tensor, numpy_to_torch, torch_to_numpy

    torch_inputs = is_torch_tensor(q)
    arrays = [torch_to_numpy(x.cpu()) if torch_inputs else x for x in (q, k, v, *bias)]
    outputs = entry.launch(built_module(plan.forward), *arrays, level=level)
    if plan.combine is not None:
        with combine_lowering():
            outputs = entry.launch(built_module(plan.combine), *plan.partials(outputs), level=level)
    results = plan.results(outputs)
    if not torch_inputs:
        return results
    return tuple(numpy_to_torch(r) for r in results) if isinstance(results, tuple) else numpy_to_torch(results)
