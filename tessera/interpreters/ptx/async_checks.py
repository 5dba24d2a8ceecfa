"""Installing the PTX executor's asynchrony checks on decoded steps (`install`): an `asynchrony.AsyncTracker`
on the machine, and each step that touches wgmma registers, fences, or opens or waits for wgmma and bulk groups
wrapped with the tracker's call before or after it. The checks that need a hook inside a decoder (TMA, mbarriers,
shared-memory accesses) call the tracker from there."""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.asynchrony import AsyncTracker
from tessera.interpreters.ptx.decode import Step
from tessera.interpreters.ptx.global_accesses import scope_level
from tessera.interpreters.ptx.state import Machine
from tessera.interpreters.ptx.wgmma_tracking import WgmmaRoles, named_registers, wgmma_roles

_NO_ROLES = WgmmaRoles({}, (), (), "")  # an instruction that is no wgmma.mma_async


def _lanes(m: Machine, sel) -> np.ndarray:
    return m.lane_ids if isinstance(sel, slice) else sel


def _wrap(step: Step, before=None, after=None, watched: frozenset = frozenset()) -> Step:
    """`step` with `before(active lanes)` / `after(active lanes)` around its run (`watched`: the wgmma
    registers `before` checks and logs, for `fuse`)."""
    inner = step.run
    if step.control:
        def run_control(lanes, active):
            if before is not None and len(active):
                before(active)
            inner(lanes, active)
            if after is not None and len(active):
                after(active)

        return Step(step.inst, run_control, step.control, step.unit, step.mask, step.member_mask, watched)

    def run(sel):
        if before is not None:
            before(sel)
        inner(sel)
        if after is not None:
            after(sel)

    return Step(step.inst, run, step.control, step.unit, step.mask, step.member_mask, watched)


def _a_roles(roles: WgmmaRoles | None) -> WgmmaRoles | None:
    """The A registers of a wgmma.mma_async alone (None without register A): what `check_fenced` still walks for a
    wgmma that continues a chain (`WgmmaTracking.chain_continues`)."""
    if roles is None or not roles.a_operands:
        return None
    return WgmmaRoles({name: roles.kinds[name] for name in roles.a_operands}, (), roles.a_operands, roles.shape)


def _group_count(inst) -> int:
    operand = inst.operands[0] if inst.operands else None
    return getattr(operand, "value", 0)


def install(m: Machine, steps: list[Step]) -> list[Step]:
    """Attach an `AsyncTracker` to `m` and return `steps` with the checks that need no hook inside the
    decoders: registers of wgmma (checked only on instructions naming one), fence.proxy.async, and the
    wgmma and bulk commit/wait groups."""
    tracker = m.tracker = AsyncTracker(m)
    m.exit_hooks.append(tracker.on_exit)
    tracker.proxy_readers = any(s.inst.opcode == "wgmma" or (s.inst.opcode == "cp" and "bulk" in s.inst.modifiers)
                                for s in steps)  # generic stores need tracking for fence.proxy.async
    watched: set[str] = set()
    for step in steps:
        if step.inst.opcode == "wgmma":
            watched.update((wgmma_roles(step.inst) or _NO_ROLES).kinds)
    result = []
    for step in steps:
        inst = step.inst
        roles = wgmma_roles(inst) if inst.opcode == "wgmma" else None
        names = tuple(sorted(named_registers(inst) & watched)) if watched else ()
        before = after = None
        if names and inst.opcode != "wgmma":
            def before(sel, inst=inst, names=names, touched=frozenset(names)):
                if tracker.pending:
                    tracker.check_registers(inst, _lanes(m, sel), names, {})
                tracker.touch(inst, sel, touched)
        elif names:
            def before(sel, inst=inst, names=names, roles=roles,
                       others=tuple(n for n in names if n not in (roles.results if roles else ())),
                       a_roles=_a_roles(roles)):
                lanes = _lanes(m, sel)
                if roles and tracker.chain_continues(lanes, roles):  # the accumulators decided as for the last wgmma
                    if others and tracker.pending:
                        tracker.check_registers(inst, lanes, others, roles.kinds)
                    if a_roles is not None:
                        tracker.check_fenced_in_chain(inst, lanes, a_roles)
                    return
                if tracker.pending:
                    tracker.check_registers(inst, lanes, names, (roles or _NO_ROLES).kinds)
                if roles:
                    tracker.check_fenced(inst, lanes, roles)
        mods = inst.modifiers
        if roles:
            def after(sel, inst=inst, roles=roles):
                lanes = _lanes(m, sel)
                if tracker.chain_continues(lanes, roles):
                    tracker.chain_issued(inst, roles)
                    return
                pending = tracker.wgmma_issued(inst, lanes, roles)
                shaped = tracker.wgmma_shaped(inst, lanes, roles)
                tracker.chain_open(lanes, roles, pending, shaped)
        elif inst.opcode == "wgmma" and "fence" in mods:
            def after(sel):
                tracker.wgmma_fenced(_lanes(m, sel))
        elif inst.opcode == "wgmma" and "commit_group" in mods:
            def after(sel):
                tracker.wgmma_commit(_lanes(m, sel))
        elif inst.opcode == "wgmma" and "wait_group" in mods:
            def after(sel, keep=_group_count(inst), inst=inst):
                tracker.wgmma_wait(_lanes(m, sel), keep, inst)
        elif inst.opcode == "fence" and "proxy" in mods and "async" in mods:
            spaces = {x for x in mods if x.startswith(("shared", "global"))}

            def after(sel, shared=not spaces or any(x.startswith("shared") for x in spaces),
                      global_=not spaces or "global" in spaces):
                tracker.fence(_lanes(m, sel), shared, global_)
        elif (inst.opcode == "fence" and {"sc", "acq_rel", "acquire", "release"} & set(mods)
              and "mbarrier_init" not in mods and not any(x.startswith("proxy") for x in mods)) \
                or (inst.opcode == "membar" and not any(x.startswith("proxy") for x in mods)):
            def after(sel, release=inst.opcode == "membar" or bool({"sc", "acq_rel", "release"} & set(mods)),
                      acquire=inst.opcode == "membar" or bool({"sc", "acq_rel", "acquire"} & set(mods)),
                      scope=scope_level(mods)):
                if m.global_order is not None:  # release and acquire patterns (global_order)
                    m.global_order.fence(_lanes(m, sel), release, acquire, scope)
        elif inst.opcode == "fence" and "mbarrier_init" in mods:
            def after(sel):
                m.cluster_state.release_inits(_lanes(m, sel))
        elif inst.opcode == "cp" and "bulk" in mods and "commit_group" in mods:
            def after(sel):
                tracker.bulk_commit(_lanes(m, sel))
        elif inst.opcode == "cp" and "bulk" in mods and "wait_group" in mods:
            def after(sel, keep=_group_count(inst), inst=inst, writes="read" not in mods):
                tracker.bulk_wait(_lanes(m, sel), keep, inst, writes)
        watches = frozenset(names) if names and inst.opcode != "wgmma" else frozenset()
        result.append(step if before is None and after is None else _wrap(step, before, after, watches))
    return result


__all__ = ["install"]
