"""`python -m tessera`: what a first try at running the package finds, its version and its command-line tools.

Tessera is a library (`import tessera`) with two console scripts, `tessera-opt` and `tessera-run`, each also
`python -m tessera.tools.tessera_opt` / `python -m tessera.tools.tessera_run` where the scripts are not on PATH
(docs/tools.md). Without arguments this prints the version and those commands and exits with 0; an argument is
refused with exit status 2 (argparse's for a usage error), naming the tools that take arguments, rather than
Python's "No module named tessera.__main__".
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from tessera.version import __version__

USAGE = f"""tessera {__version__}: a compiler of tile kernels to sm_90a PTX, used from Python (import tessera)
command-line tools, each with --help:
  tessera-opt FILE -p PIPELINE [-t ptx]                  or python -m tessera.tools.tessera_opt
  tessera-run FILE [--level tile|target|ptx] [--check]   or python -m tessera.tools.tessera_run"""


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv:
        print(f"python -m tessera: error: takes no arguments (got {' '.join(argv)}): run tessera-opt or "
              "tessera-run with them", file=sys.stderr)
        print(USAGE, file=sys.stderr)
        return 2
    try:
        print(USAGE, flush=True)
    except BrokenPipeError:  # `python -m tessera | head -1`: the reader stopped early, as the tools end then
        from tessera.tools.streams import quiet_broken_pipe

        return quiet_broken_pipe()
    return 0


if __name__ == "__main__":
    sys.exit(main())
