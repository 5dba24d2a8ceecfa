"""`import tessera` alone reaches the public subpackages (`tessera.passes`, `tessera.validate`, ...): each is imported
on first access (PEP 562), so the import itself stays light. Run in fresh interpreters: the test process has long
imported everything."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import tessera

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("passes", "interpreters", "kernels", "runtime", "validate", "validation", "ptx", "toolchain", "tools",
         "lowering", "regalloc", "host")
"""Submodules that `import tessera` must not import (the passes, interpreters and kernel builders take most of
the time of importing everything)."""


def fresh(code: str):
    """What `code` prints as JSON on its last line, run after `import tessera` in a new interpreter."""
    proc = subprocess.run([sys.executable, "-c", f"import json, sys\nimport tessera\n{code}"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def test_import_tessera_imports_no_heavy_submodule():
    loaded = fresh("print(json.dumps([n for n in tessera.SUBMODULES if f'tessera.{n}' in sys.modules]))")
    assert not set(HEAVY) & set(loaded), f"import tessera imported {sorted(set(HEAVY) & set(loaded))}"


def test_the_documented_submodules_are_reached_on_first_access():
    found = fresh("""
before = {n: f'tessera.{n}' in sys.modules for n in ('passes', 'validate', 'ptx', 'kernels')}
print(json.dumps({
    "before": before,
    "pipeline": tessera.passes.DEFAULT_PIPELINE,
    "validate": callable(tessera.validate.validate),
    "print_ptx": callable(tessera.ptx.print_ptx),
    "gemm": tessera.kernels.gemm.__module__,
}))
""")
    assert found["before"] == {"passes": False, "validate": False, "ptx": False, "kernels": False}
    assert found["pipeline"].endswith("allocate-registers")
    assert found["validate"] and found["print_ptx"]
    assert found["gemm"] == "tessera.kernels.gemm"


def test_every_submodule_is_the_module_and_listed_by_dir():
    result = fresh("""
import importlib, types
same = {n: getattr(tessera, n) is importlib.import_module(f'tessera.{n}') for n in tessera.SUBMODULES}
print(json.dumps({"same": same, "dir": dir(tessera), "kinds": {n: type(getattr(tessera, n)).__name__ for n in tessera.SUBMODULES}}))
""")
    assert all(result["same"].values()), result["same"]
    assert set(result["kinds"].values()) == {"module"}
    assert set(tessera.SUBMODULES) | {"attention", "attention_backward", "attention_with_kvcache"} <= set(result["dir"])
    assert {"compile", "interpret", "LEVELS"} <= set(result["dir"])


def test_an_unknown_attribute_is_an_attribute_error():
    result = fresh("""
try:
    tessera.pases
    print(json.dumps("no error"))
except AttributeError as e:
    print(json.dumps([str(e), hasattr(tessera, "nope"), 'tessera.pases' in sys.modules]))
""")
    assert result == ["module 'tessera' has no attribute 'pases'", False, False]


def test_every_subpackage_is_a_lazy_submodule():
    """A new subpackage (a folder with an __init__.py below a folder that pyproject's package-dir maps into
    tessera) must be added to tessera.SUBMODULES, or `tessera.NAME` would fail until something imports it."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    subpackages = {name.split(".")[1] for name in package_dir if name.count(".") == 1}
    subpackages |= {p.parent.name for p in (ROOT / package_dir["tessera"]).glob("*/__init__.py")}
    missing = sorted(subpackages - set(tessera.SUBMODULES))
    assert not missing, f"add {missing} to tessera.SUBMODULES (tessera/__init__.py): `tessera.NAME` must reach them"
