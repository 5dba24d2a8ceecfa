"""The distribution as a user installs it: the sdist and the wheel built from this checkout, installed into a fresh
virtual environment that cannot see the checkout, must import every module of the package and run both console
tools. (The suite otherwise runs against the editable install, which finds every module in the checkout whether
or not the wheel would hold it.)

One test, in steps, so that the build happens once even when the suite runs on several workers. It needs the
build backend of pyproject.toml (setuptools>=77, in the `test` extra) in this environment and no network: a
failure to build fails the test with the backend's output, it is never skipped.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL_IMPORTS = {"torch": "tessera.runtime.autograd's PyTorch integration", "cuda": "the `cuda` extra (cuda-bindings)"}
"""Top-level modules of optional extras: a module of the package that needs one of them and does not find it in
the fresh environment is reported as skipped by that name; every other import failure fails the test."""
COPY_IGNORED_AT_ROOT = {".git", ".venv", "venv", "build", "dist", "out", ".pytest_cache"}
"""Local state at the top of a checkout that is not copied for the build (the checkout's own environment is
large; a decoy `.venv` is planted in the copy instead, to check that it stays out of the archives)."""
PROBES = {"tessera/_wheel_probe/nested/__init__.py": "tessera._wheel_probe.nested",
          "passes/_wheel_probe/__init__.py": "tessera.passes._wheel_probe"}
"""New packages (source file: module) planted in the copy before building, one below a folder that has no __init__.py: package
discovery must install them without anyone listing them."""
STALE_BUILD_MODULE = "build/lib/tessera/interpreters/ptx/tensor.py"
"""A module an earlier build left in the build folder and the checkout has since deleted (tensor.py was split),
planted in the copy: the wheel must hold only the checkout's modules (setup.py's `FreshBuildPy`)."""


def _run(args, cwd, what, timeout=120, env=None):
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        pytest.fail(f"{what} failed (exit {proc.returncode}): {' '.join(map(str, args))}\n"
                    f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


def _copy_checkout(dest: Path) -> None:
    def ignore(folder, names):
        ignored = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
        if Path(folder) == ROOT:
            ignored |= COPY_IGNORED_AT_ROOT & set(names)
        return ignored

    shutil.copytree(ROOT, dest, ignore=ignore)
    (dest / ".venv" / "lib").mkdir(parents=True)
    (dest / ".venv" / "lib" / "decoy.py").write_text("raise ImportError('a local environment was packaged')\n")
    for probe in PROBES:
        (dest / probe).parent.mkdir(parents=True)
        (dest / probe).write_text("PROBE = True\n")
    stale = dest / STALE_BUILD_MODULE
    stale.parent.mkdir(parents=True)
    stale.write_text("raise ImportError('a module an earlier build left in build/lib was packaged')\n")


def _build(backend_hook: str, source: Path, out: Path) -> Path:
    """Call the build backend's PEP 517 hook (`build_sdist` or `build_wheel`) as pip and `python -m build` do,
    without build isolation (no download); the one archive it writes."""
    out.mkdir()
    code = f"import sys; from setuptools import build_meta; build_meta.{backend_hook}(sys.argv[1])"
    _run([sys.executable, "-c", code, str(out)], source, f"building the {backend_hook.removeprefix('build_')}")
    archives = list(out.iterdir())
    assert len(archives) == 1, archives
    return archives[0]


def _module_files(source: Path) -> set[str]:
    """Where each Python file of the package folders lies inside the package, by pyproject's package-dir mapping
    (`passes/x.py` -> `tessera/passes/x.py`)."""
    package_dir = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    files = set()
    for name, folder in package_dir.items():
        for path in (source / folder).rglob("*.py"):
            if "__pycache__" not in path.parts:
                files.add("/".join([*name.split("."), *path.relative_to(source / folder).parts]))
    return files


def _dependency_folders() -> list[str]:
    """The folders on this interpreter's path that hold the distribution's dependencies (pyproject's
    [project] dependencies), for the fresh environment to see them without the editable install of tessera."""
    requirements = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    folders = []
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
        try:
            folder = Path(importlib.metadata.distribution(name).locate_file("")).resolve()
        except importlib.metadata.PackageNotFoundError:
            pytest.fail(f"the dependency {requirement!r} is not installed here (pip install -e '.[test]')")
        if (folder / "tessera").exists() or (folder / "tessera.py").exists():
            pytest.fail(f"{folder} holds the dependency {name} and a module named tessera: the fresh environment "
                        "could not tell the installed wheel from it")
        if str(folder) not in folders:
            folders.append(str(folder))
    return folders


def _fresh_install(wheel: Path, tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    """A fresh virtual environment that sees the dependencies (through a .pth naming their folders, which does not
    run the editable install's finder) but no tessera until `wheel` is installed into it: (venv, its
    site-packages, the environment variables to run it with)."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, "creating a virtual environment")
    python = venv / "bin" / "python"
    site = _run([python, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path,
                "asking the fresh environment for its site-packages").stdout.strip()
    Path(site, "tessera_test_dependencies.pth").write_text("\n".join(_dependency_folders()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    before = _run([python, "-I", "-c", "import importlib.util; print(importlib.util.find_spec('tessera'))"],
                  tmp_path, "looking for tessera before the install", env=env).stdout.strip()
    assert before == "None", f"the fresh environment finds a tessera before the wheel is installed: {before}"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index", str(wheel)],
         tmp_path, "installing the wheel", env=env)
    return venv, site, env


IMPORT_EVERY_MODULE = """
import importlib, json, os, sys
import tessera

optional = set(sys.argv[1].split(","))
package = os.path.dirname(tessera.__file__)
names = []
for folder, subfolders, files in os.walk(package):
    subfolders[:] = sorted(s for s in subfolders if s != "__pycache__")
    dotted = os.path.relpath(folder, os.path.dirname(package)).replace(os.sep, ".")
    names += [dotted if f == "__init__.py" else dotted + "." + f[:-3] for f in sorted(files) if f.endswith(".py")]
failed, skipped = {}, {}
for name in names:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] in optional:
            skipped[name] = e.name
        else:
            failed[name] = f"ModuleNotFoundError: {e}"
    except Exception as e:
        failed[name] = f"{type(e).__name__}: {e}"
print(json.dumps({"file": tessera.__file__, "modules": names, "failed": failed, "skipped": skipped}))
"""


def test_the_wheel_installs_a_working_tessera(tmp_path):
    try:
        backend = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        backend = "none"
    if int(re.match(r"[0-9]*", backend).group(0) or 0) < 77:
        pytest.fail(f"building the wheel needs setuptools>=77 (pyproject's build backend), found {backend}: "
                    "pip install -e '.[test]'")

    # 1. Build as `python -m build` does: the sdist from (a copy of) the checkout, the wheel from the sdist.
    source = tmp_path / "checkout"
    _copy_checkout(source)
    sdist = _build("build_sdist", source, tmp_path / "sdist")
    with tarfile.open(sdist) as archive:
        sdist_names = [n.split("/", 1)[1] for n in archive.getnames() if "/" in n]
        unpacked = tmp_path / "unpacked"
        if hasattr(tarfile, "data_filter"):
            archive.extractall(unpacked, filter="data")
        else:  # Python 3.11 before 3.11.4
            archive.extractall(unpacked)
    for folder in ("tests/", "bench/", ".venv/"):
        assert not [n for n in sdist_names if n.startswith(folder)], f"the sdist holds {folder}"
    wheel = _build("build_wheel", next(unpacked.iterdir()), tmp_path / "wheel")

    # 2. The wheel holds every Python file of the package folders under its package name, the planted new packages
    # among them, and nothing else (no tests, benchmarks or environments).
    with zipfile.ZipFile(wheel) as archive:
        wheel_names = archive.namelist()
    distribution, version = wheel.name.split("-")[:2]
    # The wheel `pip install .` builds in the checkout itself, over what an earlier build left in build/lib
    # (STALE_BUILD_MODULE), holds the same files.
    with zipfile.ZipFile(_build("build_wheel", source, tmp_path / "in-tree")) as archive:
        in_tree = archive.namelist()
    assert sorted(in_tree) == sorted(wheel_names), \
        f"the in-tree wheel differs: {sorted(set(in_tree) ^ set(wheel_names))}"
    assert {n.split("/")[0] for n in wheel_names} == {"tessera", f"{distribution}-{version}.dist-info"}
    expected = _module_files(source)
    assert {m.replace(".", "/") + "/__init__.py" for m in PROBES.values()} <= expected
    packaged = {n for n in wheel_names if n.endswith(".py")}
    assert not expected - packaged, f"modules missing from the wheel: {sorted(expected - packaged)}"
    assert not packaged - expected, f"files in the wheel that are no module of the package: {sorted(packaged - expected)}"

    # 3. A fresh environment sees the dependencies but no tessera until the wheel is installed.
    venv, site, env = _fresh_install(wheel, tmp_path)
    python = venv / "bin" / "python"

    # 4. Every module of the installed package imports (those of optional extras that are absent are named).
    proc = _run([python, "-I", "-c", IMPORT_EVERY_MODULE, ",".join(OPTIONAL_IMPORTS)], tmp_path,
                "importing every module", env=env)
    report = json.loads(proc.stdout.splitlines()[-1])
    assert Path(report["file"]).is_relative_to(site), f"tessera was imported from {report['file']}, not the wheel"
    assert not report["failed"], f"modules of the installed wheel that do not import: {report['failed']}"
    assert len(report["modules"]) == len(expected)
    assert set(PROBES.values()) <= set(report["modules"])
    for module, missing in report["skipped"].items():
        print(f"not imported: {module} (needs {missing}: {OPTIONAL_IMPORTS[missing.split('.')[0]]})")

    # 5. The console scripts of the wheel run a real pipeline and a kernel, from outside the checkout.
    from tessera.passes import DEFAULT_PIPELINE

    gemm = ROOT / "examples" / "gemm.mlir"
    opt = _run([venv / "bin" / "tessera-opt", gemm, "-p", DEFAULT_PIPELINE, "-t", "ptx"], tmp_path,
               "tessera-opt from the wheel", env=env)
    assert ".target sm_90a" in opt.stdout and "wgmma.mma_async" in opt.stdout
    run = _run([venv / "bin" / "tessera-run", gemm, "--level", "ptx", "-d", "M=70", "-d", "N=64", "-d", "K=32",
                "--check"], tmp_path, "tessera-run from the wheel", env=env)
    assert ": ok" in run.stdout, run.stdout
    for proc in (opt, run):
        assert "Traceback" not in proc.stderr

    # 6. What a first-time user tries next (tests/test_unseen_install.py runs the same in this process): `python -m
    # tessera` names the version the distribution was built with; `tessera-opt --help` every pass and named pipeline
    # it accepts; a misspelt pass is refused with the one meant.
    from tessera.passes import PASSES, named_pipelines

    about = _run([python, "-I", "-m", "tessera"], tmp_path, "python -m tessera from the wheel", env=env)
    assert about.stdout.startswith(f"tessera {version}: "), about.stdout
    listing = _run([venv / "bin" / "tessera-opt", "--help"], tmp_path, "tessera-opt --help from the wheel", env=env)
    unlisted = [name for name in [*PASSES, *named_pipelines()] if f"  {name}" not in listing.stdout]
    assert not unlisted, f"tessera-opt --help does not list {unlisted}"
    typo = subprocess.run([venv / "bin" / "tessera-opt", gemm, "-p", "defualt-pipeline"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert typo.returncode == 1 and "(did you mean 'default-pipeline'?)" in typo.stderr, typo.stderr
    for proc in (about, listing, typo):
        assert "Traceback" not in proc.stderr


DOCS_DATA = ("examples", "bench", "tests/ptx_kernels", "tests/user_kernels", "tests/rewriter")
"""The checkout's folders that blocks of the docs read by relative path (a user runs them from a checkout)."""


def reads_checkout(code: str) -> bool:
    """Whether a block names one of `DOCS_DATA` (`examples/gemm.mlir`, `Path("bench")`): it runs from a checkout;
    every other block must run from any directory (docs/install.md)."""
    return any(re.search(rf"(?<![\w/]){re.escape(folder)}\b", code) for folder in DOCS_DATA)


@pytest.mark.slow
def test_docs_blocks_run_with_the_wheel(tmp_path):
    """Every python and shell block of README.md and docs/*.md that is not gpu-only runs, as written, with the
    wheel installed in a fresh environment, from a directory outside the checkout: a block that names one of the
    data folders (`reads_checkout`) from one that holds copies of only those folders, every other block from an
    empty one. No block may depend on the editable install (the package's location, modules outside it), nor
    on a checkout it does not name. test_docs_snippets runs the same blocks against the editable install."""
    import test_docs_snippets as snippets

    source = tmp_path / "checkout"
    _copy_checkout(source)
    venv, _, env = _fresh_install(_build("build_wheel", source, tmp_path / "wheel"), tmp_path)
    user, anywhere = tmp_path / "user", tmp_path / "anywhere"
    for folder in DOCS_DATA:
        shutil.copytree(ROOT / folder, user / folder)
    anywhere.mkdir()
    env = dict(env, PATH=str(venv / "bin") + os.pathsep + env.get("PATH", ""), OPENBLAS_NUM_THREADS="1")
    failed = []
    for block in snippets.ALL_BLOCKS:
        if block.tag not in snippets.RUN or block.gpu_only or (block.needs and find_spec(block.needs) is None):
            continue  # the fresh environment sees this one's dependencies: a module missing here is missing there
        script = tmp_path / "block.py"
        script.write_text(block.padded_code, encoding="utf-8")
        command = ([venv / "bin" / "python", script] if block.tag == "python"
                   else ["bash", "-e", "-o", "pipefail", "-c", block.code])
        proc = subprocess.run(command, cwd=user if reads_checkout(block.code) else anywhere, env=env,
                              capture_output=True, text=True, timeout=snippets.TIMEOUT_S)
        if proc.returncode != 0:
            failed.append(f"{block.name}: exit {proc.returncode}\n{proc.stderr[-1500:]}")
    assert not failed, "\n".join(failed)


def test_install_hints_name_what_pip_can_install():
    """The distribution `tessera-compiler` is installed from its source, not from PyPI: no message or docstring
    of the package may tell a user to `pip install 'tessera-compiler[EXTRA]'` (the extras install from a checkout,
    `pip install '.[EXTRA]'`, or by their packages' own names), nor `pip install tessera[EXTRA]`, which installs
    PyPI's unrelated `tessera` (regression: tessera.toolchain.find_all_ptxas's docstring said so)."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    hint = re.compile(r"tessera-compiler\[|pip install ['\"]?tessera\b")
    offenders = [f"{path.relative_to(ROOT)}:{number}"
                 for folder in package_dir.values() for path in sorted((ROOT / folder).rglob("*.py"))
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if hint.search(line)]
    assert not offenders, f"hints to install extras from PyPI, where tessera-compiler is not: {offenders}"
