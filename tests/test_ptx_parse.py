"""The PTX parser (`tessera.interpreters.ptx.parse`): the data each construct becomes, the scoping of registers
and labels, every diagnostic with its line and column, and round trips over the PTX samples and Tessera's
own output for GEMM and flash attention."""

from __future__ import annotations

import random
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tessera.interpreters.ptx.lexer import tokenize
from tessera.interpreters.ptx.parse import parse_ptx
from tessera.interpreters.ptx.syntax import (
    Address, Entry, FloatImm, Guard, Imm, Instruction, Label, Module, Negated, PtxSyntaxError, Reg, Sink,
    Special, Symbol, Variable, Vector,
)
from race_templates import PTX_HEADER
from text_edits import checked

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "tests" / "ptx_samples").glob("*.ptx"))
KERNELS = sorted((ROOT / "tests" / "ptx_kernels").glob("*.ptx"))
DECLS = ".reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n.reg .f32 %f<8>;\n.reg .pred %p<4>;\n.reg .b16 %h<2>;\n"
BODY_LINE = 11
"""The line of the first body statement in `entry(body)`."""


def entry(body: str, params: str = ".param .u64 out", before: str = "", directives: str = "") -> Entry:
    """The entry `k` of a module with PTX_HEADER, `before`, and the registers of DECLS declared."""
    return parse_ptx(module_text(body, params, before, directives)).entries["k"]


def module_text(body: str, params: str = ".param .u64 out", before: str = "", directives: str = "") -> str:
    return f"{PTX_HEADER}{before}.visible .entry k({params}){directives}\n{{\n{DECLS}{body}\n}}\n"


def instruction(text: str) -> Instruction:
    (only,) = entry(text).instructions
    return only


def error(text: str) -> PtxSyntaxError:
    with pytest.raises(PtxSyntaxError) as info:
        parse_ptx(text, "test.ptx")
    return info.value


def assert_error(text: str, message: str, line: int, column: int) -> None:
    e = error(text)
    assert (e.message, e.line, e.column) == (message, line, column), str(e)


# region header and module scope


def test_header_and_comments():
    module = parse_ptx("// a\n.version 8.3 /* multi\nline */ .target sm_90a, debug\n.address_size 64\n")
    assert module == Module((8, 3), ["sm_90a", "debug"], 64)
    assert parse_ptx(".version 7.8\n.target sm_80\n").address_size == 32  # the PTX default


def test_tokens_carry_line_and_column():
    tokens = tokenize("/* a\n b */ mov.u32\t%r1, 0f3F800000; // c\n  @!%p1")
    assert [(t.kind, t.text, t.line, t.column) for t in tokens] == [
        ("name", "mov.u32", 2, 7), ("name", "%r1", 2, 15), (",", ",", 2, 18), ("float", "0f3F800000", 2, 20),
        (";", ";", 2, 30), ("@", "@", 3, 3), ("!", "!", 3, 4), ("name", "%p1", 3, 5), ("eof", "", 3, 8)]


def test_module_variables():
    module = parse_ptx(PTX_HEADER + """
.global .align 4 .b8 data[6] = {1, 2, 0x10, 255, -1};
.visible .global .f32 x = 0f3F800000;
.weak .global .f32 y[2] = {1.5, -2.0};
.const .u32 c[2][2] = {{1, 2}, {3, 0b11}};
.global .u16 h[] = {7, 8};
.global .u64 g1, g2 = 5;
.shared .align 8 .b64 bar;
.extern .shared .align 1024 .b8 smem[];
""")
    assert module.variables == [
        Variable("data", "global", "b8", 6, 4, False, bytes([1, 2, 16, 255, 255, 0]), 5),
        Variable("x", "global", "f32", 1, 4, False, bytes.fromhex("0000803f"), 6),
        Variable("y", "global", "f32", 2, 4, False, bytes.fromhex("0000c03f000000c0"), 7),
        Variable("c", "const", "u32", 4, 4, False, bytes.fromhex("01000000020000000300000003000000"), 8),
        Variable("h", "global", "u16", 2, 2, False, bytes.fromhex("07000800"), 9),
        Variable("g1", "global", "u64", 1, 8, False, None, 10),
        Variable("g2", "global", "u64", 1, 8, False, (5).to_bytes(8, "little"), 10),
        Variable("bar", "shared", "b64", 1, 8, False, None, 11),
        Variable("smem", "shared", "b8", None, 1024, True, None, 12),
    ]


def test_entry_params_directives_and_pragmas():
    module = parse_ptx(PTX_HEADER + """.pragma "nounroll";
.visible .entry k(
    .param .align 64 .b8 tmap[128],
    .param .u64 .ptr .global .align 16 out,
    .param .u32 n)
.reqntid 384, 1, 1
.minnctapersm 1
.pragma "nounroll";
.maxnreg 240
.reqnctapercluster 2, 1, 1
.explicitcluster
{
    .pragma "nounroll";
    ret;
}
.entry empty()
{
}
""")
    k = module.entries["k"]
    assert k.params == [Variable("tmap", "param", "b8", 128, 64, line=6), Variable("out", "param", "u64", 1, 8, line=7),
                        Variable("n", "param", "u32", 1, 4, line=8)]
    assert k.directives == {"reqntid": (384, 1, 1), "minnctapersm": (1,), "maxnreg": (240,),
                            "reqnctapercluster": (2, 1, 1), "explicitcluster": ()}
    assert (k.line, k.instructions) == (5, [Instruction("ret", (), (), None, 17)])
    assert module.entries["empty"] == Entry("empty", [], line=19)


def test_register_declarations_and_body_variables():
    e = entry(".reg .pred %q, %s;\n.reg .f16x2 %x<2>;\n.shared .align 128 .b8 tile[4096];\n.local .b32 buf[4];")
    assert e.registers == {**{f"%r{i}": "b32" for i in range(8)}, **{f"%rd{i}": "b64" for i in range(8)},
                           **{f"%f{i}": "f32" for i in range(8)}, **{f"%p{i}": "pred" for i in range(4)},
                           "%h0": "b16", "%h1": "b16", "%q": "pred", "%s": "pred", "%x0": "f16x2", "%x1": "f16x2"}
    assert e.variables == [Variable("tile", "shared", "b8", 4096, 128, line=13),
                           Variable("buf", "local", "b32", 4, 4, line=14)]


# endregion
# region instructions and operands


@pytest.mark.parametrize("text,expected", [
    ("ret;", Instruction("ret", (), (), None, BODY_LINE)),
    ("exit;", Instruction("exit", (), (), None, BODY_LINE)),
    ("mov.u32 %r1, %tid.x;", Instruction("mov", ("u32",), (Reg("%r1"), Special("%tid.x")), None, BODY_LINE)),
    ("@%p1 add.s32 %r1, %r2, -3;",
     Instruction("add", ("s32",), (Reg("%r1"), Reg("%r2"), Imm(-3)), Guard(Reg("%p1")), BODY_LINE)),
    ("@!%p0 st.global.v4.f32 [%rd1+16], {%f1, %f2, %f3, %f4};",
     Instruction("st", ("global", "v4", "f32"), (Address(Reg("%rd1"), 16), Vector((Reg("%f1"), Reg("%f2"),
                 Reg("%f3"), Reg("%f4")))), Guard(Reg("%p0"), negated=True), BODY_LINE)),
    ("mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r5], %r6;",
     Instruction("mbarrier", ("try_wait", "parity", "shared::cta", "b64"), (Reg("%p1"), Address(Reg("%r5")),
                 Reg("%r6")), None, BODY_LINE)),
    ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd5, {%r2, %r3}],"
     " [%r4];",
     Instruction("cp", ("async", "bulk", "tensor", "2d", "shared::cluster", "global", "tile",
                        "mbarrier::complete_tx::bytes"),
                 (Address(Reg("%r1")), Address(Reg("%rd5"), coords=Vector((Reg("%r2"), Reg("%r3")))),
                  Address(Reg("%r4"))), None, BODY_LINE)),
    ("shfl.sync.idx.b32 %r1|%p1, %r2, 0, 31, -1;",
     Instruction("shfl", ("sync", "idx", "b32"), (Vector((Reg("%r1"), Reg("%p1"))), Reg("%r2"), Imm(0), Imm(31),
                 Imm(-1)), None, BODY_LINE)),
    ("elect.sync _|%p1, -1;", Instruction("elect", ("sync",), (Vector((Sink(), Reg("%p1"))), Imm(-1)), None,
                                          BODY_LINE)),
    ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r1,%r2,%r3,%r4}, [%r5];",
     Instruction("ldmatrix", ("sync", "aligned", "m8n8", "x4", "shared", "b16"), (Vector((Reg("%r1"), Reg("%r2"),
                 Reg("%r3"), Reg("%r4"))), Address(Reg("%r5"))), None, BODY_LINE)),
    ("mov.b64 %rd1, {%r1, %r2};", Instruction("mov", ("b64",), (Reg("%rd1"), Vector((Reg("%r1"), Reg("%r2")))),
                                               None, BODY_LINE)),
    ("mov.b32 {%h0, %h1}, %r1;", Instruction("mov", ("b32",), (Vector((Reg("%h0"), Reg("%h1"))), Reg("%r1")), None,
                                              BODY_LINE)),
    ("setp.lt.and.s32 %p1, %r1, %r2, !%p2;",
     Instruction("setp", ("lt", "and", "s32"), (Reg("%p1"), Reg("%r1"), Reg("%r2"), Negated(Reg("%p2"))), None,
                 BODY_LINE)),
    ("selp.b32 %r1, 1, 0, %p1;", Instruction("selp", ("b32",), (Reg("%r1"), Imm(1), Imm(0), Reg("%p1")), None,
                                              BODY_LINE)),
    ("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r3], 16384;",
     Instruction("mbarrier", ("arrive", "expect_tx", "shared::cta", "b64"), (Sink(), Address(Reg("%r3")),
                 Imm(16384)), None, BODY_LINE)),
    ("fence.proxy.async.shared::cta;", Instruction("fence", ("proxy", "async", "shared::cta"), (), None, BODY_LINE)),
    ("bar.sync 1, 256;", Instruction("bar", ("sync",), (Imm(1), Imm(256)), None, BODY_LINE)),
    ("setmaxnreg.inc.sync.aligned.u32 240;",
     Instruction("setmaxnreg", ("inc", "sync", "aligned", "u32"), (Imm(240),), None, BODY_LINE)),
    ("cvt.rn.bf16x2.f32 %r1, %f1, %f2;",
     Instruction("cvt", ("rn", "bf16x2", "f32"), (Reg("%r1"), Reg("%f1"), Reg("%f2")), None, BODY_LINE)),
    ("ex2.approx.ftz.f32 %f1, %f2;", Instruction("ex2", ("approx", "ftz", "f32"), (Reg("%f1"), Reg("%f2")), None,
                                                 BODY_LINE)),
    ("mov.u64 %rd1, out;", Instruction("mov", ("u64",), (Reg("%rd1"), Symbol("out")), None, BODY_LINE)),
    ("ld.param.u64 %rd1,\n    [out];", Instruction("ld", ("param", "u64"), (Reg("%rd1"), Address(Symbol("out"))),
                                                    None, BODY_LINE)),
], ids=lambda v: v.split(" ")[0] if isinstance(v, str) else "")
def test_instruction(text, expected):
    assert instruction(text) == expected


def test_wgmma_with_predicate_or_immediate_scale_d():
    accumulators = ", ".join(f"%d{i}" for i in range(64))
    mma = f"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{{accumulators}}}, %rd1, %rd2"
    e = entry(f".reg .f32 %d<64>;\n{mma}, %p1, 1, 1, 0, 1;\n{mma}, 1, -1, 1, 0, 1;")
    d = Vector(tuple(Reg(f"%d{i}") for i in range(64)))
    first, second = e.instructions
    assert (first.opcode, first.modifiers) == ("wgmma", ("mma_async", "sync", "aligned", "m64n128k16", "f32", "bf16",
                                                         "bf16"))
    assert first.name == "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"
    assert first.operands == (d, Reg("%rd1"), Reg("%rd2"), Reg("%p1"), Imm(1), Imm(1), Imm(0), Imm(1))
    assert second.operands == (d, Reg("%rd1"), Reg("%rd2"), Imm(1), Imm(-1), Imm(1), Imm(0), Imm(1))


@pytest.mark.parametrize("text,value", [
    ("42", Imm(42)), ("-7", Imm(-7)), ("0x1F", Imm(31)), ("0XffffffffU", Imm(0xFFFFFFFF)), ("017", Imm(15)),
    ("0b101", Imm(5)), ("10U", Imm(10)), ("0", Imm(0)), ("WARP_SZ", Imm(32)),
    ("0f3F800000", FloatImm(0x3F800000, 32)), ("-0f3F800000", FloatImm(0xBF800000, 32)),
    ("0d3FF0000000000000", FloatImm(0x3FF0000000000000, 64)), ("1.0", FloatImm(0x3FF0000000000000, 64)),
    ("1e-3", FloatImm(0x3F50624DD2F1A9FC, 64)), ("-2.5", FloatImm(0xC004000000000000, 64)),
])
def test_immediates(text, value):
    assert instruction(f"mov.b32 %r1, {text};").operands[1] == value


@pytest.mark.parametrize("text,address", [
    ("[%rd1]", Address(Reg("%rd1"))), ("[%rd1+16]", Address(Reg("%rd1"), 16)),
    ("[%rd1+-4]", Address(Reg("%rd1"), -4)), ("[%rd1 + 0x10]", Address(Reg("%rd1"), 16)),
    ("[smem+128]", Address(Symbol("smem"), 128)), ("[out]", Address(Symbol("out"))), ("[0x100]", Address(None, 256)),
    ("[%rd1, {%r1, %r2, %r3, %r4, %r5}]",
     Address(Reg("%rd1"), coords=Vector(tuple(Reg(f"%r{i}") for i in range(1, 6))))),
])
def test_addresses(text, address):
    e = entry(f"ld.shared.b32 %r0, {text};", before=".extern .shared .align 1024 .b8 smem[];\n")
    assert e.instructions[0].operands[1] == address


@pytest.mark.parametrize("name", ["%tid.x", "%ntid.y", "%ctaid.z", "%nctaid.x", "%laneid", "%warpid", "%nwarpid",
                                  "%smid", "%clock", "%clock64", "%globaltimer", "%dynamic_smem_size",
                                  "%total_smem_size", "%lanemask_eq", "%lanemask_lt", "%lanemask_le", "%lanemask_gt",
                                  "%lanemask_ge", "%envreg3", "%cluster_ctarank", "%cluster_ctaid.y", "%clusterid.x"])
def test_special_registers(name):
    assert instruction(f"mov.u32 %r1, {name};").operands[1] == Special(name)


def test_registers_need_no_percent_sign():
    """As in CUTLASS's inline assembly: `{ .reg .pred P1; ... @P1 bra DONE; ... }`."""
    e = entry("""{
    .reg .pred P1;
    .reg .b32 x;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 P1, [%r1], %r2;
    @!P1 bra.uni WAIT;
    selp.b32 %r3, 1, 0, P1;
    ld.param.u32 x, [out];
}""")
    assert [i.operands for i in e.instructions] == [
        (Reg("P1@1"), Address(Reg("%r1")), Reg("%r2")), (Label("WAIT", 0),), (Reg("%r3"), Imm(1), Imm(0), Reg("P1@1")),
        (Reg("x@1"), Address(Symbol("out")))]
    assert e.instructions[1].guard == Guard(Reg("P1@1"), negated=True)


def test_debug_directives_are_ignored():
    module = parse_ptx(PTX_HEADER + """	.file	1 "/tmp/k.py"
.file 2 "b.cu", 1700000000, 42
.entry k()
{
	.loc	1 9 0
	.loc 1 10 2, function_name $L__info_string0, inlined_at 1 3 4
	ret;
}
	.section	.debug_abbrev
	{
.b8 17
.b8 1 { }
	}
""")
    assert module.entries["k"].instructions == [Instruction("ret", (), (), None, 10)]


def test_declared_register_shadows_a_special_name():
    assert entry(".reg .b32 %laneid;\nmov.u32 %r1, %laneid;").instructions[0].operands[1] == Reg("%laneid")


# endregion
# region scopes and labels


def test_nested_scopes_rename_their_registers():
    e = entry("""mov.u32 %r1, 1;
{
    .reg .b32 %r1, %t;
    mov.u32 %r1, %r2;
    {
        .reg .b32 %r1;
        add.u32 %r1, %t, %r1;
    }
    mov.u32 %r2, %r1;
}
{
    .reg .b32 %t;
    mov.u32 %r1, %t;
}""")
    assert [i.operands for i in e.instructions] == [
        (Reg("%r1"), Imm(1)), (Reg("%r1@1"), Reg("%r2")), (Reg("%r1@2"), Reg("%t@1"), Reg("%r1@2")),
        (Reg("%r2"), Reg("%r1@1")), (Reg("%r1"), Reg("%t@3"))]
    assert {name: e.registers[name] for name in ("%r1@1", "%t@1", "%r1@2", "%t@3")} == dict.fromkeys(
        ("%r1@1", "%t@1", "%r1@2", "%t@3"), "b32")


def test_labels_resolve_innermost_first_and_forward():
    e = entry("""bra DONE;
L:
{
L:  add.u32 %r1, %r1, 1;
    @%p1 bra L;
    bra OUT;
}
{
L:  sub.u32 %r1, %r1, 1;
    @%p1 bra L;
}
OUT:
    bra.uni L;
DONE:""")
    targets = [(i.operands[0].name, i.operands[0].index) for i in e.instructions if i.opcode == "bra"]
    assert targets == [("DONE", 7), ("L", 1), ("OUT", 6), ("L", 4), ("L", 1)]
    assert e.instructions[6].name == "bra.uni"
    assert len(e.instructions) == 7  # DONE labels the end of the entry


SCOPE_ERRORS = [
    ("L:\nL: ret;", "label 'L' is already defined in this scope (line 11)", 12, 1),
    ("{\nIN: ret;\n}\nbra IN;", "branch to undefined label 'IN'", 14, 5),
    ("{\nA: ret;\n}\n{\nbra A;\n}", "branch to undefined label 'A'", 15, 5),
    ("bra NOWHERE;", "branch to undefined label 'NOWHERE'", 11, 5),
    ("{\n.reg .b32 %in;\n}\nmov.u32 %in, 0;", "register %in is not declared", 14, 9),
    (".reg .b32 %r1;", "register %r1 is declared twice in this scope", 11, 11),
]


@pytest.mark.parametrize("body,message,line,column", SCOPE_ERRORS)
def test_scope_errors(body, message, line, column):
    assert_error(module_text(body), message, line, column)


# endregion
# region diagnostics


ERRORS = [
    ("", "a PTX module starts with .version, found end of file", 1, 1),
    (".target sm_90a\n", "a PTX module starts with .version, found '.target'", 1, 1),
    (".version 8\n", "expected a version such as 8.0, found '8'", 1, 10),
    (".version 8.0\n.address_size 64\n", "expected .target, found '.address_size'", 2, 1),
    (PTX_HEADER + ".address_size 16", "unsupported module-scope directive '.address_size'", 4, 1),
    (PTX_HEADER + ".version 8.0\n", "unsupported module-scope directive '.version'", 4, 1),
    (PTX_HEADER + ".func f()\n{\n}\n.func f()\n{\n}\n", "function 'f' is defined twice (line 4)", 7, 7),
    (PTX_HEADER + ".global .b8 a[];\n", "the unsized array 'a' needs .extern or an initialiser", 4, 13),
    (PTX_HEADER + ".global .b8 a[2] = {1, 2, 3};\n", "3 initial values for 2 elements of 'a'", 4, 13),
    (PTX_HEADER + ".global .b8 a = 256;\n", "256 does not fit in .b8", 4, 17),
    (PTX_HEADER + ".global .u32 a = 1.5;\n", "a floating-point value cannot initialise .u32 'a'", 4, 18),
    (PTX_HEADER + ".global .f32 a[2] = {1.0, 2};\n", "an integer cannot initialise .f32 'a' (write a float literal)", 4,
     27),
    (PTX_HEADER + ".shared .b32 a = 1;\n", "a .shared variable cannot be initialised", 4, 14),
    (PTX_HEADER + ".global .align 3 .b32 a;\n", "alignment 3 is not a power of two", 4, 16),
    (PTX_HEADER + ".global .v4 .f32 a;\n", "vector variables (.v4) are not supported", 4, 9),
    (PTX_HEADER + ".global .b32 a;\n.global .b32 a;\n", "symbol 'a' is already declared (line 4)", 5, 14),
    (PTX_HEADER + ".extern .entry k()\n", "an .extern .entry (a declaration without body) is not supported", 4, 9),
    (PTX_HEADER + ".entry k(.param .u64 p) .maxntid 1 .maxntid 2 {\n}", ".maxntid is given twice", 4, 36),
    (PTX_HEADER + ".entry k() .blocksareclusters {\n}", "unsupported entry directive '.blocksareclusters'", 4, 12),
    (PTX_HEADER + ".entry k(.reg .u64 p) {\n}", "expected .param, found '.reg'", 4, 10),
    (PTX_HEADER + ".entry k() {\n}\n.entry k() {\n}", "entry 'k' is already declared (line 4)", 6, 8),
    (PTX_HEADER + ".entry k() {\n{\nret;\n}", "missing '}' closing the block opened at line 4", 7, 2),
    (PTX_HEADER + ".entry k() {\n/* open", "unterminated comment", 5, 1),
    (PTX_HEADER + ".entry k() {\nret; #", "unexpected character '#'", 5, 6),
    (module_text("add.u32 %r1, %r0, %r9;"), "register %r9 is not declared", 11, 19),
    (module_text("bogus.op.b32 %r1, %r0;"), "unknown instruction 'bogus'", 11, 1),
    (module_text("call f, (%r1);"), "call target 'f' is not a function: indirect calls are not supported", 11, 6),
    (module_text("brx.idx %r1, tab;"), "'brx' is not supported (indirect branches)", 11, 1),
    (module_text("ld..u32 %r1, [%rd1];"), "unexpected character '.'", 11, 3),
    (module_text("mov.u32 %r1, 1 mov.u32 %r2, 2;"), "expected ',' or ';' after an operand, found 'mov.u32'", 11, 16),
    (module_text("ret"), "expected ';' ending the instruction, found '}'", 12, 1),
    (module_text("mov.u32 %r1, nosuch;"), "unknown symbol 'nosuch'", 11, 14),
    (module_text("mov.u32 %r1, ;"), "expected an operand, found ';'", 11, 14),
    (module_text("mov.u32 %r1, 09;"), "'09' is not an octal number", 11, 14),
    (module_text("mov.f32 %f1, 0f3F80;"), "'0f3F80' needs exactly 8 hex digits after 0f", 11, 14),
    (module_text("ld.u32 %r1, [%rd1-4];"), "expected ']' closing the address (an offset is written '+N' or '+-N'), "
                                           "found '-'", 11, 18),
    (module_text("ld.u32 %r1, [%tid.x];"), "%tid.x cannot be the base of an address", 11, 14),
    (module_text("@%r1 ret;"), "'%r1' is not a .pred register", 11, 2),
    (module_text("and.pred %p1, %p2, !%r1;"), "'%r1' is not a .pred register", 11, 21),
    (module_text("bra %r1;"), "bra takes a label, not the register '%r1'", 11, 5),
    (module_text(".reg .v4 .f32 %v;"), "vector registers (.v4) are not supported", 11, 6),
    (module_text(".reg .b33 %v;"), "unknown register type '.b33'", 11, 6),
    (module_text(".reg .b128 %q<2>;"), "registers of type '.b128' are not supported by the PTX executor", 11, 6),
    (module_text(".reg .b32 %r.x;"), "'%r.x' is not a register name (an identifier such as %r)", 11, 11),
    (module_text(".maxnreg 4;"), "unsupported directive '.maxnreg' in an entry body", 11, 1),
    (module_text(".reg .b32 %big<65537>;"), "more than 65536 registers in one declaration", 11, 16),
    (PTX_HEADER + ".global .b8 a[1000000000] = {1};", "initialised data over 268435456 bytes: 'a'", 4, 13),
    (PTX_HEADER + ".global .f32 a = -1e39;", "the value does not fit in .f32", 4, 18),
]


@pytest.mark.parametrize("text,message,line,column", ERRORS, ids=[e[1][:40] for e in ERRORS])
def test_error(text, message, line, column):
    assert_error(text, message, line, column)


def test_error_text_names_source_and_points_at_the_column():
    assert str(error(module_text("  add.u32 %r1, %r0, %r9;"))) == (
        "test.ptx:11:21: error: register %r9 is not declared\n  add.u32 %r1, %r0, %r9;\n                    ^")


def test_damaged_input_gives_only_syntax_errors():
    """Truncations and single-character deletions of a real kernel parse or raise PtxSyntaxError, nothing else."""
    text = (ROOT / "tests" / "ptx_samples" / "gemm_k_loop.ptx").read_text()
    rng = random.Random(7)
    cuts = [rng.randrange(len(text)) for _ in range(150)]
    for damaged in [text[:cut] for cut in cuts] + [text[:cut] + text[cut + 1:] for cut in cuts]:
        try:
            parse_ptx(damaged)
        except PtxSyntaxError as e:
            assert 1 <= e.line <= damaged.count("\n") + 1 and e.column >= 1


# endregion
# region samples and Tessera's output


@pytest.mark.parametrize("path", [p for p in SAMPLES if p.name != "syntax_error.ptx"], ids=lambda p: p.stem)
def test_sample_round_trip(path):
    text = path.read_text()
    module = parse_ptx(text, str(path))
    assert_instructions_match_source(module, text)
    assert_round_trip(module)


@pytest.mark.parametrize("path", KERNELS, ids=lambda p: p.stem)
def test_executor_kernel_parses(path):
    """The executor's test kernels, written as nvcc, Triton and CUTLASS emit PTX."""
    text = path.read_text()
    module = parse_ptx(text, str(path))
    assert_instructions_match_source(module, text)
    if not any("@" in name for k in module.entries.values() for name in k.registers):  # no nested scope
        assert_round_trip(module)


def test_syntax_error_sample():
    """ptxas reports line 11 (unknown symbol '%r9') and line 12 (not an instruction); we stop at the first."""
    path = ROOT / "tests" / "ptx_samples" / "syntax_error.ptx"
    text = path.read_text()
    e = error(text)
    assert (e.message, e.line, e.column) == ("register %r9 is not declared", 11, 23)
    assert_error(checked(text).replace("%r9", "%r0"), "unknown instruction 'bogus'", 12, 5)


PIPELINES = {
    "gemm-specialized": ("gemm", "assign-swizzle,pipeline-loops{stages=2},convert-tile-to-sm90,canonicalize,cse,"
                                 "rematerialize-constants,warp-specialize,allocate-registers"),
    "flash-specialized": ("flash_attention", "assign-swizzle,pipeline-loops{stages=2},convert-tile-to-sm90,"
                                             "canonicalize,cse,rematerialize-constants,warp-specialize,"
                                             "allocate-registers"),
    "flash-single-stage": ("flash_attention", "assign-swizzle,convert-tile-to-sm90,canonicalize,cse,"
                                              "rematerialize-constants,allocate-registers"),
}


@pytest.fixture(scope="module")
def tessera_ptx() -> dict[str, str]:
    """Tessera's PTX for the examples, as `tessera-opt EXAMPLE -p PIPELINE -t ptx` prints it."""
    from tessera.ir import parse_module
    from tessera.passes import apply_pipeline
    from tessera.ptx.module import print_ptx
    from tessera.ptx.target import allocated_registers

    texts = {}
    for name, (example, pipeline) in PIPELINES.items():
        module = parse_module((ROOT / "examples" / f"{example}.mlir").read_text(), example)
        apply_pipeline(module, pipeline)
        texts[name] = print_ptx(module, registers=allocated_registers)
    return texts


@pytest.mark.parametrize("name", PIPELINES)
def test_tessera_output_round_trip(name, tessera_ptx):
    text = tessera_ptx[name]
    module = parse_ptx(text, name)
    (k,) = module.entries.values()
    assert module.version == (8, 0) and module.targets == ["sm_90a"] and module.address_size == 64
    assert module.variables == [Variable("smem", "shared", "b8", None, 1024, True, None, 5)]
    assert k.directives["minnctapersm"] == (1,) and len(k.directives["reqntid"]) == 3
    assert sum(1 for i in k.instructions if i.opcode == "wgmma" and i.modifiers[0] == "mma_async") > 0
    assert_instructions_match_source(module, text)
    assert_round_trip(module)


def test_five_thousand_lines_parse_in_well_under_two_seconds(tessera_ptx):
    text = tessera_ptx["flash-specialized"]
    header, _, entry_text = text.partition(".visible .entry ")
    copies = [f".visible .entry copy{i}_" + entry_text for i in range(3)]
    big = header + "".join(copies)
    assert big.count("\n") > 5000
    start = time.process_time()  # CPU time: the parser's own cost, not the machine's load
    module = parse_ptx(big)
    elapsed = time.process_time() - start
    assert len(module.entries) == 3
    assert elapsed < 1.5, f"{elapsed:.2f} s for {big.count(chr(10))} lines"


def assert_instructions_match_source(module: Module, text: str) -> None:
    """Each instruction line of `text` became one Instruction with that line, guard and mnemonic; each branch
    goes to the first instruction after a definition of its label in the same entry."""
    lines = [line.split("//")[0].strip() for line in text.split("\n")]
    source = {n: line for n, line in enumerate(lines, 1)
              if line.endswith(";") and not line.startswith((".", "{", "}")) and not re.match(r"[\w$]+:", line)}
    instructions = [i for k in module.entries.values() for i in k.instructions]
    assert {i.line: i for i in instructions}.keys() == source.keys()
    entries = list(module.entries.values())
    for k, end in zip(entries, [e.line for e in entries[1:]] + [len(lines) + 1]):
        labels: dict[str, list[int]] = {}
        for n in range(k.line, end):
            if m := re.match(r"([\w$]+):", lines[n - 1]):
                labels.setdefault(m.group(1), []).append(n)
        for i in k.instructions:
            guard = re.sub(r"@\d+ $", " ", format_guard(i))  # the source name of a scoped predicate
            assert re.match(re.escape(guard + i.name) + r"[\s;]", source[i.line]), (i, source[i.line])
            if i.opcode == "bra":
                label = i.operands[0]
                starts = [next((n for n, j in enumerate(k.instructions) if j.line > line), len(k.instructions))
                          for line in labels[label.name]]
                assert label.index in starts, (i, starts)


def assert_round_trip(module: Module) -> None:
    """Printing the module as PTX and parsing it again gives the same data (lines aside)."""
    again = parse_ptx(format_module(module))
    assert [replace(v, line=0) for v in again.variables] == [replace(v, line=0) for v in module.variables]
    for mine, theirs in zip(module.entries.values(), again.entries.values(), strict=True):
        assert [replace(v, line=0) for v in theirs.params] == [replace(v, line=0) for v in mine.params]
        assert (theirs.name, theirs.registers, theirs.directives) == (mine.name, mine.registers, mine.directives)
        assert [replace(v, line=0) for v in theirs.variables] == [replace(v, line=0) for v in mine.variables]
        assert [replace(i, line=0) for i in theirs.instructions] == [replace(i, line=0) for i in mine.instructions]


def format_module(module: Module) -> str:
    """PTX text for `module` (entries without nested scopes), one statement a line."""
    lines = [f".version {module.version[0]}.{module.version[1]}", f".target {', '.join(module.targets)}",
             f".address_size {module.address_size}"]
    lines += [format_variable(v) for v in module.variables]
    for k in module.entries.values():
        params = ", ".join(format_variable(p)[:-1] for p in k.params)
        lines.append(f".entry {k.name}({params})")
        lines += [f".{name} {', '.join(map(str, values))}" for name, values in k.directives.items()]
        lines.append("{")
        lines += [f".reg .{type_} {name};" for name, type_ in k.registers.items()]
        lines += [format_variable(v) for v in k.variables]
        labels = {(op.index, op.name) for i in k.instructions for op in i.operands if isinstance(op, Label)}
        for index, i in enumerate(k.instructions + [None]):
            lines += [f"{name}:" for at, name in sorted(labels) if at == index]
            if i is not None:
                lines.append(f"{format_guard(i)}{i.name} {', '.join(format_operand(op) for op in i.operands)};")
        lines.append("}")
    return "\n".join(lines) + "\n"


def format_guard(i: Instruction) -> str:
    return "" if i.guard is None else f"@{'!' if i.guard.negated else ''}{i.guard.predicate.name} "


def format_variable(v: Variable) -> str:
    extern = ".extern " if v.extern else ""
    size = "" if v.count == 1 else "[]" if v.count is None else f"[{v.count}]"
    init = ""
    if v.init is not None:
        width = v.element_bytes
        words = [int.from_bytes(v.init[i:i + width], "little") for i in range(0, len(v.init), width)]
        prefix = {"f32": "0f%08X", "f64": "0d%016X"}.get(v.type, "%d")
        init = " = {" + ", ".join(prefix % w for w in words) + "}"
    return f"{extern}.{v.space} .align {v.align} .{v.type} {v.name}{size}{init};"


def format_operand(op) -> str:
    if isinstance(op, (Reg, Special, Symbol, Label)):
        return op.name
    if isinstance(op, Imm):
        return str(op.value)
    if isinstance(op, FloatImm):
        return f"0f{op.bits:08X}" if op.width == 32 else f"0d{op.bits:016X}"
    if isinstance(op, Sink):
        return "_"
    if isinstance(op, Negated):
        return "!" + op.operand.name
    if isinstance(op, Vector):
        return "{" + ", ".join(format_operand(e) for e in op.elements) + "}"
    assert isinstance(op, Address)
    base = "" if op.base is None else op.base.name
    if op.coords is not None:
        return f"[{base}, {format_operand(op.coords)}]"
    return f"[{base}+{op.offset}]" if base else f"[{op.offset}]"


# endregion


@pytest.mark.parametrize("character", ["\u00e9", "\u0663", "\x00"])
def test_a_character_ptxas_refuses_is_a_syntax_error_with_its_place(character):
    """PTX is ASCII: ptxas refuses another character (or a NUL) anywhere, comments included, and so does the
    executor, at its line and column."""
    text = f".version 8.3\n.target sm_90a\n// caf{character}\n.address_size 64\n"
    with pytest.raises(PtxSyntaxError, match=rf"U\+{ord(character):04X} is not ASCII") as caught:
        parse_ptx(text, "k.ptx")
    assert "k.ptx:3:7" in str(caught.value)
