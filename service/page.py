"""The page at ``/``: per GPU model and dtype, the dispatch map of its table.

Two maps per table, both M (rows, down) × N (columns, across) on log-spaced axes:

- *measured points*: each cell is a shape the sweep timed, coloured by the variant the table chooses
  there, with the fraction of speed of light written in it: ``copy_us / chosen time``, where
  ``copy_us`` is a plain copy of the same bytes (1.00 would be a softmax as fast as a copy);
- *lookups between them*: a denser grid (the measured values and the geometric means between
  neighbours) answered by the table's rule, showing where the choice changes for unmeasured shapes.

Plus a legend and the table's regret figures. Everything is inline (CSS and SVG, no scripts, no
external assets): the page works offline and behind any proxy. Rendered with ``string.Template`` so
the service needs no template engine; every value from a table is HTML-escaped.
"""
from __future__ import annotations

import html
import math
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from string import Template
from typing import Any, Iterable, Sequence

from autotuner.lookup.table import DispatchTable
from service.tables import LiveTables

# Tableau 20 reordered so that the first ten are far apart; variants beyond 20 reuse with a hatch-free
# darker tone (rare: the registry has 17 variants).
PALETTE = (
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7",
    "#9c755f", "#bab0ac", "#a0cbe8", "#ffbe7d", "#8cd17d", "#ff9d9a", "#d4a6c8", "#86bcb6",
    "#f1ce63", "#fabfd2", "#d7b5a6", "#79706e",
)
NO_CHOICE = "#e8e8e8"
CELL_W, CELL_H, DENSE_CELL = 58, 30, 18
LABEL_GAP = 34  # pixels between the centres of two column labels (a 5-digit label is ~32 px wide)
LEFT, TOP = 72, 34


@lru_cache(maxsize=1)
def _template() -> Template:
    return Template((resources.files("service") / "templates" / "page.html").read_text(encoding="utf-8"))


def render_page(live: LiveTables, gpu: str | None = None, dtype: str | None = None) -> str:
    """The whole HTML document for the tables matching ``gpu`` and ``dtype`` (all when None)."""
    tables = [t for t in live.store.tables() if (gpu is None or t.gpu == gpu) and (dtype is None or t.dtype == dtype)]
    colours = variant_colours(c["variant"] for t in tables for c in t.candidates)
    if tables:
        sections = "\n".join(_section(live, table, colours) for table in tables)
    else:
        sections = ('<p class="empty">No dispatch tables match. Run <code>autotuner sweep</code> and '
                    '<code>autotuner fit</code> on a GPU host, or upload its export to <code>POST /runs</code> '
                    'and fit here.</p>')
    nav = " ".join(
        f'<a href="#{_anchor(t)}">{_e(t.gpu)} · {_e(t.dtype)} · {_e(t.timing_method)}</a>' for t in tables
    )
    scope = " · ".join(part for part in (gpu, dtype) if part) or "all GPUs and dtypes"
    return _template().substitute(
        title=_e(f"Softmax dispatch maps — {scope}"),
        nav=nav,
        sections=sections,
        generated=_e(datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        table_count=len(tables),
    )


def variant_colours(variants: Iterable[str]) -> dict[str, str]:
    """A stable colour per variant name (sorted order), the same in every map of one page."""
    names = sorted(set(variants))
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def _section(live: LiveTables, table: DispatchTable, colours: dict[str, str]) -> str:
    measured, winners = _measured_map(table, colours)
    dense = _lookup_map(table, colours)
    legend = "".join(
        f'<li><span class="swatch" style="background:{colours[name]}"></span>{_e(name)} '
        f'<span class="count">{count} point{"s" if count != 1 else ""}</span></li>'
        for name, count in sorted(winners.items(), key=lambda item: (-item[1], item[0]))
    )
    never = sorted({c["variant"] for c in table.candidates} - set(winners))
    never_text = f'<p class="never">Never chosen at a measured point: {_e(", ".join(never))}</p>' if never else ""
    return f"""
<section id="{_anchor(table)}">
  <h2>{_e(table.gpu)} <small>{_e(table.document.get("gpu_name") or "")}</small> · {_e(table.dtype)} · {_e(table.timing_method)} timing</h2>
  <p class="facts">{_regret_text(table.document.get("regret"))}</p>
  <p class="facts">rule <b>{_e(table.rule)}</b> · {len(table.candidates)} candidates · {len(table.points)} measured
     points · from the {_e(live.source_of(table))}{_created(table)}</p>
  <div class="maps">
    <figure>{measured}<figcaption>Measured points: colour = chosen variant, number = fraction of speed of
      light (copy time ÷ chosen time)</figcaption></figure>
    <figure>{dense}<figcaption>Lookups between measured points (the table's <i>{_e(table.rule)}</i> rule)</figcaption></figure>
  </div>
  <ul class="legend">{legend}</ul>{never_text}
</section>"""


def _measured_map(table: DispatchTable, colours: dict[str, str]) -> tuple[str, dict[str, int]]:
    """SVG of the measured grid, and how many points each variant wins."""
    ms = sorted({p["m"] for p in table.points})
    ns = sorted({p["n"] for p in table.points})
    by_shape = {(p["m"], p["n"]): p for p in table.points}
    winners: dict[str, int] = {}
    cells = []
    for row, m in enumerate(ms):
        for col, n in enumerate(ns):
            x, y = LEFT + col * CELL_W, TOP + row * CELL_H
            point = by_shape.get((m, n))
            if point is None:
                continue
            pick = table.lookup(m, n)
            if pick is None:
                cells.append(_cell(x, y, CELL_W, CELL_H, NO_CHOICE, f"M={m} N={n}: no admissible candidate", "–", "#555"))
                continue
            candidate = table.candidates[pick.candidate]
            variant = candidate["variant"]
            winners[variant] = winners.get(variant, 0) + 1
            fraction = _speed_of_light(point.get("copy_us"), pick.predicted_us)
            label = f"{fraction:.2f}" if fraction is not None else "–"
            tip = (f"M={m} N={n}: {variant} [{candidate.get('config_key') or _config_key(candidate)}] "
                   f"{_us(pick.predicted_us)}; copy {_us(point.get('copy_us'))}")
            cells.append(_cell(x, y, CELL_W, CELL_H, colours[variant], tip, label, _ink(colours[variant])))
    axes = _axes(ms, ns, CELL_W, CELL_H)
    width, height = LEFT + len(ns) * CELL_W + 8, TOP + len(ms) * CELL_H + 8
    return _svg(width, height, axes + "".join(cells), f"{table.gpu} {table.dtype} measured dispatch map"), winners


def _lookup_map(table: DispatchTable, colours: dict[str, str]) -> str:
    ms = densified(sorted({p["m"] for p in table.points}))
    ns = densified(sorted({p["n"] for p in table.points}))
    cells = []
    for row, m in enumerate(ms):
        for col, n in enumerate(ns):
            pick = table.lookup(m, n)
            variant = table.candidates[pick.candidate]["variant"] if pick else None
            colour = colours[variant] if variant else NO_CHOICE
            tip = f"M={m} N={n}: {variant or 'no admissible candidate'}" + (f" {_us(pick.predicted_us)}" if pick else "")
            cells.append(_cell(LEFT + col * DENSE_CELL, TOP + row * DENSE_CELL, DENSE_CELL, DENSE_CELL, colour, tip))
    axes = _axes(ms, ns, DENSE_CELL, DENSE_CELL, labelled={p["m"] for p in table.points} | {p["n"] for p in table.points})
    width, height = LEFT + len(ns) * DENSE_CELL + 8, TOP + len(ms) * DENSE_CELL + 8
    return _svg(width, height, axes + "".join(cells), f"{table.gpu} {table.dtype} lookup map")


def densified(values: Sequence[int]) -> list[int]:
    """The values and the (rounded) geometric mean between each pair of neighbours."""
    out: list[int] = []
    for lower, upper in zip(values, values[1:]):
        out += [lower, round(math.sqrt(max(lower, 1) * upper))]
    out += list(values[-1:])
    return sorted(set(out))


def _axes(ms: Sequence[int], ns: Sequence[int], width: int, height: int, labelled: set[int] | None = None) -> str:
    """Axis labels: every value, or (dense map) only the measured ones, skipping a label that would
    overlap the previous one."""
    parts = [f'<text x="{LEFT - 8}" y="{TOP - 20}" class="axis-title" text-anchor="end">M \\ N</text>']
    last_x = -math.inf
    for col, n in enumerate(ns):
        x = LEFT + col * width + width / 2
        if (labelled is None or n in labelled) and x - last_x >= LABEL_GAP:
            parts.append(f'<text x="{x:.1f}" y="{TOP - 6}" class="axis" text-anchor="middle">{_e(_short(n))}</text>')
            last_x = x
    for row, m in enumerate(ms):
        if labelled is None or m in labelled:
            parts.append(f'<text x="{LEFT - 6}" y="{TOP + row * height + height / 2 + 4:.1f}" class="axis" '
                         f'text-anchor="end">{_e(_short(m))}</text>')
    return "".join(parts)


def _cell(x: float, y: float, w: int, h: int, fill: str, tip: str, label: str = "", ink: str = "#000") -> str:
    text = (f'<text x="{x + w / 2:.1f}" y="{y + h / 2 + 4:.1f}" text-anchor="middle" fill="{ink}" '
            f'class="sol">{_e(label)}</text>') if label else ""
    return (f'<g><title>{_e(tip)}</title><rect x="{x}" y="{y}" width="{w - 1}" height="{h - 1}" '
            f'fill="{fill}"/>{text}</g>')


def _svg(width: int, height: int, content: str, label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(label)}">{content}</svg>')


def _speed_of_light(copy_us: Any, chosen_us: float | None) -> float | None:
    if not isinstance(copy_us, (int, float)) or not chosen_us or copy_us <= 0:
        return None
    return copy_us / chosen_us


def _regret_text(regret: Any) -> str:
    if not isinstance(regret, dict):
        return "regret: not computed for this table"
    figures = [f"{name} <b>{regret[name]:.3f}×</b>" for name in ("geomean", "p95", "max")
               if isinstance(regret.get(name), (int, float))]
    method = f" ({_e(str(regret['method']))})" if regret.get("method") else ""
    return "regret vs the per-shape best: " + (" · ".join(figures) or "none recorded") + method


def _created(table: DispatchTable) -> str:
    created = table.document.get("created_at")
    return f", fitted {_e(str(created))}" if created else ""


def _ink(background: str) -> str:
    """Black or white text, whichever reads better on the background (WCAG relative luminance)."""
    red, green, blue = (int(background[i:i + 2], 16) / 255 for i in (1, 3, 5))
    luminance = 0.2126 * red + 0.7152 * green + 0.0722 * blue
    return "#000" if luminance > 0.45 else "#fff"


def _short(value: int) -> str:
    """1024 → 1K, 131072 → 128K, 50257 → 50257: powers of two short, other sizes exact."""
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


def _us(value: Any) -> str:
    return f"{value:.2f} µs" if isinstance(value, (int, float)) else "n/a"


def _config_key(candidate: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in candidate.get("config", {}).items())


def _anchor(table: DispatchTable) -> str:
    return "-".join(_e(part) for part in (table.gpu, table.dtype, table.timing_method))


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)
