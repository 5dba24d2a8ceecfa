"""The verdict for any kernel: its own float64 reference, and a tolerance from where it rounds.

A kernel that a builder made has a NumPy reference of its kind (`tessera.reference`). Any other kernel is its
own specification: the **reference** is its Tile IR run in the Tile interpreter with every float widened to
float64 and nothing rounded (`run_grid(..., widen=True)`) on the same rounded inputs.

The **tolerance** follows the builders' rule (DESIGN.md section 9): twice the error of a straightforward
computation in the kernel's precision, plus a small absolute term. The straightforward computations are the
kernel's Tile IR run in its own precision (f32 arithmetic, exact exp/log, its casts), and float64 runs in
which every op that rounds, or that the levels below compute differently, has its result moved by the most
its rounding may move it (`ROUNDING`, one rule per op), the moves all up, all down, or with seeded random
signs. The rules:

- a cast or anything else that produces a narrower float: half an ulp of the result type (`unit_roundoff`),
  so that a lower level whose f32 value differs in its last bits and rounds the other way is within it;
- the exponentials (`tile.exp_subtract`, `tile.exp_diff`, `tile.exp2_subtract`): ex2.approx's bound
  (`tessera.sm90.approx.EX2_APPROX_RELATIVE_ERROR`) plus the f32 rounding of the exponent's argument;
- `tile.log`: lg2.approx's bound (`lg2_approx_error_bound`) times ln 2 (`tile.log2`: the bound itself);
  `tile.div_rows` and `tile.reciprocal`: rcp.approx; `tile.tanh`, `tile.rsqrt`: their approximations' bounds;
  `tile.exp`, `tile.exp2`, `tile.sigmoid`, `tile.silu`: ex2.approx (and rcp.approx), with the argument's
  rounding;
- the sums whose order the levels below choose (`tile.mma`'s K, `tile.row_sum`'s row, `tile.col_sum`'s column): the bound of any
  f32 summation order, n 2^-24 sum |terms|; and the contractions' carried moves (`CARRIED`): a contraction
  may move by sum |move of each operand element| x |the other operand| (`tile.mma`; `tile.row_sum`: the sum of
  its operand's moves), the bound of any signs, where an operand's move is the bound its producer applied
  (through shared memory too: a cast to f16 stored with `tile.store_shared` and read by the mma), passed on
  by the ops that move values without rounding them (neg, abs, select, maxima and minima, masks, reshapes and
  the broadcasts of their operands, loads of a shared tile, scf.for and scf.if) and by the converts with the
  rounding they add (`PASSED_ON`): an f16 rounding widened, negated and selected before a row sum, or carried
  out of a loop to an mma, still counts there. The moved
  runs move the operands coherently, all up or all down, and those moves cancel in a sum over terms of mixed
  signs (dQ = sum_j dS_j K_j), while a lower level whose f32 value differs in its last bits rounds one term
  the other way, a move that does not cancel: the attention backward's f16 dQaccum was off by 0.14 against a
  tolerance of 0.068 without this term;
- exact ops (maxima and minima, abs, neg, select, masks, loads, gathers, fills, splats, reshapes, the roundings
  to integers) move nothing; any other op with a float result is one rounding to its type.

Every output is held element by element: each element may differ from the reference by twice the most the
straightforward runs moved that element, plus the absolute term (none for an integer output). A value that
jumps where a float computed before it crosses a rounding boundary (`tile.rint`, `tile.floor`, a cast to i32,
a compare and select) moves by the jump in the few elements a straightforward run rounds across, and the
largest move over all elements, the rule before, let every element be off by it: a quantize kernel lowered
with rint as trunc, one off on every value with a fraction of 1/2 or more, was within its tolerance of 4 (2 as
an f32 output); any count off by one where counts pass 2^20 was within the absolute term.

A new op plugs in with `ROUNDING[OpClass] = bound`, a function of the op, its operands and its float64
result (both as the interpreter holds them, [blocks, *shape]) that returns the largest absolute move of
each result element (an array or a scalar).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.interpreter import Interpreter
from xdsl.ir import Operation, SSAValue

from tessera.dialects import tile
from tessera.dialects.tile_types import TileType
from tessera.interpreters.launch import prepare_arguments, run_grid
from tessera.interpreters.tile_elementwise import aligned_operand
from tessera.interpreters.tile_memory import SharedBuffer, SharedRef
from tessera.kernel_abi import KernelSignature
from tessera.validation.compare import differences, max_difference
from tessera.numerics import BF16, F8E4M3, F8E5M2, F16, F32, numpy_dtype
from tessera.sm90.approx import (
    EX2_APPROX_RELATIVE_ERROR, RCP_APPROX_RELATIVE_ERROR, RSQRT_APPROX_RELATIVE_ERROR, TANH_APPROX_RELATIVE_ERROR,
    erf_error_bound, lg2_approx_error_bound, sin_cos_error_bound,
)

F32_ROUNDOFF = 2.0**-24

ABSOLUTE_TOLERANCE = 2.0**-20
"""The small absolute term of a kernel's own tolerance, relative to max(1, max |reference|)."""


def unit_roundoff(dtype) -> float:
    """Half an ulp at 1 (relative rounding error of round-to-nearest) of a float dtype; 0 for float64 and
    integers."""
    dtype = np.dtype(dtype)
    return {BF16: 2.0**-8, F16: 2.0**-11, F32: F32_ROUNDOFF, F8E4M3: 2.0**-4, F8E5M2: 2.0**-3}.get(dtype, 0.0)


FP8_SUBNORMAL_HALF_STEP = {F8E4M3: 2.0**-10, F8E5M2: 2.0**-17}
"""The absolute rounding error below an 8-bit float's normal range: half its smallest subnormal (2^-9 for e4m3,
2^-16 for e5m2), where `unit_roundoff`'s relative bound does not hold."""


Bound = Callable[[Operation, Sequence, np.ndarray], "np.ndarray | float"]


def _magnitude(x) -> np.ndarray:
    return np.abs(np.nan_to_num(np.asarray(x, np.float64), nan=0.0, posinf=0.0, neginf=0.0))


def _rows(vector) -> np.ndarray:
    return _magnitude(vector)[..., None]


def _one_rounding(op: Operation, operands, result) -> np.ndarray:
    """One rounding to the result's element type."""
    return unit_roundoff(numpy_dtype(op.results[0].type.element_type)) * _magnitude(result)


def _exact(op: Operation, operands, result) -> float:
    return 0.0


def _exponential(argument) -> Bound:
    """ex2.approx of an argument computed in f32 from the operands (`argument(operands)`: its magnitude)."""
    def bound(op, operands, result):
        return (EX2_APPROX_RELATIVE_ERROR + 2 * F32_ROUNDOFF * argument(operands)) * _magnitude(result)
    return bound


def _log(op, operands, result) -> np.ndarray:
    (x,) = operands
    positive = np.where(np.asarray(x, np.float64) > 0, np.asarray(x, np.float64), 1.0)
    return np.log(2) * lg2_approx_error_bound(positive) + F32_ROUNDOFF * _magnitude(result)


def _div_rows(op, operands, result) -> np.ndarray:
    return (RCP_APPROX_RELATIVE_ERROR + 2 * F32_ROUNDOFF) * _magnitude(result)


def _mma(op: tile.MmaOp, operands, result) -> np.ndarray:
    a, b, c = (_magnitude(x) for x in operands)
    if op.transpose_a:
        a = np.swapaxes(a, -1, -2)
    if op.transpose_b:
        b = np.swapaxes(b, -1, -2)
    k = a.shape[-1]
    return (k + 1) * F32_ROUNDOFF * (np.matmul(a, b) + c)


def _row_sum(op, operands, result) -> np.ndarray:
    (x,) = operands
    return x.shape[-1] * F32_ROUNDOFF * _magnitude(x).sum(axis=-1)


def _col_sum(op, operands, result) -> np.ndarray:
    """`_row_sum` over the rows: each column's n 2^-24 sum |terms|, as a [.., 1, N] column vector."""
    (x,) = operands
    return x.shape[-2] * F32_ROUNDOFF * _magnitude(x).sum(axis=-2, keepdims=True)


def _cast(op: tile.CastOp, operands, result):
    source = numpy_dtype(op.source.type.element_type)
    target = numpy_dtype(op.result.type.element_type)
    if unit_roundoff(target) <= unit_roundoff(source) or target.kind in "iub":
        return 0.0  # widening (or an integer conversion, exact on the same integers at every level)
    return unit_roundoff(target) * _magnitude(result) + FP8_SUBNORMAL_HALF_STEP.get(target, 0.0)


def _relative(bound: float) -> Bound:
    """An approximate instruction with a relative error `bound`, then one f32 rounding."""
    def rule(op, operands, result):
        return (bound + F32_ROUNDOFF) * _magnitude(result)
    return rule


def _log2(op, operands, result) -> np.ndarray:
    (x,) = operands
    positive = np.where(np.asarray(x, np.float64) > 0, np.asarray(x, np.float64), 1.0)
    return lg2_approx_error_bound(positive) + F32_ROUNDOFF * _magnitude(result)


def _sin_cos(op, operands, result) -> np.ndarray:
    """The lowering's absolute bound (`sin_cos_error_bound`: the reduction and sin.approx/cos.approx), and the
    reference's own rounding to f32."""
    (x,) = operands
    return sin_cos_error_bound(x) + F32_ROUNDOFF * _magnitude(result)


def _erf(op, operands, result) -> np.ndarray:
    """The lowering's bound (`erf_error_bound`) and the reference's own rounding to f32."""
    (x,) = operands
    return erf_error_bound(x) + F32_ROUNDOFF * _magnitude(result)


def _sigmoid(op, operands, result) -> np.ndarray:
    """rcp(1 + ex2(-x log2 e)): ex2 with its argument's rounding, an add, rcp (relative to the result)."""
    (x,) = operands
    return (EX2_APPROX_RELATIVE_ERROR + RCP_APPROX_RELATIVE_ERROR + 2 * F32_ROUNDOFF * (1 + _magnitude(x))) \
        * _magnitude(result)


ROUNDING: dict[type[Operation], Bound] = {
    tile.ExpOp: _exponential(lambda o: _magnitude(o[0])),
    tile.Exp2Op: _relative(EX2_APPROX_RELATIVE_ERROR),
    tile.Log2Op: _log2,
    tile.TanhOp: _relative(TANH_APPROX_RELATIVE_ERROR),
    tile.SinOp: _sin_cos,
    tile.CosOp: _sin_cos,
    tile.ErfOp: _erf,
    tile.RsqrtOp: _relative(RSQRT_APPROX_RELATIVE_ERROR),
    tile.ReciprocalOp: _relative(RCP_APPROX_RELATIVE_ERROR),
    tile.SigmoidOp: _sigmoid,
    tile.SiluOp: _sigmoid,
    tile.CastOp: _cast,
    tile.ExpSubtractOp: _exponential(lambda o: _magnitude(o[0]) + _rows(o[1])),
    tile.Exp2SubtractOp: _exponential(lambda o: _magnitude(o[0]) + _rows(o[1])),
    tile.ExpDiffOp: _exponential(lambda o: _magnitude(o[0]) + _magnitude(o[1])),
    tile.LogOp: _log,
    tile.DivRowsOp: _div_rows,
    tile.MmaOp: _mma,
    tile.RowSumOp: _row_sum,
    tile.RowMaxOp: _exact,
    tile.RowMinOp: _exact,
    tile.ColSumOp: _col_sum,
    tile.ColMaxOp: _exact,
    tile.ColMinOp: _exact,
    tile.ElementMaxOp: _exact,
    tile.ElementMinOp: _exact,
    tile.AbsOp: _exact,
    tile.NegOp: _exact,
    tile.SelectOp: _exact,
    tile.SplatOp: _exact,
    tile.GatherOp: _exact,
    tile.FloorOp: _exact,
    tile.CeilOp: _exact,
    tile.RintOp: _exact,
    tile.TruncOp: _exact,
    tile.MaskCausalOp: _exact,
    tile.MaskBoundsOp: _exact,
    tile.FillOp: _exact,
    tile.LoadOp: _exact,
    tile.LoadBroadcastOp: _exact,
    tile.ReshapeOp: _exact,
}
"""Per op class, the largest move of its result (module docstring); ops not listed: `_one_rounding`."""


def rounding_bound(op: Operation, operands, result) -> np.ndarray | float:
    """The largest move of `op`'s float result under `ROUNDING` (0 for results that are not float tiles, and
    for ops of other dialects: control flow such as scf.for passes its values through unchanged)."""
    ty = op.results[0].type if op.results else None
    if not isinstance(ty, TileType) or numpy_dtype(ty.element_type).kind in "iub" or not op.name.startswith("tile."):
        return 0.0
    return ROUNDING.get(type(op), _one_rounding)(op, operands, result)


def _mma_carried(op: tile.MmaOp, operands, moves) -> np.ndarray:
    """sum_k |move of a_ik| |b_kj| + |a_ik| |move of b_kj|: how far A B may move when its operands move by
    `moves` with any signs (the accumulator's move adds as it is, and the moved runs carry it)."""
    a, b = (_magnitude(x) for x in operands[:2])
    da, db = (np.broadcast_to(_magnitude(m), x.shape) for m, x in zip(moves[:2], (a, b)))
    if op.transpose_a:
        a, da = np.swapaxes(a, -1, -2), np.swapaxes(da, -1, -2)
    if op.transpose_b:
        b, db = np.swapaxes(b, -1, -2), np.swapaxes(db, -1, -2)
    return np.matmul(da, b) + np.matmul(a, db)


def _row_sum_carried(op, operands, moves) -> np.ndarray:
    """sum over the row of |move of x|."""
    return np.broadcast_to(_magnitude(moves[0]), np.shape(operands[0])).sum(axis=-1)


def _col_sum_carried(op, operands, moves) -> np.ndarray:
    """sum over the column of |move of x|."""
    return np.broadcast_to(_magnitude(moves[0]), np.shape(operands[0])).sum(axis=-2, keepdims=True)


CARRIED: dict[type[Operation], Callable] = {
    tile.MmaOp: _mma_carried,
    tile.RowSumOp: _row_sum_carried,
    tile.ColSumOp: _col_sum_carried,
}
"""Per contraction, the move of its result from the moves its operands carry (module docstring), added to its
`ROUNDING` bound: a function of the op, its operands and, per operand, the move it carries (0 where none)."""


def _aligned_moves(op: Operation, operands, moves) -> list[np.ndarray]:
    """Per tile operand, |its carried move| at its own shape, aligned to broadcast against the result as the
    interpreter aligns the operand (a row vector [B, M] as [B, M, 1])."""
    result = op.results[0].type
    return [aligned_operand(np.broadcast_to(_magnitude(m), np.shape(x)) if isinstance(x, np.ndarray) else
                            _magnitude(m), v.type, result)  # a global window (`tile.load`'s) carries none
            for v, x, m in zip(op.operands, operands, moves) if isinstance(v.type, TileType)]


def _elementwise_passed(op, operands, moves, result) -> np.ndarray:
    """Each result element is its operand's element (or, past a mask, -inf: see `Perturbation`)."""
    return _aligned_moves(op, operands, moves)[0]


def _select_passed(op: tile.SelectOp, operands, moves, result) -> np.ndarray:
    condition, _, _ = (aligned_operand(np.asarray(x), v.type, op.result.type) for v, x in zip(op.operands, operands))
    _, true_move, false_move = _aligned_moves(op, operands, moves)
    return np.where(condition, true_move, false_move)


def _extremum_passed(op, operands, moves, result) -> np.ndarray:
    """max and min move by at most the larger of their operands' moves."""
    return np.maximum(*_aligned_moves(op, operands, moves))


def _row_max_passed(op, operands, moves, result) -> np.ndarray:
    return _aligned_moves(op, operands, moves)[0].max(axis=-1)  # a move bound: the largest of the row's, min too


def _col_max_passed(op, operands, moves, result) -> np.ndarray:
    return _aligned_moves(op, operands, moves)[0].max(axis=-2, keepdims=True)  # the largest of the column's


def _reshape_passed(op: tile.ReshapeOp, operands, moves, result) -> np.ndarray:
    return _aligned_moves(op, operands, moves)[0].reshape(np.shape(result))


PASSED_ON: dict[type[Operation], Callable] = {
    tile.NegOp: _elementwise_passed,
    tile.AbsOp: _elementwise_passed,
    tile.CastOp: _elementwise_passed,
    tile.MaskCausalOp: _elementwise_passed,
    tile.MaskBoundsOp: _elementwise_passed,
    tile.LoadOp: _elementwise_passed,
    tile.LoadBroadcastOp: _elementwise_passed,
    tile.SelectOp: _select_passed,
    tile.ElementMaxOp: _extremum_passed,
    tile.ElementMinOp: _extremum_passed,
    tile.RowMaxOp: _row_max_passed,
    tile.RowMinOp: _row_max_passed,
    tile.ColMaxOp: _col_max_passed,
    tile.ColMinOp: _col_max_passed,
    tile.ReshapeOp: _reshape_passed,
}
"""Per op that moves values without rounding them, and per conversion, the move its result carries on from its
operands' (module docstring): a function of the op, its operands, their carried moves and its result, whose
value broadcasts to the result. The result carries that plus its own `ROUNDING` bound (a narrowing cast's).
Unlike a contraction's, this move is not applied to the result again: in the moved runs the result moved with
its operands already. A `tile.load` or `tile.load_broadcast` carries the move of what a shared tile holds
(`Perturbation`), none from global memory."""


class Perturbation(Interpreter.Listener):
    """Moves each float register tile an op produces by its `rounding_bound`, times `sign` (+1, -1, or 0 for
    seeded random signs per element); a contraction (`CARRIED`) also by the sum of its operands' carried moves.

    Carried moves: each register value's is the bound its producer applied, plus what it passed on from its
    operands' (`PASSED_ON`; `carried`, per SSA value: a loop body's value is its latest iteration's, a loop's
    iteration arguments and results and an if's results carry what is passed to them, `_pass_on`);
    `tile.store_shared` records the stored value's into the buffer
    (`stored`, per buffer: the move and the data as stored), and an op reading the buffer (a stage of it) finds
    the move where the buffer still holds the stored data, 0 where something else wrote it since."""

    def __init__(self, sign: int, rng: np.random.Generator):
        self.sign, self.rng, self.args, self.operands = sign, rng, (), ()
        self.carried: dict[SSAValue, np.ndarray] = {}
        self.stored: dict[int, tuple[SharedBuffer, np.ndarray, np.ndarray]] = {}

    def will_interpret_op(self, op: Operation, args) -> None:
        self.args = tuple(args)
        self.operands = tuple(a.read() if isinstance(a, SharedRef) else a for a in args)
        if isinstance(op, scf.ForOp):
            self._pass_on(op.operands[3:], op.body.block.args[1:])
            self._pass_on(op.operands[3:], op.results)  # what a loop of no trips returns
        elif isinstance(op, scf.IfOp):
            for result in op.results:  # each region's yield adds its moves (`_pass_on`)
                self.carried.pop(result, None)
        elif isinstance(op, scf.YieldOp) and isinstance(op.parent_op(), scf.ForOp):
            loop = op.parent_op()
            self._pass_on(op.operands, loop.body.block.args[1:])
            self._pass_on(op.operands, loop.results)
        elif isinstance(op, scf.YieldOp) and isinstance(op.parent_op(), scf.IfOp):
            self._pass_on(op.operands, op.parent_op().results, merge=True)

    def _pass_on(self, values: Sequence[SSAValue], targets: Sequence[SSAValue], merge: bool = False) -> None:
        """Control flow moves values without rounding them: each target (a loop's iteration argument or result,
        an if's result) carries the move of the value passed to it; with `merge`, the larger of that and what
        it carries already (the two branches of an scf.if, each for its own blocks)."""
        moves = [self.carried.get(v) for v in values]
        for target, move in zip(targets, moves):
            if merge and move is not None and target in self.carried:
                move = np.maximum(self.carried[target], move)
            if move is not None:
                self.carried[target] = move
            elif not merge:
                self.carried.pop(target, None)

    def _carried_move(self, value: SSAValue, arg) -> np.ndarray | float:
        """The move operand `value` (interpreted as `arg`) carries."""
        if not isinstance(arg, SharedRef):
            return self.carried.get(value, 0.0)
        record = self.stored.get(id(arg.buffer))
        if record is None:
            return 0.0
        _, data, move = record
        return np.where(arg.read() == arg.view(data), arg.view(move), 0.0)

    def _record_store(self, op: tile.StoreSharedOp) -> None:
        """After `tile.store_shared`: the buffer's elements that hold the stored value (the active blocks')
        carry its move; the others keep what they carried."""
        value, dest = self.args
        buffer = dest.buffer
        move, record = self.carried.get(op.operands[0]), self.stored.get(id(buffer))
        if move is None and record is None:
            return
        before = record[2] if record is not None else np.zeros(buffer.data.shape)
        stored = buffer.data == np.broadcast_to(value, buffer.data.shape)
        move = np.where(stored, 0.0 if move is None else move, before)
        # keyed by id: SharedBuffer compares by value; the record holds the buffer, so the id stays its own
        self.stored[id(buffer)] = (buffer, buffer.data.copy(), move)

    def did_interpret_op(self, op: Operation, results) -> None:
        if isinstance(op, tile.StoreSharedOp):
            self._record_store(op)
            return
        if not op.name.startswith("tile.") or len(results) != 1 or not isinstance(results[0], np.ndarray) \
                or results[0].dtype != np.float64:
            return  # control flow passes its values on unmoved (`_pass_on`)
        value = results[0]
        with np.errstate(all="ignore"):
            bound = rounding_bound(op, self.operands, value)
            contraction, passed = CARRIED.get(type(op)), PASSED_ON.get(type(op))
            if contraction is not None or passed is not None:
                moves = [self._carried_move(v, a) for v, a in zip(op.operands, self.args)]
            if contraction is not None:
                bound = bound + contraction(op, self.operands, moves)
            if passed is None and not np.any(bound):  # an exact op that passes nothing on (a fill, a splat, a gather)
                self.carried.pop(op.results[0], None)
                return
            carried = bound if passed is None else bound + passed(op, self.operands, moves, value)
            finite = np.isfinite(value)
            # a value that is not finite is never moved (below), and carries no move on (a mask's -inf)
            carried = np.where(finite, np.broadcast_to(carried, value.shape), 0.0)
            if carried.any():
                self.carried[op.results[0]] = carried
            else:
                self.carried.pop(op.results[0], None)
            bound = np.broadcast_to(bound, value.shape)
            if not bound.any():
                return
            sign = self.sign if self.sign else self.rng.choice((-1.0, 1.0), size=value.shape)
            moved = value + sign * bound
        value[...] = np.where(finite, moved, value)  # the listener sees the result the op returns


def run_widened(module: ModuleOp, sig: KernelSignature, inputs, sizes: Mapping[str, int],
                sign: int | None = None, rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """The kernel's outputs from its Tile IR run in float64 (rounded inputs, nothing else rounded); with `sign`,
    each op's result moved by its rounding bound (`Perturbation`, one per batch of blocks)."""
    arguments, bound = prepare_arguments(sig, inputs, sizes, widen=True)
    listeners = None if sign is None else (lambda batch: (Perturbation(sign, rng or np.random.default_rng(0)),))
    run_grid(sig, module, arguments, bound, listeners, widen=True)
    return [a for a, arg in zip(arguments, sig.args) if arg.role == "out"]


@dataclass(frozen=True)
class KernelReference:
    """A kernel's own float64 outputs and, per output, the tolerance of each of its elements (module
    docstring)."""

    outputs: tuple[np.ndarray, ...]
    tolerances: tuple[np.ndarray, ...]

    def errors(self, outputs: Sequence[np.ndarray]) -> list[float]:
        return [max_difference(o, r) for o, r in zip(outputs, self.outputs)]

    def beyond(self, outputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per output, the mask of its elements farther from the reference than their own tolerance (every
        element of an output whose shape is not the reference's)."""
        masks = []
        for output, reference, tolerance in zip(outputs, self.outputs, self.tolerances):
            if np.shape(output) != reference.shape:
                masks.append(np.ones(np.shape(output), bool))
            else:
                masks.append(differences(output, reference) > tolerance)
        return masks

    def judge(self, outputs: Sequence[np.ndarray]) -> tuple[float, float]:
        """(error, tolerance) of the output whose error is the largest fraction of its tolerance ((0, 0) for a
        kernel without outputs: nothing to be wrong): an output's worst element's where one exceeds its own
        tolerance, else its largest error and largest tolerance."""
        pairs = [_judge_output(o, r, t) for o, r, t in zip(outputs, self.outputs, self.tolerances)] or [(0.0, 0.0)]
        return max(pairs, key=lambda p: (p[0] / p[1]) if p[1] > 0 else (np.inf if p[0] > 0 else 0.0))


def _judge_output(output, reference: np.ndarray, tolerance: np.ndarray) -> tuple[float, float]:
    """(error, tolerance) of one output held element by element (`KernelReference.judge`)."""
    largest = float(tolerance.max(initial=0.0))
    if np.shape(output) != reference.shape:
        return float("inf"), largest
    error = differences(output, reference)
    over = error > tolerance
    if over.any():
        worst = int(np.argmax(np.where(over, error - tolerance, -1.0)))
        return float(error.flat[worst]), float(tolerance.flat[worst])
    return float(error.max(initial=0.0)), largest


def kernel_reference(module: ModuleOp, sig: KernelSignature, inputs, sizes: Mapping[str, int],
                     seed: int = 0) -> KernelReference:
    """The float64 reference and tolerances of kernel `sig` (Tile IR in `module`) on `inputs`: the module
    docstring's rule, from one run in the kernel's precision and four in float64 (exact, and moved up, down
    and at random by `ROUNDING`)."""
    arguments, bound = prepare_arguments(sig, inputs, sizes)
    run_grid(sig, module, arguments, bound)
    native = [a for a, arg in zip(arguments, sig.args) if arg.role == "out"]
    exact = run_widened(module, sig, inputs, sizes)
    rng = np.random.default_rng(seed)
    moved = [run_widened(module, sig, inputs, sizes, sign, rng) for sign in (1, -1, 0)]
    tolerances = []
    for i, ref in enumerate(exact):
        moves = np.max([differences(run[i], ref) for run in [native, *moved]], axis=0)
        finite = np.isfinite(ref)
        scale = max(1.0, float(np.abs(ref[finite]).max())) if finite.any() else 1.0
        absolute = 0.0 if ref.dtype.kind in "iub" else ABSOLUTE_TOLERANCE * scale  # integers: exact but the moves
        tolerances.append(2 * moves + absolute)
    return KernelReference(tuple(exact), tuple(tolerances))
