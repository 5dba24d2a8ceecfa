"""Which packages the distribution installs; everything else about it is in pyproject.toml.

`[tool.setuptools.package-dir]` in pyproject.toml maps each top-level folder into the `tessera` package
(`tessera/` -> tessera, `dialects/` -> tessera.dialects, `passes/` -> tessera.passes, `tools/` -> tessera.tools).
Every package below those folders is found by setuptools' discovery and installed under its mapped name, so a
new subpackage is never left out of the wheel by a list that forgot it. Discovery is that of namespace packages
(PEP 420): a folder of modules is a package even before it has an `__init__.py`, as it is when imported from a
checkout. Nothing outside those folders (tests/, bench/, examples/) is a package of the distribution.
"""

import tomllib
from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).resolve().parent


def mapped_packages() -> list[str]:
    """Each package-dir name, and each package found below its folder under that name as prefix."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    found = set(package_dir)
    for name, folder in package_dir.items():
        found.update(f"{name}.{sub}" for sub in find_namespace_packages(where=str(ROOT / folder),
                                                                          exclude=["__pycache__", "*.__pycache__"]))
    return sorted(found)


setup(packages=mapped_packages())
