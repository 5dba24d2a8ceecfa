"""The standard streams of tessera-opt and tessera-run, handled alike by both.

- No input file, or `-` (mlir-opt's spelling), is standard input; diagnostics name it `<stdin>`.
- Standard input that is closed (`tessera-opt <&-`: Python then has no `sys.stdin`) or cannot be read is a
  `UsageError` naming it, as a missing file is, never an internal error.
- A reader that stops early (`tessera-run ... | head -1`) closes the pipe: the tool stops quietly with exit
  status 1, as Python's documentation advises for SIGPIPE (`quiet_broken_pipe`), with no internal error.
"""

from __future__ import annotations

import os
import sys

from tessera.tools.arguments import UsageError

STDIN_NAME = "<stdin>"
"""What diagnostics call standard input (`<stdin>:3:7: ...`), in both tools."""


def reads_standard_input(path: str | None) -> bool:
    """Whether the input argument `path` means standard input: absent, or `-`."""
    return path is None or path == "-"


def read_standard_input() -> bytes:
    """All of standard input, as bytes (decoded by the caller as any input file is); UsageError when it is
    closed or cannot be read."""
    if sys.stdin is None:
        raise UsageError("cannot read standard input: it is closed")
    try:
        return sys.stdin.buffer.read()
    except (OSError, ValueError) as e:  # ValueError: "I/O operation on closed file"
        raise UsageError(f"cannot read standard input: {getattr(e, 'strerror', None) or e}") from e


def quiet_broken_pipe() -> int:
    """After a BrokenPipeError on standard output: point it at /dev/null, so that the interpreter's last flush
    does not fail again, and return the exit status 1."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a test's stream): nothing to redirect
        pass
    return 1
