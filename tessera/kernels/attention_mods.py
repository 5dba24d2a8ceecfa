"""Emitting a traced score_mod / mask_mod (`tessera.variants.trace`) as Tile IR in an attention kernel's score tile.

In the key loop of a query block at q0 and a key block at k0, with the [BM, BN] f32 tile S = scale Q K^T:

- `score` is S; `q_idx` is `tile.iota rows offset q0` ([BM] i32), `kv_idx` is `tile.iota cols offset k0`
  ([1, BN] i32) (on S^T, the backward's keys-on-rows kernel, the other way round: `ScoreContext.keys_on_rows`),
  `b` and `h` are the block's batch and head program ids splat into [BM] i32 row vectors;
- numbers are [BM] row vectors (`tile.fill` for f32, `tile.splat` of an index constant for i32): a value the
  same for every element is held as a row vector, which broadcasts against every other shape and which the
  lowering keeps in two registers a thread;
- arithmetic, comparisons, np.where, min/max/clip and the unary functions are the `tile_elementwise` ops,
  broadcasting as they do; an i32 operand of f32 arithmetic is converted with `tile.cast`, and so is an f32
  value `astype(int)` (truncated toward zero);
- a float `//`, `%` and np.fmod are NumPy's, from an exact fmod (`tessera.variants.float_division`: divisions,
  truncations and `tile.fma`);
- booleans (i1 tiles) combine through i32 0/1 tiles: a & b = (min(a, b) != 0), a | b = (max(a, b) != 0),
  ~a = (a == 0): Tile IR has no i1 logic ops;
- `array[i, j]` of a captured array is `tile.gather` from the kernel input that holds it.

Each node is emitted once (the graph is a DAG). Positions past seq_q and seq_k are computed too and masked by
the kernel afterwards (`tile.mask_bounds`), so a modifier sees indices up to the tile's edge there; its
gathers read 0 outside their table. Before a launch the host proves every read at the positions that count
inside its table (`tessera.variants.index_ranges`; the builders register the traces with the module).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import i32
from xdsl.ir import SSAValue

from tessera.variants import float_division, searches
from tessera.variants.nodes import BOOL, COMPARES, F32, Node
from tessera.variants.trace import Trace
from tessera.dialects import tile
from tessera.dialects.tile_elementwise import broadcast_shape
from tessera.kernels.common import ArgSpec, TileBuilder, ceildiv_dim, f32, global_tensor, register_tile

_BINARY_OPS = {"add": tile.AddOp, "sub": tile.SubOp, "mul": tile.MulOp, "div": tile.DivOp,
               "min": tile.ElementMinOp, "max": tile.ElementMaxOp, "floordiv": tile.FloorDivOp, "mod": tile.ModOp}
_UNARY_OPS = {"neg": tile.NegOp, "abs": tile.AbsOp, "exp": tile.ExpOp, "exp2": tile.Exp2Op, "log2": tile.Log2Op,
              "log": tile.LogOp, "tanh": tile.TanhOp, "sqrt": tile.SqrtOp, "reciprocal": tile.ReciprocalOp,
              "floor": tile.FloorOp, "ceil": tile.CeilOp, "rint": tile.RintOp, "trunc": tile.TruncOp}
FLOAT_DIVISIONS = ("floordiv", "mod", "fmod")
"""f32 nodes emitted as NumPy computes them (`tessera.variants.float_division`); i32 floordiv and mod are the
`tile.floordiv` / `tile.mod` ops."""


@dataclass
class ScoreContext:
    """Where a modifier is emitted: the builder, the block's coordinates, the score tile's rows and columns
    (`block_m` x `block_n`), and the kernel inputs holding captured arrays (by `CapturedArray.name`).
    `keys_on_rows`: the score tile is S^T (the backward's keys-on-rows main kernel), so `kv_idx` is the rows'
    iota ([block_m] from k0) and `q_idx` the columns' ([1, block_n] from q0)."""

    b: TileBuilder
    block_m: int
    block_n: int
    q0: SSAValue
    k0: SSAValue
    batch: SSAValue
    head: SSAValue
    arrays: dict[str, SSAValue]
    score: SSAValue | None = None
    keys_on_rows: bool = False
    _values: dict[int, SSAValue] = field(default_factory=dict)

    def emit(self, node: Node) -> SSAValue:
        """The Tile IR value of `node`: emitted once, except the coordinates, which are emitted at each use so
        that an index tile (whose [BM, BN] uses take [BM, BN] registers) is never live across other work."""
        if node.op in ("q_idx", "kv_idx"):
            return self._emit(node)
        key = id(node)
        if key not in self._values:
            self._values[key] = self._emit(node)
        return self._values[key]

    _ints: dict[int, SSAValue] = field(default_factory=dict)
    _divisions: dict = field(default_factory=dict)
    _equalities: dict = field(default_factory=dict)
    _scored: dict[int, bool] = field(default_factory=dict)

    def _uses_score(self, node: Node) -> bool:
        if id(node) not in self._scored:
            self._scored[id(node)] = node.op == "score" or any(self._uses_score(a) for a in node.args)
        return self._scored[id(node)]

    def _size(self, node: Node, seen: set) -> int:
        """The nodes of `node`'s graph not emitted yet (a measure of the temporaries it needs)."""
        if id(node) in seen or id(node) in self._values:
            return 0
        seen.add(id(node))
        return 1 + sum(self._size(a, seen) for a in node.args)

    def _emit_args(self, node: Node) -> list[SSAValue]:
        """The operands of `node`, those that do not depend on the score emitted first: the score (live
        anyway) then waits for them, instead of what is computed from the score waiting beside their
        temporaries (ALiBi's [BM, BN] index tiles beside a soft-cap's tanh). Among either kind the larger
        operand goes first (Sethi-Ullman): a small one computed first would wait beside its temporaries."""
        order = sorted(range(len(node.args)),
                       key=lambda i: (self._uses_score(node.args[i]), -self._size(node.args[i], set())))
        values = {i: self.emit(node.args[i]) for i in order}
        return [values[i] for i in range(len(node.args))]

    def _int_tile(self, value: int, name: str) -> SSAValue:
        if value not in self._ints:
            self._ints[value] = self.b.emit(tile.SplatOp(self.b.const(value), self._scalar(i32)), name)
        return self._ints[value]

    def _scalar(self, element_type) -> object:
        """The tile type of a value the same for every element: a row vector [BM], which broadcasts against
        every other operand and which the lowering holds in two registers a thread."""
        return register_tile([self.block_m], element_type)

    def _as_int(self, node: Node) -> SSAValue:
        """A boolean node as an i32 0/1 tile."""
        return self.b.emit(tile.SelectOp(self.emit(node), self._int_tile(1, "one"), self._int_tile(0, "zero")),
                           "mod_bool")

    def _fma(self, node: Node) -> SSAValue:
        """`tile.fma` (one rounding), whose operands share one type: an operand of a smaller shape is first
        broadcast by adding -0.0 (x + -0 is x, a signed zero included)."""
        args = self._emit_args(node)
        shape = broadcast_shape([tuple(v.type.get_shape()) for v in args])
        zero = None
        for i, v in enumerate(args):
            if tuple(v.type.get_shape()) == shape:
                continue
            if node.args[i].op == "const":  # a fill of the whole shape: the fma's immediate, no registers
                args[i] = self.b.fill(float(node.args[i].value), register_tile(list(shape)), "mod_const")
                continue
            zero = zero or self.b.fill(-0.0, register_tile(list(shape)), "mod_minus_zero")
            args[i] = self.b.emit(tile.AddOp(v, zero), "mod_broadcast")
        return self.b.emit(tile.FmaOp(*args), "mod_fma")

    def _searched_equal(self, equal: searches.SearchedEqual) -> Node:
        """Two searches' counts compared (`searches.SearchedEqual`): the search of a row vector's value (else of
        the value with fewer elements) and two compares of the other's per element (`same_count`)."""
        if id(equal) not in self._equalities:  # kept: the emitted nodes' ids must stay theirs
            # a row vector first: its ops with constants (row vectors too) stay row vectors, where a column
            # vector's broadcast to the whole tile
            sizes = [(len(shape) != 1, int(np.prod(shape))) for shape in
                     (tuple(self.emit(s.value).type.get_shape()) for s in (equal.first, equal.second))]
            searched, other = (equal.first, equal.second) if sizes[0] <= sizes[1] else (equal.second, equal.first)
            self._equalities[id(equal)] = searches.same_count(searched, other.value, equal.bounds)
        return self._equalities[id(equal)]

    def _emit(self, node: Node) -> SSAValue:
        b, op = self.b, node.op
        if op == "score":
            assert self.score is not None, "a mask_mod has no score"
            return self.score
        if op in ("q_idx", "kv_idx"):
            on_rows = (op == "kv_idx") == self.keys_on_rows
            start = self.q0 if op == "q_idx" else self.k0
            if on_rows:
                return b.emit(tile.IotaOp("rows", register_tile([self.block_m], i32), start), op)
            return b.emit(tile.IotaOp("cols", register_tile([1, self.block_n], i32), start), op)
        if op in ("b", "h"):
            return b.emit(tile.SplatOp(self.batch if op == "b" else self.head, self._scalar(i32)), op)
        if op == "const":
            if node.dtype == F32:
                return b.fill(float(node.value), self._scalar(f32), "mod_const")
            if node.dtype == BOOL:
                zero = self._int_tile(0, "zero")
                return b.emit(tile.CmpOp("eq" if node.value else "ne", zero, zero), "mod_const")
            return self._int_tile(int(node.value), "mod_const")
        if op == "to_f32":
            inner = node.args[0]
            if inner.op in ("add", "sub") and all(_exact_in_f32(a) for a in inner.args):
                # f32(a - b) = f32(a) - f32(b) exactly when a and b are (f32 subtraction rounds once): the
                # indices (and b, h) convert as their row or column vectors, and one [BM, BN] f32 tile is made,
                # not an i32 one beside it (ALiBi's kv_idx - q_idx)
                f32_args = [b.cast(self.emit(a), f32, "mod_f32") for a in inner.args]
                return b.emit(_BINARY_OPS[inner.op](*f32_args), f"mod_{inner.op}_f32")
            return b.cast(self.emit(inner), f32, "mod_f32")
        if op == "to_i32":  # NumPy's astype(int): truncation toward zero
            return b.cast(self.emit(node.args[0]), i32, "mod_i32")
        if op in FLOAT_DIVISIONS and node.dtype == F32:
            return self.emit(float_division.expand(node, self._divisions))
        if op == "fma":
            return self._fma(node)
        if op in _BINARY_OPS:
            return b.emit(_BINARY_OPS[op](*self._emit_args(node)), f"mod_{op}")
        if op in _UNARY_OPS:
            return b.emit(_UNARY_OPS[op](self.emit(node.args[0])), f"mod_{op}")
        if isinstance(node.value, searches.SearchedEqual):
            return self.emit(self._searched_equal(node.value))
        if op in COMPARES:
            return b.emit(tile.CmpOp(op, *self._emit_args(node)), f"mod_{op}")
        if op == "select":
            return b.emit(tile.SelectOp(*self._emit_args(node)), "mod_select")
        if op in ("and", "or"):
            ints = [self._as_int(a) for a in node.args]
            joined = b.emit((tile.ElementMinOp if op == "and" else tile.ElementMaxOp)(*ints), f"mod_{op}_int")
            return b.emit(tile.CmpOp("ne", joined, self._int_tile(0, "zero")), f"mod_{op}")
        if op == "not":
            return b.emit(tile.CmpOp("eq", self._as_int(node.args[0]), self._int_tile(0, "zero")), "mod_not")
        if op == "gather":
            table = self.arrays[node.value.name]
            return b.emit(tile.GatherOp(table, [self.emit(a) for a in node.args]), "mod_gather")
        raise AssertionError(f"no Tile IR for the traced op {op}")


F32_EXACT_INTEGERS = 2**24
"""Integers up to this magnitude are exact in f32 (a 24-bit significand): query and key indices, batch and
head ids are taken to be below it (sequences of at most 16M tokens)."""


def _exact_in_f32(node: Node) -> bool:
    """Whether `node` is an index argument, or an integer constant exact in f32 (`F32_EXACT_INTEGERS`)."""
    if node.op in ("q_idx", "kv_idx", "b", "h"):
        return True
    return node.op == "const" and node.dtype not in (F32, BOOL) and abs(int(node.value)) <= F32_EXACT_INTEGERS


def apply_score_mod(ctx: ScoreContext, trace: Trace, s: SSAValue) -> SSAValue:
    """score_mod(S, b, h, q_idx, kv_idx) as a [BM, BN] f32 tile."""
    ctx.score = s
    out = ctx.emit(trace.result)
    if out.type.get_shape() != s.type.get_shape():  # a modifier that ignores the score: broadcast it
        zero = ctx.b.fill(0.0, register_tile([ctx.block_m, ctx.block_n]), "mod_zero")
        out = ctx.b.emit(tile.AddOp(out, zero), "score_mod")
    return out


def apply_mask_mod(ctx: ScoreContext, trace: Trace, s: SSAValue) -> SSAValue:
    """S where mask_mod(b, h, q_idx, kv_idx) holds, -inf elsewhere.

    The boolean structure applies as selects on S, which needs no i32 0/1 tiles (and their registers):
    a & b hides what a hides, then what b hides; a | b keeps S where a holds, else applies b; ~a swaps the
    select's arms. Anything else (a compare, a gathered boolean, np.where of booleans) is one select."""
    hidden = ctx.b.fill(float("-inf"), register_tile([ctx.block_m]), "minus_inf")

    def hide(node: Node, s: SSAValue, keep_if: bool = True) -> SSAValue:
        """S where `node` equals keep_if, -inf elsewhere."""
        if node.op == "not":
            return hide(node.args[0], s, not keep_if)
        if isinstance(node.value, searches.SearchedEqual):  # a document mask: its compares as selects on S
            return hide(ctx._searched_equal(node.value), s, keep_if)
        if node.op == "const":
            if bool(node.value) == keep_if:
                return s
            return ctx.b.fill(float("-inf"), register_tile([ctx.block_m, ctx.block_n]), "s_hidden")
        if (node.op, keep_if) in (("and", True), ("or", False)):  # a & b, ~a & ~b: one condition after the other
            return hide(node.args[1], hide(node.args[0], s, keep_if), keep_if)
        if node.op in ("and", "or"):  # a | b: S where a, else b's; ~a | ~b: b's where a, else S
            cond, rest = ctx.emit(node.args[0]), hide(node.args[1], s, keep_if)
            return ctx.b.emit(tile.SelectOp(cond, *((s, rest) if keep_if else (rest, s))), "s_mask_mod")
        arms = (s, hidden) if keep_if else (hidden, s)
        return ctx.b.emit(tile.SelectOp(ctx.emit(node), *arms), "s_mask_mod")

    return hide(trace.result, s)


BLOCK_LISTS = ("FULL_KV_NUM_BLOCKS", "FULL_KV_INDICES", "KV_NUM_BLOCKS", "KV_INDICES")
"""The block-sparse kernel's inputs (FlexAttention's BlockMask): per (batch, head, query block) the number of
full key blocks and their indices, then the number of partial key blocks and theirs (`tessera.variants.block_mask`)."""


BACKWARD_BLOCK_LISTS = ("Q_NUM_VISITS", "Q_VISITS")
"""The block-sparse backward's inputs, `BlockMask.backward_inputs`: per main-kernel thread block (batch, K/V head,
key block) the numbers of full and of partial (query head of the GQA group, query block) pairs it visits, and
the pairs (full ones first), each packed in one i32 (`block_mask.VISIT_HEAD`)."""

BACKWARD_RANKS = ("Q_VISIT_RANKS",)
"""The deterministic block-sparse backward's input after the lists: per pair, the rank of this key block among
the key blocks that visit that query block of that head (`BlockMask.transposed_ranks`): the dQ semaphore
count it waits for."""


@dataclass(frozen=True)
class AttentionMods:
    """What `flash_attention(score_mod=, mask_mod=, block_sparse=)` adds to the kernel: the traces, and
    whether the key loop walks the block lists (full blocks first, without mask_mod, then partial blocks
    with it; empty blocks are in neither list, so never copied nor multiplied) instead of every key block."""

    score_mod: Trace | None = None
    mask_mod: Trace | None = None
    block_sparse: bool = False
    grads: tuple[str, ...] = ()
    """The captured arrays (kernel input names) whose gradient the backward's main kernel adds into an output
    `d_<name>` of the array's shape (`tessera.variants.derivative.captured_derivatives`)."""

    def traced(self) -> list[tuple[Trace, str]]:
        """(trace, "score_mod" or "mask_mod") of each modifier (`index_ranges.check_at_launch`)."""
        return [(t, kind) for t, kind in ((self.score_mod, "score_mod"), (self.mask_mod, "mask_mod")) if t is not None]

    @property
    def arrays(self) -> list:
        """The captured arrays of both modifiers, each once (by name), in argument order."""
        seen: dict[str, object] = {}
        for trace in (self.score_mod, self.mask_mod):
            for array in trace.arrays if trace is not None else ():
                seen.setdefault(array.name, array)
        return list(seen.values())

    def inputs(self, c, backward: bool = False, ranks: bool = False) -> list[ArgSpec]:
        """The kernel inputs: each captured array (static shape, f32 or i32), then the block lists (the
        backward's: per key block, its query blocks, `BACKWARD_BLOCK_LISTS`, then with `ranks` the
        deterministic backward's `BACKWARD_RANKS`)."""
        specs = [ArgSpec(a.name, global_tensor(list(a.array.shape), f32 if a.dtype == F32 else i32),
                         list(a.array.shape)) for a in self.arrays]
        if self.block_sparse:
            # The block counts are the kernel's (ceildiv(seq_q, BM), ceildiv(seq_k, BN)), checked at every launch:
            # lists made for other blocks than the kernel's would be read in bounds, and the blocks they name
            # would be other blocks (a silently wrong O). The backward's pairs per key block, group x
            # ceildiv(seq_q, BM), are a plain name: a read outside them is reported (tile.load_index).
            q_blocks, kv_blocks = ceildiv_dim("seq_q", c.block_m), ceildiv_dim("seq_k", c.block_n)
            rows = ["batch", "heads_k", kv_blocks] if backward else ["batch", "heads", q_blocks]
            names = (BACKWARD_BLOCK_LISTS + (BACKWARD_RANKS if ranks else ())) if backward else BLOCK_LISTS
            for name in names:
                if backward:
                    dims = rows + [2 if "NUM_" in name else "q_visits"]
                else:
                    dims = rows + ([kv_blocks] if "NUM_" not in name else [])
                specs.append(ArgSpec(name, global_tensor([None] * len(dims), i32), dims))
        return specs

    def apply(self, b: TileBuilder, blk, s: SSAValue, k0: SSAValue, mask_mod: bool) -> SSAValue:
        """score_mod, then (if `mask_mod`) mask_mod, on the block's score tile S at key block k0."""
        c = blk.config
        ctx = ScoreContext(b, c.block_m, c.block_n, blk.q0, k0, blk.batch, blk.head,
                           {a.name: blk.args[a.name] for a in self.arrays})
        if self.score_mod is not None:
            s = apply_score_mod(ctx, self.score_mod, s)
        if self.mask_mod is not None and mask_mod:
            s = apply_mask_mod(ctx, self.mask_mod, s)
        return s
