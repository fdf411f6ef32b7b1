"""The page at ``/``: per GPU model, dtype and timing method, one dispatch map of its table.

A map is the whole shape domain (``autotuner.domain``: M from 1 to 2**20 rows down, N from 1 to 2**24
across, both log2 axes) cut into cells of half an octave; each cell is coloured by the variant the
table answers for the shape at its centre, exactly as ``select_kernel`` answers it (the table's own
kernels, its rule, the scaling model outside the measured points). On top:

- the measured points (shapes the sweep timed), as dots;
- a hatch over the cells answered by the scaling model alone (outside the measured M and N).

A predicted table (``autotuner predict``: a GPU never measured) is said to be one: its points are the
shapes other GPUs measured, with times the performance model moved to this GPU, and its copy times a
bare bandwidth figure, so it shows no measured points and no speed of light.

A variant has one colour everywhere (``VARIANT_COLOURS``, keyed by name: the same on ``/`` and on
``/?gpu=h100&dtype=bf16``); the legend gives each variant's share of the map. A map is a few paths
(one per colour, runs of equal cells merged), so a page of every table weighs tens of kilobytes.
Everything is inline (CSS and SVG, no scripts, no external assets): the page works offline and behind
any proxy. Rendered with ``string.Template`` so the service needs no template engine; every value from a
table is HTML-escaped.
"""
from __future__ import annotations

import html
import math
import zlib
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from string import Template
from typing import Any, Sequence

from autotuner.domain import DOMAIN_M_MAX, DOMAIN_N_MAX
from autotuner.lookup.select import TableStore, is_predicted
from autotuner.lookup.table import DispatchTable
from service.tables import LiveTables

# One colour per registered variant (kernels.registry._REGISTRY's 23), chosen from Kelly's colours of maximum
# contrast and a few more so that any two are at least 25 apart in CIELAB (ΔE76): two variants of one
# map never look alike. tests/service/test_page.py checks the distances and that every registered
# variant has its colour.
VARIANT_COLOURS: dict[str, str] = {
    "torch_softmax": "#848482", "cuda_warp_row": "#0067a5", "cuda_short_rows": "#a1caf1",
    "cuda_short_rows_keep": "#3344ee",
    "cuda_block_fused": "#008856", "cuda_block_online": "#8db600", "cuda_packed16": "#f3c300",
    "cuda_online_two_pass": "#875692", "cuda_split_row": "#c2b280", "cuda_smem_cache_medium": "#be0032",
    "cuda_smem_cache_extreme": "#e68fac", "cuda_cluster_split": "#f38400", "cuda_cluster_keep": "#882d17",
    "cuda_grid_split": "#1b2a6b", "cuda_long_split": "#2b3d26", "triton_fused_row": "#00a3a3",
    "triton_one_row": "#f99379", "triton_tiled_three_pass": "#6fe0c0", "triton_online_two_pass": "#654522",
    "triton_split_row": "#b3446c", "cute_online": "#e25822", "quack_softmax": "#ff66ff",
    "liger_softmax": "#5d5d00",
}
# A variant not registered here (a plugin, a renamed variant in an old table): a colour from its name's
# CRC, so it is stable across pages and restarts too.
EXTRA_COLOURS = ("#4e79a7", "#59a14f", "#b07aa1", "#9c755f", "#76b7b2", "#edc948", "#d37295", "#bab0ac")
NO_CHOICE = "#e8e8e8"  # select_kernel's fallback: no candidate admits the shape or was measured near it
FALLBACK_LABEL = "fallback to torch_softmax"

STEPS_PER_OCTAVE = 2
CELL = 10  # pixels per cell
LEFT, TOP = 44, 22  # room for the axis labels
TICK_OCTAVES = 4  # a labelled tick every 2**4


@lru_cache(maxsize=1)
def _template() -> Template:
    return Template((resources.files("service") / "templates" / "page.html").read_text(encoding="utf-8"))


def render_page(live: LiveTables, gpu: str | None = None, dtype: str | None = None) -> str:
    """The whole HTML document for the tables matching ``gpu`` and ``dtype`` (all when None)."""
    tables = [t for t in live.store.tables() if (gpu is None or t.gpu == gpu) and (dtype is None or t.dtype == dtype)]
    if tables:
        sections = "\n".join(_section(live, table) for table in tables)
    else:
        sections = ('<p class="empty">No dispatch tables match. Run <code>autotuner sweep</code> and '
                    '<code>autotuner fit</code> on a GPU host, or upload its export to <code>POST /runs</code> '
                    'and fit here.</p>')
    nav = " ".join(
        f'<a href="#{_anchor(t)}">{_e(t.gpu)}{" (predicted)" if is_predicted(t) else ""} · {_e(t.dtype)} · '
        f'{_e(t.timing_method)}</a>' for t in tables
    )
    scope = " · ".join(part for part in (gpu, dtype) if part) or "all GPUs and dtypes"
    return _template().substitute(
        title=_e(f"Softmax dispatch maps — {scope}"),
        nav=nav,
        sections=sections,
        generated=_e(datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
        table_count=len(tables),
    )


def colour_of(variant: str) -> str:
    """The variant's colour: its own for a registered variant, else one fixed by its name."""
    return VARIANT_COLOURS.get(variant) or EXTRA_COLOURS[zlib.crc32(variant.encode()) % len(EXTRA_COLOURS)]


def axis_values(maximum: int) -> list[int]:
    """The cell centres along one axis: 2**(i / STEPS_PER_OCTAVE) rounded, from 1 to ``maximum``."""
    steps = round(math.log2(maximum) * STEPS_PER_OCTAVE)
    return [round(2 ** (i / STEPS_PER_OCTAVE)) for i in range(steps + 1)]


def dispatch_grid(table: DispatchTable) -> list[list[tuple[str | None, bool]]]:
    """Per cell (rows M, columns N): the variant ``select_kernel`` answers with this table (None for
    its torch_softmax fallback) and whether the scaling model alone answered it. Asked of a store of
    this table only, so the service's answer cache is left alone."""
    store = TableStore([table], cache_limit=1)
    grid = []
    for m in axis_values(DOMAIN_M_MAX):
        row = []
        for n in axis_values(DOMAIN_N_MAX):
            choice = store.select_canonical(m, n, table.dtype, table.gpu, table.timing_method)
            row.append((None if choice.source == "fallback" else choice.variant, choice.source == "model"))
        grid.append(row)
    return grid


def _section(live: LiveTables, table: DispatchTable) -> str:
    grid = dispatch_grid(table)
    cells = sum(len(row) for row in grid)
    shares: dict[str | None, int] = {}
    for row in grid:
        for variant, _ in row:
            shares[variant] = shares.get(variant, 0) + 1
    modelled = sum(model for row in grid for _, model in row)
    legend = "".join(
        f'<li><span class="swatch" style="background:{colour_of(name) if name else NO_CHOICE}"></span>'
        f'{_e(name or FALLBACK_LABEL)} <span class="count">{_share(count, cells)}</span></li>'
        for name, count in sorted(shares.items(), key=lambda item: (-item[1], item[0] or ""))
    )
    if modelled:
        legend += f'<li><span class="swatch hatch"></span>scaling model only <span class="count">{_share(modelled, cells)}</span></li>'
    predicted = is_predicted(table)
    legend += f'<li><span class="swatch dot"></span>{"point predicted from " + _from(table) if predicted else "measured point"}</li>'
    never = sorted({c["variant"] for c in table.candidates} - set(shares))
    never_text = f'<p class="never">Never chosen on the map: {_e(", ".join(never))}</p>' if never else ""
    return f"""
<section id="{_anchor(table)}">
  <h2>{_e(table.gpu)} <small>{_subtitle(table)}</small> · {_e(table.dtype)} · {_e(table.timing_method)} timing</h2>
  <p class="facts">{_regret_text(table.document.get("regret"))}</p>
  <p class="facts">rule <b>{_e(table.rule)}</b> · {len(table.candidates)} candidates · {_points_text(table)}
     · {"a shipped table" if live.source_of(table) == "shipped" else "the database's table"}{_created(table)}</p>
  <figure>{_map_svg(table, grid)}<figcaption>Kernel chosen per shape, M rows (down) × N row length (across),
    log scales; dots: {"shapes predicted" if predicted else "measured shapes"}; hatched: answered by the scaling
    model only</figcaption></figure>
  <ul class="legend">{legend}</ul>{never_text}
</section>"""


def _map_svg(table: DispatchTable, grid: Sequence[Sequence[tuple[str | None, bool]]]) -> str:
    """The map: one path per colour (runs of equal cells along a row merged), the model hatch, the
    measured points and the axes."""
    width, height = CELL * len(grid[0]), CELL * len(grid)
    runs: dict[str, list[str]] = {}
    hatched: list[str] = []
    for row_index, row in enumerate(grid):
        y = TOP + row_index * CELL
        start = 0
        for col in range(1, len(row) + 1):
            if col < len(row) and row[col] == row[start]:
                continue
            variant, model = row[start]
            rect = f"M{LEFT + start * CELL} {y}h{(col - start) * CELL}v{CELL}h-{(col - start) * CELL}z"
            runs.setdefault(colour_of(variant) if variant else NO_CHOICE, []).append(rect)
            if model:
                hatched.append(rect)
            start = col
    names = {colour_of(v) if v else NO_CHOICE: v or FALLBACK_LABEL for row in grid for v, _ in row}
    paths = "".join(f'<path fill="{colour}" d="{"".join(parts)}"><title>{_e(names[colour])}</title></path>'
                    for colour, parts in runs.items())
    if hatched:
        paths += f'<path fill="url(#hatch)" d="{"".join(hatched)}"/>'
    dots = "".join(f"M{x:.1f} {y:.1f}h0" for x, y in _point_positions(table))
    if dots:
        paths += (f'<path id="pts-{_anchor(table)}" d="{dots}" stroke="#000" stroke-width="3.6" stroke-linecap="round"/>'
                  f'<use href="#pts-{_anchor(table)}" stroke="#fff" stroke-width="1.6"/>')
    content = paths + _axes(len(grid[0]), len(grid)) + \
        f'<rect x="{LEFT}" y="{TOP}" width="{width}" height="{height}" fill="none" stroke="#9ca3af"/>'
    total_w, total_h = LEFT + width + 12, TOP + height + 6
    label = f"{table.gpu} {table.dtype} dispatch map"
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{total_h}" '
            f'viewBox="0 0 {total_w} {total_h}" role="img" aria-label="{_e(label)}">{content}</svg>')


def _point_positions(table: DispatchTable) -> list[tuple[float, float]]:
    """Where each measured shape inside the map lies, in pixels (cell centres sit at 2**(i / steps))."""
    positions = set()
    for point in table.points:
        m, n = point["m"], point["n"]
        if 1 <= m <= DOMAIN_M_MAX and 1 <= n <= DOMAIN_N_MAX:
            positions.add((LEFT + (math.log2(n) * STEPS_PER_OCTAVE + 0.5) * CELL,
                           TOP + (math.log2(m) * STEPS_PER_OCTAVE + 0.5) * CELL))
    return sorted(positions)


def _axes(columns: int, rows: int) -> str:
    parts = [f'<text x="{LEFT - 4}" y="{TOP - 8}" class="axis-title" text-anchor="end">M\\N</text>']
    step = TICK_OCTAVES * STEPS_PER_OCTAVE
    for col in range(0, columns, step):
        x = LEFT + (col + 0.5) * CELL
        parts.append(f'<text x="{x:.0f}" y="{TOP - 6}" class="axis" text-anchor="middle">{_short(2 ** (col // STEPS_PER_OCTAVE))}</text>')
    for row in range(0, rows, step):
        y = TOP + (row + 0.5) * CELL + 4
        parts.append(f'<text x="{LEFT - 4}" y="{y:.0f}" class="axis" text-anchor="end">{_short(2 ** (row // STEPS_PER_OCTAVE))}</text>')
    return "".join(parts)


def _subtitle(table: DispatchTable) -> str:
    """The device name the table was measured on, or what a predicted table is (its ``gpu_name`` is the
    key again, "a100 (predicted)")."""
    if is_predicted(table):
        return "predicted, never measured"
    name = str(table.document.get("gpu_name") or "")
    return "" if name == table.gpu else _e(name)


def _from(table: DispatchTable) -> str:
    return _e(", ".join(str(g) for g in table.document.get("predicted_from") or ()) or "other GPUs")


def _points_text(table: DispatchTable) -> str:
    if is_predicted(table):
        return (f"{len(table.points)} shapes predicted from the measurements of {_from(table)} (no speed of "
                "light: no copy was measured on this GPU)")
    return f"{len(table.points)} measured points{_speed_of_light_text(table)}"


def _speed_of_light_text(table: DispatchTable) -> str:
    """The geometric mean over measured points of copy time ÷ chosen time (1.00: as fast as a copy)."""
    logs = []
    for point in table.points:
        pick = table.lookup(point["m"], point["n"])
        copy_us = point.get("copy_us")
        if pick is not None and pick.predicted_us and isinstance(copy_us, (int, float)) and copy_us > 0:
            logs.append(math.log(copy_us / pick.predicted_us))
    if not logs:
        return ""
    return f" · speed of light <b>{math.exp(sum(logs) / len(logs)):.2f}</b> (geomean of copy ÷ chosen time)"


def _share(count: int, total: int) -> str:
    percent = 100 * count / total
    return "&lt;1 %" if 0 < percent < 0.5 else f"{percent:.0f} %"


def _regret_text(regret: Any) -> str:
    if not isinstance(regret, dict):
        return "regret: not computed for this table"
    figures = [f"{name} <b>{regret[name]:.3f}×</b>" for name in ("geomean", "p95", "max")
               if isinstance(regret.get(name), (int, float))]
    method = f" ({_e(str(regret['method']))})" if regret.get("method") else ""
    return "regret vs the per-shape best: " + (" · ".join(figures) or "none recorded") + method


def _created(table: DispatchTable) -> str:
    created = table.document.get("created_at")
    return f", {'predicted' if is_predicted(table) else 'fitted'} {_e(str(created))}" if created else ""


def _short(value: int) -> str:
    """1024 → 1K, 16777216 → 16M: the axis ticks are powers of two."""
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if value >= size and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)


def _anchor(table: DispatchTable) -> str:
    return "-".join(_e(part) for part in (table.gpu, table.dtype, table.timing_method))


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)
