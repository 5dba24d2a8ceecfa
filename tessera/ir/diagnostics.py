"""Diagnostics that say where: the source location of an op, its kernel, and the op itself.

Every diagnostic about IR names where it happened: the place in the input file (`file:line:col`), and the
kernel and op it concerns, in this form

    kernel.mlir:12:5: kernel @flash: op 'tile.fill': register tiles have 32 rows; warpgroups take 64 rows each

xDSL records no source location on ops it parses (only an explicit `loc(...)`), so `tessera.ir.parser.TesseraParser`
gives every op the `FileLineColLoc` of its first token. Ops a pass creates have no location: for them the kernel
and the op are named. `located(op, message)` formats a message this way; `verify_module` verifies ops one at a
time so that a verifier error is located at the op that fails (xDSL's own `verify` reports structural errors,
such as a missing terminator, with no op at all).

Warnings (`warn`) are `TesseraWarning`s: the command-line tools print them as `tessera-opt: warning: ...` and
library users see them through Python's `warnings` module.
"""

from __future__ import annotations

import re
import traceback
import warnings

from xdsl.dialects import func
from xdsl.dialects.builtin import FileLineColLoc, ModuleOp
from xdsl.ir import Operation
from xdsl.utils.exceptions import VerifyException

from tessera.ir.kernel_marks import is_kernel, is_target_kernel


class TesseraWarning(UserWarning):
    """Something the user asked for that has no effect (a pass given input it does not transform)."""


class LocatedVerifyException(VerifyException):
    """A VerifyException whose message already says where (see `located`)."""


def require(condition: bool, op: Operation, message: str) -> None:
    """A verifier's check: unless `condition`, a VerifyException `'dialect.op' op <message>`, the form of every
    verifier message of Tessera's dialects (the diagnostics locate it at the op, `verify_module`)."""
    if not condition:
        raise VerifyException(f"'{op.name}' op {message}")


def warn(message: str) -> None:
    """Warn through Python's `warnings` (the tools print it as one line)."""
    warnings.warn(message, TesseraWarning, stacklevel=2)


def source_location(op: Operation) -> str | None:
    """`file:line:col` of `op` in the file it was parsed from, or None for an op without one."""
    loc = op.location
    if isinstance(loc, FileLineColLoc):
        return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
    return None


def enclosing_function(op: Operation) -> func.FuncOp | None:
    """The `func.func` that is `op` or holds it."""
    current: Operation | None = op
    while current is not None and not isinstance(current, func.FuncOp):
        current = current.parent_op()
    return current


def where(op: Operation, name_op: bool = True) -> str:
    """Where `op` is: `file:line:col: kernel @name: op 'dialect.op'`, leaving out what is unknown (an op a pass
    created has no file location; a function names itself only once)."""
    parts = []
    if loc := source_location(op):
        parts.append(loc)
    fn = enclosing_function(op)
    if fn is not None:
        what = "kernel" if is_kernel(fn) or is_target_kernel(fn) else "func"
        parts.append(f"{what} @{fn.sym_name.data}")
    if name_op and fn is not op and not isinstance(op, ModuleOp):
        parts.append(f"op '{op.name}'")
    return ": ".join(parts)


def located(op: Operation | None, message: str, name_op: bool = True) -> str:
    """`message` prefixed with `where(op)` (unchanged when `op` is None); a message that already names the op
    (`name_op=False`, as passes that print it do, or xDSL's `'tile.dim' op ...`) or the kernel (`kernel @k:
    ...`) does not name it twice."""
    if op is None:
        return message
    prefix = where(op, name_op=name_op and not message.startswith(f"'{op.name}' op "))
    fn = enclosing_function(op)
    if fn is not None and message.startswith(f"kernel @{fn.sym_name.data}: "):
        prefix = prefix.removesuffix(f"kernel @{fn.sym_name.data}").removesuffix(": ")
    return f"{prefix}: {message}" if prefix else message


def verify_module(module: Operation) -> None:
    """Verify every op of `module` (nested ops before the op that holds them, as xDSL does), raising a
    LocatedVerifyException located at the first op that fails, with xDSL's message."""
    for op in _post_order(module):
        try:
            op.verify(verify_nested_ops=False)
        except LocatedVerifyException:
            raise
        except VerifyException as e:
            message = str(e)
            prefix = "Operation does not verify: "  # xDSL's wording around an op's own verifier
            if message.startswith(prefix):
                message = message[len(prefix):]
            raise LocatedVerifyException(located(_culprit(op, message), message)) from e


_REDEFINED = re.compile(r'Redefinition of symbol "(?P<name>[^"]*)"')


def _culprit(op: Operation, message: str) -> Operation:
    """The op a verifier error of `op` is about: for a symbol table's "Redefinition of symbol", the second op
    that defines the name (xDSL reports it on the table, which has no location of its own); else `op`."""
    match = _REDEFINED.match(message)
    if match is None:
        return op
    seen = 0
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                name = inner.properties.get("sym_name") or inner.attributes.get("sym_name")
                if getattr(name, "data", None) == match["name"]:
                    seen += 1
                    if seen == 2:
                        return inner
    return op


def _post_order(op: Operation):
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                yield from _post_order(inner)
    yield op


_SOURCES: dict[str, tuple[int, str]] = {}
"""The text last parsed under each file name, and the line offset of its first line (for `with_context`)."""
_MAX_SOURCES = 16
_LOCATION_PREFIX = re.compile(r"^(?P<file>.+?):(?P<line>[0-9]+):(?P<col>[0-9]+): ")


def remember_source(name: str, line_offset: int, text: str) -> None:
    """Keep `text` (parsed under file `name`, its first line being line `line_offset + 1`) for `with_context`;
    the last few files parsed are kept."""
    _SOURCES.pop(name, None)
    _SOURCES[name] = (line_offset, text)
    while len(_SOURCES) > _MAX_SOURCES:
        del _SOURCES[next(iter(_SOURCES))]


def with_context(message: str) -> str:
    """`message` followed by the source line its leading `file:line:col` points at, with a caret under the
    column, when that file was parsed by a TesseraParser in this process (the tools print diagnostics so)."""
    match = _LOCATION_PREFIX.match(message)
    if match is None or match["file"] not in _SOURCES:
        return message
    offset, text = _SOURCES[match["file"]]
    lines = text.splitlines()
    index = int(match["line"]) - offset - 1
    if not 0 <= index < len(lines):
        return message
    first, sep, rest = message.partition("\n")
    caret = " " * (int(match["col"]) - 1) + "^"
    return "\n".join([first, lines[index], caret]) + (sep + rest if sep else "")


def internal_error_text(e: BaseException) -> str:
    """`internal error: Type: message`, never an empty message: an exception without text is described by the
    place that raised it."""
    text = str(e).strip()
    if not text:
        frames = traceback.extract_tb(e.__traceback__)
        text = f"raised at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "(no message)"
    return f"internal error: {type(e).__name__}: {text}"


class PassInputError(VerifyException):
    """A pass given kernels of a level it does not transform (Tile IR to a Target IR pass or back)."""


LEVEL_NAMES = {"tile": "Tile IR", "target": "Target IR"}


def functions_by_level(module: ModuleOp) -> dict[str, list[func.FuncOp]]:
    """The functions of `module` at each of Tessera's levels: "target" those that are Target IR kernels or hold
    `sm90` ops, "tile" (of the others) those that are Tile IR kernels or hold `tile` ops (pass tests use plain
    functions too); a function of neither is in neither list."""
    found: dict[str, list[func.FuncOp]] = {"tile": [], "target": []}
    for fn in module.walk():
        if not isinstance(fn, func.FuncOp):
            continue
        if is_target_kernel(fn) or any(op.dialect_name() == "sm90" for op in fn.walk()):
            found["target"].append(fn)
        elif is_kernel(fn) or any(op.dialect_name() == "tile" for op in fn.walk()):
            found["tile"].append(fn)
    return found


def check_pass_input(pass_: object, module: ModuleOp) -> None:
    """Refuse or warn about a pass that would do nothing on `module`, by the level its class declares in
    `input_level` ("tile" or "target"; passes without one, such as xDSL's, are not checked). A function is at
    the Tile level when it is a Tile IR kernel or holds `tile` ops, at the Target level when it is a Target IR
    kernel or holds `sm90` ops (pass tests use plain functions too):

    - functions of the other level only: PassInputError, an error, as the output would silently lack what the
      pass was asked for (`-p allocate-registers -t ptx` on Tile IR);
    - no function of either level: a TesseraWarning, as there is nothing to do (which a test may intend).
    """
    level = getattr(pass_, "input_level", None)
    if level is None:
        return
    found = functions_by_level(module)
    if found[level]:
        return
    name = getattr(pass_, "name", type(pass_).__name__)
    other = "target" if level == "tile" else "tile"
    if found[other]:
        first = found[other][0]
        names = ", ".join(f"@{k.sym_name.data}" for k in found[other])
        lowering = "assign-swizzle,convert-tile-to-sm90,canonicalize,cse,rematerialize-constants"
        example = lowering if lowering.endswith(f",{name}") else f"{lowering},{name}"  # not the pass twice
        hint = (f"lower it first: convert-tile-to-sm90 (e.g. -p '{example}')" if level == "target"
                else "it runs before convert-tile-to-sm90")
        raise PassInputError(located(first, f"pass '{name}' transforms {LEVEL_NAMES[level]}, but the input "
                                            f"({names}) is {LEVEL_NAMES[other]}; {hint}"))
    warn(f"pass '{name}': the input has no {LEVEL_NAMES[level]} (no kernel, no function with "
         f"{'tile' if level == 'tile' else 'sm90'} ops); nothing to do")
