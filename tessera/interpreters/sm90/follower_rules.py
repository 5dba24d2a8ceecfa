"""Which ops the followers of a CTA simulator batch run, and how (`followers`).

`follower_rule(op)` names how followers compute an op alongside their leader (None: they cannot, and a kernel
with it runs one CTA at a time, `batches.batchable`): control flow, terminators, ops whose results are the
leader's ("as leader"), ops with only operands to compare ("checked"), pure ops computed over every follower's
threads at once ("pure"), and the memory, TMA, wgmma and special-register ops with their own rules.
`pure_if` says whether an `scf.if`'s branches only compute values, so that followers whose condition differs
from the leader's can compute the branch it does not take by themselves; `shuffle_followers` is
`vector.shuffle` over the followers' values."""

from __future__ import annotations

import numpy as np
from xdsl.dialects import arith, func, scf, vector
from xdsl.ir import Operation

from tessera.dialects import sm90
from tessera.interpreters.sm90.arith import folded_lanes, read_only, shuffle_plan

_CONTROL = (scf.ForOp, scf.WhileOp, scf.IfOp)
"""Their follower values come from `control` (`Followers.control_results`)."""

_TERMINATORS = (scf.YieldOp, scf.ConditionOp, func.ReturnOp)

_AS_LEADER = (arith.ConstantOp, sm90.SharedBufferOp, sm90.MBarrierTryWaitParityOp, sm90.ElectSyncOp)
"""Ops whose results are the leader's in every follower: constants, shared addresses, and outcomes of the
leader's bookkeeping (a wait's success, the elected lane), which the followers share."""

_CHECKED_ONLY = (
    sm90.BarSyncOp, sm90.BarArriveOp, sm90.FenceMBarrierInitOp, sm90.FenceProxyAsyncOp, sm90.MBarrierInitOp,
    sm90.MBarrierArriveOp, sm90.MBarrierArriveExpectTxOp, sm90.MBarrierInvalOp, sm90.SetMaxNRegOp,
    sm90.WgmmaFenceOp, sm90.WgmmaCommitGroupOp, sm90.WgmmaWaitGroupOp,
)
"""Ops without results or data: the followers' operands (addresses) must be the leader's."""

PURE_SM90 = tuple(getattr(sm90, name) for name in (
    "CvtOp", "CvtPackOp", "CvtPackFp8Op", "Ex2ApproxOp", "RcpApproxOp", "Lg2ApproxOp", "TanhApproxOp", "SinApproxOp", "CosApproxOp",
    "RsqrtApproxOp", "PrmtOp", "SetpOp", "SelpOp", "MakeDescriptorOp", "DescriptorAdvanceOp", "DescriptorOffsetOp",
    "ShflSyncOp") if hasattr(sm90, name))
"""`sm90` ops that compute from their operands alone: run over every follower's threads at once."""


def _pure(op: Operation) -> bool:
    if isinstance(op, PURE_SM90):
        return True
    name = op.name
    return (name.startswith(("arith.", "math.", "vector.")) and not isinstance(op, arith.ConstantOp))


_RULES: dict[type, str | None] = {}
"""`follower_rule` by op type (the rule reads only the type and its name)."""


def follower_rule(op: Operation) -> str | None:
    """How followers run `op` (None: they cannot, and a kernel with it runs one CTA at a time)."""
    kind = type(op)
    try:
        return _RULES[kind]
    except KeyError:
        rule = _RULES[kind] = _rule(op)
        return rule


def _rule(op: Operation) -> str | None:
    if isinstance(op, func.FuncOp):
        return "kernel"
    if isinstance(op, _CONTROL):
        return "control"
    if isinstance(op, _TERMINATORS):
        return "terminator"
    if isinstance(op, _AS_LEADER):
        return "as leader"
    if isinstance(op, _CHECKED_ONLY):
        return "checked"
    if isinstance(op, (sm90.SpecialRegOp, sm90.TmaLoadOp, sm90.WgmmaMmaAsyncOp, sm90.StGlobalOp, sm90.StGlobalB16Op,
                       sm90.LdGlobalOp, sm90.LdGlobalU16Op, sm90.StSharedOp)):
        return op.name
    if isinstance(op, vector.ShuffleOp):
        return "vector.shuffle"
    if _pure(op):
        return "pure"
    return None


REGION_OPS = ("pure", "vector.shuffle", "sm90.special", "terminator")


def shuffle_followers(op: vector.ShuffleOp, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """`vector.shuffle` of the followers' [F, T, N] values at once (`arith.run_shuffle`'s lanes)."""
    v1, v2 = (first if first.ndim == 3 else first[:, :, None]), (second if second.ndim == 3 else second[:, :, None])
    plan = shuffle_plan(op, v1.shape[2])
    if isinstance(plan, tuple):
        kind, lanes = plan
        if kind == 3:  # lanes of the first operand only
            return v1[:, :, lanes]
        if kind == 2:  # a concatenation
            return np.concatenate([v1, v2[:, :, lanes]], axis=2)
        return read_only((v2 if kind else v1)[:, :, lanes])
    if first is second:
        return v1[:, :, folded_lanes(op, plan, v1.shape[2])]
    return np.concatenate([v1, v2], axis=2)[:, :, plan]


def pure_if(interpreter, op: scf.IfOp) -> bool:
    """Whether `op`'s branches only compute values (pure ops, constants, shared addresses, special registers:
    no memory, synchronisation or nested control flow) that no check of the CTA observes, so that followers
    whose condition differs from the leader's can compute the branch it does not run by themselves
    (`Followers.region`) and a one-at-a-time run would find nothing more in it: for every op of the branches,
    each listener either observes nothing (`observes`) or says that `check_pure_region(op, leader operands)`
    is all it needs there (`in_pure_region(op)`: a check that depends only on what every CTA of the batch
    shares, made when the followers run the branch). Kept per kernel and listener keys."""
    ops = [inner for region in op.regions for block in region.blocks for inner in block.ops]
    listeners = interpreter.listeners

    def compute() -> bool:
        if any(inner.regions or not (follower_rule(inner) in REGION_OPS
                                     or isinstance(inner, (arith.ConstantOp, sm90.SharedBufferOp)))
               for inner in ops):
            return False
        for listener in listeners:
            observes = getattr(listener, "observes", None)
            in_pure_region = getattr(listener, "in_pure_region", None)
            for inner in ops:
                if in_pure_region is not None and in_pure_region(inner):
                    continue
                if observes is None or observes(inner) != (False, False):
                    return False
        return True

    key = ("pure if", op, tuple(getattr(listener, "observes_key", type(listener)) for listener in listeners))
    return interpreter.kernel.fact(key, compute)


__all__ = ["PURE_SM90", "REGION_OPS", "follower_rule", "pure_if", "shuffle_followers"]
