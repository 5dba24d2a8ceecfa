"""The PTX printer (`tessera.ptx`): what it prints computes what the Target IR computes, and ptxas accepts it.

- Semantics: small Target IR kernels (loops with swapped carried values, if/while with results, integer
  divisions of negative numbers, compares, selects, casts, float max/min with NaN and -0, cvt packing, masked
  global loads and stores) run in the CTA simulator (`tessera.interpreters.sm90`) and, printed, in
  `PtxThread` below, a one-thread evaluator of the PTX subset these kernels print as; the outputs must be the
  same bits. The same with register assignments that reuse registers (in-place ops, permutations), which
  exercises the printer's parallel assignment.
- Kernels: every configuration (flash attention head_dim 64/128 x causal x bf16/f16, two- and three-pass
  attention, GEMM bf16/f16) prints byte-identically twice and is accepted by `ptxas -arch=sm_90a -v` with no
  warning (none about wgmma serialization).
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from tessera import passes, toolchain
from tessera.interpreters.sm90 import run_target_kernel
from tessera.ir import make_context
from tessera.ir.parser import TesseraParser
from tessera.ptx import PtxPrintError, PtxTarget, print_ptx, register
from tessera.ptx.machine import descriptor_of_address
from tessera.sm90 import facts
from tessera.sm90.nan import CANONICAL_NAN_BITS

from conftest import build_kernel, require_tool

LIT_DIR = Path(__file__).parent / "lit" / "ptx"

# region A one-thread PTX evaluator ------------------------------------------------------------------------------


def _f32(bits: int) -> np.float32:
    return np.array(bits & 0xFFFFFFFF, np.uint32).view(np.float32)[()]


def _bits(x) -> int:
    return int(np.array(x, np.float32).view(np.uint32))


def _signed(value: int, width: int) -> int:
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value


def _split_operands(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for c in text:
        if c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += c
    return parts + [current.strip()] if current.strip() else parts


def _max_f32(a, b, nan: bool):
    if np.isnan(a) or np.isnan(b):
        return np.float32("nan") if nan or (np.isnan(a) and np.isnan(b)) else (b if np.isnan(a) else a)
    if a == b == 0:
        return a if not np.signbit(a) else b  # +0 > -0
    return max(a, b)


def _min_f32(a, b, nan: bool):
    if np.isnan(a) or np.isnan(b):
        return np.float32("nan") if nan or (np.isnan(a) and np.isnan(b)) else (b if np.isnan(a) else a)
    if a == b == 0:
        return a if np.signbit(a) else b
    return min(a, b)


_FLOAT_SETP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
               "ge": np.greater_equal}


@dataclass
class PtxThread:
    """Runs one thread of a PTX `.entry`, instruction by instruction, as the PTX ISA defines the subset the
    printer uses for scalar code (integer/float/predicate ALU, setp/selp, cvt, branches, ld.param,
    ld/st.global on the simulator's memory layout). Registers hold raw bits; predicates bools."""

    ptx: str
    entry: str
    params: dict[str, int]
    memory: list[np.ndarray]
    tid: int
    regs: dict[str, object] = field(default_factory=dict)
    steps: int = 0

    def run(self, max_steps: int = 200_000) -> None:
        code, labels = self._parse()
        pc = 0
        while pc < len(code):
            self.steps += 1
            if self.steps > max_steps:
                raise AssertionError("PTX thread does not terminate")
            guard, opcode, operands = code[pc]
            pc += 1
            if guard is not None:
                negate, name = guard
                if bool(self.regs[name]) == negate:
                    continue
            if opcode == "bra":
                pc = labels[operands[0]]
            elif opcode == "ret":
                return
            else:
                self._execute(opcode, operands)

    def _parse(self):
        body = self.ptx.split(f".entry {self.entry}(", 1)[1].split("{", 1)[1]
        body = body[: body.index("\n}")]
        code, labels = [], {}
        for raw in body.splitlines():
            line = raw.split("//", 1)[0].strip()
            if not line or line.startswith(".reg"):
                continue
            if line.endswith(":"):
                labels[line[:-1]] = len(code)
                continue
            line = line.rstrip(";")
            guard = None
            if line.startswith("@"):
                predicate, line = line.split(None, 1)
                guard = (predicate[1] == "!", predicate.lstrip("@!"))
            opcode, _, rest = line.partition(" ")
            code.append((guard, opcode, _split_operands(rest)))
        return code, labels

    # -- operands
    def _value(self, text: str, width: int = 32) -> int:
        if text.startswith("%"):
            special = {"%tid.x": self.tid, "%tid.y": 0, "%tid.z": 0, "%ctaid.x": 0, "%ctaid.y": 0, "%ctaid.z": 0,
                       "%laneid": self.tid % 32}
            if text in special:
                return special[text]
            value = self.regs[text]
            return int(value)
        if text.startswith("0f"):
            return int(text[2:], 16)
        return int(text, 0) & ((1 << width) - 1)

    def _float(self, text: str) -> np.float32:
        return _f32(self._value(text))

    def _address(self, text: str) -> tuple[int, int]:
        inner = text.strip("[]")
        base, _, offset = inner.partition("+")
        address = self._value(base, 64) + (int(offset) if offset else 0)
        tensor = (address >> 40) - 1
        return tensor, address & ((1 << 40) - 1)

    # -- instructions
    def _execute(self, opcode: str, ops: list[str]) -> None:
        parts = opcode.split(".")
        name, typ = parts[0], parts[-1]
        width = {"pred": 1}.get(typ, int(re.sub(r"\D", "", typ) or 32))
        d = ops[0] if ops else None
        if name == "mov":
            self.regs[d] = bool(self._value(ops[1])) if typ == "pred" else self._value(ops[1], width)
        elif name == "ld" and parts[1] == "param":
            self.regs[d] = self.params[ops[1].strip("[]")]
        elif name == "cvta":
            self.regs[d] = self._value(ops[1], 64)
        elif name == "st" and parts[1] == "global":
            tensor, offset = self._address(ops[0])
            self.memory[tensor].reshape(-1).view(np.uint8)[offset: offset + 4] = np.frombuffer(
                struct.pack("<I", self._value(ops[1]) & 0xFFFFFFFF), np.uint8)
        elif name == "ld" and parts[1] == "global":
            tensor, offset = self._address(ops[1])
            self.regs[d] = struct.unpack("<I", self.memory[tensor].reshape(-1).view(np.uint8)[offset: offset + 4].tobytes())[0]
        elif typ == "pred" and name in ("and", "or", "xor", "not"):
            a = bool(self.regs[ops[1]])
            b = bool(self.regs[ops[2]]) if name != "not" else None
            self.regs[d] = {"and": lambda: a and b, "or": lambda: a or b, "xor": lambda: a != b, "not": lambda: not a}[name]()
        elif name == "setp":
            self.regs[d] = self._setp(parts[1], typ, ops[1], ops[2])
        elif name == "selp":
            self.regs[d] = self._value(ops[1], width) if self.regs[ops[3]] else self._value(ops[2], width)
        elif name == "cvt":
            self.regs[d] = self._cvt(parts[1:], ops[1], ops[2] if len(ops) > 2 else None)
        elif typ == "f32":
            self.regs[d] = _bits(self._float_op(name, parts, [self._float(o) for o in ops[1:]]))
        else:
            self.regs[d] = self._integer(name, typ, width, [self._value(o, width) for o in ops[1:]])

    def _setp(self, cmp: str, typ: str, a: str, b: str) -> bool:
        if typ == "f32":
            x, y = self._float(a), self._float(b)
            unordered = bool(np.isnan(x) or np.isnan(y))
            if cmp == "num":
                return not unordered
            if cmp == "nan":
                return unordered
            if cmp.endswith("u"):
                return unordered or bool(_FLOAT_SETP[cmp[:-1]](x, y))
            return not unordered and bool(_FLOAT_SETP[cmp](x, y))
        width = int(typ[1:])
        x, y = self._value(a, width), self._value(b, width)
        if typ[0] == "s":
            x, y = _signed(x, width), _signed(y, width)
        return {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y}[cmp]

    def _cvt(self, parts: list[str], a: str, b: str | None) -> int:
        if parts[:2] in (["rn", "bf16x2"], ["rn", "f16x2"]):
            dtype = ml_dtypes.bfloat16 if parts[1] == "bf16x2" else np.float16
            hi = int(np.array(self._float(a)).astype(dtype).view(np.uint16))
            lo = int(np.array(self._float(b)).astype(dtype).view(np.uint16))
            return hi << 16 | lo  # first source -> upper half [P#...-cvt]
        if parts[0] == "rn" and parts[1] == "f32":
            width = int(parts[2][1:])
            value = self._value(a, width)
            value = _signed(value, width) if parts[2][0] == "s" else value
            return _bits(np.float32(value))
        if parts[0] == "rzi":
            width = int(parts[1][1:])
            x = float(self._float(a))
            if np.isnan(x):
                return 0
            lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if parts[1][0] == "s" else (0, (1 << width) - 1)
            return int(min(max(np.trunc(x), lo), hi)) & ((1 << width) - 1)
        dst, src = parts
        value = self._value(a, int(src[1:]))
        if src[0] == "s":
            value = _signed(value, int(src[1:]))
        return value & ((1 << int(dst[1:])) - 1)

    @classmethod
    def _float_op(cls, name: str, parts: list[str], x: list[np.float32]) -> np.float32:
        """The f32 result of `name`; arithmetic and max/min with a NaN result give the canonical NaN
        (`tessera.sm90.nan`, NVIDIA's: no payload of an input), neg and abs the input's bits."""
        result = cls._float_value(name, parts, x)
        if name not in ("neg", "abs") and np.isnan(result):
            return np.array(CANONICAL_NAN_BITS["f32"], np.uint32).view(np.float32)[()]
        return result

    @staticmethod
    def _float_value(name: str, parts: list[str], x: list[np.float32]) -> np.float32:
        with np.errstate(all="ignore"):
            if name == "add":
                return x[0] + x[1]
            if name == "sub":
                return x[0] - x[1]
            if name == "mul":
                return x[0] * x[1]
            if name == "div":
                return x[0] / x[1]
            if name == "fma":
                return np.float32(np.float64(x[0]) * np.float64(x[1]) + np.float64(x[2]))
            if name == "neg":
                return -x[0]
            if name == "abs":
                return np.abs(x[0])
            if name == "max":
                return _max_f32(x[0], x[1], "NaN" in parts)
            if name == "min":
                return _min_f32(x[0], x[1], "NaN" in parts)
        raise AssertionError(f"PtxThread: no f32 {name}")

    @staticmethod
    def _integer(name: str, typ: str, width: int, v: list[int]) -> int:
        mask = (1 << width) - 1
        signed = typ[0] == "s"
        a, b = (_signed(x, width) if signed else x for x in (v + [0, 0])[:2])
        if name in ("div", "rem"):
            q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # truncating division
            return (q if name == "div" else a - q * b) & mask
        if name in ("shl", "shr"):
            amount = min(v[1], width)
            if name == "shl":
                return (v[0] << amount) & mask
            return (_signed(v[0], width) >> amount if signed else v[0] >> amount) & mask
        ops = {"add": a + b, "sub": a - b, "mul": a * b, "and": v[0] & v[1], "or": v[0] | v[1],
               "xor": v[0] ^ v[1], "min": min(a, b), "max": max(a, b), "not": ~v[0]}
        return ops[name] & mask


# endregion
# region Running a small kernel both ways -------------------------------------------------------------------------


def _module(text: str) -> ModuleOp:
    module = TesseraParser(make_context(), text).parse_module()
    module.verify()
    return module


def _kernel(module: ModuleOp) -> func.FuncOp:
    (fn,) = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    return fn


def _both_ways(text: str, outputs: list[np.ndarray], sizes: dict[str, int], registers=None) -> list[np.ndarray]:
    """Run the kernel in the CTA simulator and, printed, thread by thread in PtxThread; return the simulator's
    outputs after checking the PTX's are the same bits."""
    module = _module(text)
    fn = _kernel(module)
    simulated = [o.copy() for o in outputs]
    run_target_kernel(fn, simulated, sizes)
    ptx = print_ptx(module, registers)
    threads = fn.attributes["sm90.kernel"].data["threads"].value.data
    evaluated = [o.copy() for o in outputs]
    params = {}
    for arg, name in zip(fn.body.blocks.first.args, re.findall(r"\.param \.u(?:32|64) (\w+)", ptx)):
        attrs = fn.arg_attrs.data[arg.index].data
        params[name] = ((attrs["sm90.source"].value.data + 1) << 40) if "sm90.source" in attrs else sizes[attrs["sm90.size"].data]
    for tid in range(threads):
        PtxThread(ptx, fn.sym_name.data, params, evaluated, tid).run()
    for sim, ev in zip(simulated, evaluated):
        assert sim.view(np.uint8).tobytes() == ev.view(np.uint8).tobytes(), f"simulator:\n{sim}\nPTX:\n{ev}\n{ptx}"
    return simulated


def _custom_kernel(name: str, body: str, out_type: str = "i32", lanes: int = 4, extra_args: str = "") -> str:
    """A 32-thread kernel storing `lanes` registers %vals (vector<lanes x out_type>) per thread at out[tid]."""
    return f"""
func.func @{name}(%out: i64 {{sm90.source = 0 : i64, tile.dims = #tile.dims<32, {lanes}>, tile.role = "out"}},
                  %n: index {{sm90.size = "n"}}{extra_args})
    attributes {{tile.kernel = {{kind = "custom"}}, tile.grid = #tile.dims<1>,
                 sm90.kernel = {{threads = 32 : i64, smem_bytes = 0 : i64}}}} {{
  %tid = sm90.special "tid.x" : index
{body}
  %t64 = arith.index_cast %tid : index to i64
  %row = arith.constant {4 * lanes} : i64
  %base = arith.muli %t64, %row : i64
  %bv = vector.broadcast %base : i64 to vector<{lanes}xi64>
  %lane = arith.constant dense<[{", ".join(str(4 * i) for i in range(lanes))}]> : vector<{lanes}xi64>
  %offs = arith.addi %bv, %lane : vector<{lanes}xi64>
  %all = arith.constant dense<true> : vector<{lanes}xi1>
  sm90.st_global %out[%offs], %vals, %all : vector<{lanes}xi64>, vector<{lanes}x{out_type}>, vector<{lanes}xi1>
  func.return
}}
"""


def _pack(scalars: list[str], ty: str = "i32") -> str:
    """IR gathering i32 (or f32) scalars into %vals."""
    lines = [f"  %e{i} = vector.broadcast {s} : {ty} to vector<1x{ty}>" for i, s in enumerate(scalars)]
    acc = "%e0"
    for i in range(1, len(scalars)):
        lines.append(f"  %g{i} = vector.shuffle {acc}, %e{i} [{', '.join(map(str, range(i + 1)))}] : "
                     f"vector<{i}x{ty}>, vector<1x{ty}>")
        acc = f"%g{i}"
    lines.append(f"  %vals = vector.shuffle {acc}, {acc} [{', '.join(map(str, range(len(scalars))))}] : "
                 f"vector<{len(scalars)}x{ty}>, vector<{len(scalars)}x{ty}>")
    return "\n".join(lines)


def _to_i32(names: list[str]) -> tuple[str, list[str]]:
    cast = [f"{n.replace('#', '_')}_i" for n in names]
    lines = [f"  {c} = arith.index_cast {n} : index to i32" for c, n in zip(cast, names)]
    return "\n".join(lines), cast


def _index_kernel(name: str, body: str, results: list[str]) -> str:
    casts, scalars = _to_i32(results)
    return _custom_kernel(name, f"{body}\n{casts}\n{_pack(scalars)}", lanes=len(results))


# endregion
# region Semantics: control flow ------------------------------------------------------------------------------------

LOOP_SWAP = _index_kernel("loop_swap", """
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %a0 = arith.subi %tid, %c16 : index
  %b0 = arith.constant 7 : index
  %a, %b, %k = scf.for %i = %c0 to %n step %c1 iter_args(%x = %a0, %y = %b0, %z = %c0) -> (index, index, index) {
    %s = arith.addi %z, %i : index
    scf.yield %y, %x, %s : index, index, index
  }""", ["%a", "%b", "%k"])


@pytest.mark.parametrize("trips", [0, 1, 2, 5])
def test_loop_carried_values_swap(trips):
    """`yield %y, %x` swaps the carried registers at every latch (a cycle: through a scratch register); the
    loop runs `trips` times (none for 0)."""
    out = _both_ways(LOOP_SWAP, [np.zeros((32, 3), np.int32)], {"n": trips})
    tid = np.arange(32)
    a, b = (tid - 16, np.full(32, 7)) if trips % 2 == 0 else (np.full(32, 7), tid - 16)
    assert (out[0] == np.stack([a, b, np.full(32, sum(range(trips)))], axis=1)).all()


NESTED = _index_kernel("nested_control", """
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %odd = arith.remui %tid, %c2 : index
  %is_odd = arith.cmpi eq, %odd, %c1 : index
  %r:2 = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %tid, %cnt = %c0) -> (index, index) {
    %it = arith.addi %i, %tid : index
    %m = arith.remsi %it, %c3 : index
    %sel = arith.cmpi eq, %m, %c0 : index
    %v, %w = scf.if %sel -> (index, index) {
      %t = arith.muli %acc, %c2 : index
      scf.yield %t, %cnt : index, index
    } else {
      %u = arith.subi %acc, %i : index
      %cnt2 = arith.addi %cnt, %c1 : index
      scf.yield %u, %cnt2 : index, index
    }
    scf.yield %v, %w : index, index
  }
  %only_odd = scf.if %is_odd -> (index) {
    scf.yield %r#0 : index
  } else {
    scf.yield %c3 : index
  }
  %fin, %fin_steps = scf.while (%x = %tid, %steps = %c0) : (index, index) -> (index, index) {
    %big = arith.cmpi slt, %x, %n : index
    scf.condition(%big) %x, %steps : index, index
  } do {
  ^bb0(%x2: index, %s2: index):
    %x3 = arith.addi %x2, %c3 : index
    %s3 = arith.addi %s2, %c1 : index
    scf.yield %x3, %s3 : index, index
  }""", ["%r#0", "%r#1", "%only_odd", "%fin"])


@pytest.mark.parametrize("n", [0, 4, 40])
def test_if_and_while_with_results(n):
    """scf.if with results in a loop (divergent: the branch depends on the trip and the thread), an if/else
    yielding a loop result or a constant, and a while loop whose trip count differs per thread, forwarding
    the value it exits with."""
    out = _both_ways(NESTED, [np.zeros((32, 4), np.int32)], {"n": n})
    assert (out[0][:, 3] == np.where(np.arange(32) < n, np.arange(32) + 3 * -(-(n - np.arange(32)) // 3),
                                     np.arange(32))).all()


# endregion
# region Semantics: integers ----------------------------------------------------------------------------------------

INTEGER_OPS = ["ceildivsi", "floordivsi", "divsi", "remsi", "ceildivui", "divui", "remui", "maxsi", "minsi",
               "maxui", "minui", "shli", "shrsi", "shrui", "subi", "muli", "andi", "ori", "xori"]


@pytest.mark.parametrize("divisor", [7, -3, 1, 8])
def test_integer_arithmetic(divisor):
    """Signed and unsigned divisions (ceildiv rounding towards +inf for negative operands too), min/max,
    shifts, wrapping arithmetic, on index values -16..15 by the thread. Unsigned division and remainder by 1
    and 8 print as shr.u32/and.b32."""
    names = [f"%{op}" for op in INTEGER_OPS]
    body = "\n".join([
        "  %c16 = arith.constant 16 : index",
        "  %a = arith.subi %tid, %c16 : index",
        f"  %b = arith.constant {divisor} : index",
        "  %c2 = arith.constant 2 : index",
    ] + [f"  %{op} = arith.{op} %a, {'%c2' if op.startswith('sh') else '%b'} : index" for op in INTEGER_OPS])
    out = _both_ways(_index_kernel("integers", body, names), [np.zeros((32, len(names)), np.int32)], {"n": 0})
    a = np.arange(32) - 16
    expected_ceil = -(-a // divisor)
    assert (out[0][:, 0] == expected_ceil).all()
    assert (out[0][:, 1] == a // divisor).all()


def test_compares_selects_and_casts():
    """cmpi with every predicate (signed and unsigned), select on a scalar i1, i1 logic, extui/extsi/trunci,
    i64 arithmetic and casts between index, i32 and i64."""
    predicates = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
    lines = ["  %c16 = arith.constant 16 : index", "  %a = arith.subi %tid, %c16 : index",
             "  %b = arith.constant 3 : index", "  %m1 = arith.constant -1 : index"]
    results = []
    for p in predicates:
        lines += [f"  %{p} = arith.cmpi {p}, %a, %b : index", f"  %{p}_m = arith.cmpi {p}, %a, %m1 : index",
                  f"  %{p}_x = arith.xori %{p}, %{p}_m : i1",
                  f"  %{p}_s = arith.select %{p}_x, %a, %b : index"]
        results.append(f"%{p}_s")
    lines += [
        "  %t = arith.constant true",
        "  %nt = arith.xori %slt, %t : i1",
        "  %both = arith.andi %nt, %ne : i1",
        "  %either = arith.ori %both, %eq : i1",
        "  %ext_s = arith.extsi %either : i1 to i32",
        "  %ext_u = arith.extui %either : i1 to i32",
        "  %ext_s_x = arith.index_cast %ext_s : i32 to index",
        "  %ext_u_x = arith.index_cast %ext_u : i32 to index",
        "  %wide = arith.index_cast %a : index to i64",
        "  %big = arith.constant 4294967296 : i64",
        "  %sum = arith.addi %wide, %big : i64",
        "  %neg = arith.constant -5 : i64",
        "  %prod = arith.muli %sum, %neg : i64",
        "  %narrow = arith.trunci %prod : i64 to i32",
        "  %narrow_x = arith.index_cast %narrow : i32 to index",
        "  %is_big = arith.cmpi sgt, %sum, %big : i64",
        "  %bit = arith.trunci %prod : i64 to i1",
        "  %bit_x = arith.extui %bit : i1 to i32",
        "  %bit_xx = arith.index_cast %bit_x : i32 to index",
        "  %pick = arith.select %is_big, %narrow_x, %bit_xx : index",
    ]
    results += ["%ext_s_x", "%ext_u_x", "%narrow_x", "%pick"]
    _both_ways(_index_kernel("compares", "\n".join(lines), results), [np.zeros((32, len(results)), np.int32)],
               {"n": 0})


# endregion
# region Semantics: floats ------------------------------------------------------------------------------------------


def test_float_arithmetic_and_compares():
    """maximumf/minimumf propagate NaN and order -0 < +0, maxnumf/minnumf drop a NaN; fma rounds once;
    sm90.setp "ne" is true on NaN, cmpf ordered/unordered as named; selp; negf; bitcasts."""
    body = """
  %c8 = arith.constant 8 : index
  %i = arith.subi %tid, %c8 : index
  %i32 = arith.index_cast %i : index to i32
  %x = arith.sitofp %i32 : i32 to f32
  %tenth = arith.constant 0.1 : f32
  %y = arith.mulf %x, %tenth : f32
  %nan = arith.constant 0x7FC00000 : f32
  %negzero = arith.constant -0.0 : f32
  %zero = arith.constant 0.0 : f32
  %c0 = arith.constant 0 : index
  %is_zero = arith.cmpi eq, %i, %c0 : index
  %c3 = arith.constant 3 : index
  %is_three = arith.cmpi eq, %i, %c3 : index
  %z1 = arith.select %is_zero, %negzero, %y : f32
  %z = arith.select %is_three, %nan, %z1 : f32
  %mx = arith.maximumf %z, %zero : f32
  %mn = arith.minimumf %z, %zero : f32
  %mxn = arith.maxnumf %z, %zero : f32
  %mnn = arith.minnumf %z, %zero : f32
  %fma = math.fma %y, %y, %tenth : f32
  %sum = arith.addf %y, %tenth : f32
  %neg = arith.negf %sum : f32
  %ne = sm90.setp "ne" %z, %tenth : f32 -> i1
  %lt = sm90.setp "lt" %z, %tenth : f32 -> i1
  %ult = arith.cmpf ult, %z, %tenth : f32
  %one = arith.constant 1.0 : f32
  %two = arith.constant 2.0 : f32
  %s1 = sm90.selp %ne, %one, %zero : i1, f32
  %s2 = sm90.selp %lt, %two, %s1 : i1, f32
  %s3 = arith.select %ult, %neg, %s2 : f32
  %trunc = arith.fptosi %fma : f32 to i32
  %back = arith.sitofp %trunc : i32 to f32
"""
    scalars = ["%mx", "%mn", "%mxn", "%mnn", "%fma", "%neg", "%s3", "%back"]
    text = _custom_kernel("floats", body + _pack(scalars, "f32"), out_type="f32", lanes=len(scalars))
    out = _both_ways(text, [np.zeros((32, len(scalars)), np.float32)], {"n": 0})
    assert np.isnan(out[0][11, 0]) and out[0][11, 2] == 0.0  # maximumf propagates NaN, maxnumf does not
    assert np.signbit(out[0][8, 1]) and not np.signbit(out[0][8, 0])  # min(-0, +0) = -0, max = +0


@pytest.mark.parametrize("half", ["bf16", "f16"])
def test_cvt_pack_puts_the_even_element_low(half):
    """sm90.cvt_pack: (x[2i], x[2i+1]) -> one register, x[2i] in bits 15:0 (`cvt` takes the odd one first)."""
    body = f"""
  %i32 = arith.index_cast %tid : index to i32
  %x = arith.sitofp %i32 : i32 to f32
  %third = arith.constant 0.333333343 : f32
  %y = arith.mulf %x, %third : f32
  %v = vector.broadcast %y : f32 to vector<4xf32>
  %k = arith.constant dense<[1.0, -2.5, 1000.25, 0.0078125]> : vector<4xf32>
  %w = arith.mulf %v, %k : vector<4xf32>
  %vals = sm90.cvt_pack %w type "{half}" : vector<4xf32> -> vector<2xi32>
"""
    out = _both_ways(_custom_kernel(f"pack_{half}", body, lanes=2), [np.zeros((32, 2), np.int32)], {"n": 0})
    x = (np.arange(32, dtype=np.float32) * np.float32(0.333333343))[:, None] * np.array(
        [1.0, -2.5, 1000.25, 0.0078125], np.float32)
    expected = facts.cvt_rn_x2(x[:, 1::2], x[:, 0::2], half).astype(np.uint32).view(np.int32)
    assert (out[0] == expected).all()


def test_masked_global_load_gives_zero():
    """ld_global: registers whose mask bit is clear read 0; the others read their word (i32 offsets)."""
    body = """
  %t32 = arith.index_cast %tid : index to i32
  %c8 = arith.constant 8 : i32
  %rowb = arith.muli %t32, %c8 : i32
  %rv = vector.broadcast %rowb : i32 to vector<2xi32>
  %lanes = arith.constant dense<[0, 4]> : vector<2xi32>
  %o = arith.addi %rv, %lanes : vector<2xi32>
  %c2 = arith.constant 2 : i32
  %odd = arith.remui %t32, %c2 : i32
  %z = arith.constant 0 : i32
  %is_odd = arith.cmpi ne, %odd, %z : i32
  %ov = vector.broadcast %is_odd : i1 to vector<2xi1>
  %first = arith.constant dense<[true, false]> : vector<2xi1>
  %m = arith.ori %ov, %first : vector<2xi1>
  %vals = sm90.ld_global %src[%o], %m : vector<2xi32>, vector<2xi1> -> vector<2xi32>
"""
    text = _custom_kernel("masked_load", body, lanes=2, extra_args=(
        ', %src: i64 {sm90.source = 1 : i64, tile.dims = #tile.dims<32, 2>, tile.role = "in"}'))
    src = np.arange(64, dtype=np.int32).reshape(32, 2) + 100
    out = _both_ways(text, [np.zeros((32, 2), np.int32), src], {"n": 0})
    assert (out[0][:, 0] == src[:, 0]).all()
    assert (out[0][:, 1] == np.where(np.arange(32) % 2 == 1, src[:, 1], 0)).all()
    ptx = print_ptx(_module(text))
    loads = re.findall(r"mov\.b32 (%r\d+), 0;\n\s*@%p\d+ ld\.global\.b32 (%r\d+), ", ptx)
    # Each register is set unconditionally before its predicated load: ptxas 13.3+ does not take a
    # complementary `@p ld d; @!p mov d, 0` pair for a definition of d and keeps d's old value live.
    assert len(loads) == 2 and all(d == e for d, e in loads)
    assert not re.search(r"@!%p\d+ mov", ptx)


# endregion
# region Semantics under register assignments --------------------------------------------------------------------


def test_in_place_and_permuted_assignments():
    """With an assignment in which each result takes its dying operand's registers in another order (register
    i of the result is register i+1 of the operand), the printer orders the per-register instructions so that
    no register is overwritten before it is read, breaking the cycle with a scratch register."""
    body = """
  %i32 = arith.index_cast %tid : index to i32
  %v = vector.broadcast %i32 : i32 to vector<4xi32>
  %k = arith.constant dense<[1, 20, 300, 4000]> : vector<4xi32>
  %a = arith.addi %v, %k : vector<4xi32>
  %r = vector.shuffle %a, %a [1, 2, 3, 0] : vector<4xi32>, vector<4xi32>
  %b = arith.muli %r, %k : vector<4xi32>
  %s = vector.shuffle %b, %b [3, 0, 1, 2] : vector<4xi32>, vector<4xi32>
  %vals = arith.subi %s, %k : vector<4xi32>
"""
    rotated = {"a": ["%r10", "%r11", "%r12", "%r13"], "r": ["%r11", "%r12", "%r13", "%r10"],
               "b": ["%r10", "%r11", "%r12", "%r13"], "s": ["%r13", "%r10", "%r11", "%r12"],
               "vals": ["%r10", "%r11", "%r12", "%r13"]}

    def names(fn):
        return {v: rotated[v.name_hint] for op in fn.walk() for v in op.results if v.name_hint in rotated}

    text = _custom_kernel("permuted", body)
    _both_ways(text, [np.zeros((32, 4), np.int32)], {"n": 0}, registers=names)
    module = _module(text)
    ptx = print_ptx(module, names(_kernel(module)))
    muls = re.findall(r"mul\.lo\.s32 (%r\d+), (%r\d+),", ptx)
    assert muls[0][0] not in ("%r10", "%r11", "%r12", "%r13")  # the cycle starts in a scratch register
    assert re.search(r"mov\.b32 %r10, %r\d+;", ptx)


@pytest.mark.parametrize("kernel_text", [LOOP_SWAP, NESTED], ids=["loop_swap", "nested_control"])
def test_register_allocator_assignment(kernel_text):
    """The register allocator's names (tessera.regalloc, when present) print to the same results."""
    from tessera import regalloc
    _both_ways(kernel_text, [np.zeros((32, 3 if "loop_swap" in kernel_text else 4), np.int32)], {"n": 5},
               registers=lambda fn: regalloc.allocate_registers(fn).names)


# endregion
# region Descriptors -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lbo,sbo", [(16, 1024), (8192, 1024), (16384, 1024), (256, 128)])
def test_descriptor_sequence_matches_the_encoding(lbo, sbo):
    """The and/shr/cvt/or sequence of sm90.make_descriptor equals facts.encode_descriptor on every
    16-byte-aligned shared address of the 18-bit window."""
    for swizzle in facts.SWIZZLE_MODES:
        for address in range(0, 1 << 18, 16 * 37):
            assert descriptor_of_address(address, lbo, sbo, swizzle) == facts.encode_descriptor(address, lbo, sbo, swizzle)


# endregion
# region Every kernel configuration: ptxas --------------------------------------------------------------------------

CONFIGURATIONS = (
    [(f"flash_d{hd}_{'causal' if c else 'full'}_{dt}", "flash_attention", {"head_dim": hd, "causal": c, "dtype": dt})
     for hd in (64, 128) for c in (False, True) for dt in ("bf16", "f16")]
    + [(f"{v}_d{hd}_{'causal' if c else 'full'}", f"{v}_attention", {"head_dim": hd, "causal": c})
       for v in ("two_pass", "three_pass") for hd in (64, 128) for c in (False, True)]
    + [(f"gemm_{dt}", "gemm", {"dtype": dt}) for dt in ("bf16", "f16")]
)


def _lowered(variant: str, config: dict) -> ModuleOp:
    module = build_kernel(variant, **config).clone()
    passes.apply_pipeline(module, passes.TARGET_PIPELINE)
    return module


def _ptxas(ptx: str):
    require_tool("ptxas")  # fails, never skips, without ptxas
    return toolchain.compile_ptx(ptx)


@pytest.mark.parametrize("variant,config", [c[1:] for c in CONFIGURATIONS], ids=[c[0] for c in CONFIGURATIONS])
def test_kernel_ptx_is_accepted_without_warnings(variant, config):
    module = _lowered(variant, config)
    ptx = print_ptx(module)
    assert print_ptx(module) == ptx, "two prints of the same module differ"
    for needle in ("wgmma.mma_async.sync.aligned.m64n", "cp.async.bulk.tensor", "mbarrier.try_wait.parity"):
        assert needle in ptx
    if variant != "gemm":
        assert "shfl.sync.bfly.b32" in ptx and "ex2.approx.ftz.f32" in ptx
    result = _ptxas(ptx)
    assert not result.warnings, "\n".join(map(str, result.warnings))
    (entry,) = result.entries.values()
    assert entry.registers <= facts.MAX_REGISTERS_PER_THREAD


def test_output_does_not_depend_on_hash_seeds():
    """Byte-identical PTX from two processes with different hash seeds (no set or id order leaks out)."""
    example = Path(__file__).parent.parent / "examples" / "flash_attention.mlir"
    script = ("import sys; from tessera.ir import parse_module; from tessera import passes; "
              "from tessera.ptx import print_ptx; m = parse_module(open(sys.argv[1]).read()); "
              "passes.apply_pipeline(m, passes.TARGET_PIPELINE); sys.stdout.write(print_ptx(m))")
    outputs = [subprocess.run([sys.executable, "-c", script, str(example)], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert outputs[0] == outputs[1] and ".entry flash_attention_d128_bf16(" in outputs[0]


@pytest.mark.parametrize("name", ["control-flow", "machine-ops"])
def test_without_comments_the_instructions_are_the_same(name):
    """print_ptx(comments=False) (what tessera.compile(target="cubin") hands ptxas) leaves out the comment
    lines inside the kernels and nothing else: the same declarations, labels and instructions in the same
    order, parameters named alike."""
    module = _module((LIT_DIR / f"{name}.mlir").read_text())
    with_comments, without = print_ptx(module), print_ptx(module, comments=False)
    body = [line for line in with_comments.split("\n") if not line.startswith("    //")]
    assert without.split("\n") == body
    assert len(without.split("\n")) < len(with_comments.split("\n"))


def test_without_comments_an_error_still_names_the_op():
    text = _custom_kernel("unsupported", """
  %f = arith.constant 1.0 : f32
  %g = math.exp %f : f32
  %vals = arith.constant dense<0> : vector<4xi32>""")
    with pytest.raises(PtxPrintError, match=r"@unsupported: '%g = math.exp %f : f32': no PTX for 'math.exp'"):
        print_ptx(_module(text), comments=False)


@pytest.mark.parametrize("name", ["control-flow", "machine-ops"])
def test_lit_inputs_are_accepted_without_warnings(name):
    """The hand-written Target IR of tests/lit/ptx (every sm90 op, all control flow) assembles cleanly."""
    result = _ptxas(print_ptx(_module((LIT_DIR / f"{name}.mlir").read_text())))
    assert not result.warnings, "\n".join(map(str, result.warnings))


def test_tile_ir_kernel_is_refused():
    with pytest.raises(PtxPrintError, match="is a Tile IR kernel: lower it first"):
        print_ptx(build_kernel("gemm", dtype="bf16"))


def test_unsupported_op_is_refused_by_name():
    text = _custom_kernel("unsupported", """
  %f = arith.constant 1.0 : f32
  %g = math.exp %f : f32
  %vals = arith.constant dense<0> : vector<4xi32>""")
    with pytest.raises(PtxPrintError, match=r"@unsupported: '%g = math.exp %f : f32': no PTX for 'math.exp'"):
        print_ptx(_module(text))


def test_ptx_target_of_tessera_opt(tmp_path, capsys):
    """`-t ptx` once registered (tools/tessera_opt.py's register_all_targets calls tessera.ptx.register)."""
    from tessera.tools.tessera_opt import TesseraOptMain

    class Main(TesseraOptMain):
        def register_all_targets(self) -> None:
            super().register_all_targets()
            register(self)

    source = tmp_path / "gemm.mlir"
    source.write_text(str(build_kernel("gemm", dtype="bf16")))
    Main(args=[str(source), "-p", passes.TARGET_PIPELINE, "-t", "ptx"]).run()
    text = capsys.readouterr().out
    assert text.startswith(".version 8.0\n.target sm_90a\n.address_size 64\n")
    assert ".visible .entry gemm_bf16(" in text
    assert PtxTarget.name == "ptx"


def test_ptx_target_options(tmp_path, capsys):
    """`-t "ptx{fold_epilogue=false}"` prints a flash forward's last P.V after its loop (the Target IR op for op:
    its wgmmas twice), the default runs it in the loop; options the target does not take are a usage error
    before any pass runs (exit 1, no traceback), for xDSL's targets too."""
    from tessera.kernels import flash_attention
    from tessera.tools.tessera_opt import main

    source = tmp_path / "flash.mlir"
    source.write_text(str(flash_attention(64)))
    counts = {}
    for target in ("ptx", "ptx{fold_epilogue=false}", "ptx{fold-epilogue=true}"):
        assert main([str(source), "-p", "default-pipeline", "-t", target]) == 0
        counts[target] = capsys.readouterr().out.count("wgmma.mma_async.sync")
    assert counts["ptx"] == counts["ptx{fold-epilogue=true}"] < counts["ptx{fold_epilogue=false}"], counts
    for target, words in (("ptx{bogus=1}", '["bogus"] not found'), ("ptx{fold_epilogue=maybe}", "expected <class 'bool'>"),
                          ("mlir{nope=2}", '["nope"] not found')):
        assert main([str(source), "-p", "default-pipeline", "-t", target]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"tessera-opt: error: invalid target '{target}': ") and words in err, err
        assert "Traceback" not in err


# endregion


def _main_loop(ptx: str) -> list[str]:
    """The lines of the flash kernel's main loop: the longest `$L__forN: ... @%p bra $L__forN` holding ex2."""
    loops = re.findall(r"^(\$L__for\d+):\n(.*?)^\s*@%p\d+ bra \1;", ptx, re.S | re.M)
    return max((body for _, body in loops if "ex2.approx" in body), key=len).split("\n")


@pytest.mark.parametrize("causal", [False, True])
def test_flash_main_loop_bookkeeping_as_ptxas_folds_it(causal):
    """The consumers' main loop of the default flash kernel (head_dim 64, 128 keys a trip, the masks under a
    branch): each mbarrier wait's address is (base + slot) + the barrier's offset, the constant last, which ptxas
    folds into the SYNCS immediate; the running max is yielded in the registers it came in (no mov.f32 at the
    latch); the causal mask compares once per distinct column - row (two rows eight apart: 34), not once per
    score, and the bounds mask not at all (mask-by-mma adds it with a wgmma; selected, it compared once per
    distinct column, 32 of a thread's 64 scores); one more, the folded first trip's test (`iv == lb`:
    overlap-softmax's default runs trip 0 in the loop and branches past the previous trip's P.V update)."""
    import tessera.kernels

    loop = _main_loop(tessera.compile(tessera.kernels.flash_attention(head_dim=64, causal=causal), target="ptx"))
    waits = [(i, re.search(r"mbarrier\.try_wait\.parity\S* %p\d+, \[(%r\d+)\]", line))
             for i, line in enumerate(loop)]
    waits = [(i, m.group(1)) for i, m in waits if m]
    assert len(waits) == 2  # K's and V's full barriers
    for i, address in waits:
        made = next(line for line in reversed(loop[:i]) if re.match(rf"\s*\S+ {re.escape(address)},", line))
        assert re.fullmatch(rf"\s*add\.s32 {re.escape(address)}, {re.escape(address)}, \d+;", made), made
    latch = loop[max(i for i, line in enumerate(loop) if "latch of" in line):]
    assert not any("mov.f32" in line for line in latch), latch
    compares = [line for line in loop if re.search(r"setp\.\w+\.s32 %p\d+, %r\d+, -?\d+;", line)]
    assert len(compares) == (35 if causal else 1)
    assert sum(bool(re.search(r"setp\.eq\.s32 %p\d+, %r\d+, 0;", line)) for line in compares) == 1
