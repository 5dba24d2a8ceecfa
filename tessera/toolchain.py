"""NVIDIA's tools, driven from Python: find ptxas and nvdisasm, assemble PTX into a cubin.

- `find_ptxas()` / `find_nvdisasm()`: the tool on PATH, else in `$CUDA_HOME/bin` (or `$CUDA_PATH/bin`), else
  in NVIDIA's PyPI wheels (`nvidia-cuda-nvcc`, `nvidia-cuda-nvdisasm`: `nvidia/cu13/bin/` in site-packages,
  found through the `nvidia` namespace package); None when absent. The `ptx` extra (`pip install '.[ptx]'` from a
  checkout) brings both.
- `find_all_ptxas()`: every ptxas of those places, one per version, newest first (the test suite checks the
  kernels with each: the `test` extra adds a CUDA 12 ptxas, `nvidia-cuda-nvcc-cu12`, in `nvidia/cuda_nvcc/bin/`).
- `compile_ptx(ptx)`: `ptxas -arch=sm_90a -v` as data: per function the registers, barriers, static shared
  memory, stack frame and spill bytes; every warning and error with its PTX line. A rejected module raises
  `PtxasError` carrying the parsed errors.
- `run_tool(command, timeout)`: an NVIDIA tool run with its output captured, or a `ToolchainError`.

Reading SASS back (`nvdisasm -c`, opcode counts, loops) is `tessera.sass`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xdsl.utils.exceptions import DiagnosticException

# Where NVIDIA's wheels put executables, relative to the `nvidia` namespace package: CUDA 13 wheels
# (`nvidia-cuda-nvcc`, `nvidia-cuda-nvdisasm`) share `cu13/bin`; the CUDA 12 `nvidia-cuda-nvcc-cu12` wheel
# uses `cuda_nvcc/bin`.
WHEEL_BIN_DIRS = ("cu13/bin", "cuda_nvcc/bin")
CUDA_ROOT_VARIABLES = ("CUDA_HOME", "CUDA_PATH")
DEFAULT_TIMEOUT_S = 300.0


class ToolchainError(DiagnosticException):
    """An NVIDIA tool is missing, failed to run, or rejected its input; the message says which and why."""


# region Finding the tools


def find_tool(name: str) -> str | None:
    """The path of the executable `name`: PATH, then `$CUDA_HOME/bin` and `$CUDA_PATH/bin`, then the
    `nvidia` wheels' bin folders (see `WHEEL_BIN_DIRS`); None when none has it."""
    on_path = shutil.which(name)
    if on_path:
        return on_path
    for variable in CUDA_ROOT_VARIABLES:
        root = os.environ.get(variable)
        if root and _is_executable(Path(root, "bin", name)):
            return str(Path(root, "bin", name))
    for location in _nvidia_package_locations():
        for bin_dir in WHEEL_BIN_DIRS:
            candidate = Path(location, bin_dir, name)
            if _is_executable(candidate):
                return str(candidate)
    return None


def find_tools(name: str) -> list[str]:
    """Every executable `name` there is, in `find_tool`'s order of preference: each PATH entry, then
    `$CUDA_HOME/bin` and `$CUDA_PATH/bin`, then the `nvidia` wheels' bin folders; a file reached twice (a
    link, a folder named twice) is listed once, under the first path that reached it."""
    candidates = [Path(folder or ".", name) for folder in os.environ.get("PATH", "").split(os.pathsep)]
    candidates += [Path(root, "bin", name) for root in map(os.environ.get, CUDA_ROOT_VARIABLES) if root]
    candidates += [Path(location, bin_dir, name) for location in _nvidia_package_locations() for bin_dir in WHEEL_BIN_DIRS]
    found: dict[str, str] = {}
    for candidate in candidates:
        if _is_executable(candidate):
            found.setdefault(os.path.realpath(candidate), str(candidate))
    return list(found.values())


def find_all_ptxas() -> list[ToolVersion]:
    """Every ptxas found (`find_tools`), one per version, newest first: the system's, CUDA_HOME's and the
    wheels' (`pip install '.[test,ptx]'` in a checkout brings a CUDA 12 one and the newest CUDA 13 one). Of two
    with the same version, the one `find_tool` would prefer is kept."""
    by_version: dict[tuple[int, ...], ToolVersion] = {}
    for path in find_tools("ptxas"):
        version = tool_version(path)
        by_version.setdefault(version.version, version)
    return sorted(by_version.values(), key=lambda v: v.version, reverse=True)


def find_ptxas() -> str | None:
    """ptxas from PATH, CUDA_HOME or the `nvidia-cuda-nvcc` wheel; None when absent."""
    return find_tool("ptxas")


def find_nvdisasm() -> str | None:
    """nvdisasm from PATH, CUDA_HOME or the `nvidia-cuda-nvdisasm` wheel; None when absent."""
    return find_tool("nvdisasm")


def _nvidia_package_locations() -> list[str]:
    # `nvidia` is a namespace package that several wheels (and several site-packages) may contribute to.
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return list(spec.submodule_search_locations)


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@dataclass(frozen=True)
class ToolVersion:
    """What `TOOL --version` says: `release` "13.0" and `version` (13, 0, 88) from its
    "Cuda compilation tools, release 13.0, V13.0.88" line."""

    path: str
    release: str
    version: tuple[int, ...]
    text: str

    def __str__(self) -> str:
        return f"{Path(self.path).name} {'.'.join(map(str, self.version)) or self.release or '(unknown version)'}"


@functools.lru_cache(maxsize=None)
def tool_version(path: str) -> ToolVersion:
    """The version of the NVIDIA tool at `path` (cached per path)."""
    completed = run_tool([path, "--version"], timeout=60.0)
    text = (completed.stdout + completed.stderr).strip()
    release = re.search(r"release (\d+(?:\.\d+)*)", text)
    version = re.search(r"\bV(\d+(?:\.\d+)*)", text)
    return ToolVersion(
        path=path,
        release=release.group(1) if release else "",
        version=tuple(int(part) for part in version.group(1).split(".")) if version else (),
        text=text,
    )


# endregion

# region ptxas


@dataclass(frozen=True)
class PtxasDiagnostic:
    """One message of ptxas. `severity` is "error", "fatal", "warning" or "info"; `line` is the PTX line
    ptxas names ("FILE, line N;" or "around line N"), else None; `code` is ptxas' code such as "C7517".

    ptxas reports wgmma serialization and dropped setmaxnreg as coded *info* lines ("(C7511) Potential
    Performance Loss: ..."); `is_warning` counts them as warnings, as they are for a kernel compiler."""

    severity: str
    message: str
    file: str | None = None
    line: int | None = None
    code: str | None = None
    function: str | None = None

    @property
    def is_error(self) -> bool:
        return self.severity in ("error", "fatal")

    @property
    def is_warning(self) -> bool:
        return self.severity == "warning" or (self.severity == "info" and self.code is not None)

    def __str__(self) -> str:
        where = f"{self.file or '<ptx>'}:{self.line}: " if self.line is not None else ""
        code = f"{self.code}: " if self.code else ""
        return f"{where}{self.severity}: {code}{self.message}"


@dataclass(frozen=True)
class FunctionResources:
    """What `ptxas -v` says about one function. `smem_bytes` is static shared memory only (dynamic shared
    memory is sized at launch; an `.extern .shared .align 1024` array pads the static size to 1024);
    `cmem_bytes` maps a constant bank to its bytes where ptxas reports them (older ptxas did; 12.9 and 13.x do not)."""

    name: str
    is_entry: bool = False
    arch: str | None = None
    registers: int | None = None
    barriers: int = 0
    smem_bytes: int = 0
    stack_frame_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    cumulative_stack_bytes: int = 0
    cmem_bytes: dict[int, int] = field(default_factory=dict)
    compile_time_ms: float | None = None

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


@dataclass(frozen=True)
class PtxasLog:
    """`ptxas -v` output as data: the functions in the order ptxas reports them, global memory bytes, and
    every message that is not a resource count."""

    functions: dict[str, FunctionResources]
    gmem_bytes: int
    diagnostics: tuple[PtxasDiagnostic, ...]


@dataclass(frozen=True)
class PtxasResult:
    """A module ptxas accepted: its log as data, the cubin's bytes, and the ptxas that made it."""

    arch: str
    ptxas: ToolVersion
    command: tuple[str, ...]
    log: PtxasLog
    text: str
    cubin: bytes
    cubin_path: Path | None

    @property
    def functions(self) -> dict[str, FunctionResources]:
        return self.log.functions

    @property
    def entries(self) -> dict[str, FunctionResources]:
        """The kernels (`.entry`), by name."""
        return {name: f for name, f in self.log.functions.items() if f.is_entry}

    def entry(self, name: str | None = None) -> FunctionResources:
        """The entry called `name`, or the module's only entry."""
        entries = self.entries
        if name is not None:
            if name not in entries:
                raise KeyError(f"no entry '{name}' in the ptxas report (entries: {', '.join(entries) or 'none'})")
            return entries[name]
        if len(entries) != 1:
            raise KeyError(f"the module has {len(entries)} entries ({', '.join(entries)}); name one")
        return next(iter(entries.values()))

    @property
    def diagnostics(self) -> tuple[PtxasDiagnostic, ...]:
        return self.log.diagnostics

    @property
    def warnings(self) -> tuple[PtxasDiagnostic, ...]:
        """ptxas warnings and its coded performance advisories (see `PtxasDiagnostic.is_warning`)."""
        return tuple(d for d in self.log.diagnostics if d.is_warning)


class PtxasError(ToolchainError):
    """ptxas rejected the module. `errors` holds the parsed errors (file, line, message), `diagnostics` every
    message; the exception's text lists them one per line, as a compiler would."""

    def __init__(self, diagnostics: Sequence[PtxasDiagnostic], returncode: int, ptxas: ToolVersion, source_name: str):
        self.diagnostics = tuple(diagnostics)
        self.errors = tuple(d for d in self.diagnostics if d.is_error)
        self.returncode = returncode
        self.ptxas = ptxas
        shown = [d for d in self.diagnostics if d.is_error or d.is_warning]
        lines = [f"{ptxas} rejected {source_name} (exit status {returncode}):", *(f"  {d}" for d in shown)]
        super().__init__("\n".join(lines))


_MESSAGE = re.compile(
    r"^ptxas(?: (?P<file>.+?), line (?P<line>\d+);)? (?P<severity>error|fatal|warning|info)\s*: (?P<message>.*)$"
)
_PROPERTIES = re.compile(r"^\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_FIELDS = {
    "registers": re.compile(r"^Used (\d+) registers$"),
    "barriers": re.compile(r"^used (\d+) barriers$"),
    "smem_bytes": re.compile(r"^(\d+) bytes smem$"),
    "cumulative_stack_bytes": re.compile(r"^(\d+) bytes cumulative stack size$"),
}
_CMEM = re.compile(r"^(\d+) bytes cmem\[(\d+)\]$")


def parse_ptxas_log(text: str, source_name: str | None = None, reported_name: str | None = None) -> PtxasLog:
    """Parse `ptxas -v` output (CUDA 12 and 13 spellings). Messages naming the file `reported_name` are
    reported as `source_name`. Lines ptxas does not usually write become "error" diagnostics, so nothing
    it says is lost."""
    functions: dict[str, dict] = {}
    current: dict | None = None
    gmem = 0
    diagnostics: list[PtxasDiagnostic] = []

    def function(name: str) -> dict:
        return functions.setdefault(name, {"name": name})

    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if (properties := _PROPERTIES.match(line)) and current is not None:
            current["stack_frame_bytes"], current["spill_store_bytes"], current["spill_load_bytes"] = map(
                int, properties.groups()
            )
            continue
        match = _MESSAGE.match(line)
        if match is None:
            diagnostics.append(PtxasDiagnostic("error", line.strip()))
            continue
        severity, message = match["severity"], match["message"].strip()
        if severity == "info":
            if gmem_match := re.match(r"(\d+) bytes gmem\b", message):
                gmem = int(gmem_match[1])
                continue
            if entry := re.fullmatch(r"Compiling entry function '(.+)' for '(.+)'", message):
                current = function(entry[1])
                current.update(is_entry=True, arch=entry[2])
                continue
            if props := re.fullmatch(r"Function properties for (.+)", message):
                current = function(props[1].strip("'"))
                continue
            if message.startswith("Used ") and current is not None:
                _parse_used(message, current)
                continue
            if (timing := re.fullmatch(r"Compile time = ([\d.]+) ms", message)) and current is not None:
                current["compile_time_ms"] = float(timing[1])
                continue
        file = match["file"]
        if file is not None and source_name is not None and (reported_name is None or file == reported_name):
            file = source_name
        line_number = int(match["line"]) if match["line"] else None
        code = None
        if coded := re.match(r"\((C\d+)\)\s*(.*)", message):
            code, message = coded[1], coded[2]
        if line_number is None and (around := re.search(r"\baround line (\d+)", message)):
            line_number = int(around[1])
            file = file or source_name
        named = re.search(r"(?:in (?:the )?function|for entry) '?([\w$.]+)'?", message)
        diagnostics.append(
            PtxasDiagnostic(severity, message, file, line_number, code, named[1] if named else None)
        )
    return PtxasLog(
        functions={name: FunctionResources(**fields) for name, fields in functions.items()},
        gmem_bytes=gmem,
        diagnostics=tuple(diagnostics),
    )


def _parse_used(message: str, fields: dict) -> None:
    # "Used 58 registers, used 1 barriers, 1024 bytes smem, 184 bytes cumulative stack size, 400 bytes cmem[0]"
    for item in message.split(","):
        item = item.strip()
        for name, pattern in _USED_FIELDS.items():
            if found := pattern.match(item):
                fields[name] = int(found[1])
                break
        else:
            if cmem := _CMEM.match(item):
                fields.setdefault("cmem_bytes", {})[int(cmem[2])] = int(cmem[1])


def compile_ptx(
    ptx: str,
    arch: str = "sm_90a",
    *,
    output: str | os.PathLike | None = None,
    options: Sequence[str] = (),
    source_name: str = "<ptx>",
    ptxas: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> PtxasResult:
    """Assemble `ptx` with `ptxas -arch=ARCH -v [OPTIONS] -o CUBIN` and report what ptxas said as data.

    The cubin is written to `output` when given (and `cubin_path` names it), else to a temporary folder
    that is removed; either way `PtxasResult.cubin` holds its bytes. Diagnostics name the input
    `source_name`. Raises `PtxasError` when ptxas rejects the module, `ToolchainError` when no ptxas is found
    (pass `ptxas=PATH` to choose one), it cannot be run, or it does not say its version (no working ptxas)."""
    tool = ptxas or find_ptxas()
    if tool is None:
        raise ToolchainError(
            "ptxas not found: searched PATH, $CUDA_HOME/bin, $CUDA_PATH/bin and the nvidia-cuda-nvcc wheel "
            f"({', '.join('nvidia/' + d for d in WHEEL_BIN_DIRS)}); install it with `pip install nvidia-cuda-nvcc`, "
            "or from a Tessera checkout `pip install '.[ptx]'`"
        )
    version = tool_version(tool)
    if not version.version:  # every ptxas says "V13.0.88"; else the tool does not run (a wrapper whose CUDA is gone)
        raise ToolchainError(
            f"{tool} is not a working ptxas: `{Path(tool).name} --version` printed "
            f"{version.text[-300:] or 'nothing'!r}, no version; remove or fix it (it is found first), or pass "
            "ptxas=PATH")
    with tempfile.TemporaryDirectory(prefix="tessera-ptxas-") as work:
        ptx_name = "kernel.ptx"
        Path(work, ptx_name).write_text(ptx)
        cubin_path = Path(output).resolve() if output is not None else Path(work, "kernel.cubin")
        command = (tool, f"-arch={arch}", "-v", *options, "-o", str(cubin_path), ptx_name)
        completed = run_tool(list(command), timeout=timeout, cwd=work)
        text = completed.stdout + completed.stderr
        log = parse_ptxas_log(text, source_name=source_name, reported_name=ptx_name)
        if completed.returncode != 0:
            diagnostics = log.diagnostics
            if not any(d.is_error for d in diagnostics):
                diagnostics += (PtxasDiagnostic("error", text.strip() or "ptxas failed without a message"),)
            raise PtxasError(diagnostics, completed.returncode, version, source_name)
        if not cubin_path.is_file():
            raise ToolchainError(f"{version} reported success but wrote no cubin at {cubin_path}")
        cubin = cubin_path.read_bytes()
    return PtxasResult(
        arch=arch,
        ptxas=version,
        command=command,
        log=log,
        text=text,
        cubin=cubin,
        cubin_path=cubin_path if output is not None else None,
    )


def run_tool(command: list[str], timeout: float, cwd: str | None = None) -> subprocess.CompletedProcess:
    """`command` run to completion with its output captured; a `ToolchainError` when it cannot start or runs past
    `timeout` seconds (its exit status is the caller's to judge)."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False)
    except subprocess.TimeoutExpired:
        raise ToolchainError(f"{Path(command[0]).name} did not finish within {timeout:g} s") from None
    except OSError as e:
        raise ToolchainError(f"cannot run {command[0]}: {e.strerror or e}") from None


# endregion
