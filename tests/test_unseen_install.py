"""What a first-time user of the installed package tries next (unseen round 23, first contact): a misspelt pass
name, `python -m tessera`, `tessera-run --version`, a .ptx file that is not there. Each ends in the answer a user
can act on, never Python's own words (`No module named tessera.__main__`, `[Errno 2] ...`). The same checks
against the installed wheel are in tests/test_wheel.py. In this process: about 1 s."""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

import inprocess
import tessera
import tessera.kernels
from tessera.passes import PipelineError
from tessera.tools import tessera_opt, tessera_run

ROOT = Path(__file__).resolve().parents[1]
GEMM = ROOT / "examples" / "gemm.mlir"
VECTOR_ADD = ROOT / "tests" / "ptx_kernels" / "vector_add.ptx"


@pytest.mark.parametrize("spec, meant", [
    ("defualt-pipeline", "default-pipeline"),                       # a named pipeline
    ("assign-swizle", "assign-swizzle"),                            # a pass of Tessera's
    ("canonicalize,cse,pipline-loops{stages=3}", "pipeline-loops"),  # one element of several, with options
    ("canonicalise", "canonicalize"),                               # one of xDSL's
])
def test_a_misspelt_pass_is_refused_with_the_one_meant(spec, meant, capsys):
    """Regression: xDSL's "Unrecognized passes: ['defualt-pipeline']" named the typo but not the pass."""
    hint = f"(did you mean '{meant}'?)"
    status, _, err = inprocess.main_in_process(tessera_opt.main, capsys, str(GEMM), "-p", spec)
    assert status == 1 and err.startswith(f"tessera-opt: error: invalid pass pipeline '{spec}'") and hint in err, err
    status, _, err = inprocess.main_in_process(tessera_run.main, capsys, str(GEMM), "-d", "M=64", "-d", "N=64",
                                               "-d", "K=64", "-p", spec)
    assert status == 1 and hint in err, err
    with pytest.raises(PipelineError, match=r"Unrecognized passes: .*" + hint.replace("(", r"\(").replace("?)", r"\?\)")):
        tessera.compile(tessera.kernels.gemm(), pipeline=spec)


def test_a_pass_name_close_to_none_gets_no_guess(capsys):
    status, _, err = inprocess.main_in_process(tessera_opt.main, capsys, str(GEMM), "-p", "no-such-pass")
    assert status == 1 and err == "tessera-opt: error: invalid pass pipeline 'no-such-pass': Unrecognized passes: " \
                                  "['no-such-pass']\n", err


def test_python_m_tessera_names_the_version_and_the_tools():
    """Regression: `python -m tessera` said "No module named tessera.__main__; 'tessera' is a package"."""
    proc = inprocess.run([sys.executable, "-m", "tessera"])
    assert proc.returncode == 0 and proc.stdout.startswith(f"tessera {tessera.__version__}: "), proc.stderr
    assert "tessera-opt FILE" in proc.stdout and "tessera-run FILE" in proc.stdout
    proc = inprocess.run([sys.executable, "-m", "tessera", "gemm.mlir"])
    assert proc.returncode == 2 and proc.stderr.startswith("python -m tessera: error: takes no arguments (got gemm.mlir)")


@pytest.mark.parametrize("flag", ["-v", "--version"])
def test_both_tools_print_the_package_version(flag, capsys):
    """Regression: `tessera-run --version` was a usage error (tessera-opt has had -v/--version)."""
    xdsl = importlib.metadata.version("xdsl")
    for main, name in ((tessera_run.main, "tessera-run"), (tessera_opt.main, "tessera-opt")):
        status, out, _ = inprocess.main_in_process(main, capsys, flag)
        assert status == 0 and out == f"{name} {tessera.__version__} (xdsl {xdsl})\n", out


def test_a_ptx_file_that_cannot_be_read_is_named_as_an_mlir_file_is(tmp_path, capsys):
    """Regression: a missing .ptx file gave "tessera-run: error: [Errno 2] No such file or directory: 'x.ptx'"."""
    missing = tmp_path / "missing.ptx"
    status, _, err = inprocess.main_in_process(tessera_run.main, capsys, str(missing))
    assert status == 1 and err == f"tessera-run: error: cannot read '{missing}': No such file or directory\n", err
    folder = tmp_path / "folder.ptx"
    folder.mkdir()
    status, _, err = inprocess.main_in_process(tessera_run.main, capsys, str(folder))
    assert status == 1 and err == f"tessera-run: error: cannot read '{folder}': Is a directory\n", err
    json = tmp_path / "missing.json"
    status, _, err = inprocess.main_in_process(tessera_run.main, capsys, str(VECTOR_ADD), "--arg", f"struct:{json}")
    assert status == 1 and f"--arg struct:{json}: cannot read '{json}': No such file or directory" in err, err


def test_the_autograd_module_without_torch_says_how_to_get_it(monkeypatch):
    """Regression: `import tessera.runtime.autograd` without PyTorch was Python's bare "No module named 'torch'"
    (the GPU runtime has named its extra, cuda-bindings, all along). The error keeps its name, torch, for code
    that tells optional extras apart (tests/test_wheel.py's OPTIONAL_IMPORTS)."""
    import importlib

    monkeypatch.setitem(sys.modules, "torch", None)  # what `import torch` finds where it is not installed
    monkeypatch.delitem(sys.modules, "tessera.runtime.autograd", raising=False)
    with pytest.raises(ModuleNotFoundError, match=r"tessera.runtime.autograd needs PyTorch, which is not installed: "
                                                  r"pip install torch .*pip install '.\[torch\]'") as caught:
        importlib.import_module("tessera.runtime.autograd")
    assert caught.value.name == "torch"


def test_a_ptx_file_run_without_its_arguments_lists_its_parameters(tmp_path, capsys):
    """What a user runs next after the README's `tessera-opt ... -t ptx -o flash_attention.ptx`: `tessera-run
    flash_attention.ptx`. Regression: "entry ... has 8 parameters, got 0 arguments" said neither which nor how."""
    ptx = tmp_path / "gemm.ptx"
    ptx.write_text(tessera.compile(tessera.kernels.gemm()))
    status, _, err = inprocess.main_in_process(tessera_run.main, capsys, str(ptx))
    assert status == 1 and "parameters (param_A_map" in err and "got 0 --arg: give one per parameter, in order" in err
    assert "tessera-run FILE.mlir --level ptx" in err, err


def test_python_m_tessera_into_a_reader_that_stops_early_prints_no_traceback():
    """Regression (found at once): `python -m tessera | head -1` ended in a BrokenPipeError traceback."""
    import subprocess

    reader = subprocess.Popen([sys.executable, "-m", "tessera"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader.stdout.close()  # the reader has gone before the first line is written
    _, err = reader.communicate(timeout=60)
    assert reader.returncode in (0, 1) and b"Traceback" not in err, err.decode()


def test_python_m_tessera_opt_calls_itself_tessera_opt():
    """docs/tools.md gives `python -m tessera.tools.tessera_opt` beside the script. Regression: its usage and
    argparse's errors said `tessera_opt.py` (xDSL names its parser after sys.argv[0])."""
    proc = inprocess.run([sys.executable, "-m", "tessera.tools.tessera_opt", "-t", "nosuch"])
    assert proc.returncode == 2 and proc.stderr.splitlines()[0].startswith("usage: tessera-opt [-h]"), proc.stderr
    assert "tessera-opt: error: argument -t/--target: invalid choice: 'nosuch'" in proc.stderr


def test_no_module_sets_an_array_shape_in_place():
    """NumPy 2.5, which pip installs on Python 3.12 and later (pyproject allows it; CI's Python 3.11 gets 2.4),
    deprecates assigning an array's `.shape` (and `.strides`): under `python -W error::DeprecationWarning` on
    Python 3.13 the CTA simulator's first wgmma failed, and a later NumPy removes it. Regression:
    `fragment_view.FragmentPlan._arranged` split its pairs so; it now reshapes and checks for a copy."""
    import ast
    import re

    offenders = []
    for folder in ("tessera", "dialects", "passes", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if not re.search(r"\.(shape|strides)\s*(=[^=]|[-+*/]=)|\.(shape|strides)\s*:", text):
                continue  # parsed only where an assignment may be (parsing every module takes seconds)
            for node in ast.walk(ast.parse(text)):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno}" for target in targets
                              if isinstance(target, ast.Attribute) and target.attr in ("shape", "strides")
                              and not (isinstance(target.value, ast.Name) and target.value.id == "self")]
    assert not offenders, f"array shapes set in place (use reshape): {offenders}"


def test_a_random_draw_is_located_through_python_313s_paired_loads(monkeypatch):
    """Python 3.13 loads two locals in one instruction (LOAD_FAST_LOAD_FAST, argval ('score', 'rng')), so the
    refusal of a draw from a generator passed by keyword named the modifier's `def` line, not the line reading
    `rng` (tests/test_attention_mods_unseen7.py failed so on Python 3.13). The 3.13 instruction is written here
    over this Python's two LOAD_FASTs, so that any Python checks it."""
    import dis

    from tessera.variants import randomness

    def keyword_noise(score, b, h, q_idx, kv_idx, *, rng):
        return score + rng.standard_normal()

    real = dis.get_instructions

    def paired(code):
        instructions = list(real(code))
        for i, (first, second) in enumerate(zip(instructions, instructions[1:])):
            if (first.opname, second.opname, second.argval) == ("LOAD_FAST", "LOAD_FAST", "rng"):
                paired_load = first._replace(opname="LOAD_FAST_LOAD_FAST", argval=(first.argval, "rng"))
                return [*instructions[:i], paired_load, *instructions[i + 2:]]
        return instructions  # Python 3.13 and later: already paired

    monkeypatch.setattr(dis, "get_instructions", lambda code: iter(paired(code)) if code is keyword_noise.__code__
                        else real(code))
    assert any(i.opname == "LOAD_FAST_LOAD_FAST" for i in dis.get_instructions(keyword_noise.__code__))
    line = int(randomness._naming_line(keyword_noise, {"rng"}).rsplit(":", 1)[1])
    assert line == keyword_noise.__code__.co_firstlineno + 1, line
