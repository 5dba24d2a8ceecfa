"""Run a lit test file of tests/lit in this Python process, the way `lit` runs it, without a process per command.

`lit tests/lit` starts a Python for every tool in every RUN line (about two hundred of them, each importing
xDSL and Tessera: 1-1.5 s of start-up for milliseconds of work). Here the same RUN lines run in-process:

- the RUN lines, the substitutions and the shell syntax are lit's own (`lit.TestRunner` reads the directives and
  applies the substitutions of tests/lit/lit.cfg.py and lit's %s/%S/%p/%t; `lit.ShUtil` parses the line), so a
  RUN line means what it means under lit;
- a command is a console script of this environment (`tessera-opt`, `tessera-run`, `filecheck`: their entry
  points, called as the script would call them), `python -m MODULE` / `python -c CODE`, or lit's `echo` and
  `not`; each runs with sys.argv, stdin, stdout and stderr of its own, and its exit status is what the process
  would return (SystemExit's code; an escaped exception prints its traceback and exits 1, as Python does);
- a pipeline fails if any of its commands fails (lit's pipefail, the default); redirections `>`, `>>`, `<`, `2>`, `2>&1`
  and `>&2` apply in order, as in the shell.

Anything else (another program, `&&`, `;`) is refused by name: run that file with `lit`. The whole suite still
runs under real lit with `pytest -m slow tests/test_lit.py` (and `lit -v tests/lit`).
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import re
import runpy
import sys
import traceback
import types
from dataclasses import dataclass, field
from pathlib import Path

from lit import ShUtil
from lit.ShCommands import Command, Pipeline, Seq
from lit.TestRunner import _parseKeywords, applySubstitutions, getDefaultSubstitutions, kPdbgRegex

LIT_DIR = Path(__file__).parent / "lit"


class Unsupported(Exception):
    """A RUN line this runner does not execute in-process (the message says what); lit runs it."""


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

    def __init__(self, label: str, path: str | None = None, append: bool = False):
        self.label, self.path, self.append = label, path, append
        self.data = io.BytesIO()

    def text_stream(self) -> io.TextIOWrapper:
        return io.TextIOWrapper(self.data, encoding="utf-8", errors="surrogateescape", line_buffering=True,
                                write_through=True)

    def finish(self) -> None:
        if self.path is not None and self.path != os.devnull:
            with open(self.path, "ab" if self.append else "wb") as f:
                f.write(self.data.getvalue())


@dataclass
class CommandResult:
    argv: list[str]
    status: int
    stderr: bytes = b""


@dataclass
class Log:
    lines: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.lines.append(text)

    def __str__(self) -> str:
        return "\n".join(self.lines)


# endregion

# region Commands


def _console_script(name: str):
    """The entry point of console script `name` of this environment, or None."""
    for entry in importlib.metadata.entry_points(group="console_scripts", name=name):
        return entry.load()
    return None


def _program(argv: list[str]):
    """A callable that runs `argv` as its process would (returns its exit status, may raise SystemExit)."""
    name = os.path.basename(argv[0])
    if re.fullmatch(r"python(\d+(\.\d+)?)?", name):
        if len(argv) >= 3 and argv[1] == "-m":
            module, rest = argv[2], argv[3:]

            def run_module():
                sys.argv = [module, *rest]
                runpy.run_module(module, run_name="__main__", alter_sys=True)
                return 0

            return run_module
        if len(argv) >= 3 and argv[1] == "-c":
            code, rest = argv[2], argv[3:]

            def run_code():
                sys.argv = ["-c", *rest]
                exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
                return 0

            return run_code
        raise Unsupported(f"'{' '.join(argv)}': only `python -m MODULE` and `python -c CODE` run in-process")
    main = _console_script(name)
    if main is None:
        raise Unsupported(f"'{name}' is not a console script of this environment")

    def run_script():
        sys.argv = [name, *argv[1:]]
        return main()

    return run_script


def _echo(args: list[str], stdout) -> int:
    newline = True
    if args and args[0] == "-n":
        newline, args = False, args[1:]
    stdout.write(" ".join(args) + ("\n" if newline else ""))
    return 0


def _exit_status(code) -> int:
    """The status a Python process exits with after `sys.exit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _run_command(command: Command, stdin: bytes, pipe: _Sink, log_sink: _Sink, tmp_dir: Path) -> tuple[CommandResult, list[_Sink]]:
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
            sink = _Sink(target, target, append=op == ">>")
            opened.append(sink)
            fds[number] = sink
        elif op == "<" and number == 0:
            stdin = Path(target).read_bytes()
        else:
            raise Unsupported(f"redirection {op}{fd} {target}")
    streams = {sink_id: sink.text_stream() for sink_id, sink in {id(s): s for s in fds.values()}.items()}
    out, err = streams[id(fds[1])], streams[id(fds[2])]
    if args[0] == "echo":
        status = _echo(args[1:], out)
    else:
        program = _program(args)
        saved = sys.argv, sys.stdin, sys.stdout, sys.stderr
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", errors="surrogateescape")
        sys.stdout, sys.stderr = out, err
        try:
            status = _exit_status(program())
        except SystemExit as e:
            status = _exit_status(e.code)
        except KeyboardInterrupt:
            raise
        except BaseException:
            traceback.print_exc(file=err)
            status = 1
        finally:
            for stream in streams.values():
                stream.flush()
            sys.argv, sys.stdin, sys.stdout, sys.stderr = saved
    for stream in streams.values():
        stream.detach()
    for _ in range(negations):
        status = 0 if status != 0 else 1
    return CommandResult(args, status), opened


def _run_pipeline(pipeline: Pipeline, log: Log, tmp_dir: Path) -> int:
    data = b""
    status = 0
    for index, command in enumerate(pipeline.commands):
        pipe = _Sink("pipe")
        log_sink = _Sink("stderr")
        result, opened = _run_command(command, data, pipe, log_sink, tmp_dir)
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
        if _run_pipeline(tree, log, tmp_dir) != 0:
            return False, str(log)
    return True, str(log)
