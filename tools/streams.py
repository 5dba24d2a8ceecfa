"""The standard streams of tessera-opt and tessera-run, handled alike by both.

- No input file, or `-` (mlir-opt's spelling), is standard input; diagnostics name it `<stdin>`.
- Standard input that is closed (`tessera-opt <&-`: Python then has no `sys.stdin`) or cannot be read is a
  `UsageError` naming it, as a missing file is, never an internal error.
- `-o FILE` is written only once the run has succeeded (`OutputFile`, as mlir-opt's output file): FILE may be
  the input itself, which xDSL's driver truncated before reading it (`tessera-opt k.mlir -o k.mlir` left an
  empty module, status 0), and a run that fails leaves FILE as it was.
- A reader that stops early (`tessera-run ... | head -1`) closes the pipe: the tool stops quietly with exit
  status 1, as Python's documentation advises for SIGPIPE (`quiet_broken_pipe`), with no internal error.
"""

from __future__ import annotations

import io
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


class OutputFile(io.StringIO):
    """The text for `-o PATH`, kept in memory and written to PATH by `commit` after a successful run. Made after
    `check_writable(PATH)`, so that a path that cannot be written is refused before any work."""

    def __init__(self, path: str) -> None:
        super().__init__()
        check_writable(path)
        self.path = path

    def close(self) -> None:
        """Nothing: xDSL's driver closes its output stream when the run ends, failed or not; `commit` writes."""

    def commit(self) -> None:
        """Write the text to the file (replacing it); UsageError naming it where that fails."""
        try:
            with open(self.path, "w", encoding="utf-8") as f:
                f.write(self.getvalue())
        except OSError as e:
            raise UsageError(f"cannot write '{self.path}': {e.strerror or e}") from e


def check_writable(path: str) -> None:
    """UsageError unless `path` names a file that can be written (an existing writable file, or a new one in an
    existing writable folder), said as `open` would say it; nothing is created or changed."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        reason = "Is a directory"
    elif not os.path.isdir(folder):
        reason = "No such file or directory"
    elif not os.access(path if os.path.exists(path) else folder, os.W_OK):
        reason = "Permission denied"
    else:
        return
    raise UsageError(f"cannot write '{path}': {reason}")
