"""What `tessera-opt --help` and `tessera-opt --all-passes` list: Tessera's passes (with their options and the
first sentence of their docstrings), the named pipelines of `tessera.passes` and the targets come first; xDSL's
other passes and targets (RISC-V, x86, WGSL, CSL, ...), which tessera-opt also accepts, only with `--all-passes`.

Both listings import every pass of Tessera to read its docstring, so they are built only when printed.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import shutil
import sys
import textwrap

TESSERA_TARGETS = ("mlir", "ptx")
"""The output formats of Tessera's flow: the IR (the default) and the PTX printer's text."""


def _first_sentence(doc: str | None) -> str:
    """The first sentence of a docstring's first paragraph, without pointers to the module docstring (which
    the reader of --help does not have)."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    sentence = re.split(r"(?<=\.)\s", paragraph)[0]
    return re.sub(r"\s*\((see the )?module docstring\)", "", sentence)


def _options(pass_class) -> str:
    from xdsl.passes import get_pass_option_infos

    infos = get_pass_option_infos(pass_class)
    return "{" + " ".join(f"{o.name}={o.default_value}" for o in infos) + "}" if infos else ""


def pipelines() -> list[tuple[str, str, str]]:
    """(name, spec, first sentence of its docstring) of each `*_PIPELINE` string of `tessera.passes`, the
    default first, then in the order of the source."""
    import tessera.passes as passes

    docs: dict[str, str] = {}
    try:
        body = ast.parse(inspect.getsource(passes)).body
    except (OSError, TypeError):  # no source: the pipelines are still listed, without their docstrings
        body = []
    for statement, following in zip(body, body[1:]):
        if isinstance(statement, ast.Assign) and isinstance(following, ast.Expr) \
                and isinstance(following.value, ast.Constant) and isinstance(following.value.value, str):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    docs[target.id] = following.value.value
    names = [n for n, v in vars(passes).items() if n.endswith("_PIPELINE") and isinstance(v, str)]
    names.sort(key=lambda n: n != "DEFAULT_PIPELINE")
    return [(n, getattr(passes, n), _first_sentence(docs.get(n))) for n in names]


def _wrap(text: str, indent: str) -> str:
    width = max(shutil.get_terminal_size().columns - 2, 40)  # as argparse's own formatter
    return textwrap.fill(text, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)


def tessera_listing(available_passes: dict, available_targets: dict) -> str:
    """The help's epilogue: Tessera's passes, pipelines and targets, and how many of xDSL's others exist."""
    from tessera.passes import PASSES, parse_pipeline, pipeline_name

    lines = ["Tessera's passes (-p NAME, or NAME{option=value ...}; each option shown with its default):"]
    for name, factory in PASSES.items():
        pass_class = factory()
        lines.append(f"  {name}{_options(pass_class)}")
        lines.append(_wrap(_first_sentence(pass_class.__doc__), " " * 6))
    lines.append("")
    lines.append("Pipelines (-p NAME, alone or as one element of a pipeline; tessera.passes.VARIABLE in Python):")
    used = []
    for name, spec, doc in pipelines():
        lines.append(f"  {pipeline_name(name)} = tessera.passes.{name}"
                     + (" (the default of tessera-run, tessera.compile and tessera.interpret)"
                        if name == "DEFAULT_PIPELINE" else ""))
        if doc:
            lines.append(_wrap(doc, " " * 6))
        lines.append(f"      {spec}")
        used += [p.name for p in parse_pipeline(spec).passes if p.name not in PASSES and p.name not in used]
    lines.append("")
    lines.append(f"Targets (-t): {', '.join(TESSERA_TARGETS)}; the default is mlir.")
    others = len(available_passes) - len(PASSES) - len(used)
    other_targets = len([t for t in available_targets if t not in TESSERA_TARGETS])
    lines.append(_wrap(f"xDSL's passes in these pipelines: {', '.join(used)}. tessera-opt also accepts xDSL's "
                       f"{others} other passes and {other_targets} other targets (RISC-V, x86, WGSL, ...): "
                       "tessera-opt --all-passes lists them.", ""))
    return "\n".join(lines) + "\n"


def all_passes_listing(available_passes: dict, available_targets: dict) -> str:
    """Every pass and target tessera-opt accepts, one a line: Tessera's first, then xDSL's."""
    from tessera.passes import PASSES

    ours = [p for p in available_passes if p in PASSES]
    theirs = sorted(p for p in available_passes if p not in PASSES)
    targets = [t for t in available_targets if t in TESSERA_TARGETS]
    other_targets = sorted(t for t in available_targets if t not in TESSERA_TARGETS)
    sections = [
        (f"Tessera's passes ({len(ours)}):", ours),
        (f"xDSL's passes ({len(theirs)}):", theirs),
        (f"Targets of Tessera's flow ({len(targets)}):", targets),
        (f"xDSL's other targets ({len(other_targets)}):", other_targets),
    ]
    return "\n".join(f"{title}\n" + "".join(f"  {name}\n" for name in names) for title, names in sections)


def add_help_listings(arg_parser: argparse.ArgumentParser, available_passes: dict, available_targets: dict) -> None:
    """Make `--help` end with Tessera's passes, pipelines and targets (instead of xDSL's list of every pass in the
    help of -p and -t), and add `--all-passes`, which prints every pass and target and exits."""

    class AllPasses(argparse.Action):
        def __init__(self, option_strings, dest, **kwargs):
            super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

        def __call__(self, parser, namespace, values, option_string=None):
            sys.stdout.write(all_passes_listing(available_passes, available_targets))
            parser.exit()

    for action in arg_parser._actions:
        if action.dest == "passes":
            action.help = ("a pass pipeline: passes separated by commas, each NAME or NAME{option=value ...}; "
                           "Tessera's passes and pipelines are listed below")
        elif action.dest == "target":
            action.help = f"output format: {' or '.join(TESSERA_TARGETS)} (default mlir); --all-passes lists xDSL's others"
    arg_parser.add_argument("--all-passes", action=AllPasses,
                            help="list every pass and target tessera-opt accepts, xDSL's too, and exit")
    # xDSL builds the parser; the listing imports every pass, so it is made only when the help is printed.
    format_help = arg_parser.format_help
    arg_parser.format_help = lambda: format_help() + "\n" + tessera_listing(available_passes, available_targets)
