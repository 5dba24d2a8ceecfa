"""Every code block of README.md and docs/*.md runs, exactly as written, one test per block.

The convention, by the block's language tag (the word after the opening ```):

- ```python   run as a script in a fresh interpreter (this test's `sys.executable`), from the repository root;
              it must exit with status 0.
- ```sh, ```bash
              run with `bash -e -o pipefail` from the repository root, with this interpreter's bin/ first on PATH
              (so `tessera-opt`, `tessera-run` and `python` are the installed ones); it must exit with status 0.
              These blocks show the command-line tools: each must invoke `tessera-opt` or `tessera-run`. A relative
              path it writes with `-o FILE` or `--save DIR` is removed afterwards (unless it was there before).
- `<!-- gpu-only -->` on the line right before a ```python block: the block needs an H100/H200, so it is
              only compiled (`compile()`: it must be valid Python), never run. Only python blocks may be gpu-only.
- `<!-- needs MODULE -->` on the line right before a ```python block: the block imports an optional package
              (`<!-- needs torch -->`); it runs where MODULE is installed and is skipped, by name, where it is not.
              A block that is not gpu-only and imports torch or cuda must be so marked.
- ```console  commands for a reader to type that the tests do not run: installing, the whole test suite,
              benchmarks, GPU commands.
- ```mlir, ```ptx, ```text
              IR, PTX or output shown, not run.

Any other tag, or a fence without one, fails `test_every_block_has_a_known_tag`: a block cannot escape the tests
by accident. A test is named FILE:LINE, the line of the block's opening fence.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ("python", "sh", "bash")
SHOWN = ("console", "mlir", "ptx", "text")
GPU_ONLY = "<!-- gpu-only -->"
NEEDS = re.compile(r"<!-- needs (?P<module>[\w.]+) -->")
TOOLS = ("tessera-opt", "tessera-run")
OPTIONAL_IMPORT = re.compile(r"^\s*(?:import|from)\s+(torch|cuda)\b", re.MULTILINE)
"""An import of an optional extra's top-level module (`[torch]`, `[cuda]`; tests/test_wheel.py's OPTIONAL_IMPORTS)."""
TIMEOUT_S = 300
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)\s*(?P<tag>[^\s`]*)")


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # of the opening fence, 1-based
    tag: str
    code: str
    gpu_only: bool
    needs: str | None = None  # the optional module a python block imports (`<!-- needs MODULE -->`)

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def padded_code(self) -> str:
        """The code behind as many empty lines as precede it, so a traceback's line numbers are the file's."""
        return "\n" * self.line + self.code


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file (CommonMark fences: ``` or ~~~, indented at most 3 spaces)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            text = lines[j]
            body.append(text[min(indent, len(text) - len(text.lstrip(" "))):])
            j += 1
        previous = next((lines[k].strip() for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        needs = NEEDS.fullmatch(previous)
        found.append(Block(str(path.relative_to(ROOT)), i + 1, opening["tag"].lower(), "\n".join(body) + "\n",
                           previous == GPU_ONLY, needs["module"] if needs else None))
        i = j + 1
    return found


ALL_BLOCKS = [block for path in markdown_files() for block in blocks(path)]


def test_every_block_has_a_known_tag():
    wrong = [f"{b.name}: tag '{b.tag}'" for b in ALL_BLOCKS if b.tag not in RUN + SHOWN]
    wrong += [f"{b.name}: gpu-only marks a '{b.tag}' block (only python blocks may be gpu-only)"
              for b in ALL_BLOCKS if b.gpu_only and b.tag != "python"]
    wrong += [f"{b.name}: needs marks a '{b.tag}' block (only python blocks may need a module)"
              for b in ALL_BLOCKS if b.needs and b.tag != "python"]
    wrong += [f"{b.name}: a {b.tag} block runs neither tessera-opt nor tessera-run (show it as ```console)"
              for b in ALL_BLOCKS if b.tag in ("sh", "bash") and not any(t in b.code for t in TOOLS)]
    wrong += [f"{b.name}: imports {module}, an optional extra's module: mark it <!-- needs {module} --> (a user "
              f"without the extra gets ModuleNotFoundError)"
              for b in ALL_BLOCKS if b.tag == "python" and not b.gpu_only
              for module in sorted(set(OPTIONAL_IMPORT.findall(b.code))) if module != b.needs]
    assert not wrong, "blocks outside the convention of tests/test_docs_snippets.py:\n" + "\n".join(wrong)


def test_every_fence_opens_or_closes_a_block_the_tests_see():
    """A fence indented 4 spaces or more (inside a list item) is no fence to `blocks` (CommonMark's rule), so
    its code would run in no test: every line that starts with ``` or ~~~ must open or close a found block."""
    for path in markdown_files():
        fences = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if re.match(r"\s*(```|~~~)", line))
        found = len(blocks(path))
        assert fences == 2 * found, f"{path.relative_to(ROOT)}: {fences} fence lines, {found} blocks found"


def test_the_readme_and_docs_have_blocks_to_run():
    assert any(b.path == "README.md" and b.tag == "python" for b in ALL_BLOCKS)
    assert any(b.path == "README.md" and b.tag in ("sh", "bash") for b in ALL_BLOCKS)


def test_the_readme_gives_the_test_command_ci_runs():
    """`.ci/run` installs with the test extras and runs pytest; the README's quick start says the same."""
    readme, ci = (ROOT / "README.md").read_text(encoding="utf-8"), (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for command in ("pip install -q -e '.[test,ptx,torch]'", "python -m pytest -q -n auto"):
        assert command in ci, f".ci/run no longer runs {command!r}: update the README's quick start with it"
        assert command in readme, f"the README's quick start must give CI's command {command!r}"


def test_every_docs_page_is_linked_from_the_readme():
    """A page in docs/ that the README does not link is a page no newcomer finds."""
    readme = (ROOT / "README.md").read_text()
    unlinked = [page.name for page in sorted((ROOT / "docs").glob("*.md")) if f"(docs/{page.name})" not in readme]
    assert unlinked == [], f"docs pages not linked from README.md's Documentation list: {unlinked}"


def test_the_pipelines_the_docs_name_exist():
    """The docs give tessera-opt the default pipeline by name (`-p default-pipeline`); a named pipeline they use
    must be one of `tessera.passes.named_pipelines()`, and one spelled out to its register allocation must stay
    `tessera.passes.DEFAULT_PIPELINE`."""
    from tessera.passes import DEFAULT_PIPELINE, named_pipelines

    named = [m for b in ALL_BLOCKS for m in re.findall(r"-p '?([a-z-]+-pipeline)\b", b.code)]
    assert "default-pipeline" in named and set(named) <= set(named_pipelines()), named
    spelled = [m for b in ALL_BLOCKS for m in re.findall(r"-p '([^']*allocate-registers)'", b.code)]
    assert all(p == DEFAULT_PIPELINE for p in spelled), (spelled, DEFAULT_PIPELINE)


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    for variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        env.setdefault(variable, "1")  # as tests/conftest.py: one BLAS thread per test process
    return env


def _written_paths(code: str) -> list[Path]:
    """Relative paths a shell block writes with `-o FILE`/`--output-file FILE`/`--save DIR`."""
    words = shlex.split(code, comments=True)
    paths = []
    for flag, value in zip(words, words[1:]):
        if flag in ("-o", "--output-file", "--save") and not os.path.isabs(value):
            paths.append(ROOT / value)
    return paths


def _run(block: Block, tmp_path: Path) -> subprocess.CompletedProcess:
    if block.tag == "python":
        script = tmp_path / (re.sub(r"\W", "_", block.name) + ".py")
        script.write_text(block.padded_code, encoding="utf-8")
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", block.code]
    return subprocess.run(command, cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.mark.parametrize("block", [pytest.param(b, id=b.name) for b in ALL_BLOCKS if b.tag in RUN])
def test_block_runs_as_written(block: Block, tmp_path: Path):
    if block.gpu_only and block.tag == "python":
        compile(block.padded_code, block.path, "exec")  # a SyntaxError names the file and its line
        return
    if block.needs and importlib.util.find_spec(block.needs) is None:
        compile(block.padded_code, block.path, "exec")
        pytest.skip(f"{block.name} needs {block.needs}, which is not installed")
    written = [p for p in _written_paths(block.code) if not p.exists()] if block.tag != "python" else []
    try:
        result = _run(block, tmp_path)
    finally:
        for path in written:
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    assert result.returncode == 0, (
        f"{block.name} ({block.tag}) exited with {result.returncode}\n--- block ---\n{block.code}"
        f"--- stdout ---\n{result.stdout[-4000:]}\n--- stderr ---\n{result.stderr[-4000:]}")


def test_the_packages_the_docs_install_are_spelled_as_the_extras_require_them():
    """A `pip install 'REQUIREMENT'` in the README or docs/ whose package is one of pyproject's extras gives that
    extra's own requirement (the README's ptxas line and install.md's `[ptx]` line spell the extra out): the
    console blocks are not run (they install), so when an extra's bounds move, this moves the line a reader copies."""
    import tomllib

    def spelled(requirement: str) -> tuple[str, tuple[str, ...]]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
        return name.lower().replace("_", "-"), tuple(sorted(requirement[len(name):].replace(" ", "").split(",")))

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    required = dict(spelled(r) for requirements in extras.values() for r in requirements)
    wrong, checked = [], 0
    for page in markdown_files():
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for requirement in re.findall(r"pip install[^#`|]*", line):
                for quoted in re.findall(r"'([A-Za-z0-9_.-]+[<>=!~][^']*)'", requirement):
                    name, bounds = spelled(quoted)
                    checked += name in required
                    if name in required and bounds != required[name]:
                        wrong.append(f"{page.relative_to(ROOT)}:{number}: '{quoted}', the extra requires "
                                     f"{name}{','.join(required[name])}")
    assert not wrong, "\n".join(wrong)
    assert checked >= 3, "the README's and install.md's ptxas lines were not found"
