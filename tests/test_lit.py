"""The lit/FileCheck suite in tests/lit (tessera-opt round trips, verifier and kernel-ABI diagnostics).

Each lit file is a test of its own, run in this process by `lit_inprocess` (lit's RUN lines, substitutions and
shell syntax, the console scripts called in-process): xdist spreads the files over the workers, and no tool
starts a Python of its own. A file with a RUN line that needs a real shell runs under lit instead. `test_lit_config` runs one file under real lit (lit.cfg.py and the console
scripts as installed); `pytest -m slow tests/test_lit.py` runs the whole suite under real lit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import lit_inprocess

CONFIG = lit_inprocess.load_config()
FILES = lit_inprocess.lit_files(CONFIG)


def _lit(*args: str) -> str:
    # lit 23 has no `python -m lit`; run its console-script entry point with this interpreter, next to which
    # lit.cfg.py finds tessera-opt and filecheck.
    result = subprocess.run([sys.executable, "-c", "import lit.main; lit.main.main()", "-v", *args],
                            capture_output=True, text=True, timeout=900)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"lit failed:\n{output}"
    assert "Passed" in output and "Failed" not in output, output
    return output


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(lit_inprocess.LIT_DIR)) for p in FILES])
def test_lit_file(path: Path, tmp_path: Path) -> None:
    try:
        passed, log = lit_inprocess.run_file(path, CONFIG, tmp_path)
    except lit_inprocess.Unsupported:  # a RUN line only a shell runs (another program, `&&`): lit runs the file
        _lit(str(path))
        return
    assert passed, f"{path.relative_to(lit_inprocess.LIT_DIR)} failed:\n{log}"


def test_lit_config() -> None:
    """Real lit on one file: lit.cfg.py's substitutions and the installed console scripts work."""
    output = _lit(str(lit_inprocess.LIT_DIR / "tools" / "dominance-invalid.mlir"))
    assert "Passed: 1" in output or "Passed : 1" in output, output


@pytest.mark.slow
def test_lit_suite() -> None:
    """The whole suite under real lit, one process per command (what `lit -v tests/lit` runs)."""
    output = _lit(str(lit_inprocess.LIT_DIR))
    assert f"Passed: {len(FILES)}" in output or f"Passed : {len(FILES)}" in output, output
