"""What one run's page shows: its tables in every layout that applies (with their downloads), its figures, and each cell in detail."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from benchbench.errors import BenchError
from benchbench.site.cells import HtmlTable, html_table, show
from benchbench.site.figures import Figure, figures

LAYOUT_TITLES = {
    "models": "Models: a row per model, an accuracy column per dataset",
    "summary": "Summary: a row per cell",
    "paper-transfer": "Transfer (the paper's Table 2 shape): datasets x models",
    "paper-scaling": "Scaling (the paper's model-scaling table): model, epochs, accuracies, exaFLOPs",
    "data-scaling": "Data scaling: models x training-set sizes",
    "compute": "Compute: params, GMACs, pre-training exaFLOPs, throughput",
    "timm": "Checkpoints as timm's results CSVs: top-1/top-5, params, crop_pct, interpolation, GMACs, img/s",
    "intervals": "Intervals: top-1 with its Wilson 95 % interval, the seed spread apart, calibration (ECE)",
}
FIRST_HEADER = {"paper-transfer": "Dataset"}  # layouts whose first column has no heading of its own
DOWNLOADS = (("csv", "csv", "CSV"), ("json", "json", "JSON"), ("latex", "tex", "LaTeX"), ("markdown", "md", "Markdown"))


@dataclass(frozen=True)
class LayoutTable:
    layout: str
    title: str
    table: HtmlTable
    files: dict[str, str]  # {format: text} of the downloads
    downloads: list[tuple[str, str]]  # (label, file name)


@dataclass(frozen=True)
class CellDetail:
    anchor: str
    title: str
    status: str
    error: str
    traceback: str
    attempts: int
    facts: list[tuple[str, str]]  # what ran: model, dataset, protocol, seed, device, times
    settings: list[tuple[str, str]]
    metrics: list[tuple[str, str]]
    env: str  # JSON, as recorded with the cell


@dataclass
class RunPage:
    run: Any  # runs.Run
    default_layout: str
    tables: list[LayoutTable] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # layout or figure kind -> why not drawn
    figures: list[Figure] = field(default_factory=list)
    cells: HtmlTable | None = None
    details: list[CellDetail] = field(default_factory=list)


def run_page(run, styles, compute_columns=None) -> RunPage:
    """The page of `run`; `compute_columns(run, table, frame)`, where given, adds columns to its compute table
    (the projected device-days of `benchbench report --project-to`)."""
    from benchbench.store.results import frame
    from benchbench.report.tables import LAYOUTS

    default = run.env.get("table") if run.env.get("table") in LAYOUTS else "models"
    page = RunPage(run, default)
    if not run.records:
        return page
    df = frame(run.last)
    for layout in sorted(LAYOUTS, key=lambda name: name != default):  # the suite's own layout first
        try:
            page.tables.append(_layout_table(df, layout, run, compute_columns if layout == "compute" else None))
        except BenchError as exc:
            page.skipped[layout] = str(exc)
        except Exception as exc:  # noqa: BLE001 - records this code did not foresee: say so, build the rest
            page.skipped[layout] = f"could not be built ({type(exc).__name__}: {exc})"
            print(f"warning: {run.label}: table {layout}: {type(exc).__name__}: {exc}", file=sys.stderr)
    page.figures, skipped = figures(df, styles, run.slug)
    page.skipped.update(skipped)
    page.cells, page.details = _cells(run)
    return page


def _layout_table(df, layout: str, run, extra=None) -> LayoutTable:
    """`layout`'s table of `run` (whose frame is `df`), with its downloads; `extra(run, table, df)`, where
    given, returns the table with columns added."""
    from benchbench.report.tables import build_table, readable, render

    # Counts that are not verified are shown, marked with a dagger and a note (never hidden).
    table = build_table(df, layout, force_flops=True)
    if extra is not None:
        table = extra(run, table, df)
    slug = run.slug
    files = {ext: render(table, fmt) for fmt, ext, _ in DOWNLOADS}
    names = [(label, f"{slug}/{layout}.{ext}") for _, ext, label in DOWNLOADS]
    shown = readable(table)  # as the markdown and LaTeX downloads print it
    return LayoutTable(layout, LAYOUT_TITLES.get(layout, layout),
                       html_table(f"table-{layout}", LAYOUT_TITLES.get(layout, layout),
                                  [shown.headers[0] or FIRST_HEADER.get(layout, ""), *shown.headers[1:]], shown.rows,
                                  shown.notes), files, names)


def _accuracies(record) -> str:
    """The cell's accuracies in percent, labelled where it has several ("10-shot 71.20; 25-shot 80.10")."""
    parts = [f"{label} {record.metrics[m] * 100:.2f}".strip() for m, label in record.accuracies.items()
             if isinstance(record.metrics.get(m), (int, float))]
    return "; ".join(parts) or "-"


def _cells(run) -> tuple[HtmlTable, list[CellDetail]]:
    attempts: dict[str, int] = {}
    for r in run.records:
        attempts[r.key] = attempts.get(r.key, 0) + 1
    rows, links, details = [], [], []
    for n, r in enumerate(run.last, start=1):
        anchor = f"cell-{n}"
        rows.append([r.model_name or r.model, r.dataset_name or r.dataset, r.protocol, r.seed,
                     r.status if r.ok else f"failed: {r.error or ''}", _accuracies(r),
                     r.wall_seconds])
        links.append(f"#{anchor}")
        facts = [("key", r.key), ("model", f"{r.model_name} ({r.model})"),
                 *[("contender", r.contender)] * bool(r.contender and r.contender != r.model),  # its weights, named
                 ("dataset", f"{r.dataset_name} ({r.dataset})"),
                 ("protocol", r.protocol), ("seed", str(r.seed)), ("resolution", show(r.resolution)),
                 ("device", f"{r.devices} x {r.device}" if (r.devices or 1) > 1 else r.device), ("FLOPs", show(r.flops_status)),
                 ("started", show(r.started_at)), ("finished", show(r.finished_at)),
                 ("wall seconds", show(r.wall_seconds)), ("plugins", ", ".join(
                     p for p in (r.model_plugin, r.dataset_plugin, r.protocol_plugin) if p))]
        # what it cost beyond compute: the energy counters read (or why none), what they covered, the price
        facts += [(name, show(value)) for name, value in (("energy", r.energy_method), ("energy counters",
                  r.energy_domains), ("price", r.price)) if value is not None]
        details.append(CellDetail(
            anchor, f"{r.model_name or r.model} x {r.dataset_name or r.dataset} x {r.protocol} (seed {r.seed})",
            r.status, r.error or "", r.traceback or "", attempts[r.key], facts,
            [(k, show(v)) for k, v in sorted(r.settings.items())],
            [(k, show(v)) for k, v in sorted(r.metrics.items())],
            json.dumps(r.env, indent=2, sort_keys=True, default=str) if r.env else ""))
    table = html_table("table-cells", "Every cell: its last attempt", ["Model", "Dataset", "Protocol", "Seed", "Status",
                       "Accuracy (%)", "Wall (s)"], rows, links=links)
    return table, details
