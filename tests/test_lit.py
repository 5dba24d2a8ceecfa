"""Run the lit/FileCheck suite in tests/lit (tessera-opt round trips, verifier and kernel-ABI diagnostics)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

LIT_DIR = Path(__file__).parent / "lit"


def test_lit_suite() -> None:
    # lit 23 has no `python -m lit`; run its console-script entry point with this interpreter, next to which
    # lit.cfg.py finds tessera-opt and filecheck.
    result = subprocess.run(
        [sys.executable, "-c", "import lit.main; lit.main.main()", "-v", str(LIT_DIR)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"lit failed:\n{output}"
    assert "Passed" in output and "Failed" not in output, output
