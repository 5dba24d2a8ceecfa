"""Which packages the distribution installs; everything else about it is in pyproject.toml.

`[tool.setuptools.package-dir]` in pyproject.toml maps each top-level folder into the `tessera` package
(`tessera/` -> tessera, `dialects/` -> tessera.dialects, `passes/` -> tessera.passes, `tools/` -> tessera.tools).
Every package below those folders is found by setuptools' discovery and installed under its mapped name, so a
new subpackage is never left out of the wheel by a list that forgot it. Discovery is that of namespace packages
(PEP 420): a folder of modules is a package even before it has an `__init__.py`, as it is when imported from a
checkout. Nothing outside those folders (tests/, bench/, examples/) is a package of the distribution.

Each build starts from an empty `build/lib/tessera` (`FreshBuildPy`): setuptools copies the checkout's modules over
what an earlier build left there and keeps the rest, so a module deleted or split since that build went into the
wheel beside its replacement (a wheel built in a checkout that had built one before held the old
`interpreters/ptx/tensor.py`, which no longer imports).
"""

import shutil
import tomllib
from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def mapped_packages() -> list[str]:
    """Each package-dir name, and each package found below its folder under that name as prefix."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    found = set(package_dir)
    for name, folder in package_dir.items():
        found.update(f"{name}.{sub}" for sub in find_namespace_packages(where=str(ROOT / folder),
                                                                          exclude=["__pycache__", "*.__pycache__"]))
    return sorted(found)


class FreshBuildPy(build_py):
    """build_py that first removes the package an earlier build left in its build folder (module docstring)."""

    def run(self):
        stale = Path(self.build_lib) / "tessera"
        if stale.is_dir():
            shutil.rmtree(stale)
        super().run()


setup(packages=mapped_packages(), cmdclass={"build_py": FreshBuildPy})
