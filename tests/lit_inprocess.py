"""Run a lit test file of tests/lit in this Python process, the way `lit` runs it, without a process per command.

`lit tests/lit` starts a Python for every tool in every RUN line (about two hundred of them, each importing
xDSL and Tessera: 1-1.5 s of start-up for milliseconds of work). Here the same RUN lines run in-process:

- the RUN lines, the substitutions and the shell syntax are lit's own (`lit.TestRunner` reads the directives and
  applies the substitutions of tests/lit/lit.cfg.py and lit's %s/%S/%p/%t; `lit.ShUtil` parses the line), so a
  RUN line means what it means under lit;
- a command is a console script of this environment (`tessera-opt`, `tessera-run`, `filecheck`),
  `python -m MODULE` / `python -c CODE` (run by `inprocess`, as its process would run it), or lit's `echo` and
  `not`;
- a pipeline fails if any of its commands fails (lit's pipefail, the default); redirections `>`, `>>`, `<`,
  `2>`, `2>&1` and `>&2` apply in order, as in the shell.

Anything else (another program, `&&`, `;`) is refused by name: run that file with `lit`. The whole suite still
runs under real lit with `pytest -m slow tests/test_lit.py` (and `lit -v tests/lit`).
"""

from __future__ import annotations

import io
import os
import re
import types
from dataclasses import dataclass, field
from pathlib import Path

import inprocess
from inprocess import Unsupported
from lit import ShUtil
from lit.ShCommands import Command, Pipeline, Seq
from lit.TestRunner import _parseKeywords, applySubstitutions, getDefaultSubstitutions, kPdbgRegex

LIT_DIR = Path(__file__).parent / "lit"


def load_config() -> types.SimpleNamespace:
    """tests/lit/lit.cfg.py executed on a stand-in for lit's `config` (its substitutions, suffixes, excludes)."""
    config = types.SimpleNamespace(substitutions=[], environment={}, suffixes=[], excludes=[], pipefail=True,
                                   recursiveExpansionLimit=None)
    path = LIT_DIR / "lit.cfg.py"
    exec(compile(path.read_text(), str(path), "exec"), {"config": config, "__file__": str(path)})
    return config


def lit_files(config: types.SimpleNamespace) -> list[Path]:
    """The test files lit discovers under tests/lit: the configured suffixes, outside the excluded folders."""
    found = []
    for root, dirs, files in os.walk(LIT_DIR):
        dirs[:] = sorted(d for d in dirs if d not in config.excludes and d != "Output")
        found += [Path(root) / f for f in sorted(files) if Path(f).suffix in config.suffixes and f not in config.excludes]
    return found


def run_lines(path: Path, config: types.SimpleNamespace, tmp_dir: Path) -> list[tuple[str, str]]:
    """(where, command) for each RUN line of `path`, substituted as lit substitutes it (%t under `tmp_dir`)."""
    script = _parseKeywords(str(path))["RUN:"]
    test = types.SimpleNamespace(getSourcePath=lambda: str(path), config=config)
    tmp_base = str(tmp_dir / path.name)
    substitutions = getDefaultSubstitutions(test, str(tmp_dir), tmp_base)
    lines = []
    for line in applySubstitutions(script, substitutions, {}, config.recursiveExpansionLimit):
        match = re.fullmatch(kPdbgRegex, line)
        lines.append((match.group(1), match.group(2).strip()) if match else ("command line", line.strip()))
    return lines


# region Streams


class _Sink:
    """Where a file descriptor writes: a pipe to the next command, a file, /dev/null or the test's log."""

    def __init__(self, path: str | None = None, append: bool = False):
        self.path, self.append = path, append
        self.data = io.BytesIO()

    def finish(self) -> None:
        if self.path is not None and self.path != os.devnull:
            with open(self.path, "ab" if self.append else "wb") as f:
                f.write(self.data.getvalue())


@dataclass
class CommandResult:
    argv: list[str]
    status: int


@dataclass
class Log:
    lines: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.lines.append(text)

    def __str__(self) -> str:
        return "\n".join(self.lines)


# endregion

# region Commands


def _echo(args: list[str], stdout) -> int:
    """lit's builtin echo (`-n`: no newline)."""
    newline = True
    if args and args[0] == "-n":
        newline, args = False, args[1:]
    stdout.write(" ".join(args) + ("\n" if newline else ""))
    return 0


def _run_command(command: Command, stdin: bytes, pipe: _Sink, log_sink: _Sink) -> tuple[CommandResult, list[_Sink]]:
    """Run one command of a pipeline: its stdin is `stdin`, its stdout goes to `pipe` unless redirected."""
    args = list(command.args)
    negations = 0
    while args and args[0] == "not":
        negations, args = negations + 1, args[1:]
    if not args or args[0] == "--crash":
        raise Unsupported("`not` without a command, or `not --crash`")
    fds: dict[int, _Sink] = {1: pipe, 2: log_sink}
    opened: list[_Sink] = []
    for (op, *fd), target in command.redirects:
        number = fd[0] if fd else (0 if op == "<" else 1)
        if op == ">&" and target in ("1", "2"):
            fds[number] = fds[int(target)]
        elif op in (">", ">>"):
            sink = _Sink(target, append=op == ">>")
            opened.append(sink)
            fds[number] = sink
        elif op == "<" and number == 0:
            stdin = Path(target).read_bytes()
        else:
            raise Unsupported(f"redirection {op}{fd} {target}")
    streams = {sink_id: inprocess.text_stream(sink.data) for sink_id, sink in {id(s): s for s in fds.values()}.items()}
    out, err = streams[id(fds[1])], streams[id(fds[2])]
    status = _echo(args[1:], out) if args[0] == "echo" else inprocess.call(args, stdin, out, err)
    for stream in streams.values():
        stream.detach()
    for _ in range(negations):
        status = 0 if status != 0 else 1
    return CommandResult(args, status), opened


def _run_pipeline(pipeline: Pipeline, log: Log) -> int:
    data = b""
    status = 0
    for command in pipeline.commands:
        pipe, log_sink = _Sink(), _Sink()
        result, opened = _run_command(command, data, pipe, log_sink)
        for sink in opened:
            sink.finish()
        data = pipe.data.getvalue()
        if log_sink.data.getvalue():
            log.add(f"# .---stderr of {' '.join(result.argv)[:200]}\n"
                    + log_sink.data.getvalue().decode("utf-8", "replace").rstrip("\n"))
        if result.status != 0:
            log.add(f"# error: command failed with exit status: {result.status}: {' '.join(result.argv)[:200]}")
        # lit's pipefail (pipe_err): the pipeline's status is its last failing command's, else its last command's
        if not pipeline.pipe_err or result.status != 0 or not status:
            status = result.status
    if data:
        log.add("# .---stdout\n" + data.decode("utf-8", "replace").rstrip("\n"))
    return (0 if status else 1) if pipeline.negate else status


# endregion


def run_file(path: Path, config: types.SimpleNamespace, tmp_dir: Path) -> tuple[bool, str]:
    """Run every RUN line of `path` in order, as lit does, stopping at the first that fails: (passed, log)."""
    log = Log()
    for where, line in run_lines(path, config, tmp_dir):
        log.add(f"# {where}\n{line}")
        tree = ShUtil.ShParser(line, False, config.pipefail).parse()
        if isinstance(tree, Seq):
            raise Unsupported(f"{where}: `{tree.op}` between commands")
        if _run_pipeline(tree, log) != 0:
            return False, str(log)
    return True, str(log)
