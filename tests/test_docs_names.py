"""Every `tessera.*` name, every repository path and every link (with its #anchor) that README.md and docs/*.md
mention exists.

A page that names a function, module or file that was renamed or removed sends a newcomer nowhere; the snippets
test (tests/test_docs_snippets.py) runs the code blocks, this one reads the prose too. Names are resolved from
the sources, importing nothing (some modules import torch, seconds a first time): `tessera.a.b.c` is the longest
prefix that is a module file of the package (`tessera.dialects`, `.passes` and `.tools` live in the repository's
top folders, pyproject.toml), then names defined at its top level (functions, classes, assignments, imports;
the lazy ones: the package's `_LAZY_FUNCTIONS` and `SUBMODULES`, the names a module's `__getattr__` compares
with), then names in a class's body. A name past a function, a value or an import is not followed. The
graph-level attention dialect's op names (`tessera.attention_bwd`, an IR op, not a Python name) count as names
too. A path is any word starting with one of the repository's top folders (`tessera/`, `tests/`, `bench/`, ...);
paths with a wildcard are skipped.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from test_docs_snippets import ROOT, blocks, markdown_files

NAME = re.compile(r"(?<![\w./-])tessera(?:\.[A-Za-z_]\w*)+")
PATH = re.compile(r"(?<![\w./-])((?:tessera|dialects|passes|tools|tests|bench|examples|docs|\.ci)/[\w./-]*[\w/])")
TOP_FOLDERS = ("dialects", "passes", "tools")  # installed as tessera.dialects, tessera.passes, tessera.tools
OP_NAME = re.compile(r'^\s*name = "(tessera\.\w+)"', re.MULTILINE)


def mentions(pattern: re.Pattern) -> list[tuple[str, str]]:
    """(FILE:LINE, the word) for every match of `pattern` in the README and the docs."""
    found = []
    for page in markdown_files():
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            found += [(f"{page.relative_to(ROOT)}:{number}", m.group(1 if m.groups() else 0).rstrip("."))
                      for m in pattern.finditer(line)]
    return found


def module_file(parts: list[str]) -> Path | None:
    """The source of module `tessera.<parts>` (a package's __init__.py), or None."""
    if parts and parts[0] in TOP_FOLDERS:
        base = ROOT.joinpath(*parts)
    else:
        base = ROOT.joinpath("tessera", *parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def defined(path: Path) -> dict[str, ast.AST | None]:
    """Top-level names of a module: a class maps to its node (its body is searched further), others to None."""
    names: dict[str, ast.AST | None] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        names.update(body_names(node))
        lazy = isinstance(node, ast.FunctionDef) and node.name == "__getattr__"  # names it compares with
        if lazy or isinstance(node, ast.Assign) and any(getattr(t, "id", "") in ("_LAZY_FUNCTIONS", "SUBMODULES")
                                                        for t in node.targets):
            names.update((e.value, None) for e in ast.walk(node)
                         if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value.isidentifier())
    return names


def body_names(node: ast.AST) -> dict[str, ast.AST | None]:
    if isinstance(node, ast.ClassDef):
        return {node.name: node}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {node.name: None}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0]: None for a in node.names}
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
        node, ast.AnnAssign) else []
    return {n.id: None for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def resolves(name: str) -> bool:
    parts = name.split(".")[1:]
    cut = next((i for i in range(len(parts), -1, -1) if module_file(parts[:i])), None)
    if cut is None:
        return False
    scope = defined(module_file(parts[:cut]))
    for part in parts[cut:]:
        if part not in scope:
            return False
        node = scope[part]
        if node is None:  # a function, a value or an import: not followed
            return True
        scope = {k: v for child in node.body for k, v in body_names(child).items()}
    return True


def test_every_tessera_name_the_docs_mention_exists():
    op_names = set(OP_NAME.findall((ROOT / "dialects" / "attention.py").read_text(encoding="utf-8")))
    missing = [f"{where}: {name}" for where, name in mentions(NAME) if name not in op_names and not resolves(name)]
    assert not missing, "names in the docs that Tessera does not define:\n" + "\n".join(missing)


def test_every_path_the_docs_mention_exists():
    missing = [f"{where}: {path}" for where, path in mentions(PATH) if "*" not in path and not (ROOT / path).exists()]
    assert not missing, "paths in the docs that the repository does not hold:\n" + "\n".join(missing)


HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"\]\((?!https?:|mailto:)([^)\s#]*)(?:#([^)\s]*))?\)")


def prose_lines(page: Path) -> list[tuple[int, str]]:
    """(number, line) of a Markdown page outside its fenced code blocks (a `# comment` in a block is no heading)."""
    code = {n for b in blocks(page) for n in range(b.line, b.line + b.code.count("\n") + 2)}
    return [(n, line) for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1) if n not in code]


@functools.cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors GitHub gives a page's headings: lowercased, punctuation but `-` and `_` dropped, spaces made
    `-`, a repeated one suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    for _, line in prose_lines(page):
        heading = HEADING.match(line)
        if heading is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(2).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return frozenset(seen)


def test_every_link_and_anchor_resolves():
    """Every relative link of README.md and docs/*.md (`[text](page.md)`, `[text](page.md#anchor)`,
    `[text](#anchor)`, outside code blocks) leads to a file, and its #anchor to a heading of that page."""
    broken = []
    for page in markdown_files():
        for number, line in prose_lines(page):
            for target, anchor in LINK.findall(line):
                where = f"{page.relative_to(ROOT)}:{number}: ({target}{'#' + anchor if anchor else ''})"
                path = (page.parent / target) if target else page
                if not path.exists():
                    broken.append(f"{where}: no such file")
                elif anchor and path.suffix == ".md" and anchor not in anchors(path.resolve()):
                    broken.append(f"{where}: no heading with that anchor in {path.resolve().relative_to(ROOT)}")
    assert not broken, "links in the docs that lead nowhere:\n" + "\n".join(broken)


def test_the_index_lists_every_page_once():
    """docs/index.md gives every page of docs/ a line of its own: a page it leaves out is an orphan there."""
    index = ROOT / "docs" / "index.md"
    listed = re.findall(r"^- \[[^]]+\]\(([\w.-]+\.md)\)", index.read_text(encoding="utf-8"), re.MULTILINE)
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p != index)
    assert sorted(listed) == pages, (f"not in docs/index.md: {sorted(set(pages) - set(listed))}, listed but absent "
                                     f"or twice: {sorted(set(listed) - set(pages)) or [p for p in listed if listed.count(p) > 1]}")
