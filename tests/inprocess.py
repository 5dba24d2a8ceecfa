"""Run a command line of this environment's Python tools in this process, as its own process would run it.

Each `tessera-opt`, `tessera-run` or `python -m ...` started by a test costs a Python start-up and the import
of xDSL and Tessera (1-1.5 s of CPU) for milliseconds of work. `run` calls the same entry point here instead:

- a command is a console script of this environment (its entry point, called as the script calls it:
  `sys.exit(main())` with sys.argv set), `python -m MODULE` (runpy, as `-m` does) or `python -c CODE`;
- it gets sys.argv, stdin, stdout and stderr of its own (bytes in, text out in UTF-8), and optionally a working
  directory and environment variables, all restored afterwards;
- its status is what the process would exit with: SystemExit's code, and an exception that escapes prints its
  traceback to stderr and gives 1, as Python does.

A command that is not one of these raises `Unsupported`. Tests that must see the installed script itself (its
shebang, a fresh interpreter) keep a subprocess for that.
"""

from __future__ import annotations

import importlib.metadata
import io
import os
import re
import runpy
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


class Unsupported(Exception):
    """A command this module does not run in-process (the message says which)."""


@dataclass
class Completed:
    """What `subprocess.run(..., capture_output=True, text=True)` would return."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def _console_script(name: str) -> Callable[[], object] | None:
    for entry in importlib.metadata.entry_points(group="console_scripts", name=name):
        return entry.load()
    return None


def program(argv: Sequence[str]) -> Callable[[], object]:
    """A callable that runs `argv` as its process would, given sys.argv set by it (may raise SystemExit)."""
    name = os.path.basename(argv[0])
    if re.fullmatch(r"python(\d+(\.\d+)?)?", name) or argv[0] == sys.executable:
        if len(argv) >= 3 and argv[1] == "-m":
            module, rest = argv[2], list(argv[3:])

            def run_module():
                sys.argv = [module, *rest]
                with warnings.catch_warnings():
                    # The module is already imported here, as it never is in a fresh `python -m`: runpy warns.
                    warnings.filterwarnings("ignore", r".* found in sys\.modules after import of package", RuntimeWarning)
                    runpy.run_module(module, run_name="__main__", alter_sys=True)

            return run_module
        if len(argv) >= 3 and argv[1] == "-c":
            code, rest = argv[2], list(argv[3:])

            def run_code():
                sys.argv = ["-c", *rest]
                exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})

            return run_code
        raise Unsupported(f"'{' '.join(argv)}': only `python -m MODULE` and `python -c CODE` run in-process")
    main = _console_script(name)
    if main is None:
        raise Unsupported(f"'{name}' is not a console script of this environment")

    def run_script():
        sys.argv = [name, *argv[1:]]
        return main()

    return run_script


def exit_status(code: object) -> int:
    """The status a Python process exits with after `sys.exit(code)` (a message goes to stderr, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def text_stream(buffer: io.BytesIO) -> io.TextIOWrapper:
    """A UTF-8 text stream over `buffer`, written through at once (what a pipe or a file gets)."""
    return io.TextIOWrapper(buffer, encoding="utf-8", errors="surrogateescape", line_buffering=True,
                            write_through=True)


def call(argv: Sequence[str], stdin: bytes, stdout: io.TextIOWrapper, stderr: io.TextIOWrapper) -> int:
    """Run `argv` with these streams as sys.stdin/stdout/stderr; its exit status."""
    run = program(argv)
    saved = sys.argv, sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", errors="surrogateescape")
    sys.stdout, sys.stderr = stdout, stderr
    try:
        status = exit_status(run())
    except SystemExit as e:
        status = exit_status(e.code)
    except KeyboardInterrupt:
        raise
    except BaseException:
        traceback.print_exc(file=stderr)
        status = 1
    finally:
        stdout.flush()
        stderr.flush()
        sys.argv, sys.stdin, sys.stdout, sys.stderr = saved
    return status


def run(argv: Sequence[str], stdin: str | bytes = b"", cwd: str | os.PathLike | None = None,
        env: Mapping[str, str | None] | None = None) -> Completed:
    """`argv` run in-process with `stdin`, in directory `cwd`, with the variables of `env` set (None: unset);
    its status, stdout and stderr."""
    out, err = io.BytesIO(), io.BytesIO()
    out_stream, err_stream = text_stream(out), text_stream(err)
    saved_cwd, saved_env = os.getcwd(), {k: os.environ.get(k) for k in (env or {})}
    try:
        if cwd is not None:
            os.chdir(cwd)
        for key, value in (env or {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        data = stdin.encode() if isinstance(stdin, str) else stdin
        status = call(argv, data, out_stream, err_stream)
    finally:
        os.chdir(saved_cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    decode = lambda b: b.getvalue().decode("utf-8", "replace")  # noqa: E731
    return Completed(list(argv), status, decode(out), decode(err))


def main_in_process(main: Callable[[list[str]], int], capsys, *args: str) -> tuple[int, str, str]:
    """(status, stdout, stderr) of a tool's `main(args)` called in this process, its output taken from pytest's
    `capsys`; argparse's errors exit with 2. Asserts that no traceback was printed."""
    try:
        status = main(list(args))
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return status, out, err
