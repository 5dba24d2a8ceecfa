"""`python -m tessera.ptx [FILE]`: print the PTX module of the Target IR kernels in FILE (MLIR; stdin if FILE
is omitted or `-`). Until `tessera-opt -t ptx` is registered, lit tests pipe `tessera-opt -p ...` into it.
Bad input is a diagnostic on stderr and exit status 1."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from xdsl.utils.exceptions import DiagnosticException, ParseError

from tessera.ir import parse_module
from tessera.ptx.module import print_ptx


def main(args: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tessera.ptx", description=__doc__.split("\n")[0])
    parser.add_argument("file", nargs="?", default="-", help="Target IR (MLIR); '-' or nothing for stdin")
    options = parser.parse_args(args)
    try:
        text = sys.stdin.read() if options.file == "-" else open(options.file, encoding="utf-8").read()
    except OSError as e:
        print(f"python -m tessera.ptx: error: cannot read '{options.file}': {e.strerror or e}", file=sys.stderr)
        return 1
    try:
        sys.stdout.write(print_ptx(parse_module(text, "<stdin>" if options.file == "-" else options.file)))
    except (ParseError, DiagnosticException) as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
