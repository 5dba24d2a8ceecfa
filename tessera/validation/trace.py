"""The online-softmax state of flash attention per K/V tile, from any interpreted level and from NumPy.

For one row block, after K/V tile t (t = 0, 1, ...), the kernel holds the running max m_t, the rescale factor
alpha_t = exp(m_{t-1} - m_t), the running sum l_t = alpha_t l_{t-1} + rowsum(P_t) and the partial output
acc_t = alpha_t acc_{t-1} + P_t V_t. `attention_trace` records them while a level runs, by op:

- Tile IR, by op kind: `tile.element_max` (m), `tile.exp_diff` (alpha), `tile.fma` (l), and the `tile.mma`
  whose A operand is a register tile (the P.V product: acc);
- Target IR, by the name hints `convert-tile-to-sm90` carries over (`%m_new`, `%alpha`, `%l_new`,
  `%acc_next`), gathered from the threads' fragments into rows (`recording.gather_fragment`); a running sum the
  lowering holds as per-thread partial sums (`row_sums`) is gathered as the sum over each row's quad.

The k-th value of each kind is tile k's at every level, whatever the pipelining. A kernel with an additive
bias (`flash_attention(bias=True)`) is traced with its bias (`bias=`), and the golden adds it, in float64, to
the scaled scores. `golden_attention_trace` computes the same quantities in float64 from the rounded inputs, and `compare_traces` gives per tile the
largest error of each, relative to the quantity's magnitude (at least 1): the first tile and quantity past
the tolerance is where precision is lost. Target IR keeps m in the units of the scaled scores, like Tile IR.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tessera.dialects import tile
from tessera.dialects.tile_types import MemSpace
from tessera.validation import levels
from tessera.validation.recording import ValueTrace, target_recorders, tile_recorders

QUANTITIES = ("m", "alpha", "l", "acc")

TARGET_NAMES = {"m": "m_new", "alpha": "alpha", "l": "l_new", "acc": "acc_next"}

DEFAULT_TOLERANCES = {"m": 1e-4, "alpha": 1e-3, "l": 1e-3, "acc": 2e-2}
"""Relative errors (to max(1, |quantity|)) expected against the float64 golden: m, alpha and l only see f32
rounding (and ex2.approx at Target level); acc sees P rounded to bf16/f16 before the P.V product."""


def _is_pv_mma(op) -> bool:
    return isinstance(op, tile.MmaOp) and op.a.type.space.data == MemSpace.REGISTER


_TILE_KINDS = {"m": lambda op: isinstance(op, tile.ElementMaxOp), "alpha": lambda op: isinstance(op, tile.ExpDiffOp),
               "l": lambda op: isinstance(op, tile.FmaOp), "acc": _is_pv_mma}


@dataclass
class AttentionTrace:
    """Per K/V tile, each quantity for the rows of one row block: m, alpha, l [tiles, BM]; acc [tiles, BM, D]."""

    m: list[np.ndarray]
    alpha: list[np.ndarray]
    l: list[np.ndarray]
    acc: list[np.ndarray]

    @property
    def tiles(self) -> int:
        return min(len(getattr(self, q)) for q in QUANTITIES)


def attention_trace(module: ModuleOp, q, k, v, level: str = "tile", pipeline: str | None = None,
                    block: tuple[int, int, int] = (0, 0, 0), kernel: str | None = None,
                    bias=None) -> AttentionTrace:
    """Run the flash attention kernel of `module` (Tile IR; not modified) on Q, K, V (and `bias`, which a
    kernel built with `bias=True` needs and any other refuses: ValueError; a kernel with other inputs, the FP8
    kernel's descales, is refused: ValueError) at `level` ("tile" or "target"),
    after `pipeline` if given (at "target" it must reach Target IR; default the full `DEFAULT_PIPELINE`), and
    return the state of row block `block` = (batch, head, row block)."""
    from tessera import find_kernel
    from tessera.arguments import check_array, check_module, check_string
    from tessera.passes import DEFAULT_PIPELINE, apply_pipeline

    where = "tessera.validate.attention_trace"
    check_module(where, module)
    q, k, v = (check_array(where, name, x) for name, x in (("q", q), ("k", k), ("v", v)))
    if bias is not None:
        bias = check_array(where, "bias", bias)
    check_string(where, "level", level)
    check_string(where, "pipeline", pipeline, optional=True)
    check_string(where, "kernel", kernel, optional=True)
    if not (isinstance(block, tuple) and len(block) == 3 and
            all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in block)):
        raise TypeError(f"{where}: block must be a tuple (batch, head, row block) of non-negative integers; "
                        f"got {block!r}")
    if level not in (levels.TILE, levels.TARGET):
        raise ValueError(f"attention_trace runs at level 'tile' or 'target' (the PTX executor keeps no per-op "
                         f"values), got '{level}'")
    sig = find_kernel(module, kernel)
    traced = ["Q", "K", "V"] + (["Bias"] if sig.bias else [])
    if len(sig.inputs) != len(traced):  # an FP8 kernel's descales: its golden would need them, and 2^8 P
        raise ValueError(f"{where}: kernel @{sig.name} takes inputs ({', '.join(a.name for a in sig.inputs)}); "
                         f"attention_trace traces a 16-bit flash attention kernel on {', '.join(traced[:3])} (and "
                         "Bias) only: an FP8 kernel (flash_attention(dtype='e4m3')) is not traced; hold its output "
                         "to tessera.reference.check_attention_fp8")
    axes = list(sig.grid)
    if len(axes) < 3 or not (axes[1].is_name and axes[1].symbol.data == "heads"):
        # a split-KV kernel's grid y counts parts x heads: its block (0, h, 0) is one part of the key range,
        # which no golden of the whole row describes
        raise ValueError(f"{where}: kernel @{sig.name} has the grid {sig.grid}; attention_trace traces a kernel "
                         "whose grid is (row blocks, heads, batch), block (batch, head, row block) reading the whole "
                         "key range: a split-KV kernel (flash_attention(num_splits > 1)) is not traced; trace "
                         "flash_attention(num_splits=1), or hold the combined output to tessera.reference")
    if sig.bias != (bias is not None):
        raise ValueError(f"{where}: kernel @{sig.name} " + (
            "takes 4 inputs (Q, K, V, Bias): pass bias=, [batch, heads, seq_q, seq_k] (1 where it is broadcast)"
            if sig.bias else "takes no bias (inputs Q, K, V); got bias="))
    module = module.clone()
    # The running sum may be held as each thread's partial sum at Target level (convert-tile-to-sm90's
    # row_sums): its rows are gathered as the sum over the quad holding them.
    from tessera.passes.convert_tile_to_sm90.row_sums import partial_row_sums
    partial = {v.name_hint for op in module.walk() if op.name == "func.func"
               for v in partial_row_sums(op) if v.name_hint}
    if level == levels.TARGET and not pipeline:
        pipeline = DEFAULT_PIPELINE
    if pipeline:
        apply_pipeline(module, pipeline)
    if levels.level_of(module, sig.name) != level:
        raise ValueError(f"after the pipeline '{pipeline or ''}' the kernel is at level "
                         f"'{levels.level_of(module, sig.name)}', not '{level}'")
    b, h, row_block = block
    program_id = (row_block, h, b)
    trace = ValueTrace()
    factory = (tile_recorders(program_id, trace) if level == levels.TILE
               else target_recorders(program_id, trace, partial & {TARGET_NAMES["l"]}))
    levels.run_level(module, level, sig, [q, k, v] + ([bias] if sig.bias else []), {}, factory)
    found = {}
    for quantity in QUANTITIES:
        if level == levels.TILE:
            records = trace.of_ops(_TILE_KINDS[quantity])
        else:
            records = [r for r in trace.values if r.name == TARGET_NAMES[quantity]]
        found[quantity] = [np.asarray(r.tile, np.float64) for r in records if r.tile is not None]
    return AttentionTrace(**found)


def golden_attention_trace(q, k, v, causal: bool, scale: float | None, block_m: int, block_n: int,
                           block: tuple[int, int, int] = (0, 0, 0), dtype=None, bias=None) -> AttentionTrace:
    """The online-softmax state per K/V tile in float64 for row block `block` = (batch, head, row block)
    (k and v may have fewer heads, GQA: query head h reads key head h // (heads // heads_k)), with the kernel's
    trip count (bottom-right causal: tiles up to the last key the block's last row sees).
    Inputs are rounded to `dtype` (the kernel's element type) first when given. Rows past seq_q are computed
    as the kernel computes them, from zero queries (a tensor copy fills them with zeros). With `bias`
    ([batch or 1, heads or 1, seq_q, seq_k], rounded like the inputs) the scores are scale Q K^T + bias before
    the masks, the bias saturated as the kernels saturate it (`reference_attention.saturate_bias`; read as 0 past
    seq_q and seq_k, where the kernel's bounded load reads nothing)."""
    from tessera.numerics import round_to
    from tessera.reference_attention import expand_heads, saturate_bias

    q, k, v = (np.asarray(x) for x in (q, k, v))
    k, v = expand_heads(k, q.shape[1]), expand_heads(v, q.shape[1])  # GQA: query head h reads h // group
    if dtype is not None:
        q, k, v = (round_to(x, dtype) for x in (q, k, v))
        bias = None if bias is None else round_to(np.asarray(bias), dtype)
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    b, h, row_block = block
    seq_q, seq_k, head_dim = q.shape[2], k.shape[2], q.shape[3]
    scale = 1.0 / np.sqrt(head_dim) if scale is None else scale
    q0 = row_block * block_m
    rows = np.zeros((block_m, head_dim))
    real = max(0, min(block_m, seq_q - q0))
    rows[:real] = q[b, h, q0:q0 + real]
    bias_rows = np.zeros((block_m, seq_k))
    if bias is not None:  # a broadcast dimension (size 1) is read at index 0
        bias = saturate_bias(bias, scale)
        bias_rows[:real] = bias[b if bias.shape[0] > 1 else 0, h if bias.shape[1] > 1 else 0, q0:q0 + real]
    trips = -(-seq_k // block_n)
    if causal:
        trips = min(trips, -(-max(0, q0 + block_m + seq_k - seq_q) // block_n))
    m = np.full(block_m, -np.inf)
    l = np.zeros(block_m)
    acc = np.zeros((block_m, head_dim))
    out = AttentionTrace([], [], [], [])
    query = (q0 + np.arange(block_m))[:, None]
    for t in range(trips):
        keys = np.zeros((block_n, head_dim))
        values = np.zeros((block_n, head_dim))
        n = max(0, min(block_n, seq_k - t * block_n))
        keys[:n] = k[b, h, t * block_n:t * block_n + n]
        values[:n] = v[b, h, t * block_n:t * block_n + n]
        s = rows @ keys.T * scale
        s[:, :n] += bias_rows[:, t * block_n:t * block_n + n]
        key = (t * block_n + np.arange(block_n))[None, :]
        hidden = key >= seq_k
        if causal:
            hidden = hidden | (key > query + (seq_k - seq_q))
        s = np.where(hidden, -np.inf, s)
        m_new = np.maximum(m, s.max(axis=1))
        safe = np.where(np.isneginf(m_new), 0.0, m_new)
        alpha = np.exp(m - safe)
        p = np.exp(s - safe[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ values
        m = m_new
        for name, value in (("m", m), ("alpha", alpha), ("l", l), ("acc", acc)):
            getattr(out, name).append(value.copy())
    return out


@dataclass(frozen=True)
class TileErrors:
    """The largest relative error of each quantity after one K/V tile."""

    tile: int
    errors: dict[str, float]

    def exceeding(self, tolerances: dict[str, float]) -> list[str]:
        return [q for q in QUANTITIES if self.errors[q] > tolerances[q]]


def _relative_error(value: np.ndarray, golden: np.ndarray, rows: int | None) -> float:
    value, golden = np.asarray(value, np.float64), np.asarray(golden, np.float64)
    if value.shape != golden.shape:
        return float("inf")
    if rows is not None:
        value, golden = value[:rows], golden[:rows]
    same = (value == golden) | (np.isnan(value) & np.isnan(golden))
    finite = np.isfinite(golden)
    scale = max(1.0, float(np.abs(golden[finite]).max())) if finite.any() else 1.0
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(value - golden))
    return float(np.nan_to_num(diff, nan=np.inf).max(initial=0.0)) / scale


def compare_traces(trace: AttentionTrace, golden: AttentionTrace, rows: int | None = None) -> list[TileErrors]:
    """Per K/V tile, the largest error of m, alpha, l and acc against the golden, relative to the golden's
    magnitude (at least 1), over the first `rows` rows (all when None). A tile only one side has is reported
    with infinite errors."""
    result = []
    for t in range(max(trace.tiles, golden.tiles)):
        errors = {}
        for q in QUANTITIES:
            ours, theirs = getattr(trace, q), getattr(golden, q)
            errors[q] = _relative_error(ours[t], theirs[t], rows) if t < len(ours) and t < len(theirs) else float("inf")
        result.append(TileErrors(t, errors))
    return result


def first_loss(errors: list[TileErrors], tolerances: dict[str, float] | None = None) -> tuple[int, str] | None:
    """The first (tile, quantity) whose error exceeds its tolerance (`DEFAULT_TOLERANCES`), or None."""
    tolerances = {**DEFAULT_TOLERANCES, **(tolerances or {})}
    for e in errors:
        over = e.exceeding(tolerances)
        if over:
            return e.tile, over[0]
    return None
