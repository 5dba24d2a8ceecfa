"""The GPU session's pictures, written by hand as SVG (the GPU machine has no matplotlib, and 64 MiB of wheels
have no room for it), and a CSV of the same numbers.

`write_svg(path, records, title)`: FlashAttention-3's Figure 5 layout for attention: one panel per
(mask, head_dim), rows "no mask" then "causal", columns head_dim 64, 128, 256; in each panel, TFLOP/s
against sequence length as groups of bars, one bar (and one colour, the same in every panel) per system,
its value written above it; a system that did not run a configuration leaves its bar out. GEMM records
(no head_dim) make one panel against M = N = K; the attention variants' (`variant_panel`) one panel per
variant. `write_csv(path, records)`: one line per record.
"""

from __future__ import annotations

import csv
import math
from html import escape
from pathlib import Path

COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
PANEL_W, PANEL_H, MARGIN, LEGEND_H = 420, 260, 50, 28
CSV_FIELDS = ("system", "status", "tflops", "ms", "max_error", "tolerance", "seq", "batch", "heads", "head_dim",
              "causal", "direction", "M", "N", "K", "dtype", "note", "variant")


def _panel_key(config: dict):
    return ("gemm", 0) if "head_dim" not in config else (bool(config["causal"]), int(config["head_dim"]))


def variant_panel(config: dict):
    """The panel of an attention variant's record (bench/gpu_variants.py): one per variant."""
    return ("variant", config["variant"])


def _panel_title(key) -> str:
    if key[0] == "gemm":
        return "GEMM, M = N = K"
    if key[0] == "variant":
        return key[1]
    return f"head_dim {key[1]}, {'causal' if key[0] else 'no mask'}"


def _x(config: dict) -> int:
    return int(config.get("seq", config.get("M", 0)))


def _label(x: int) -> str:
    return f"{x // 1024}k" if x >= 1024 and x % 1024 == 0 else str(x)


def write_svg(path: Path, records: list[dict], title: str, panel=_panel_key, columns: int | None = None) -> Path:
    """The picture of `records` (bench/attention.py's Record fields as dicts) at `path`; `panel(config)` the
    panel of a record (default FA3's (mask, head_dim); `variant_panel`: one per variant, `columns` a row)."""
    systems = list(dict.fromkeys(r["system"] for r in records))
    keys = sorted({panel(r["config"]) for r in records}, key=lambda k: (str(k[0]), k[1])) or [("gemm", 0)]
    columns = columns or (len({k[1] for k in keys}) if keys[0][0] != "gemm" else 1)
    rows = -(-len(keys) // columns)
    width = columns * PANEL_W + MARGIN
    height = rows * PANEL_H + 2 * MARGIN + LEGEND_H
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="10">', f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>']
    for i, system in enumerate(systems):  # the legend, one colour per system throughout
        x = MARGIN + i * 150
        out.append(f'<rect x="{x}" y="32" width="10" height="10" fill="{COLOURS[i % len(COLOURS)]}"/>')
        out.append(f'<text x="{x + 14}" y="41">{escape(system)}</text>')
    for index, key in enumerate(keys):
        left = MARGIN + (index % columns) * PANEL_W
        top = MARGIN + LEGEND_H + (index // columns) * PANEL_H
        out += _panel(key, [r for r in records if panel(r["config"]) == key], systems, left, top)
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")
    return path


def _step(top: float) -> float:
    """A round tick spacing (1, 2 or 5 times a power of ten) giving three to six ticks up to `top`."""
    step = 10 ** math.floor(math.log10(max(top, 1e-9) / 4))
    for factor in (1, 2, 5, 10):
        if top / (step * factor) <= 6:
            return step * factor
    return step * 10


def _panel(key, records: list[dict], systems: list[str], left: float, top: float) -> list[str]:
    plot_w, plot_h = PANEL_W - 80, PANEL_H - 70
    xs = sorted({_x(r["config"]) for r in records})
    values = [r["tflops"] for r in records if r.get("status") == "ok" and r.get("tflops") is not None]
    step = _step(max(values, default=1.0))
    top_value = step * (math.floor(max(values, default=1.0) / step) + 1)
    x0, y0 = left + 40, top + 20 + plot_h
    out = [f'<text x="{x0 + plot_w / 2}" y="{top + 10}" text-anchor="middle" font-size="12">'
           f'{escape(_panel_title(key))}</text>',
           f'<line x1="{x0}" y1="{y0}" x2="{x0 + plot_w}" y2="{y0}" stroke="black"/>',
           f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 - plot_h}" stroke="black"/>',
           f'<text x="{x0 - 32}" y="{y0 - plot_h / 2}" transform="rotate(-90 {x0 - 32} {y0 - plot_h / 2})" '
           f'text-anchor="middle">TFLOP/s</text>',
           f'<text x="{x0 + plot_w / 2}" y="{y0 + 30}" text-anchor="middle">'
           f'{"M = N = K" if key[0] == "gemm" else "sequence length"}</text>']
    tick = step
    while tick <= top_value + 1e-9:  # grid lines with their values
        y = y0 - tick / top_value * plot_h
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + plot_w}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x0 - 3}" y="{y + 3:.1f}" text-anchor="end" font-size="8">{tick:g}</text>')
        tick += step
    if not values:
        out.append(f'<text x="{x0 + plot_w / 2}" y="{y0 - plot_h / 2}" text-anchor="middle" fill="#888">'
                   'no measurements</text>')
    group_w = plot_w / max(len(xs), 1)
    bar_w = group_w * 0.8 / max(len(systems), 1)
    for g, x in enumerate(xs):
        gx = x0 + g * group_w + group_w * 0.1
        out.append(f'<text x="{gx + group_w * 0.4:.1f}" y="{y0 + 12}" text-anchor="middle">{_label(x)}</text>')
        for s, system in enumerate(systems):
            found = [r for r in records if r["system"] == system and _x(r["config"]) == x and r.get("status") == "ok"]
            if not found or found[0].get("tflops") is None:
                continue
            value = found[0]["tflops"]
            h = value / top_value * plot_h
            bx = gx + s * bar_w
            out.append(f'<rect x="{bx:.1f}" y="{y0 - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                       f'fill="{COLOURS[s % len(COLOURS)]}"/>')
            out.append(f'<text x="{bx + bar_w / 2:.1f}" y="{y0 - h - 2:.1f}" text-anchor="middle" font-size="6">'
                       f'{value:.0f}</text>')
    return out


def write_csv(path: Path, records: list[dict]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for r in records:
            writer.writerow({**r.get("config", {}), **{k: v for k, v in r.items() if k != "config"}})
    return path
