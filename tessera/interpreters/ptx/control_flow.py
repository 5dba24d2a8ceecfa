"""The control instructions: `bra`, `exit`, `ret`, `call` of a linked `.func` and `trap`/`brkpt`, each decoded to a
step that moves the pcs of the lanes it runs for (`Step(control=True)`, which `schedule.Scheduler` runs as it picks
lanes).

Every lane has its own pc, so a branch moves only the lanes its guard lets take it; the others step past it, and
the min-pc schedule (`schedule`) reconverges them. An exiting lane is marked EXITED and its CTA told
(`Machine.on_exit`). Calls: a lane that calls a `.func` (linked into the entry's instruction list by `link`)
copies the call site's argument `.param` variables into the callee's parameters, pushes its pc on its own return
stack (`Machine.call_stack`, `call_depth`) and jumps; its `ret` copies the callee's return parameters back to the
call site's and pops, and a `ret` in the entry exits. Calls of extern functions (printf, assert, malloc) stop
the run when a thread executes them; recursive calls and functions without a body are refused when decoded.
A `trap` executed by any thread stops the run.
"""

from __future__ import annotations

import numpy as np

from tessera.interpreters.ptx.decode import Operands, Step, label_index, opcode
from tessera.interpreters.ptx.state import EXITED, fail
from tessera.interpreters.ptx.syntax import Symbol


@opcode("bra")
def decode_bra(ops: Operands, inst, mods):
    mods.drop("uni")
    if len(inst.operands) != 1:
        raise ops.refuse(inst, "bra needs one label")
    target = label_index(ops, inst, inst.operands[0])
    m = ops.m

    def run(lanes, active):
        m.pc[lanes] += 1
        m.pc[active] = target

    return Step(inst, run, control=True, branch=target)


@opcode("exit")
def decode_exit(ops: Operands, inst, mods):
    mods.drop("uni")
    m = ops.m

    def run(lanes, active):
        m.pc[lanes] += 1
        m.status[active] = EXITED
        if len(active):
            m.on_exit(np.unique(m.lane_cta[active]))

    return Step(inst, run, control=True)


@opcode("ret")
def decode_ret(ops: Operands, inst, mods):
    """`ret`: a lane inside a function returns to the instruction after its innermost call (copying the
    callee's return parameters to the call site's, see `decode_call`); a lane in the entry exits."""
    mods.drop("uni")
    m = ops.m

    def run(lanes, active):
        m.pc[lanes] += 1
        if not len(active):
            return
        depth = m.call_depth[active]
        leaving, returning = active[depth == 0], active[depth > 0]
        if len(leaving):
            m.status[leaving] = EXITED
            m.on_exit(np.unique(m.lane_cta[leaving]))
        if len(returning):
            m.call_depth[returning] -= 1
            callers = m.call_stack[returning, m.call_depth[returning]]
            for pc in np.unique(callers):
                m.return_copies[int(pc)](returning[callers == pc])
            m.pc[returning] = callers + 1

    return Step(inst, run, control=True)


_EXTERNAL_NAMES = {"vprintf": "printf", "__assertfail": "a failed assert()", "malloc": "malloc",
                   "free": "free", "__nv_aligned_device_malloc": "malloc"}


def _param_copies(ops: Operands, inst, site, callee, what: str, inward: bool) -> list[tuple[int, int, int]]:
    """(source offset, target offset, bytes) in local memory copying the call site's .param variables `site`
    (operands) to the callee's parameters `callee` (inward), or the callee's return parameters back."""
    m = ops.m
    sizes = {v.name: v.element_bytes * (v.count or 0) for v in m.entry.variables if v.space == "param"}
    if len(site) != len(callee):
        raise ops.refuse(inst, f"{len(site)} {what} for {len(callee)} parameter(s) of the function")
    copies = []
    for operand, variable in zip(site, callee):
        if not isinstance(operand, Symbol) or operand.name not in sizes:
            raise ops.refuse(inst, f"call {what} that are not .param variables ({operand})")
        nbytes = sizes[variable.name]
        if sizes[operand.name] < nbytes:
            raise fail(m.source, inst, f"{operand.name} has {sizes[operand.name]} bytes, the function's "
                                       f"parameter {variable.name} {nbytes}")
        here, there = m.local_offsets[operand.name], m.local_offsets[variable.name]
        copies.append((here, there, nbytes) if inward else (there, here, nbytes))
    return copies


@opcode("call")
def decode_call(ops: Operands, inst, mods):
    """`call (ret), f, (args)` of a linked `.func` (see `link`): copy the argument .param variables into the
    callee's parameters, push this pc on the lane's return stack and jump to the function; its `ret` copies
    the callee's return parameters into `ret`. Calls of extern functions (printf, assert) stop the run when
    a thread executes them; recursive calls are refused."""
    mods.drop("uni")
    m = ops.m
    returns, target, arguments = inst.operands
    function = m.entry.functions.get(target.name)
    if function is None:
        reason = m.entry.unlinked.get(target.name, "no body")
        if reason != "extern":
            raise ops.refuse(inst, f"call of {target.name}: " + (
                "recursive functions" if reason == "recursive" else "a function declared without a body"))
        what = _EXTERNAL_NAMES.get(target.name, "an external function")

        def run_extern(lanes, active):
            if len(active):
                raise m.error(inst, f"the kernel called {target.name} ({what}), which the PTX executor does not "
                                    "provide", int(active[0]))
            m.pc[lanes] += 1

        return Step(inst, run_extern, control=True)
    inward = _param_copies(ops, inst, arguments.elements, function.params, "argument(s)", True)
    outward = _param_copies(ops, inst, returns.elements, function.returns, "return value(s)", False)
    local = m.local

    def copy_back(lanes):
        for source, dest, nbytes in outward:
            local[lanes, dest:dest + nbytes] = local[lanes, source:source + nbytes]

    def run(lanes, active):
        pc = int(m.pc[lanes[0]])
        m.pc[lanes] += 1
        if not len(active):
            return
        m.return_copies[pc] = copy_back
        for source, dest, nbytes in inward:
            local[active, dest:dest + nbytes] = local[active, source:source + nbytes]
        m.call_stack[active, m.call_depth[active]] = pc
        m.call_depth[active] += 1
        m.pc[active] = function.start

    return Step(inst, run, control=True)


@opcode("trap", "brkpt")
def decode_trap(ops: Operands, inst, mods):
    m = ops.m

    def run(lanes, active):
        if len(active):
            raise m.error(inst, "the kernel executed a trap", int(active[0]))
        m.pc[lanes] += 1

    return Step(inst, run, control=True)
