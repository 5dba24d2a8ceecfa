"""One-edit synchronisation bugs seeded into the attention backward's main kernel (head_dim 128 at 64 x 64 and at
its default 64 x 128, head_dim 64 at its default 128 x 128), applied to its Target IR (CTA simulator) and to its
PTX (PTX executor) alike: issue 31's kinds on a kernel the detectors were not written for.

Variants (`VARIANTS`): at block 64 x 64, the warp-specialized kernel (a TMA producer warpgroup filling two-stage Q
and dO rings, one consumer warpgroup) with dQ added by `red.global.add` (`atomic-add=red`), the same with dQ
staged in two shared slots and bulk-reduced by the producer (`cp.reduce.async.bulk`: the default `atomic-add=auto`),
and the single-stage kernel (thread 0 loads Q and dO each trip; every thread waits); the default kernel at
head_dim 128 (`DEFAULT_BLOCKS`, 64 x 128, "keys on rows": S^T = K Q^T, two consumer warpgroups of 64 keys each
sharing dS^T, a bar.sync at the end of each trip), its dQ^T bulk-reduced by the producer (auto), and the same
kernel with `atomic-add=red` (dQ^T added transposed by `red.global.add`: the red-specific seeds); and head_dim
64's default, 128 x 128, with dQ bulk-reduced by the producer (auto) and with `atomic-add=red`.

An edit names what to change, not how: `At(region, kind, n)` is the n-th synchronisation op of `kind` in a region
of the kernel, located the same way in both forms (op classes in Target IR, instruction prefixes in PTX: the
printer keeps the order). `apply_target(fn, edit)` and `apply_ptx(text, edit)` apply it; both raise LookupError
when the kernel has no such op. `CATALOGUE[variant]` lists `(kind, name, edit, expected, reason)`: what each
level must give on each shape (`ALL`), with the reason for every cell that must run clean (an edit the memory
model accepts in that kernel, an op one trip never reaches, or a rule the two levels state differently).
`verdict` runs one cell; `matrix(level)` runs them all. tests/test_backward_races.py runs a slice;
bench/races.py --backward and bench/races_target.py --backward run the whole matrix on two shapes each
(`shape(variant, name)`).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from functools import lru_cache

import ml_dtypes
import numpy as np
from xdsl.dialects import arith, scf

import race_templates
import tessera
from race_seeds import else_guard, predicate_valid
from tessera import find_kernel, passes, reference_attention
from tessera.dialects import sm90, sm90_cluster, sm90_reductions
from tessera.kernels import attention_backward
from text_edits import checked

HEAD_DIM = 128

RED_PIPELINE = checked(passes.DEFAULT_PIPELINE).replace("convert-tile-to-sm90", "convert-tile-to-sm90{atomic-add=red}")
"""The default pipeline with dQ by `red.global.add` (the red-specific seeds)."""

VARIANTS = {
    "warp-specialized, red dQ": RED_PIPELINE,
    "warp-specialized, bulk dQ": passes.DEFAULT_PIPELINE,
    "single-stage": passes.PTX_PIPELINE,
    "keys on rows": passes.DEFAULT_PIPELINE,
    "keys on rows, red dQ": RED_PIPELINE,
    "head_dim 64, 128 x 128": passes.DEFAULT_PIPELINE,
    "head_dim 64, 128 x 128, red dQ": RED_PIPELINE,
}

D64_VARIANTS = ("head_dim 64, 128 x 128", "head_dim 64, 128 x 128, red dQ")
BLOCKS = {variant: (64, 64) for variant in VARIANTS} | {"keys on rows": (64, 128), "keys on rows, red dQ": (64, 128)} \
    | {variant: (128, 128) for variant in D64_VARIANTS}
HEAD_DIMS = {variant: HEAD_DIM for variant in VARIANTS} | {variant: 64 for variant in D64_VARIANTS}
"""(block_m, block_n) and head_dim of each variant: the old 64 x 64 kernel, and the default at head_dim 128 (`DEFAULT_BLOCKS`:
keys on the rows, two consumer warpgroups of 64 keys each, dQ^T staged in two shared slots and added by the producer's
`cp.reduce.async.bulk`, the default `atomic-add=auto`; with `atomic-add=red` added transposed by `red.global.add`);
and head_dim 64's default, 128 x 128, queries on the rows, two consumer warpgroups of 64 queries each sharing P and
dS (dQ bulk-reduced by the producer, auto's choice there; and by `red.global.add`)."""

SHAPES = {"one trip": (64, 64), "several trips": (200, 100)}
"""(seq_q, seq_k) of the 64 x 64 variants: each CTA owns a key block and loops over the query blocks; the first
shape runs one trip (each ring slot filled once), the second four (each slot refilled, the last block ragged) on
two CTAs. `shape(variant, name)` gives another variant's (`SHAPES_OF`)."""

SHAPES_OF = {"keys on rows": {"one trip": (64, 128), "several trips": (200, 200)},
             "keys on rows, red dQ": {"one trip": (64, 128), "several trips": (200, 200)},
             **{variant: {"one trip": (128, 128), "several trips": (300, 200)} for variant in D64_VARIANTS}}
"""The keys-on-rows kernel's shapes: one trip on one CTA; four trips (the last query block ragged) on two CTAs (the
second key block ragged, 72 of its 128 key rows past seq_k); head_dim 64's: one trip, and three (the last 44 of
128 queries) on two CTAs (the second 72 keys)."""


def shape(variant: str, name: str) -> tuple[int, int]:
    """(seq_q, seq_k) of shape `name` for `variant`."""
    return SHAPES_OF.get(variant, SHAPES)[name]


# region kernels and runs
@lru_cache(maxsize=None)
def _kernels(blocks: tuple[int, int] = (64, 64), head_dim: int = HEAD_DIM):
    return attention_backward(head_dim=head_dim, causal=False, block_m=blocks[0], block_n=blocks[1])


@lru_cache(maxsize=None)
def compiled(variant: str):
    """(signature, Target IR module, PTX text) of the main kernel through `variant`'s pipeline."""
    main = _kernels(BLOCKS[variant], HEAD_DIMS[variant]).main
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = tessera.compile(main, target="target", pipeline=VARIANTS[variant])
        text = tessera.compile(main, target="ptx", pipeline=VARIANTS[variant])
    return find_kernel(main), lowered, text


@lru_cache(maxsize=None)
def inputs(variant: str, name: str) -> tuple:
    """q, k, v, dO, LSE (log2 domain) and dPsum of one head (the preprocess run at Tile level)."""
    seq_q, seq_k = shape(variant, name)
    head_dim = HEAD_DIMS[variant]
    rng = np.random.default_rng(seq_q * 1000 + seq_k)
    q, k, v, do = (rng.standard_normal((1, 1, s, head_dim)).astype(ml_dtypes.bfloat16)
                   for s in (seq_q, seq_k, seq_k, seq_q))
    o = rng.standard_normal((1, 1, seq_q, head_dim)).astype(ml_dtypes.bfloat16)
    lse = reference_attention.attention_lse(q, k).astype(np.float32)
    preprocess = _kernels(BLOCKS[variant], HEAD_DIMS[variant]).preprocess
    dpsum, lse2, _ = tessera.interpret(preprocess, o, do, lse, level="tile")
    return q, k, v, do, lse2, dpsum


def run_target(variant: str, fn, shape: str, registers: bool = False, **kw) -> list[np.ndarray]:
    """dQ_accum, dK, dV of Target IR kernel `fn` in the CTA simulator (hazards propagate); `registers`: with
    its register allocation checked, as `tessera.interpret(level="target")` runs it (the wgmma_fence rule is
    then applied to registers, as in PTX, not to SSA values)."""
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.sm90 import run_target_kernel
    from tessera.regalloc import allocate_registers

    arrays, sizes = prepare_arguments(compiled(variant)[0], list(inputs(variant, shape)))
    # a seed may keep more values live than the 255-register budget: the check needs the names, not the budget
    run_target_kernel(fn, arrays, sizes, allocate_registers(fn, budget=1 << 20) if registers else None, **kw)
    return arrays[6:]


def run_ptx(variant: str, text: str, shape: str, **kw) -> list[np.ndarray]:
    """dQ_accum, dK, dV of PTX `text` in the PTX executor (hazards propagate)."""
    from tessera.host import describe
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.ptx.launcher import launch_described

    sig, lowered, _ = compiled(variant)
    arrays, sizes = prepare_arguments(sig, list(inputs(variant, shape)))
    launch_described(text, describe(lowered)[0], arrays, sizes, source="seeded.ptx", **kw)
    return arrays[6:]


def target_kernel(variant: str):
    """A fresh copy of `variant`'s Target IR kernel."""
    from tessera.kernel_abi import is_target_kernel

    return next(op for op in compiled(variant)[1].walk() if is_target_kernel(op)).clone()


@lru_cache(maxsize=None)
def clean(level: str, variant: str, shape: str) -> tuple[bytes, ...]:
    """The unseeded kernel's outputs (bytes), the answer a seeded run must reproduce to count as right."""
    out = run_target(variant, target_kernel(variant), shape) if level == "target" else run_ptx(
        variant, compiled(variant)[2], shape)
    return tuple(a.tobytes() for a in out)


def seeded_run(level: str, variant: str, edit: Edit, shape: str, registers: bool = False, **kw) -> bool:
    """Run `variant` with `edit` at `level` on `shape`: whether the outputs are bitwise the unseeded kernel's
    (hazards and deadlocks propagate); `registers`: the CTA simulator checks the register allocation."""
    if level == "target":
        fn = target_kernel(variant)
        apply_target(fn, edit)
        out = run_target(variant, fn, shape, registers, **kw)
    else:
        out = run_ptx(variant, apply_ptx(compiled(variant)[2], edit), shape, **kw)
    return tuple(a.tobytes() for a in out) == clean(level, variant, shape)


# endregion
# region locating an op in both forms
@dataclass(frozen=True)
class At:
    """The n-th op of `kind` (`KINDS`) in `region`: "kernel", "producer", "consumer" (the role branches; in the
    single-stage kernel "consumer" is the kernel), or "producer loop" / "consumer loop" (the innermost loop of the
    role with two mbarrier waits: the steady trips)."""

    region: str
    kind: str
    n: int = 0


KINDS = {
    # kind: (Target IR op class or predicate, PTX instruction prefix)
    "wait": (sm90.MBarrierTryWaitParityOp, "mbarrier.try_wait"),
    "expect_tx": (sm90.MBarrierArriveExpectTxOp, "mbarrier.arrive.expect_tx"),
    "release": (sm90.MBarrierArriveOp, "mbarrier.arrive.shared"),
    "init": (sm90.MBarrierInitOp, "mbarrier.init"),
    "fence_mbarrier_init": (sm90.FenceMBarrierInitOp, "fence.mbarrier_init"),
    "wgmma_fence": (sm90.WgmmaFenceOp, "wgmma.fence"),
    "commit": (sm90.WgmmaCommitGroupOp, "wgmma.commit_group"),
    "wait_group": (sm90.WgmmaWaitGroupOp, "wgmma.wait_group"),
    "fence_proxy": (sm90.FenceProxyAsyncOp, "fence.proxy.async"),
    "bar_sync": (sm90.BarSyncOp, "bar.sync"),
    "bulk_wait": (sm90_reductions.BulkWaitGroupOp, "cp.async.bulk.wait_group"),
    # a cluster's (tests/tessera_seeds.py)
    "cluster_arrive": (sm90_cluster.ClusterArriveOp, "barrier.cluster.arrive"),
    "cluster_wait": (sm90_cluster.ClusterWaitOp, "barrier.cluster.wait"),
    "remote_release": (sm90_cluster.MBarrierArriveClusterOp, "mbarrier.arrive.release.cluster"),
    "multicast": (sm90_cluster.TmaLoadMulticastOp, tuple(
        f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast"
        for rank in range(1, 6))),
}


def _target_region(fn, region: str):
    ifs = [op for op in fn.body.block.ops if isinstance(op, scf.IfOp)
           and any(isinstance(o, sm90.SetMaxNRegOp) for o in op.true_region.walk())]
    role, loop = region.split(" ")[0], region.endswith("loop")
    if role == "kernel":
        return fn.body
    if not ifs:
        if role == "producer":
            raise LookupError("the kernel has no producer")
        body = fn.body
    else:
        body = ifs[-1].true_region if role == "producer" else ifs[-1].false_region
    if not loop:
        return body
    loops = [op for op in body.walk() if isinstance(op, scf.ForOp)
             and sum(isinstance(o, sm90.MBarrierTryWaitParityOp) for o in op.body.walk()) >= 2]
    inner = [op for op in loops if not any(o is not op and o in loops for o in op.body.walk())]
    if not inner:
        raise LookupError(f"no {region}")
    return inner[0].body


def find_target(fn, at: At):
    """The Target IR op `at` names (for a wait: its scf.while loop)."""
    kind = KINDS[at.kind][0]
    ops = [op for op in _target_region(fn, at.region).walk() if isinstance(op, kind)
           and (at.kind != "release" or type(op) is sm90.MBarrierArriveOp)]
    if at.kind == "wait":
        ops = [op.parent_op() for op in ops]
        while any(not isinstance(op, scf.WhileOp) for op in ops):
            ops = [op if isinstance(op, scf.WhileOp) else op.parent_op() for op in ops]
    if at.n >= len(ops):
        raise LookupError(f"no {at}")
    return ops[at.n]


def _instruction(line: str) -> str:
    return re.sub(r"^@!?%p\d+ ", "", line.strip())


def _lines_of(lines, start, stop, prefix):
    return [i for i in range(start, stop) if _instruction(lines[i]).startswith(prefix)
            and (prefix != "mbarrier.arrive.shared" or "expect_tx" not in lines[i])]


def _ptx_region(lines, region: str) -> tuple[int, int]:
    role, loop = region.split(" ")[0], region.endswith("loop")
    dec = [i for i, s in enumerate(lines) if s.strip().startswith("setmaxnreg.dec")]
    inc = [i for i, s in enumerate(lines) if s.strip().startswith("setmaxnreg.inc")]
    if role == "kernel" or (not dec and role == "consumer"):
        start, stop = 0, len(lines)
    elif not dec:
        raise LookupError("the kernel has no producer")
    else:
        start, stop = (dec[0], inc[0]) if role == "producer" else (inc[0], len(lines))
    if not loop:
        return start, stop
    loops = []
    for i in range(start, stop):
        label = re.match(r"(\$L__for\d+):", lines[i].strip())
        if label:
            end = next(j for j in range(i, len(lines)) if lines[j].strip().endswith(f"bra {label.group(1)};"))
            if len(_lines_of(lines, i, end, "mbarrier.try_wait")) >= 2:
                loops.append((i, end))
    inner = [(a, b) for a, b in loops if not any(a < c and d < b for c, d in loops)]
    if not inner:
        raise LookupError(f"no {region}")
    return inner[0]


def find_ptx(lines, at: At) -> int:
    """The index of the PTX line `at` names."""
    found = _lines_of(lines, *_ptx_region(lines, at.region), KINDS[at.kind][1])
    if at.n >= len(found):
        raise LookupError(f"no {at}")
    return found[at.n]


# endregion
# region edits
@dataclass(frozen=True)
class Edit:
    """One edit: "delete", "flip" (a wait tests the other parity), "scale" (expect_tx bytes times `value`),
    "count" (an init's arrival count or a bar_sync's thread count set to `value`), "mask" (a multicast's CTA mask
    set to `value`), "pending" (a wait_group's
    count set to `value`), "move" (before the op `other` names, with the ops
    between that compute its operands; `value` 1: an op under a branch the anchor's block holds keeps that branch,
    the branch moving in Target IR and the PTX line predicated as its `$L__else` block is: the folded loop's V
    release, skipped on the first trip), "double" (issued twice), "retarget" (a release
    arrives on the barrier of the release `other` names), "home" (a remote release, and the one `other` names,
    arrive on the executing CTA's own barrier: their `mapa` takes %cluster_ctarank as the rank)."""

    action: str
    at: At
    value: float = 0
    other: At | None = None


def _set(op, name: str, value: int) -> None:
    op.properties[name] = type(op.properties[name])(value, op.properties[name].type)


def _with_operands(op, anchor) -> list:
    """`op` and, before it, the ops of its block between `anchor` and it that compute its operands (transitively),
    in their order: what a move before `anchor` must take along so that every value is still defined first."""
    block = op.parent_block()
    if anchor.parent_block() is not block:
        return [op]
    between, o = [], op.prev_op
    while o is not None and o is not anchor:
        between.append(o)
        o = o.prev_op
    if o is None:  # the anchor comes after the op
        return [op]
    needed, taken = {id(v.owner) for v in op.operands}, []
    for o in between:  # nearest first
        if id(o) in needed:
            taken.append(o)
            needed |= {id(v.owner) for v in o.operands}
    return taken[::-1] + [op]


def _ptx_operands(lines, start: int, stop: int) -> list[int]:
    """The lines in [start, stop) that compute a register line `stop` reads (transitively: for each register, its
    nearest write before the line that reads it), in their order."""
    instruction = _instruction(lines[stop])
    needed = set(_registers(instruction.split(" ", 1)[1] if " " in instruction else ""))
    taken = []
    for k in range(stop - 1, start - 1, -1):
        text = _instruction(lines[k])
        if text.startswith("//") or " " not in text or text.startswith(("st.", "mbarrier", "bar.", "@")):
            continue
        written = _registers(text.split(" ", 1)[1])
        if written and written[0] in needed:
            taken.append(k)
            needed.discard(written[0])
            needed |= set(written[1:])
    return taken[::-1]


def _registers(operands: str) -> list[str]:
    return re.findall(r"%[a-z]+\d+(?!\w)", operands.split("//")[0])


def _renamed(block: list[str], lines: list[str]) -> tuple[list[str], list[str]]:
    """`block` (copies of instructions, each but the last computing an operand of a later one, to run earlier)
    with the registers they write renamed to fresh ones, and the declarations of those (typed as `lines` declares the
    originals): the allocator may have given those registers to other values live between the new place and the
    old one, which an earlier write would clobber."""
    kinds = {m.group(2): m.group(1) for m in re.finditer(r"\.reg \.(\w+) (%[a-z]+)<\d+>;", "\n".join(lines))}
    current: dict[str, str] = {}
    renamed, declarations = [], []
    for n, line in enumerate(block):
        head, _, operands = line.partition(_instruction(line).split(" ", 1)[0])
        registers = _registers(operands)
        dest = registers[0] if registers and n < len(block) - 1 else None
        def use(match, skip=[dest is not None]):
            if skip[0]:  # the destination: renamed below
                skip[0] = False
                return match.group(0)
            return current.get(match.group(0), match.group(0))
        operands = re.sub(r"%[a-z]+\d+(?!\w)", use, operands)
        if dest is not None:
            fresh = f"%seeded_m{n}"
            declarations.append(f"    .reg .{kinds[re.match(r'%[a-z]+', dest).group(0)]} {fresh};")
            operands = checked(operands).replace(dest, fresh, 1)
            current[dest] = fresh
        renamed.append(head + _instruction(line).split(" ", 1)[0] + operands)
    return renamed, declarations


def apply_target(fn, edit: Edit) -> None:
    op = find_target(fn, edit.at)
    if edit.action == "delete":
        op.detach()
        op.erase()
    elif edit.action == "flip":
        wait = next(o for o in op.before_region.walk() if isinstance(o, sm90.MBarrierTryWaitParityOp))
        one = arith.ConstantOp.from_int_and_width(1, wait.operands[1].type)
        flipped = arith.XOrIOp(wait.operands[1], one.result)
        wait.parent_block().insert_ops_before([one, flipped], wait)
        wait.operands[1] = flipped.result
    elif edit.action == "scale":
        _set(op, "bytes", int(op.properties["bytes"].value.data * edit.value))
    elif edit.action == "count":
        _set(op, "count" if isinstance(op, sm90.MBarrierInitOp) else "threads", int(edit.value))
    elif edit.action == "pending":
        _set(op, "pending", int(edit.value))
    elif edit.action == "mask":
        _set(op, "mask", int(edit.value))
    elif edit.action == "move":
        anchor = find_target(fn, edit.other)
        if edit.value == 1:  # the branch the op runs under moves with it
            op = anchor.parent_block().find_ancestor_op_in_block(op)
            assert isinstance(op, scf.IfOp), op
        for moved in _with_operands(op, anchor):
            moved.detach()
            anchor.parent_block().insert_op_before(moved, anchor)
    elif edit.action == "double":
        op.parent_block().insert_op_after(op.clone(), op)
    elif edit.action == "retarget":
        op.operands[0] = find_target(fn, edit.other).operands[0]
    elif edit.action == "home":
        for release in (op, find_target(fn, edit.other)):
            mapa = release.operands[0].owner
            rank = sm90.SpecialRegOp("cluster_ctarank")
            mapa.parent_block().insert_op_before(rank, mapa)
            mapa.operands[1] = rank.result
    else:
        raise ValueError(f"unknown edit {edit.action}")


def apply_ptx(text: str, edit: Edit) -> str:
    lines = text.splitlines()
    i = find_ptx(lines, edit.at)
    if edit.action == "delete":
        if edit.at.kind == "wait":  # the try_wait and its branch back
            branch = next(j for j in range(i, i + 6) if re.match(r"@!%p\d+ bra \$L__while", lines[j].strip()))
            del lines[branch]
        del lines[i]
    elif edit.action == "flip":
        parity = re.search(r"\], (%r\d+);", lines[i]).group(1)
        lines[i] = lines[i].replace(f"], {parity};", "], %seeded_parity;")
        lines.insert(i, f"    xor.b32 %seeded_parity, {parity}, 1;")
        lines.insert(next(j for j, s in enumerate(lines) if s.strip().startswith(".reg")),
                     "    .reg .b32 %seeded_parity;")
    elif edit.action == "scale":
        count = re.search(r", (\d+);$", lines[i])
        lines[i] = lines[i][:count.start()] + f", {int(int(count.group(1)) * edit.value)};"
    elif edit.action in ("count", "mask"):  # the last operand, an immediate
        lines[i] = re.sub(r", \d+;$", f", {int(edit.value)};", lines[i])
    elif edit.action == "pending":
        lines[i] = re.sub(r"\d+;$", f"{int(edit.value)};", lines[i])
    elif edit.action == "move":
        j = find_ptx(lines, edit.other)
        if edit.other.kind == "wait":  # before the wait loop's label
            j = max(k for k in range(j) if re.match(r"\$L__while\d+:", lines[k].strip()))
        if edit.value == 1:  # predicated as the block it leaves (`@!%pN bra $L__else`: the block runs on !%pN)
            test, branch = else_guard(lines, i)
            predicate_valid(lines, test, j, branch)
            lines[i] = f"    @!{test} {lines[i].strip()}"
        if j < i:  # with copies of the instructions between that compute its operands (a remote release's mapa)
            block, declarations = _renamed([lines[k] for k in _ptx_operands(lines, j, i) + [i]], lines)
            del lines[i]
            lines[j:j] = block
            first = next(k for k, text in enumerate(lines) if text.strip().startswith(".reg"))
            lines[first:first] = declarations
        else:
            line = lines.pop(i)
            lines.insert(j - 1, line)
    elif edit.action == "double":
        lines.insert(i, lines[i])
    elif edit.action == "retarget":
        target = re.search(r"\[(%r\d+)\]", lines[find_ptx(lines, edit.other)]).group(1)
        lines[i] = re.sub(r"\[%r\d+\]", f"[{target}]", lines[i])
    elif edit.action == "home":  # the mapa before each release takes the own rank
        for k in sorted((i, find_ptx(lines, edit.other)), reverse=True):  # the later first: indices hold
            j = max(m for m in range(k) if _instruction(lines[m]).startswith("mapa.shared::cluster"))
            lines[j] = re.sub(r", %r\d+;$", ", %seeded_rank;", lines[j])
            lines.insert(j, "    mov.u32 %seeded_rank, %cluster_ctarank;")
        lines.insert(next(j for j, s in enumerate(lines) if s.strip().startswith(".reg")),
                     "    .reg .b32 %seeded_rank;")
    else:
        raise ValueError(f"unknown edit {edit.action}")
    return "\n".join(lines) + "\n"


# endregion
# region the catalogue
C, P = "consumer loop", "producer loop"
_S_FENCE, _DP_FENCE, _DV_FENCE, _DQ_FENCE, _DK_FENCE = (At(C, "wgmma_fence", n) for n in range(5))
_DQ_WAIT = At(C, "wait_group", 2)
"""In every variant the loop's wgmma groups are, in convert-tile-to-sm90's default issue order (`mma-order=first-read`,
FlashAttention-3's), S = Q K^T and dP = dO V^T (its accumulator set to -dPsum before S is issued), then after the
barrier publishing P and dS, dV += P^T dO, dQ = dS K and dK += dS^T Q (one fence and one commit each); wait_group 1
after dP (S read while dP runs), 0 before dS, 1 before dQ is added (dK still in flight) and 0 before the releases."""

ALL = "RRRR"
"""What a seed must give, per (CTA simulator on one trip, on several; PTX executor on one trip, on several):
R reported (a hazard naming both sides, a deadlock naming what each blocked thread waits for, or an error at
the CTA's exit), C clean with bitwise the unseeded kernel's outputs. Every C has its reason."""

_ONE_TRIP = "on one trip nothing is refilled or overwritten"
_DPSUM_BEFORE_S = ("dP's accumulator is set to -dPsum before S's fence (convert-tile-to-sm90's mma-order=first-read "
                   "computes a wgmma's register operands before the groups in flight at its issue), and that fence "
                   "orders the writes for every wgmma after it (memory_model.WGMMA_FENCE, at both levels)")
_PRODUCER_ORDERS_SLOTS = ("the producer's one thread reduces trip t (its wait_group.read included) before it "
                          "refills Q for trip t + 2, which the consumers wait for before they store into trip t's "
                          "staging slot again: the slot's empty barrier adds no order here")
_UNREACHED = "on one trip the edited op never runs (the producer loop refills nothing) or the slot is never refilled"
_LEDGER = ("on one trip the slot is never awaited again: not a race on that length; the CTA simulator reports it by "
           "its end-of-kernel ledger (every ring slot released as often as it was filled, each arrival counted)")
_STAGING_LEDGER = ("on one trip each staging slot is filled once and never waited for again: not a race on that "
                   "length; the CTA simulator reports it by its end-of-kernel ledger of staging slots (each drained "
                   "once per fill, released once per drain)")
_Q_EMPTY_COVERS = ("the producer refills a dO slot only after its wait on the same slot's Q empty barrier, released "
                   "after the wait_group 0 that completes every wgmma reading Q and dO of that trip")
_ZERO_ACC = ("memory_model.WGMMA_FENCE on registers, at both levels: the zero accumulator (scale-d 0) is written by "
             "no instruction (the printer folds it) and nothing touches the result's registers since the previous "
             "wgmma_fence (the CTA simulator checks the allocation's registers; without one it counts the zero, an "
             "SSA value defined after the fence, as written)")
_INIT_FENCE = ("memory_model.MBARRIER_INIT_FENCE, one rule at both levels: the fence releases inits to other CTAs "
               "of a cluster; inside one CTA the bar.sync after the inits orders them for every use, TMA copies "
               "included")

_WARP_SPECIALIZED = [
    # (kind, name, edit, expected outcomes, reason for each C)
    ("wait deleted", "the Q full wait in the consumer loop", Edit("delete", At(C, "wait", 0)), ALL, ""),
    ("wait deleted", "the dO full wait in the consumer loop", Edit("delete", At(C, "wait", 1)), ALL, ""),
    ("wait deleted", "the consumers' K/V wait", Edit("delete", At("consumer", "wait", 0)), ALL, ""),
    ("wait deleted", "the producer's Q empty wait in its loop", Edit("delete", At(P, "wait", 0)), "CRCR", _UNREACHED),
    ("parity flipped", "the Q full wait in the consumer loop", Edit("flip", At(C, "wait", 0)), ALL, ""),
    ("parity flipped", "the dO full wait in the consumer loop", Edit("flip", At(C, "wait", 1)), ALL, ""),
    ("parity flipped", "the producer's Q empty wait in its loop", Edit("flip", At(P, "wait", 0)), "CRCR", _UNREACHED),
    ("parity flipped", "the producer's first Q empty wait", Edit("flip", At("producer", "wait", 0)), ALL, ""),
    ("expect_tx too small", "the producer's first Q", Edit("scale", At("producer", "expect_tx", 0), 0.5), ALL, ""),
    ("expect_tx too small", "the consumers' K/V", Edit("scale", At("consumer", "expect_tx", 0), 0.5), ALL, ""),
    ("expect_tx too large", "dO in the producer loop", Edit("scale", At(P, "expect_tx", 1), 2), "CRCR", _UNREACHED),
    ("expect_tx deleted", "the producer's first dO", Edit("delete", At("producer", "expect_tx", 1)), ALL, ""),
    ("wgmma.commit_group deleted", "S = Q K^T", Edit("delete", At(C, "commit", 0)), ALL, ""),
    ("wgmma.commit_group deleted", "dQ = dS K", Edit("delete", At(C, "commit", 3)), ALL, ""),
    ("wgmma.wait_group deleted", "after S = Q K^T", Edit("delete", At(C, "wait_group", 0)), ALL, ""),
    ("wgmma.wait_group deleted", "after dP = dO V^T", Edit("delete", At(C, "wait_group", 1)), ALL, ""),
    ("dQ added without its wait", "the wait_group 1 before dQ is added", Edit("delete", _DQ_WAIT), ALL, ""),
    ("wgmma.wait_group weakened", "wait_group 1 -> 2 before dQ is added", Edit("pending", _DQ_WAIT, 2), ALL, ""),
    ("wgmma.fence deleted", "before S = Q K^T", Edit("delete", _S_FENCE), ALL, ""),
    ("fence.proxy.async deleted", "after the dS stores", Edit("delete", At(C, "fence_proxy", 1)), ALL, ""),
    ("bar.sync deleted", "after mbarrier.init", Edit("delete", At("kernel", "bar_sync", 0)), ALL, ""),
    ("bar.sync deleted", "after the dS stores (P and dS read by every warp's wgmma)",
     Edit("delete", At(C, "bar_sync", 0)), ALL, ""),
    ("bar.sync count wrong", "the barrier after the dS stores counts 64", Edit("count", At(C, "bar_sync", 0), 64),
     ALL, ""),
    ("bar.sync count wrong", "the barrier after the inits counts only the consumers",
     Edit("count", At("kernel", "bar_sync", 0), 128), ALL, ""),
    ("slot released early", "Q, before the wait for dK += dS^T Q", Edit("move", At(C, "release", 0), other=_DQ_WAIT),
     "CRCR", _UNREACHED),
    ("slot released early", "Q, before the barrier that precedes dK += dS^T Q",
     Edit("move", At(C, "release", 0), other=At(C, "bar_sync", 0)), "CRCR", _UNREACHED),
    ("slot released early", "Q, right after its full wait", Edit("move", At(C, "release", 0), other=_S_FENCE),
     "CRCR", _UNREACHED),
    ("slot release deleted", "Q's", Edit("delete", At(C, "release", 0)), "RRCR", _LEDGER),
    ("slot release deleted", "dO's", Edit("delete", At(C, "release", 1)), "RRCR", _LEDGER),
    ("release on the wrong barrier", "Q's release arrives on dO's empty barrier",
     Edit("retarget", At(C, "release", 0), other=At(C, "release", 1)), "RRCR", _LEDGER),
    ("extra arrival", "dO's release doubled", Edit("double", At(C, "release", 1)), "RRCC",
     "the extra phases of dO's empty barrier only let the producer's dO wait pass early, and " + _Q_EMPTY_COVERS
     + "; the CTA simulator reports the extra arrivals by its ledger"),
    ("mbarrier count wrong", "Q's first empty barrier counts half the consumers",
     Edit("count", At("kernel", "init", 2), 64), "RRCR", _LEDGER),
    ("mbarrier count wrong", "Q's first full barrier counts two arrivals", Edit("count", At("kernel", "init", 1), 2),
     ALL, ""),
    ("wgmma.fence deleted", "before dP - dPsum = dO V^T (its accumulator set to -dPsum before S's fence)",
     Edit("delete", _DP_FENCE), "CCCC", _DPSUM_BEFORE_S),
    ("wgmma.fence deleted", "before dQ = dS K", Edit("delete", _DQ_FENCE), "CCCC", _ZERO_ACC),
    ("fence.mbarrier_init deleted", "after the inits", Edit("delete", At("kernel", "fence_mbarrier_init", 0)),
     "CCCC", _INIT_FENCE),
    # edits the memory model accepts in this kernel
    ("wait deleted", "the producer's dO empty wait in its loop", Edit("delete", At(P, "wait", 1)), "CCCC",
     _Q_EMPTY_COVERS),
    ("slot released early", "dO, before dV += P^T dO", Edit("move", At(C, "release", 1), other=_DV_FENCE), "CCCC",
     _Q_EMPTY_COVERS),
    ("fence.proxy.async deleted", "after the P stores", Edit("delete", At(C, "fence_proxy", 0)), "CCCC",
     "each thread's fence after its dS stores follows its P stores too, and the barrier after it carries both to "
     "every warp before the wgmmas read them"),
    ("bar.sync deleted", "the consumers' bar.sync after the K/V wait", Edit("delete", At("consumer", "bar_sync", 0)),
     "CCCC", "every consumer thread waits on the K/V barrier itself"),
    ("wgmma.fence deleted", "before dV += P^T dO", Edit("delete", _DV_FENCE), "CCCC",
     "dV's accumulator comes from the previous dV wgmma (same shape: no fence needed between them) and the fence "
     "before dP = dO V^T orders every other access"),
    ("wgmma.fence deleted", "before dK += dS^T Q", Edit("delete", _DK_FENCE), "CCCC",
     "dK's accumulator comes from the previous dK wgmma, and the fence before dV += P^T dO orders the rest"),
]

_BULK = [
    ("dQ added without its wait", "the wait_group 1 before dQ is staged", Edit("delete", _DQ_WAIT), ALL, ""),
    ("fence.proxy.async deleted", "after the dQ staging stores", Edit("delete", At(C, "fence_proxy", 2)), ALL, ""),
    # the producer adds the staged dQ (convert-tile-to-sm90's reduction slots): consumers wait for a free slot,
    # store, fence and arrive on its full barrier ("release" 0 in their loop); the producer waits for it ("wait" 2 in
    # its loop), issues the bulk reduction, waits for its read and frees the slot ("release" 0 in its loop)
    ("staged dQ published early", "a consumer arrives on the slot's full barrier before its fence.proxy.async",
     Edit("move", At(C, "release", 0), other=At(C, "fence_proxy", 2)), ALL, ""),
    ("wait deleted", "the producer's wait for the staged dQ", Edit("delete", At(P, "wait", 2)), ALL, ""),
    ("bulk wait deleted", "the producer's wait_group.read before it frees the staging slot",
     Edit("delete", At(P, "bulk_wait", 0)), ALL, ""),
    ("slot release deleted", "the producer's release of the staging slot", Edit("delete", At(P, "release", 0)),
     "RRCR", _STAGING_LEDGER),
    # edits the memory model accepts in this kernel
    ("staging slot freed early", "the producer frees the slot before its wait_group.read",
     Edit("move", At(P, "release", 0), other=At(P, "bulk_wait", 0)), "CCCC", _PRODUCER_ORDERS_SLOTS),
    ("wait deleted", "the consumers' wait for a free staging slot", Edit("delete", At(C, "wait", 2)), "CCCC",
     _PRODUCER_ORDERS_SLOTS),
]
_SINGLE = [
    ("wait deleted", "the Q/dO wait", Edit("delete", At(C, "wait", 1)), ALL, ""),
    ("wait deleted", "the K/V wait in the loop", Edit("delete", At(C, "wait", 0)), ALL, ""),
    ("parity flipped", "the Q/dO wait", Edit("flip", At(C, "wait", 1)), ALL, ""),
    ("parity flipped", "the K/V wait in the loop", Edit("flip", At(C, "wait", 0)), ALL, ""),
    ("expect_tx too small", "Q/dO", Edit("scale", At(C, "expect_tx", 0), 0.5), ALL, ""),
    ("expect_tx too large", "K/V", Edit("scale", At("consumer", "expect_tx", 0), 1.5), ALL, ""),
    ("expect_tx deleted", "Q/dO", Edit("delete", At(C, "expect_tx", 0)), ALL, ""),
    ("wgmma.commit_group deleted", "dQ = dS K", Edit("delete", At(C, "commit", 3)), ALL, ""),
    ("wgmma.commit_group deleted", "dK += dS^T Q, the trip's last (the wait_group 1 before dQ is added then leaves "
     "dQ's group pending)", Edit("delete", At(C, "commit", 4)), ALL, ""),
    ("wgmma.wait_group deleted", "after S = Q K^T", Edit("delete", At(C, "wait_group", 0)), ALL, ""),
    ("dQ added without its wait", "the wait_group 1 before dQ is added", Edit("delete", _DQ_WAIT), ALL, ""),
    ("wgmma.fence deleted", "before S = Q K^T", Edit("delete", _S_FENCE), ALL, ""),
    ("fence.proxy.async deleted", "after the dS stores", Edit("delete", At(C, "fence_proxy", 1)), ALL, ""),
    ("bar.sync deleted", "after mbarrier.init", Edit("delete", At("kernel", "bar_sync", 0)), ALL, ""),
    ("bar.sync deleted", "after the dS stores (P and dS read by every warp's wgmma)",
     Edit("delete", At(C, "bar_sync", 1)), ALL, ""),
    ("bar.sync count wrong", "the barrier after the dS stores counts 64", Edit("count", At(C, "bar_sync", 1), 64),
     ALL, ""),
    ("mbarrier count wrong", "the Q/dO barrier counts two arrivals", Edit("count", At("kernel", "init", 1), 2),
     ALL, ""),
    ("bar.sync deleted", "at the end of the trip (thread 0 refills Q/dO next trip)",
     Edit("delete", At(C, "bar_sync", 2)), "CCCC",
     "one consumer warpgroup: thread 0 refills Q and dO, and every thread stores the next P and dS, after its own "
     "wgmma.wait_group 0, which completed the warpgroup's wgmma-group and so every read of those bytes "
     "(memory_model.WGMMA_GROUP_PER_WARPGROUP, at both levels; CUTLASS and FA3 release a slot from one thread per "
     "warpgroup)"),
    ("wgmma.fence deleted", "before dQ = dS K", Edit("delete", _DQ_FENCE), "CCCC", _ZERO_ACC),
    ("fence.mbarrier_init deleted", "after the inits", Edit("delete", At("kernel", "fence_mbarrier_init", 0)),
     "CCCC", _INIT_FENCE),
    # edits the memory model accepts in this kernel
    ("wgmma.commit_group deleted", "dV += P^T dO", Edit("delete", At(C, "commit", 2)), "CCCC",
     "the next commit_group takes dV's wgmmas into dQ's group, and the wait_group 1 before dQ is added completes "
     "both before anything touches their registers or bytes"),
    ("fence.proxy.async deleted", "after the P stores", Edit("delete", At(C, "fence_proxy", 0)), "CCCC",
     "each thread's fence after its dS stores covers its P stores too, before the barrier"),
    ("bar.sync deleted", "after the waits", Edit("delete", At(C, "bar_sync", 0)), "CCCC",
     "every thread waits on both mbarriers itself"),
]

_R_S, _R_DP, _R_DV, _R_DQ, _R_DK = (At(C, "wgmma_fence", n) for n in range(5))
_R_DQ_WAIT, _R_DK_WAIT = At(C, "wait_group", 2), At(C, "wait_group", 3)
_R_PUBLISH, _R_TRIP_END = At(C, "bar_sync", 0), At(C, "bar_sync", 1)
"""The keys-on-rows loop (each consumer warpgroup, 64 keys of the 128), in convert-tile-to-sm90's default issue
order (`mma-order=first-read`, FlashAttention-3's): S^T = K Q^T and dP^T = V dO^T committed together (dP^T's
accumulator set to -dPsum before S^T's fence), wait_group 1 before P^T, wait_group 0 before dS^T, the dS^T stores
and their fence.proxy.async, dV += P^T dO (A from registers; left in flight), the bar.sync that publishes dS^T to
the other warpgroup, dQ^T = K^T dS^T (reads both warpgroups' dS^T rows) then dK += dS^T Q (A from registers), the
wait_group 1 before the transposed red.global.add of dQ^T (dK in flight), the wait_group 0 and the Q and dO releases (each empty barrier counts both warpgroups' 256 threads), and the
bar.sync at the end of the trip that pipeline-loops keeps because the body writes dS^T, a plain shared tile.
LSE2 and dPsum come through shared memory, one-row rings riding on Q's and dO's barriers (convert-tile-to-sm90's
riding rings): the producer's Q fill expects Q's and LSE2's bytes, the consumers' Q wait covers both, and the
arrive of Q's release is the one at LSE2's (the last of the pair: "release" 0 and 1 are LSE2's and dPsum's)."""
_ROW_BYTES = 64 * 128 * 2 / (64 * 128 * 2 + 64 * 4)
"""Scales the Q fill's expect_tx to Q's bytes alone (16384 of 16640): the LSE2 row riding on Q's barrier is left out."""

_KEY_ROWS = [
    ("wait deleted", "the Q full wait in the consumer loop", Edit("delete", At(C, "wait", 0)), ALL, ""),
    ("wait deleted", "the dO full wait in the consumer loop", Edit("delete", At(C, "wait", 1)), ALL, ""),
    ("wait deleted", "the consumers' K/V wait", Edit("delete", At("consumer", "wait", 0)), ALL, ""),
    ("wait deleted", "the producer's Q empty wait in its loop", Edit("delete", At(P, "wait", 0)), "CRCR", _UNREACHED),
    ("parity flipped", "the Q full wait in the consumer loop", Edit("flip", At(C, "wait", 0)), ALL, ""),
    ("parity flipped", "the producer's first Q empty wait", Edit("flip", At("producer", "wait", 0)), ALL, ""),
    ("expect_tx too small", "the producer's first Q", Edit("scale", At("producer", "expect_tx", 0), 0.5), ALL, ""),
    ("expect_tx too small", "the consumers' K/V", Edit("scale", At("consumer", "expect_tx", 0), 0.5), ALL, ""),
    ("expect_tx deleted", "the producer's first dO", Edit("delete", At("producer", "expect_tx", 1)), ALL, ""),
    ("riding row left out", "the producer's first Q fill expects Q's bytes, not its LSE2 row's",
     Edit("scale", At("producer", "expect_tx", 0), _ROW_BYTES), ALL, ""),
    ("riding row left out", "the producer loop's Q fill expects Q's bytes, not its LSE2 row's",
     Edit("scale", At(P, "expect_tx", 0), _ROW_BYTES), "CRCR", _UNREACHED),
    ("wgmma.commit_group deleted", "S^T = K Q^T", Edit("delete", At(C, "commit", 0)), ALL, ""),
    ("wgmma.commit_group deleted", "dQ^T = K^T dS^T", Edit("delete", At(C, "commit", 3)), ALL, ""),
    ("wgmma.wait_group deleted", "after S^T = K Q^T", Edit("delete", At(C, "wait_group", 0)), ALL, ""),
    ("wgmma.wait_group deleted", "after dP^T = V dO^T", Edit("delete", At(C, "wait_group", 1)), ALL, ""),
    ("dQ^T added transposed without its wait", "the wait_group 1 before the transposed red",
     Edit("delete", _R_DQ_WAIT), ALL, ""),
    ("dQ^T added transposed without its wait", "wait_group 1 -> 2 before the transposed red",
     Edit("pending", _R_DQ_WAIT, 2), ALL, ""),
    ("wgmma.fence deleted", "before S^T = K Q^T", Edit("delete", _R_S), ALL, ""),
    ("wgmma.fence deleted", "before dP^T = V dO^T (its accumulator set to -dPsum before S^T's fence)",
     Edit("delete", _R_DP), "CCCC", _DPSUM_BEFORE_S),
    ("wgmma.fence deleted", "before dV += P^T dO (its A registers, P^T, were just written)",
     Edit("delete", _R_DV), ALL, ""),
    ("wgmma.fence deleted", "before dQ^T = K^T dS^T", Edit("delete", _R_DQ), "CCCC", _ZERO_ACC),
    ("fence.proxy.async deleted", "after the dS^T stores", Edit("delete", At(C, "fence_proxy", 0)), ALL, ""),
    ("bar.sync deleted", "after mbarrier.init", Edit("delete", At("kernel", "bar_sync", 0)), ALL, ""),
    ("bar.sync count wrong", "the barrier after the inits counts only the consumers",
     Edit("count", At("kernel", "bar_sync", 0), 256), ALL, ""),
    ("second warpgroup's barrier", "the bar.sync publishing dS^T deleted (dQ^T reads the other warpgroup's rows)",
     Edit("delete", _R_PUBLISH), ALL, ""),
    ("second warpgroup's barrier", "the bar.sync publishing dS^T counts one warpgroup",
     Edit("count", _R_PUBLISH, 128), ALL, ""),
    ("second warpgroup's barrier", "Q's first empty barrier counts one warpgroup",
     Edit("count", At("kernel", "init", 2), 128), "RRCR", _LEDGER),
    ("end-of-trip barrier deleted", "the next trip's dS^T stores overwrite what the other warpgroup's dQ^T reads",
     Edit("delete", _R_TRIP_END), "CRCR", _ONE_TRIP),
    ("slot released early", "Q, before the wait for dK += dS^T Q", Edit("move", At(C, "release", 0), other=_R_DK_WAIT),
     "CRCR", _UNREACHED),
    ("slot released early", "Q, right after its full wait", Edit("move", At(C, "release", 0), other=_R_S),
     "CRCR", _UNREACHED),
    ("slot release deleted", "Q's", Edit("delete", At(C, "release", 0)), "RRCR", _LEDGER),
    ("release on the wrong barrier", "Q's release arrives on dO's empty barrier",
     Edit("retarget", At(C, "release", 0), other=At(C, "release", 1)), "RRCR", _LEDGER),
    ("extra arrival", "dO's release doubled", Edit("double", At(C, "release", 1)), "RRCC",
     "the extra phases of dO's empty barrier only let the producer's dO wait pass early, and " + _Q_EMPTY_COVERS
     + "; the CTA simulator reports the extra arrivals by its ledger"),
    ("mbarrier count wrong", "Q's first full barrier counts two arrivals", Edit("count", At("kernel", "init", 1), 2),
     ALL, ""),
    ("fence.mbarrier_init deleted", "after the inits", Edit("delete", At("kernel", "fence_mbarrier_init", 0)),
     "CCCC", _INIT_FENCE),
    ("wgmma.wait_group deleted", "at the trip's end (dK += dS^T Q, committed after dQ^T, still in flight)",
     Edit("delete", _R_DK_WAIT), ALL, ""),
    ("slot released early", "Q, before the wait for dQ^T (dK += dS^T Q, committed after it, still reads Q)",
     Edit("move", At(C, "release", 0), other=_R_DQ_WAIT), "CRCR", _UNREACHED),
    # edits the memory model accepts in this kernel
    ("wait deleted", "the producer's dO empty wait in its loop", Edit("delete", At(P, "wait", 1)), "CCCC",
     _Q_EMPTY_COVERS),
    ("slot released early", "dO, before dV += P^T dO", Edit("move", At(C, "release", 1), other=_R_DV), "CCCC",
     _Q_EMPTY_COVERS),
    ("bar.sync deleted", "the consumers' bar.sync after the K/V wait", Edit("delete", At("consumer", "bar_sync", 0)),
     "CCCC", "every consumer thread waits on the K/V barrier itself"),
    ("wgmma.fence deleted", "before dK += dS^T Q", Edit("delete", _R_DK), "CCCC",
     "dK's A registers (dS^T) were written before the fence before dV, and its accumulator comes from the previous "
     "dK wgmma (same shape: no fence needed between them)"),
]

_B_STAGED, _B_Q, _B_DO = At(C, "release", 0), At(C, "release", 1), At(C, "release", 2)
_B_SLOT_FREE, _B_STAGED_WAIT, _B_READ = At(C, "wait", 2), At(P, "wait", 2), At(P, "bulk_wait", 0)
_B_STAGE_FENCE, _B_FREED = At(C, "fence_proxy", 1), At(P, "release", 0)
"""The keys-on-rows loop with dQ^T by the producer's bulk reduction (the default `atomic-add=auto`;
convert-tile-to-sm90's reduction slots): as `_KEY_ROWS` up to dQ^T = K^T dS^T; then each consumer waits for a free
staging slot (its empty barrier: "wait" 2), waits for dQ^T (wait_group 0), stores its registers into the slot
transposed, fences them for the async proxy and arrives on the slot's full barrier ("release" 0), before Q's and dO's
releases ("release" 1 and 2) and the end-of-trip bar.sync. The producer's loop fills the next trip's Q and dO, then
waits on the full barrier of this trip's slot ("wait" 2), issues `cp.reduce.async.bulk`, waits for its read
(`cp.async.bulk.wait_group.read 0`) and frees the slot ("release" 0)."""
_SLOT_AFTER_REFILL = ("the producer's one thread reduces trip t (its wait_group.read included) before it fills Q for "
                      "trip t + 2, which the consumers wait for before they store into trip t's staging slot again: "
                      "the slot's empty barrier adds no order here")

_KEY_ROWS_BULK = [
    ("wait deleted", "the Q full wait in the consumer loop", Edit("delete", At(C, "wait", 0)), ALL, ""),
    ("wait deleted", "the dO full wait in the consumer loop", Edit("delete", At(C, "wait", 1)), ALL, ""),
    ("wait deleted", "the consumers' K/V wait", Edit("delete", At("consumer", "wait", 0)), ALL, ""),
    ("wait deleted", "the producer's Q empty wait in its loop (dK += dS^T Q still reads Q when dQ^T is staged)",
     Edit("delete", At(P, "wait", 0)), "CRCR", _UNREACHED),
    ("parity flipped", "the Q full wait in the consumer loop", Edit("flip", At(C, "wait", 0)), ALL, ""),
    ("parity flipped", "the producer's first Q empty wait", Edit("flip", At("producer", "wait", 0)), ALL, ""),
    ("expect_tx too small", "the producer's first Q", Edit("scale", At("producer", "expect_tx", 0), 0.5), ALL, ""),
    ("expect_tx deleted", "the producer's first dO", Edit("delete", At("producer", "expect_tx", 1)), ALL, ""),
    ("riding row left out", "the producer's first Q fill expects Q's bytes, not its LSE2 row's",
     Edit("scale", At("producer", "expect_tx", 0), _ROW_BYTES), ALL, ""),
    ("wgmma.commit_group deleted", "dQ^T = K^T dS^T", Edit("delete", At(C, "commit", 3)), ALL, ""),
    ("wgmma.wait_group deleted", "after S^T = K Q^T", Edit("delete", At(C, "wait_group", 0)), ALL, ""),
    ("wgmma.fence deleted", "before dV += P^T dO (its A registers, P^T, were just written)",
     Edit("delete", _R_DV), ALL, ""),
    ("fence.proxy.async deleted", "after the dS^T stores", Edit("delete", At(C, "fence_proxy", 0)), ALL, ""),
    ("second warpgroup's barrier", "the bar.sync publishing dS^T deleted (dQ^T reads the other warpgroup's rows)",
     Edit("delete", _R_PUBLISH), ALL, ""),
    ("end-of-trip barrier deleted", "the next trip's dS^T stores overwrite what the other warpgroup's dQ^T reads",
     Edit("delete", _R_TRIP_END), "CRCR", _ONE_TRIP),
    ("slot release deleted", "Q's", Edit("delete", _B_Q), "RRCR", _LEDGER),
    # the staged dQ^T and the producer's bulk reduction
    ("dQ^T staged without its wait", "the wait_group 1 before the staging stores", Edit("delete", _R_DQ_WAIT),
     ALL, ""),
    ("dQ^T staged without its wait", "wait_group 1 -> 2 before the staging stores", Edit("pending", _R_DQ_WAIT, 2),
     ALL, ""),
    ("fence.proxy.async deleted", "after the dQ^T staging stores (the bulk reduction reads through the async proxy)",
     Edit("delete", _B_STAGE_FENCE), ALL, ""),
    ("staged dQ^T published early", "a consumer arrives on the slot's full barrier before its fence.proxy.async",
     Edit("move", _B_STAGED, other=_B_STAGE_FENCE), ALL, ""),
    ("staged dQ^T published early", "a consumer arrives on the slot's full barrier before its staging stores",
     Edit("move", _B_STAGED, other=_R_DQ_WAIT), ALL, ""),
    ("staged dQ^T never published", "the consumers' arrive on the slot's full barrier deleted",
     Edit("delete", _B_STAGED), ALL, ""),
    ("wait deleted", "the producer's wait for the staged dQ^T", Edit("delete", _B_STAGED_WAIT), ALL, ""),
    ("parity flipped", "the producer's wait for the staged dQ^T", Edit("flip", _B_STAGED_WAIT), ALL, ""),
    ("mbarrier count wrong", "the staging slot's full barrier counts one warpgroup",
     Edit("count", At("kernel", "init", 9), 128), ALL, ""),
    ("bulk wait deleted", "the producer's wait_group.read before it frees the staging slot", Edit("delete", _B_READ),
     ALL, ""),
    ("staging slot freed early", "the producer frees the slot before its wait_group.read",
     Edit("move", _B_FREED, other=_B_READ), "CCCC", _SLOT_AFTER_REFILL),
    ("staging slot freed early", "the producer frees the slot before it waits for the staged dQ^T",
     Edit("move", _B_FREED, other=_B_STAGED_WAIT), ALL, ""),
    ("wait deleted", "the consumers' wait for a free staging slot", Edit("delete", _B_SLOT_FREE), "CCCC",
     _SLOT_AFTER_REFILL),
    ("slot release deleted", "the producer's release of the staging slot", Edit("delete", _B_FREED), "RRCR",
     _STAGING_LEDGER),
]

_D64_PUBLISH, _D64_TRIP_END = At(C, "bar_sync", 0), At(C, "bar_sync", 1)
"""head_dim 64's loop (each consumer warpgroup, 64 queries of the 128): S = Q K^T and dP = dO V^T committed together
(wait_group 1 before P, 0 before dS), the P stores and their fence, the dS stores and their fence, the bar.sync
publishing P and dS to the other warpgroup (dV += P^T dO, dK += dS^T Q and dQ = dS K read all 128 rows), the three
wgmmas in the order dV, dQ, dK and a wait_group 1 (dK in flight), red.global.add of dQ, the wait_group 0 and the Q
and dO releases, and the bar.sync at the end of the trip. With dQ bulk-reduced by the producer (the default): a
wait for a free staging slot ("wait" 2) before that wait_group 1, then the staging stores, their fence
("fence_proxy" 2) and the arrive on the slot's full barrier ("release" 0) before Q's and dO's releases ("release" 1
and 2); the producer's loop as the keys-on-rows kernel's (`_B_STAGED_WAIT`, `_B_READ`, `_B_FREED`)."""
_D64 = [
    ("wait deleted", "the Q full wait in the consumer loop", Edit("delete", At(C, "wait", 0)), ALL, ""),
    ("wait deleted", "the dO full wait in the consumer loop", Edit("delete", At(C, "wait", 1)), ALL, ""),
    ("parity flipped", "the Q full wait in the consumer loop", Edit("flip", At(C, "wait", 0)), ALL, ""),
    ("expect_tx too small", "the producer's first Q", Edit("scale", At("producer", "expect_tx", 0), 0.5), ALL, ""),
    ("wgmma.commit_group deleted", "S = Q K^T", Edit("delete", At(C, "commit", 0)), ALL, ""),
    ("wgmma.wait_group deleted", "after S = Q K^T", Edit("delete", At(C, "wait_group", 0)), ALL, ""),
    ("dQ added without its wait", "the wait_group 1 before dQ is added", Edit("delete", At(C, "wait_group", 2)),
     ALL, ""),
    ("wgmma.fence deleted", "before S = Q K^T", Edit("delete", At(C, "wgmma_fence", 0)), ALL, ""),
    ("fence.proxy.async deleted", "after the dS stores", Edit("delete", At(C, "fence_proxy", 1)), ALL, ""),
    ("second warpgroup's barrier", "the bar.sync publishing P and dS deleted", Edit("delete", _D64_PUBLISH), ALL, ""),
    ("second warpgroup's barrier", "the bar.sync publishing P and dS counts one warpgroup",
     Edit("count", _D64_PUBLISH, 128), ALL, ""),
    ("second warpgroup's barrier", "Q's first empty barrier counts one warpgroup",
     Edit("count", At("kernel", "init", 2), 128), "RRCR", _LEDGER),
    ("end-of-trip barrier deleted", "the next trip's P stores overwrite what the other warpgroup's wgmmas read",
     Edit("delete", _D64_TRIP_END), "CRCR", _ONE_TRIP),
    ("slot release deleted", "Q's", Edit("delete", At(C, "release", 0)), "RRCR", _LEDGER),
    ("fence.mbarrier_init deleted", "after the inits", Edit("delete", At("kernel", "fence_mbarrier_init", 0)),
     "CCCC", _INIT_FENCE),
    # edits the memory model accepts in this kernel
    ("fence.proxy.async deleted", "after the P stores", Edit("delete", At(C, "fence_proxy", 0)), "CCCC",
     "each thread's fence after its dS stores follows its P stores too, and the barrier after it carries both to "
     "every warp before the wgmmas read them"),
]

_D64_BULK = [
    ("wait deleted", "the Q full wait in the consumer loop", Edit("delete", At(C, "wait", 0)), ALL, ""),
    ("parity flipped", "the dO full wait in the consumer loop", Edit("flip", At(C, "wait", 1)), ALL, ""),
    ("wgmma.wait_group deleted", "after dP = dO V^T", Edit("delete", At(C, "wait_group", 1)), ALL, ""),
    ("second warpgroup's barrier", "the bar.sync publishing P and dS deleted", Edit("delete", _D64_PUBLISH), ALL, ""),
    ("end-of-trip barrier deleted", "the next trip's P stores overwrite what the other warpgroup's wgmmas read",
     Edit("delete", _D64_TRIP_END), "CRCR", _ONE_TRIP),
    ("slot release deleted", "Q's", Edit("delete", _B_Q), "RRCR", _LEDGER),
    # the staged dQ and the producer's bulk reduction
    ("dQ staged without its wait", "the wait_group 1 before the staging stores", Edit("delete", At(C, "wait_group", 2)),
     ALL, ""),
    ("fence.proxy.async deleted", "after the dQ staging stores (the bulk reduction reads through the async proxy)",
     Edit("delete", At(C, "fence_proxy", 2)), ALL, ""),
    ("staged dQ published early", "a consumer arrives on the slot's full barrier before its fence.proxy.async",
     Edit("move", _B_STAGED, other=At(C, "fence_proxy", 2)), ALL, ""),
    ("staged dQ never published", "the consumers' arrive on the slot's full barrier deleted",
     Edit("delete", _B_STAGED), ALL, ""),
    ("wait deleted", "the producer's wait for the staged dQ", Edit("delete", _B_STAGED_WAIT), ALL, ""),
    ("mbarrier count wrong", "the staging slot's full barrier counts one warpgroup",
     Edit("count", At("kernel", "init", 9), 128), ALL, ""),
    ("bulk wait deleted", "the producer's wait_group.read before it frees the staging slot", Edit("delete", _B_READ),
     ALL, ""),
    # edits the memory model accepts in this kernel
    ("wait deleted", "the consumers' wait for a free staging slot", Edit("delete", _B_SLOT_FREE), "CCCC",
     _SLOT_AFTER_REFILL),
]

CATALOGUE = {"warp-specialized, red dQ": _WARP_SPECIALIZED, "warp-specialized, bulk dQ": _BULK,
             "single-stage": _SINGLE, "keys on rows": _KEY_ROWS_BULK, "keys on rows, red dQ": _KEY_ROWS,
             "head_dim 64, 128 x 128": _D64_BULK, "head_dim 64, 128 x 128, red dQ": _D64}
"""variant -> [(kind, name, edit, expected, reason)]; `expected` as `ALL` says."""

LEVELS = ("target", "ptx")
CELLS = [(level, shape) for level in LEVELS for shape in SHAPES]
"""The order of the four outcomes in `expected`."""


def verdict(level: str, variant: str, edit: Edit, shape: str) -> tuple[str, str]:
    """("R", the first line of the report) or ("C", "right") or ("WRONG", ...): one seeded run."""
    from tessera.interpreters.block_batch import KernelHazardError
    from tessera.interpreters.ptx import PtxExecutionError

    try:
        right = seeded_run(level, variant, edit, shape, registers=level == "target")
    except (KernelHazardError, PtxExecutionError) as error:
        return "R", str(error).splitlines()[0] if level == "target" else " ".join(str(error).split("\n")[:2])
    return ("C", "clean, bitwise right") if right else ("WRONG", "silent with a WRONG answer")


def one_per_kind() -> list[tuple[str, int]]:
    """(variant, index) of the first seed of each kind that is reported on every cell (the fast slice)."""
    return race_templates.one_per_kind(CATALOGUE, ALL)


# endregion


def matrix(level: str, out=print) -> int:
    """Run every seed of every variant at `level` on both shapes, print one line each (outcome, expected, the
    report's start) and return how many differ from `expected`."""
    return race_templates.run_matrix(CATALOGUE, level, CELLS, SHAPES, verdict,
                                     lambda variant: f"{level}, attention backward d{HEAD_DIMS[variant]}, {variant}:", out)
