# Lit configuration of Tessera's FileCheck tests: `lit -v tests/lit` (or `pytest tests/test_lit.py`).
#
# RUN lines name the tools as `tessera-opt`, `tessera-run` and `filecheck`, the console scripts of this Python environment,
# and may use TESSERA_ROUNDTRIP, which prints the test's input in the generic form, parses that back and
# checks the (custom-form) result against the file's CHECK lines.

import os
import shlex
import shutil
import sys

import lit.formats

config.name = "tessera"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs"]  # files that RUN lines read, not tests
config.test_source_root = os.path.dirname(__file__)
# lit's scratch files (Output/ folders, test times) go to build/lit, not next to the tests
config.test_exec_root = os.path.join(os.path.dirname(os.path.dirname(config.test_source_root)), "build", "lit")

# The console scripts live next to the Python running lit (a venv's bin/), else on PATH; failing both, run the
# installed modules with that Python.
bin_dirs = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
config.environment["PATH"] = bin_dirs
if "TESSERA_DEBUG" in os.environ:
    config.environment["TESSERA_DEBUG"] = os.environ["TESSERA_DEBUG"]


def tool(name, module):
    return shutil.which(name, path=bin_dirs) or f"{shlex.quote(sys.executable)} -m {module}"


tessera_opt = tool("tessera-opt", "tessera.tools.tessera_opt")
tessera_run = tool("tessera-run", "tessera.tools.tessera_run")
filecheck = tool("filecheck", "filecheck")

# Substitutions are regular expressions applied in order. TESSERA_ROUNDTRIP comes first, so that the tool
# substitutions expand the names in it; those match whole words only (not tessera-opt-errors.mlir).
config.substitutions.append(
    ("TESSERA_ROUNDTRIP", "tessera-opt %s --split-input-file --print-op-generic | tessera-opt --split-input-file | filecheck %s")
)
config.substitutions.append((r"(?<![\w/.-])tessera-opt(?![\w.-])", tessera_opt))
config.substitutions.append((r"(?<![\w/.-])tessera-run(?![\w.-])", tessera_run))
config.substitutions.append((r"(?<![\w/.-])filecheck(?![\w.-])", filecheck))
