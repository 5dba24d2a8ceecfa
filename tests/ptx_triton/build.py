"""Compile the Triton kernels of kernels.py for sm_90a (no GPU needed) to the PTX the tests run.

    python -m venv .venv && .venv/bin/pip install 'triton==3.9.*' numpy ml_dtypes
    .venv/bin/python tests/ptx_triton/build.py [NAME ...]        # NAME.ptx here (default: every golden)
    .venv/bin/python tests/ptx_triton/build.py --out DIR NAME     # any kernel, into DIR

Each PTX starts with one line naming the Triton release, the kernel and its launch (threads per block,
dynamic shared bytes, global scratch bytes), which tests/test_ptx_triton.py reads. Triton's `.loc`/`.file`
lines and its DWARF sections are dropped (they carry the absolute path of kernels.py); the rest is Triton's
text. Kernels whose PTX is large (`Spec.golden` False) are not committed: their slow tests compile them here.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent


def compile_ptx(name: str) -> str:
    """Triton's PTX for kernel `name` of kernels.SPECS, with its header line."""
    sys.path.insert(0, str(HERE))
    import kernels
    import triton
    from triton.backends.compiler import GPUTarget

    spec = kernels.SPECS[name]
    fn = spec.fn
    attrs = {(fn.arg_names.index(arg),): [["tt.divisibility", 16]] for arg in spec.divisible}
    source = triton.compiler.ASTSource(fn=fn, signature=spec.signature, constexprs=spec.constexprs, attrs=attrs)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, said out loud
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"ptx_version": 85, **spec.options})
    meta = compiled.metadata
    text = compiled.asm["ptx"]
    text = re.sub(r"^\s*\.(loc|file)\b.*\n", "", text, flags=re.M)
    text = re.sub(r"^\s*\.section\s+\.debug_\w+\s*\{.*?^\s*\}\s*\n", "", text, flags=re.M | re.S)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("//")) + "\n"
    options = ", ".join(f"{key}={value}" for key, value in spec.options.items())
    header = (f"// Triton {triton.__version__}: tests/ptx_triton/build.py {name} ({fn.__name__}, {options}). "
              f"Launch: block ({meta.num_warps * 32}, 1, 1); dynamic shared bytes {meta.shared}; "
              f"global scratch bytes {meta.global_scratch_size}.\n")
    return header + text


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    import kernels

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="kernels of kernels.SPECS (default: every golden one)")
    parser.add_argument("--out", type=Path, default=HERE, help="folder for NAME.ptx (default: here)")
    args = parser.parse_args(argv)
    names = args.names or [name for name, spec in kernels.SPECS.items() if spec.golden]
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        text = compile_ptx(name)
        (args.out / f"{name}.ptx").write_text(text)
        print(f"{name}.ptx: {len(text)} bytes; {text.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
