"""The instructions one warm launch of a simulator runs, counted by callgrind: the measure of issue 28's speed rounds
that does not move with the host's load (docs/speed-cta-simulator.md, docs/speed-ptx-executor.md).

    python bench/launch_instructions.py cta --causal     # the CTA simulator, flash d128, 512 x 1 head, every check
    python bench/launch_instructions.py cta --unchecked  # the same without the register-file check
    python bench/launch_instructions.py ptx              # the PTX executor, flash d128, 4 CTAs, 512 x 1024

It runs itself again under `valgrind --tool=callgrind` with collection off, launches twice untimed (compiling,
decoding, the pool's first allocations, the batches' classes), switches collection on around the third launch only
(`callgrind_control -i on/off`), and prints the count. The count repeats: Python's hash seed is fixed, address-space
randomisation is off (`setarch -R`) and the strands' thread switches are made deterministic
(`sys.setswitchinterval(100)`: the strands hand over by condition variables, never by the interpreter's timer).
Two runs of one tree agree within some 20k instructions; a cyclic garbage collection (about 2.6M) may fall inside
or outside the launch as allocation counts change. callgrind counts `rep stosb`/`rep movsb` (memset, memcpy) per
byte and cache misses not at all: confirm a cut of memory traffic by time. The output file (`--out`) is for
`callgrind_annotate`. Needs valgrind (`callgrind_control` on PATH) and util-linux's `setarch`.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _collect(on: bool) -> None:
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], check=True,
                   capture_output=True)


def _cta_launch(causal: bool, checked: bool) -> None:
    import numpy as np

    import tessera
    from tessera.interpreters.launch import prepare_arguments
    from tessera.interpreters.sm90.launch import run_target_kernel
    from tessera.kernel_abi import kernels, signature
    from tessera.regalloc import allocate_registers

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 512, 128)) for _ in range(3))
    module = tessera.kernels.flash_attention(head_dim=128, causal=causal)
    sig = signature(kernels(module)[0])
    target = tessera.lower_to_target(module, sig.name)
    allocation = allocate_registers(target) if checked else None

    def launch() -> None:
        arguments, sizes = prepare_arguments(sig, [q, k, v])
        run_target_kernel(target, arguments, sizes, allocation)

    launch()
    launch()
    arguments, sizes = prepare_arguments(sig, [q, k, v])
    _collect(True)
    run_target_kernel(target, arguments, sizes, allocation)
    _collect(False)


def _ptx_launch() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    import ptx_exec

    grid = argparse.Namespace(head_dim=128, causal=False, seq_q=512, seq_k=1024, repeats=1)
    ptx_exec.executor_grid_seconds(grid, warm=True, before_timed=lambda: _collect(True))
    _collect(False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("simulator", choices=("cta", "ptx"))
    parser.add_argument("--causal", action="store_true", help="cta: the causal kernel (four leaders at 512 x 1)")
    parser.add_argument("--unchecked", action="store_true", help="cta: no register-file check")
    parser.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "tessera-launch.callgrind"),
                        help="callgrind's output file (default: in the temporary directory)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        sys.setswitchinterval(100.0)
        if args.simulator == "cta":
            _cta_launch(args.causal, not args.unchecked)
        else:
            _ptx_launch()
        return
    missing = [tool for tool in ("valgrind", "callgrind_control", "setarch") if shutil.which(tool) is None]
    if missing:
        sys.exit(f"launch_instructions: needs {', '.join(missing)} on PATH")
    command = ["setarch", "-R", "valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={args.out}", sys.executable, __file__, *sys.argv[1:], "--inside"]
    run = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True,
                         text=True)
    if run.returncode != 0:
        sys.exit(f"launch_instructions: the run under callgrind failed ({run.returncode}):\n{run.stderr[-4000:]}")
    totals = re.search(r"^totals:\s*(\d+)", Path(ROOT, args.out).read_text(), re.MULTILINE)
    if totals is None:
        sys.exit(f"launch_instructions: no totals in {args.out}")
    label = "PTX executor, flash d128 4 CTAs 512 x 1024" if args.simulator == "ptx" else (
        f"CTA simulator, flash d128 512 x 1, {'causal' if args.causal else 'non-causal'}, "
        f"{'unchecked' if args.unchecked else 'checked'}")
    print(f"{label}: {int(totals.group(1)):,} instructions, one warm launch ({args.out})")


if __name__ == "__main__":
    main()
