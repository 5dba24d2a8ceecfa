"""What `rewrite-attention` found, what it became, and for each near miss the rule that stopped it.

The pass appends one `RewriteReport` per function to `REPORTS`; `tessera-opt --rewrite-report` prints them
(`take_reports`) on stderr after the pipeline, and `tessera-run -p rewrite-attention --compare` counts the
replacements from them. Each entry is one candidate:

    forward at t.mlir:40:5: found BMM1 at t.mlir:14:5 (Q argument %arg0, K argument %arg1) - scale x 0.125
      (multiply) - softmax over the keys - BMM2 at t.mlir:40:5 (V argument %arg2)
      became tessera.attention (kernel flash_attention_d64_bf16, scale 0.125, causal false)
    near miss at t.mlir:33:5: found ...; not rewritten: the scale at t.mlir:20:5 is not a constant: it is ...
    dropout at ...: matched, not rewritten: dropout (no Tessera kernel applies dropout)
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Entry:
    """One candidate: `kind` (forward, backward, composite), where it is, what was found, and either what it
    became or the rule that stopped it (`matched`: the whole pattern was found but is not rewritten)."""

    kind: str
    place: str
    found: list[str]
    became: str | None = None
    rule: str | None = None
    matched: bool = False

    def text(self) -> str:
        found = " - ".join(self.found) if self.found else "nothing"
        if self.became is not None:
            return f"{self.kind} at {self.place}: found {found}\n    became {self.became}"
        if self.matched:
            return f"{self.kind} at {self.place}: found {found}\n    matched, not rewritten: {self.rule}"
        return f"near miss ({self.kind}) at {self.place}: found {found}\n    not rewritten: {self.rule}"


@dataclass
class RewriteReport:
    """The entries of one function, in the order the pass met them."""

    function: str
    mode: str
    entries: list[Entry] = field(default_factory=list)

    def replaced(self, kind: str | None = None) -> int:
        """How many candidates (of `kind`: "forward", "backward", "composite") were rewritten."""
        return sum(1 for e in self.entries if e.became is not None and (kind is None or e.kind == kind))

    def text(self) -> str:
        forwards = self.replaced("forward") + self.replaced("composite")
        lines = [f"rewrite-attention{{match={self.mode}}} @{self.function}: {forwards} forward, "
                 f"{self.replaced('backward')} backward replaced"]
        lines += [f"  {e.text()}" for e in self.entries]
        return "\n".join(lines)


REPORTS: list[RewriteReport] = []
"""Reports of the `rewrite-attention` runs since the last `take_reports()`."""


def take_reports() -> list[RewriteReport]:
    """The reports collected so far, emptying the list."""
    reports = list(REPORTS)
    REPORTS.clear()
    return reports
