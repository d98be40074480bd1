"""The site's history page: each cell's figures across the runs reported, and their regressions.

For every model x dataset x protocol of the runs and each figure of METRICS their records hold,
benchbench.judge.history's series (one per cell, the same resolved settings; for a timing, one per device
and environment, never mixed), ordered by the time each record finished, steps found and judged as
`benchbench history` finds and judges them (asv's step detection; benchbench.judge.rule's rule at its
defaults: a timing step without a noise estimate is never a regression). A series of one point has
no history and is left out. Each group gets a figure (a panel per series, each regression marked where it
starts: benchbench.report.history_figures) and the page one table of every regression.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from markupsafe import Markup

from benchbench.errors import BenchError
from benchbench.judge.history import Series, history
from benchbench.store.record import Record
from benchbench.site.cells import HtmlTable, html_table
from benchbench.site.figures import svg_markup
from benchbench.site.runs import Run

# energy and money where records hold them (benchbench.meters.energy, benchbench.meters.prices): judged as timings
METRICS = ("top1", "img_per_s", "train_img_per_s", "eval_img_per_s", "energy_train_j", "energy_eval_j", "cost_usd")
MAX_PANELS = 12  # series drawn per group: those with regressions first, then the longest


@dataclass(frozen=True)
class Group:
    """One model x dataset x protocol and metric: its series of two points or more, drawn."""

    model: str
    dataset: str
    protocol: str
    metric: str
    series: tuple[Series, ...]
    drawn: int  # how many of the series the figure shows (at most MAX_PANELS)
    svg: Markup

    @property
    def title(self) -> str:
        return f"{self.model} x {self.dataset} x {self.protocol}: {self.metric}"

    @property
    def anchor(self) -> str:
        return "h-" + "-".join(part.replace("/", "_") for part in (self.model, self.dataset, self.protocol,
                                                                   self.metric))


def history_groups(runs: Sequence[Run]) -> list[Group]:
    """The groups of the runs' records (every attempt) that have a history. A record without a run id
    (written by hand, or by an old version) is named by its run's."""
    from benchbench.report.history_figures import history_figure

    by_cell: dict[tuple[str, str, str], list[Record]] = {}
    for run in runs:
        for record in run.records:
            named = record if record.run_id else replace(record, run_id=run.run_id)
            by_cell.setdefault((record.model, record.dataset, record.protocol), []).append(named)
    out = []
    for (model, dataset, protocol), found in sorted(by_cell.items()):
        for metric in METRICS:
            if not any(metric in r.metrics for r in found):
                continue
            try:
                series = [s for s in history(found, metric) if len(s.points) >= 2]
            except BenchError:  # no successful record holds it
                continue
            if not series:
                continue
            series.sort(key=lambda s: (not s.regressions, -len(s.points), s.key, s.environment))
            shown = series[:MAX_PANELS]
            group = Group(model, dataset, protocol, metric, tuple(series), len(shown), Markup(""))
            try:
                fig = history_figure(shown, metric, group.title)
                svg = svg_markup(fig, f"history:{group.anchor}", f"History of {group.title}")
            except BenchError as exc:  # values near the largest float: no axis holds them
                svg = Markup("<p>{}.</p>").format(str(exc)[0].upper() + str(exc)[1:])
            out.append(replace(group, svg=svg))
    return out


def regressions_table(groups: Sequence[Group]) -> HtmlTable:
    rows, links = [], []
    for g in groups:
        for s in g.series:
            for r in s.regressions:
                rows.append([f"{g.model} x {g.dataset} x {g.protocol}", g.metric,
                             s.key + (f" ({s.label})" if s.label else ""), s.environment or "-", r.before, r.after,
                             f"{r.relative:+.1%}", r.judged.test if r.judged else "-", r.first.label,
                             r.last_good.label])
                links.append(f"#{g.anchor}")
    return html_table("table-regressions", "Every regression: a step for the worse, where it starts",
                      ["Cell", "Metric", "Key", "Environment", "Before", "After", "Change", "Judged by", "First at",
                       "Last good"], rows, links=links)
