"""Fused straight-line blocks of the PTX executor (tessera/interpreters/ptx/fuse.py): the same bits in every lane
with and without fusion, on random straight-line programs (predicated instructions, lanes that skip the block,
a branch into the middle, packed halves, approximate functions, float specials), on the hand-written kernels
and on a flash-attention kernel; errors and hazards inside a block are reported at the same instruction and
thread; blocks never span a branch target."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tessera.interpreters.launch import prepare_arguments
from tessera.interpreters.ptx import PtxExecutionError, PtxHazardError, fuse, launch
from tessera.interpreters.ptx.launcher import launch_described
from tessera.interpreters.ptx.parse import parse_ptx

R, F, P, H = 12, 12, 4, 4  # b32, f32, pred and b16 registers of a random program


@pytest.fixture(autouse=True)
def fuse_at_once(monkeypatch):
    """Blocks fused from their first run (launches here run most blocks once)."""
    monkeypatch.setattr(fuse, "HOT", 0)

_F32 = ["add.rn.f32 {f}, {f}, {f}", "sub.f32 {f}, {f}, {f}", "mul.rn.f32 {f}, {f}, {f}",
        "fma.rn.f32 {f}, {f}, {f}, {f}", "max.f32 {f}, {f}, {f}", "min.NaN.f32 {f}, {f}, {f}",
        "abs.f32 {f}, {f}", "neg.f32 {f}, {f}", "ex2.approx.ftz.f32 {f}, {f}", "rcp.approx.f32 {f}, {f}",
        "div.rn.f32 {f}, {f}, {f}", "sqrt.rn.f32 {f}, {f}", "mul.rn.ftz.f32 {f}, {f}, {f}",
        "selp.f32 {f}, {f}, {f}, {p}", "mov.f32 {f}, 0f3FC00000", "cvt.rn.f32.s32 {f}, {r}",
        "cvt.f32.bf16 {f}, {h}", "cvt.f32.f16 {f}, {h}", "mov.b32 {f}, {r}", "fma.rn.ftz.sat.f32 {f}, {f}, {f}, {f}"]
_B32 = ["add.s32 {r}, {r}, {r}", "sub.s32 {r}, {r}, 7", "mul.lo.s32 {r}, {r}, {r}", "mad.lo.s32 {r}, {r}, {r}, {r}",
        "mul.hi.u32 {r}, {r}, {r}", "shl.b32 {r}, {r}, {r}", "shr.u32 {r}, {r}, {r}", "shr.s32 {r}, {r}, {r}",
        "and.b32 {r}, {r}, {r}", "or.b32 {r}, {r}, {r}", "xor.b32 {r}, {r}, {r}", "not.b32 {r}, {r}",
        "lop3.b32 {r}, {r}, {r}, {r}, 0x96", "prmt.b32 {r}, {r}, {r}, {r}", "bfe.u32 {r}, {r}, {r}, {r}",
        "min.s32 {r}, {r}, {r}", "max.u32 {r}, {r}, {r}", "popc.b32 {r}, {r}", "clz.b32 {r}, {r}",
        "brev.b32 {r}, {r}", "selp.b32 {r}, {r}, {r}, {p}", "cvt.rn.bf16x2.f32 {r}, {f}, {f}",
        "cvt.rn.f16x2.f32 {r}, {f}, {f}", "add.rn.bf16x2 {r}, {r}, {r}", "fma.rn.f16x2 {r}, {r}, {r}, {r}",
        "mov.b32 {{{h}, {h}}}, {r}", "mov.b32 {r}, {{{h}, {h}}}", "shf.l.wrap.b32 {r}, {r}, {r}, {r}",
        "cvt.rzi.s32.f32 {r}, {f}", "mov.b32 {r}, {f}", "cvt.rn.bf16.f32 {h}, {f}", "cvt.rn.f16.f32 {h}, {f}"]
_PRED = ["setp.lt.f32 {p}, {f}, {f}", "setp.ne.s32 {p}, {r}, {r}", "setp.gtu.f32 {p}, {f}, {f}",
         "and.pred {p}, {p}, {p}", "setp.lt.and.s32 {p}, {r}, {r}, {p}", "not.pred {p}, {p}",
         "setp.ge.u32 {p}|{p}, {r}, {r}"]


def _random_program(rng, count: int) -> str:
    """A kernel whose threads load R b32 and F f32 values, run `count` random register instructions (some
    predicated; threads with tid >= cut branch past them; a data-dependent branch halfway lands on a label in
    the middle) and store every register."""
    pick = {"r": lambda: f"%r{rng.integers(R)}", "f": lambda: f"%f{rng.integers(F)}",
            "p": lambda: f"%p{rng.integers(P)}", "h": lambda: f"%h{rng.integers(H)}"}
    lines = []
    for i in range(count):
        if i == count // 2:
            lines += ["    @%p3 bra MID;", "MID:"]
        template = rng.choice(_F32 + _B32 + _PRED)
        text = template
        for key in "rfph":
            while "{" + key + "}" in text:
                text = text.replace("{" + key + "}", pick[key](), 1)
        text = text.replace("{{", "{").replace("}}", "}")
        guard = f"@{'!' if rng.random() < 0.5 else ''}%p{rng.integers(P)} " if rng.random() < 0.3 else ""
        lines.append(f"    {guard}{text};")
    loads = [f"    ld.global.b32 %r{i}, [%rd3+{4 * i}];" for i in range(R)]
    loads += [f"    ld.global.f32 %f{i}, [%rd3+{4 * (R + i)}];" for i in range(F)]
    loads += [f"    setp.lt.s32 %p{i}, %r{i}, %r{i + 1};" for i in range(P)]
    loads += [f"    cvt.u16.u32 %h{i}, %r{i + P};" for i in range(H)]
    words = R + F + P + H
    stores = [f"    st.global.b32 [%rd4+{4 * i}], %r{i};" for i in range(R)]
    stores += [f"    st.global.f32 [%rd4+{4 * (R + i)}], %f{i};" for i in range(F)]
    stores += [f"    selp.b32 %r20, 1, 0, %p{i};\n    st.global.b32 [%rd4+{4 * (R + F + i)}], %r20;" for i in range(P)]
    stores += [f"    cvt.u32.u16 %r20, %h{i};\n    st.global.b32 [%rd4+{4 * (R + F + P + i)}], %r20;" for i in range(H)]
    body = "\n".join(loads + ["    setp.ge.u32 %p7, %r21, %r22;", "    @%p7 bra SKIP;"] + lines + ["SKIP:"] + stores)
    return f""".version 8.0
.target sm_90a
.address_size 64

.visible .entry k(.param .u64 k_in, .param .u64 k_out, .param .u32 k_cut)
{{
    .reg .b32 %r<24>;
    .reg .f32 %f<{F}>;
    .reg .pred %p<8>;
    .reg .b16 %h<{H}>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [k_in];
    ld.param.u64 %rd2, [k_out];
    ld.param.u32 %r22, [k_cut];
    mov.u32 %r21, %tid.x;
    mul.wide.u32 %rd5, %r21, {4 * words};
    add.s64 %rd3, %rd1, %rd5;
    add.s64 %rd4, %rd2, %rd5;
{body}
    ret;
}}
"""


def _inputs(rng, threads: int) -> np.ndarray:
    """R integers (small, random bits, edge values) and F floats (normal, subnormal, zeros, inf, NaN) a thread."""
    ints = rng.integers(0, 2**32, (threads, R), dtype=np.uint64).astype(np.uint32)
    ints[:, ::3] = rng.integers(-40, 40, (threads, len(range(0, R, 3)))).astype(np.int32).view(np.uint32)
    floats = rng.standard_normal((threads, F)).astype(np.float32) * np.float32(4)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 65504.0, 1e30], np.float32)
    where = rng.random((threads, F)) < 0.15
    floats[where] = rng.choice(specials, int(where.sum()))
    return np.concatenate([ints, floats.view(np.uint32), np.zeros((threads, P + H), np.uint32)], axis=1)


def _run_both(text: str, args, **kw):
    """The arrays after the launch without fusion and with it."""
    results = []
    for fused in (False, True):
        copied = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        results.append(launch(text, "k", kw.get("grid", 1), kw["block"], copied, fuse=fused))
    return results


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_straight_line_programs_give_the_same_bits_fused(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    text = _random_program(rng, 70)
    threads = 96
    data = _inputs(rng, threads)
    fused_runs = []
    run = fuse.Block.run

    def counted(self, lanes):
        done = run(self, lanes)
        fused_runs.append(len(lanes) if done else None)
        return done

    monkeypatch.setattr(fuse.Block, "run", counted)
    plain, fused = _run_both(text, [data, np.zeros_like(data), np.uint32(70)], block=threads)
    assert fused_runs and None not in fused_runs and min(fused_runs) < threads  # fused, also for part of the threads
    assert fused[1].tobytes() == plain[1].tobytes()
    assert not np.array_equal(plain[1][:70, :R], data[:70, :R])  # the program computed something


def test_blocks_stop_at_branch_targets_and_special_registers():
    text = _random_program(np.random.default_rng(4), 40)
    module = parse_ptx(text)
    entry = module.entries["k"]
    mid = next(i for i, inst in enumerate(entry.instructions) if inst.opcode == "bra") + 1
    from tessera.interpreters.ptx.launch_setup import setup_launch
    run = setup_launch(module, "k", 1, 32, [np.zeros((32, 32), np.uint32)] * 2 + [np.uint32(1)], 0, "<ptx>",
                 1000, None, None, None, False, True)
    blocks = run.scheduler.fusion.blocks
    assert blocks and any(b.start == mid for b in blocks)
    for b in blocks:
        covered = range(b.start + 1, b.start + b.length)
        assert mid not in covered
        assert all(entry.instructions[i].opcode in fuse.FUSABLE for i in range(b.start, b.start + b.length))
        assert all("%tid" not in str(entry.instructions[i].operands) for i in range(b.start, b.start + b.length))


def test_hand_written_kernels_give_the_same_bits_fused():
    text = (Path(__file__).parent / "ptx_kernels" / "integer_arith.ptx").read_text()
    rng = np.random.default_rng(5)
    n = 200
    a, b = (rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    f, g = (_inputs(rng, n)[:, R:R + 2].copy().view(np.float32)[:, i].copy() for i in range(2))
    outs = []
    for fused in (False, True):
        out = np.zeros((n, 56), np.uint32)
        outs.append(launch(text, "integer_arith", 2, 128, [a, b, f, g, out, np.uint32(n)], fuse=fused)[4])
    assert outs[0].tobytes() == outs[1].tobytes()


def test_flash_attention_gives_the_same_bits_fused():
    from test_ptx_hazards import _attention
    from tessera.reference_attention import attention_operands

    sig, host, text = _attention(False)
    outs = []
    for fused in (False, True):
        arrays, sizes = prepare_arguments(sig, attention_operands(np.random.default_rng(6), 64, 70, 64))
        launch_described(text, host, arrays, sizes, fuse=fused)
        outs.append(arrays[3].tobytes())
    assert outs[0] == outs[1]


def _error(text, args, block, fused):
    with pytest.raises(PtxExecutionError) as caught:
        launch(text, "k", 1, block, args, fuse=fused)
    return caught.value


def test_an_error_inside_a_block_names_the_same_instruction_and_thread():
    text = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 k_out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [k_out];
    mov.u32 %r1, %tid.x;
    add.s32 %r2, %r1, 1;
    sub.s32 %r3, %r1, 5;
    mul.lo.s32 %r4, %r2, %r3;
    div.s32 %r5, %r4, %r3;
    add.s32 %r6, %r5, %r2;
    st.global.u32 [%rd1], %r6;
    ret;
}
"""
    errors = [_error(text, [np.zeros(4, np.uint32)], 32, fused) for fused in (False, True)]
    assert str(errors[0]) == str(errors[1])
    assert "div.s32: division by zero" in str(errors[1]) and "thread (5, 0, 0)" in str(errors[1])


def test_a_pending_wgmma_register_inside_a_block_is_reported_as_unfused():
    from test_ptx_hazards import _attention, _index, _run, _seeded
    from tessera.reference_attention import attention_operands

    text = _seeded(_attention(False), lambda lines: lines.pop(_index(lines, lambda s: "wgmma.wait_group" in s)))
    messages = []
    for fused in (False, True):
        sig, host, _ = _attention(False)
        arrays, sizes = prepare_arguments(sig, attention_operands(np.random.default_rng(7), 64, 70, 64))
        with pytest.raises(PtxHazardError) as caught:
            launch_described(text, host, arrays, sizes, source="seeded.ptx", fuse=fused)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and "before a wgmma.wait_group covers its group" in messages[1]


def test_a_wgmma_register_touched_in_a_block_without_a_fence_names_the_same_line_as_unfused():
    """A fused block's accesses to wgmma registers are one entry of the touch log (`touch_block`): the missing
    fence before the P @ V wgmma is reported naming the block's last access to the register, as unfused."""
    from test_ptx_hazards import _attention
    from tessera.reference_attention import attention_operands

    compiled = _attention(False)
    lines = compiled[2].splitlines()
    fence = [i for i, line in enumerate(lines) if "wgmma.fence" in line][1]
    text = "\n".join(lines[:fence] + lines[fence + 1:]) + "\n"
    messages = []
    for fused in (False, True):
        sig, host, _ = compiled
        arrays, sizes = prepare_arguments(sig, attention_operands(np.random.default_rng(7), 64, 70, 64))
        with pytest.raises(PtxHazardError) as caught:
            launch_described(text, host, arrays, sizes, source="seeded.ptx", fuse=fused)
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and "accessed it, with no wgmma.fence between them" in messages[1]


def test_max_steps_and_stats_are_those_of_single_instructions():
    rng = np.random.default_rng(8)
    text = _random_program(rng, 30)
    data = _inputs(rng, 32)
    counts = []
    for fused in (False, True):
        stats = {}
        launch(text, "k", 1, 32, [data.copy(), np.zeros_like(data), np.uint32(32)], stats=stats, fuse=fused)
        counts.append(stats)
    assert counts[0] == counts[1]
    steps = counts[0]["steps"]
    for fused in (False, True):  # a budget ending inside a block stops there, fused or not
        with pytest.raises(PtxExecutionError, match="the run stopped after"):
            launch(text, "k", 1, 32, [data.copy(), np.zeros_like(data), np.uint32(32)], max_steps=steps - 20,
                   fuse=fused)
        launch(text, "k", 1, 32, [data.copy(), np.zeros_like(data), np.uint32(32)], max_steps=steps + 1, fuse=fused)


@pytest.mark.slow
@pytest.mark.parametrize("kind, config, shapes", [
    ("flash_attention", dict(head_dim=128, causal=False, dtype="bf16"), [(1, 2, 256, 128)] + [(1, 2, 320, 128)] * 2),
    ("flash_attention", dict(head_dim=64, causal=True, dtype="f16"), [(1, 1, 200, 64)] + [(1, 1, 333, 64)] * 2),
    ("gemm", dict(dtype="bf16"), [(192, 128), (128, 320)]),
])
def test_builder_kernels_give_the_same_bits_fused(kind, config, shapes):
    """The warp-specialized flash kernels and the GEMM through the default pipeline (`-m slow`)."""
    from conftest import build_kernel
    from tessera.host import describe
    import tessera

    module = build_kernel(kind, **config)
    sig = tessera.find_kernel(module)
    lowered = tessera.compile(module, target="target")
    text = tessera.compile(module, target="ptx")
    rng = np.random.default_rng(9)
    inputs = [rng.standard_normal(shape) for shape in shapes]
    outs = []
    for fused in (False, True):
        arrays, sizes = prepare_arguments(sig, inputs)
        launch_described(text, describe(lowered)[0], arrays, sizes, fuse=fused)
        outs.append([a.tobytes() for a in arrays])
    assert outs[0] == outs[1]


def test_blocks_past_the_lane_counts_they_are_planned_for_run_unfused(monkeypatch):
    monkeypatch.setattr(fuse, "MAX_LANE_COUNTS", 0)
    rng = np.random.default_rng(10)
    text = _random_program(rng, 40)
    data = _inputs(rng, 64)
    plain, fused = _run_both(text, [data, np.zeros_like(data), np.uint32(40)], block=64)
    assert fused[1].tobytes() == plain[1].tobytes()


def test_a_lane_failing_inside_a_fused_block_stops_at_the_failing_instruction(monkeypatch):
    """The loop body is a block run fused from its second trip; the third trip divides by zero: the error and every
    lane's pc are those of the unfused run (the div, not the block's first instruction)."""
    from tessera.interpreters.ptx import schedule

    machines = []
    run = schedule.Scheduler.run

    def keep_machine(self):
        machines.append(self.m)
        return run(self)

    monkeypatch.setattr(schedule.Scheduler, "run", keep_machine)
    text = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 k_out)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .reg .pred %p<2>;
    ld.param.u64 %rd1, [k_out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r7, 3;
$L_loop:
    add.s32 %r2, %r1, %r7;
    sub.s32 %r3, %r7, 1;
    mul.lo.s32 %r4, %r2, %r3;
    div.s32 %r5, %r4, %r3;
    add.s32 %r6, %r5, %r2;
    sub.s32 %r7, %r7, 1;
    setp.ne.s32 %p1, %r7, 0;
    @%p1 bra $L_loop;
    st.global.u32 [%rd1], %r6;
    ret;
}
"""
    errors = [_error(text, [np.zeros(4, np.uint32)], 32, fused) for fused in (False, True)]
    assert str(errors[0]) == str(errors[1]) and "div.s32: division by zero" in str(errors[1])
    assert np.array_equal(machines[0].pc, machines[1].pc)


def test_a_reduction_trees_first_sums_read_their_operands_as_views(monkeypatch):
    """16 f32 values a thread, squared by one group and summed pairwise as a softmax row sum is (the pairs in another
    order than the squares were written: (f8, f0), (f12, f4), ...): the sums' members are ordered so that both
    operands are consecutive rows, read without a gather, and the bits are those of the unfused run."""
    squares = "\n".join(f"    mul.rn.f32 %f{16 + i}, %f{i}, %f{i};" for i in range(16))
    pairs = [(8, 0), (12, 4), (9, 1), (13, 5), (10, 2), (14, 6), (11, 3), (15, 7)]
    sums = "\n".join(f"    add.rn.f32 %f{32 + j}, %f{16 + a}, %f{16 + b};" for j, (a, b) in enumerate(pairs))
    loads = "\n".join(f"    ld.global.f32 %f{i}, [%rd3+{4 * i}];" for i in range(16))
    stores = "\n".join(f"    st.global.f32 [%rd4+{4 * j}], %f{32 + j};" for j in range(8))
    text = f""".version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 k_in, .param .u64 k_out)
{{
    .reg .b32 %r<2>;
    .reg .f32 %f<40>;
    .reg .b64 %rd<7>;
    ld.param.u64 %rd1, [k_in];
    ld.param.u64 %rd2, [k_out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd5, %r1, 64;
    mul.wide.u32 %rd6, %r1, 32;
    add.s64 %rd3, %rd1, %rd5;
    add.s64 %rd4, %rd2, %rd6;
{loads}
{squares}
{sums}
{stores}
    ret;
}}
"""
    blocks = []
    plan = fuse.Block._plan

    def kept(self, n):
        blocks.append(self)
        return plan(self, n)

    monkeypatch.setattr(fuse.Block, "_plan", kept)
    data = np.random.default_rng(11).standard_normal((64, 16)).astype(np.float32)
    plain, fused = _run_both(text, [data, np.zeros((64, 8), np.float32)], block=64)
    block = max(blocks, key=lambda b: b.length)  # the squares and the sums
    _, steps, _ = next(iter(block.plans.values()))
    assert [len(members) for members in block.groups] == [16, 8]
    assert [gathers for _, gathers, _, _ in steps] == [[], []]  # both groups' operands are views
    assert fused[1].tobytes() == plain[1].tobytes()
    assert np.array_equal(plain[1], np.float32(data[:, [a for a, _ in pairs]] ** 2 + data[:, [b for _, b in pairs]] ** 2))


@pytest.mark.parametrize("rows, kind", [
    ([5] * 8, "view"),  # one value every member reads
    ([3, 3, 4, 4] * 4, "take"),  # two values read alternately two by two (p = 4)
    ([7, 9, 11, 13, 15], "view"),  # odd partial sums (step 2)
    ([2, 5] * 3, "view"),  # a pair repeated (p = 2, step 3)
    ([9, 8, 7, 6], "take"),  # backwards
    ([4, 1, 6, 0, 2, 3], "take"),  # no pattern
    ([6, 6, 6, 2, 2, 2], "take"),  # no period shorter than k
    ([15, 0, 15, 3], "take"),  # the file's last and first rows ("clip" mode clips none)
])
def test_row_gathers_copy_the_rows_take_copies(rows, kind):
    """`RowGather` (the period's rows read once, as a view where they step evenly forward, then copied into each
    block) gives `take`'s bits for every pattern of rows, in repeated runs as a block runs them."""
    from tessera.interpreters.ptx.fuse_transfers import RowGather

    file = np.random.default_rng(len(rows)).integers(0, 2**32, (16, 24), dtype=np.uint64).astype(np.uint32)
    rows = np.array(rows, np.int64)
    out, expected = np.empty((len(rows), 24), np.uint32), np.empty((len(rows), 24), np.uint32)
    gather = RowGather(file, rows, out)
    assert (gather.file is None) == (kind == "view")
    for _ in range(2):
        file += np.uint32(1)  # the rows' new values, as each run of the block writes them
        gather.run()
        file.take(rows, axis=0, out=expected)
        assert out.tobytes() == expected.tobytes()
