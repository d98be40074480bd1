"""Paper-style tables: a pivot of the records, then formatting. Rounding happens only here.

Layouts:
- `models`: one row per model: params, GMACs, top-1 per dataset (seeds as mean ± std), device-days.
- `summary`: one row per cell: its settings that vary, status, top-1, cost (its data, for csv and json,
  also the record's `checkpoint` and `preprocessing`).
- `paper-transfer`: the paper's Table 2 shape: a row per dataset (and per k of a few-shot cell),
  a column per model, a last row of device-days.
- `paper-scaling`: the paper's model-scaling table: model, epochs, accuracy per dataset,
  pre-training exaFLOPs.
- `data-scaling`: a row per model, a column per training-set size (the paper's Figure 3/4 as a
  table).
- `compute`: one row per cell: params, GMACs, epochs, pre-training exaFLOPs, and where measured the
  training throughput and the projected device-days (the paper's compute columns); `with_gmacs_fvcore`
  adds the GMACs in timm's convention (`benchbench table --gmacs-fvcore`).
- `timm`: one row per cell that scored a checkpoint (its record names one, and a top-1), with the
  header of timm's results CSVs (model, img_size, top1, top1_err, top5, top5_err, param_count in
  millions, crop_pct, interpolation) plus our GMACs and evaluation img/s. `model` is the checkpoint's
  hub name (hf-hub:<org>/<name> -> <name>), else the model id. `reference_table` sets it beside a
  published table's top-1/top-5 (`benchbench table --reference FILE.csv`: a timm results CSV, or a
  reference table read by benchbench.judge.reference).
- `intervals`: one row per model and accuracy: the top-1, its Wilson 95 % interval over the test
  images, the spread over seeds apart from it (never merged into one "±"), and the expected
  calibration error where the cells measured it (`ece`).

Printed tables read cleanly: a missing value is "-" (never "nan"), a setting as recorded (300, not
300.0). In markdown, LaTeX and HTML, a column that is the same in every row of a table with several
rows is left out and said once under the table ("In every row: Model ViT-Mu/7; Seed 0"), except in
layouts with a fixed header: models, paper-transfer, paper-scaling, data-scaling and compute, whose
columns are a paper table's, the same for every run (compute keeps its Data column when every row is
JFT-300M). The summary is the one layout whose columns follow the cells (the settings that vary), so
it is the one that drops them. CSV and JSON carry every column of `Table.data` whatever the layout.
Text columns are left-aligned, numbers right-aligned.

Which metrics are accuracies, and their labels, each record says (`accuracies`, from its protocol's
spec). Accuracies are percentages, seeds aggregated as "mean ± sample std" (n > 1), like the paper's
"88.55 ± 0.04"; a single cell that measured its own spread (`<metric>_std`, e.g. over few-shot
draws) shows that. Only seeds are aggregated (`variants_apart`): cells of one model that differ in
their weights (contender), resolution or any setting are rows of their own, named by what differs,
unless the layout spans it (datasets and protocols as columns, paper-scaling's epochs, data-scaling's
training-set sizes).

A record whose `flops_status` is not "ok" (an operator fvcore could not count, or the two counts
disagree) is refused unless forced; forced, its GMACs carry a dagger and a footnote.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import pandas as pd
from tabulate import tabulate

from benchbench.choices import PRECISION_CHOICES, PRECISION_DEFAULT, TABLE_FORMATS, TABLE_LAYOUTS
from benchbench.store.contender import WEIGHTS, WEIGHTS_COLUMN, default_name
from benchbench.errors import BenchError
from benchbench.settings import varying_settings
from benchbench.judge.stats import wilson
from benchbench.text import encodable, setting_text as plain_setting_text

if TYPE_CHECKING:
    from benchbench.judge.reference import Reference, Row as ReferenceRow

FORMATS, LAYOUTS = TABLE_FORMATS, TABLE_LAYOUTS
DAGGER = "†"


# A cell that is a number, optionally with a spread, a dagger, a unit or a ratio's "x":
# "88.57", "88.55 ± 0.04", "0.00699 †", "+1.20 pts", "x1.023", "60,000", "8.33e-07".
NUMBER = re.compile(r"^\s*x?([+-]?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?)(?:\s*(?:±.*|†|pts|%))?\s*$")
MISSING = "-"


@dataclass(frozen=True)
class Table:
    data: pd.DataFrame  # numeric and unrounded: what csv and json carry
    headers: list[str]
    rows: list[list[str]]  # formatted; " ± " between mean and std
    notes: list[str] = field(default_factory=list)
    fixed_header: bool = True  # False: its columns follow the cells, and one the same in every row is left out


def numeric_column(cells: list[str]) -> bool:
    """Whether a column's cells are numbers (missing ones aside), so that they align right."""
    present = [c for c in cells if c.strip() not in ("", MISSING)]
    return bool(present) and all(NUMBER.match(c) for c in present)


def readable(table: Table) -> Table:
    """The table as markdown, LaTeX and HTML print it: where the header is not fixed and there are
    several rows, the columns that are the same in every row are left out and said once, in a note."""
    if table.fixed_header or len(table.rows) < 2:
        return table
    same = [i for i in range(len(table.headers)) if len({row[i] for row in table.rows}) == 1]
    keep = [i for i in range(len(table.headers)) if i not in same]
    if not same or not keep:
        return table
    first = table.rows[0]
    said = [f"{table.headers[i]} {first[i]}" for i in same if first[i] != MISSING]
    absent = [table.headers[i] for i in same if first[i] == MISSING]
    notes = ([f"In every row: {'; '.join(said)}."] if said else []) + (
        [f"No value in any row: {', '.join(absent)}."] if absent else [])
    return replace(table, headers=[table.headers[i] for i in keep], rows=[[row[i] for i in keep] for row in table.rows],
                   notes=notes + table.notes)


def _mean_std(values: pd.Series) -> tuple[float, float, int]:
    """Mean, sample std and count; the std of one value is NaN (an empty CSV cell: one seed has no
    spread, which 0.0 would claim)."""
    values = values.dropna()
    n = len(values)
    if n == 0:
        return math.nan, math.nan, 0
    return float(values.mean()), float(values.std(ddof=1)) if n > 1 else math.nan, n


def _first(cells: pd.DataFrame, column: str) -> float:
    """The model's measured value (the same in every cell of the model), NaN if never measured."""
    if column not in cells or not cells[column].notna().any():
        return math.nan
    return float(cells[column].dropna().iloc[0])


def _num(x: float, spec: str) -> str:
    return MISSING if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def setting_text(value) -> str:
    """A setting as a table shows it: as recorded (an integer-valued float as an integer), "-" for a
    cell whose protocol has no such setting, '""' for an empty string."""
    if _missing(value):
        return MISSING
    return '""' if value == "" else plain_setting_text(value)


def exaflops_text(x: float) -> str:
    """Whole exaFLOPs from 10 up, as the paper prints them; three significant digits below."""
    return _num(x, ".0f" if x >= 10 else ".3g")


def significant(x: float | None, digits: int = 3) -> str:
    """`x` to `digits` significant digits in plain notation (86.6, 304, 0.219, 0.00513), whole
    numbers from 10^digits up (1,843): a fixed number of decimals would print 5,130 parameters
    as "0.01" million."""
    if x is None or math.isnan(x):
        return "-"
    if x == 0:
        return "0"
    if abs(x) < 10 ** digits:
        x = float(f"{x:.{digits}g}")  # rounded first: 99.96 is 100, not 100.0
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def _unverified(df: pd.DataFrame, force: bool) -> dict[str, str]:
    """{model: flops_status} of models whose MAC count is not verified; BenchError unless forced."""
    if "flops_status" not in df:
        return {}
    bad = {m: s for m, s in zip(df["model"], df["flops_status"]) if isinstance(s, str) and s != "ok"}
    if bad and not force:
        listed = "; ".join(f"{m}: {s}" for m, s in bad.items())
        raise BenchError(f"refusing to publish FLOPs that are not verified ({listed}). Fix the count "
                         "(a handle for the operator in benchbench/meters/flops.py) or pass --force-flops "
                         f"to publish them marked {DAGGER}")
    return bad


def model_table(df: pd.DataFrame, force_flops: bool = False) -> Table:
    """A row per model; a column per accuracy (dataset, and protocol where a dataset has several;
    few-shot cells a column per k)."""
    if df.empty:
        raise BenchError("no records to tabulate")
    bad = _unverified(df, force_flops)
    columns = accuracy_rows(df)
    data_rows, rows = [], []
    for model in dict.fromkeys(df["model"]):
        cells = df[df["model"] == model]
        ok = cells[cells["status"] == "ok"]
        r = {"model": model, "model_name": cells["model_name"].iloc[0],
             "params_m": _first(cells, "params") / 1e6, "gmacs": _first(cells, "gmacs")}
        accs = []
        for label, d, p, metric in columns:
            mean, std, n = _accuracy(ok[(ok["dataset"] == d) & (ok["protocol"] == p)], metric)
            failed = int(((cells["dataset"] == d) & (cells["protocol"] == p)).sum() - len(
                ok[(ok["dataset"] == d) & (ok["protocol"] == p)]))
            name = d if metric == "top1" and len({pp for _, dd, pp, _ in columns if dd == d}) == 1 else f"{label}"
            r.update({f"{name}:top1_pct": mean, f"{name}:top1_pct_std": std, f"{name}:n": n, f"{name}:failed": failed})
            accs.append("failed" if n == 0 and failed else _acc_text(mean, std, n))
        days = ok["train_device_days"].dropna() if "train_device_days" in ok else pd.Series(dtype=float)
        r["train_device_days"] = float(days.sum()) if len(days) else math.nan
        data_rows.append(r)
        gmacs = _num(r["gmacs"], ".3g") + (f" {DAGGER}" if model in bad else "")
        rows.append([r["model_name"], significant(r["params_m"]), gmacs, *accs, _num(r["train_device_days"], ".3g")])
    headers = ["Model", "Params (M)", "GMACs", *(f"{label} top-1 (%)" for label, *_ in columns), "Train device-days"]
    return Table(pd.DataFrame(data_rows), headers, rows, _notes(bad))


def compute_table(df: pd.DataFrame, force_flops: bool = False) -> Table:
    ok = df[df["status"] == "ok"] if not df.empty else df
    if ok.empty:
        raise BenchError("no successful records to tabulate")
    bad = _unverified(ok, force_flops)
    columns = ["model", "model_name", "dataset_name", "pretrain_epochs", "params", "gmacs", "gmacs_fvcore",
               "gmacs_xla", "pretrain_exaflops", "train_img_per_s", "projected_device_days", "device"]
    data = ok.assign(pretrain_epochs=pretraining_epochs(ok), pretrain_exaflops=pretraining_exaflops(ok)).reindex(
        columns=columns).reset_index(drop=True)
    measured = data["projected_device_days"].notna().any()
    headers = ["Model", "Data", "Epochs", "Params (M)", "GMACs", "Pre-training exaFLOPs"]
    if measured:  # where and at which precision (as it ran: `auto` resolved) the img/s were measured
        timed = ok[ok["projected_device_days"].notna()]
        where = ", ".join([*dict.fromkeys(data["device"].dropna()), *dict.fromkeys(cell_precisions(timed).dropna())])
        headers += [f"Train img/s ({where})", f"Projected device-days ({where})"]
    rows = []
    for _, r in data.iterrows():
        row = [r["model_name"], r["dataset_name"], _num(r["pretrain_epochs"], ".3g"), significant(r["params"] / 1e6),
               _num(r["gmacs"], ".4g") + (f" {DAGGER}" if r["model"] in bad else ""),
               exaflops_text(r["pretrain_exaflops"])]
        if measured:
            row += [_num(r["train_img_per_s"], ".0f"), _num(r["projected_device_days"], ".3g")]
        rows.append(row)
    return with_spend(Table(data, headers, rows, _notes(bad)), [spend(ok.iloc[[i]]) for i in range(len(ok))])


def with_gmacs_fvcore(table: Table) -> Table:
    """The compute layout with timm's MAC convention beside the paper's: a column "GMACs (fvcore)" after
    "GMACs" (fvcore's count: norms, pooling and upsampling too; "-" for records made before it was kept)."""
    return _with_gmacs(table, "gmacs_fvcore", "GMACs (fvcore)",
                       "GMACs (fvcore): timm's, fvcore's count with norms, pooling and upsampling (docs/compute.md).")


def with_gmacs_xla(table: Table) -> Table:
    """The compute layout with XLA's MAC convention beside the paper's: a column "GMACs (XLA)" after the
    other GMACs columns (a convolution's kernel taps over its padding not counted, as XLA's cost analysis
    counts them and the ViT paper's Table 6 did; "-" for records made before it was kept)."""
    return _with_gmacs(table, "gmacs_xla", "GMACs (XLA)",
                       "GMACs (XLA): XLA's cost analysis, no convolution tap over padding: the ViT paper's Table 6 "
                       "(docs/compute.md).")


def _with_gmacs(table: Table, column: str, header: str, note: str) -> Table:
    """`table` with the data column `column` as "header" after its last GMACs column, and `note` (the first
    such column's after what GMACs are)."""
    at = max(i for i, h in enumerate(table.headers) if h.startswith("GMACs")) + 1
    texts = [_num(v, ".4g") for v in table.data[column]] if column in table.data else ["-"] * len(table.rows)
    first = not any(h.startswith("GMACs (") for h in table.headers)
    notes = [*table.notes, f"GMACs: matmul-like work (the paper's convention); {note}" if first else note]
    return replace(table, headers=[*table.headers[:at], header, *table.headers[at:]],
                   rows=[[*row[:at], text, *row[at:]] for row, text in zip(table.rows, texts)], notes=notes)


def projected_onto(table: Table, df: pd.DataFrame, project, label: str, devices: Sequence[str]) -> Table:
    """The compute layout of `df` (`table`) with a column per device of `devices`: each ok cell projected
    there by `project(label, cell, device)` (a benchbench.judge.projected.Projector over run `label`)."""
    cells = df[df["status"] == "ok"].to_dict("records")
    return with_projection(table, cells, {d: [project(label, c, d) for c in cells] for d in devices})


def with_projection(table: Table, cells: list[dict], projections: dict[str, list]) -> Table:
    """The compute layout (a row per entry of `cells`, its ok cells in order) with a column per device of
    `projections` ({device id: per cell, a benchbench.projection.source.projected dict with its device-days,
    or why that cell was not projected}): its device-days projected there and their 80 % interval,
    "1,663 [965, 2,868]"; the data gains `projected_device_days@<id>` and its bounds; a note says how each
    was projected and that it is a projection, not a measurement."""
    data, headers, rows, notes = table.data.copy(), list(table.headers), [list(r) for r in table.rows], list(table.notes)
    for device, done in projections.items():
        headers.append(f"Projected device-days on {device} (80 % interval)")
        figures, hows = [], {}
        for row, cell, one in zip(rows, cells, done):
            if isinstance(one, str):
                hows.setdefault(f"not projected ({one})", []).append(str(cell.get("model")))
                row.append("-")
                figures.append((math.nan, math.nan, math.nan))
                continue
            days, (low, high) = one["projected_device_days"], one["device_days_interval_80"]
            row.append(f"{_num(days, '.4g')} [{_num(low, '.4g')}, {_num(high, '.4g')}]")
            figures.append((days, low, high))
            hows.setdefault(one["how"], []).append(str(cell.get("model")))
        for name, column in zip(("projected_device_days", "projected_device_days_low80",
                                 "projected_device_days_high80"), zip(*figures)):
            data[f"{name}@{device}"] = list(column)
        said = (next(iter(hows)) + " (every row)" if len(hows) == 1 else
                "; ".join(f"{how}: {', '.join(dict.fromkeys(models))}" for how, models in hows.items()))
        caveat = next((f" Note: {one['target_note']}." for one in done if isinstance(one, dict) and one.get("target_note")),
                      "")
        notes.append(f"Projected on {device}: a projection, not a measurement (`benchbench project RUN --to {device}`, "
                     f"docs/compute.md), the 80 % interval from its validated error; {said}.{caveat}")
    return replace(table, data=data, headers=headers, rows=rows, notes=notes)


# What a row cost beyond compute: (its data column, header, format); each shown where some row has it.
SPEND = (("energy_kj", "Energy (kJ)", ".4g"), ("cost_usd", "Cost (USD)", ",.4g"),
         ("projected_cost_usd", "Projected cost (USD, projected)", ",.4g"))


def _total(cells: pd.DataFrame, columns: tuple[str, ...]) -> float:
    """The sum of `columns` over `cells`, NaN where no cell has any of them."""
    values = [v for c in columns if c in cells for v in cells[c].dropna()]
    return float(sum(values)) if values else math.nan


def spend(cells: pd.DataFrame) -> dict[str, float]:
    """A row's energy and money from its cells: the joules their counters read around timed training and
    evaluation, in kJ; what they cost as they ran (`cost_usd`); the projected cost of the schedules
    they project (`projected_cost_usd`); NaN where no cell has one (the reason is in each record:
    `energy_method`, `price`)."""
    return {"energy_kj": _total(cells, ("energy_train_j", "energy_eval_j")) / 1e3,
            "cost_usd": _total(cells, ("cost_usd",)), "projected_cost_usd": _total(cells, ("projected_cost_usd",))}


def with_spend(table: Table, spends: list[dict[str, float]]) -> Table:
    """`table` (a row per entry of `spends`) with a column for each of energy, cost and projected cost that
    some row has, after its last column (its device-days or exaFLOPs); "-" in a row without."""
    shown = [(name, header, fmt) for name, header, fmt in SPEND if any(not math.isnan(s[name]) for s in spends)]
    if not shown:
        return table
    data = table.data.copy()
    for name, _, _ in shown:
        data[name] = [s[name] for s in spends]
    notes = [*table.notes, "Energy: the joules the hardware's counters read around each cell's timed training and "
             "evaluation (its energy_method); cost: wall hours x devices x the price given (--price, [[cost]]); "
             "projected cost: projected device-days x 24 h x that price. \"-\": not measured or not priced, the "
             "reason in the cell's record (docs/compute.md)."]
    return replace(table, data=data, headers=[*table.headers, *(header for _, header, _ in shown)],
                   rows=[[*row, *(_num(s[name], fmt) for name, _, fmt in shown)] for row, s in zip(table.rows, spends)],
                   notes=notes)


def _notes(bad: dict[str, str]) -> list[str]:
    return [f"{DAGGER} {model}: flops_status {status}" for model, status in bad.items()]


def successful(df: pd.DataFrame) -> pd.DataFrame:
    ok = df[df["status"] == "ok"] if not df.empty else df
    if ok.empty:
        raise BenchError("no successful records to tabulate")
    return ok


def _accuracy(sel: pd.DataFrame, metric: str) -> tuple[float, float, int]:
    """Mean and std in percent over the cells of `sel`; one cell: the std it recorded itself
    (`<metric>_std`, e.g. over few-shot draws), else NaN (no spread was measured)."""
    if metric not in sel:
        return math.nan, math.nan, 0
    mean, std, n = _mean_std(sel[metric] * 100)
    if n == 1 and f"{metric}_std" in sel and sel[f"{metric}_std"].notna().any():
        std = float(sel[f"{metric}_std"].dropna().iloc[0]) * 100
    return mean, std, n


def _acc_text(mean: float, std: float, n: int) -> str:
    if n == 0 or math.isnan(mean):
        return "-"
    return f"{mean:.2f} ± {std:.2f}" if (n > 1 or std > 0) and not math.isnan(std) else f"{mean:.2f}"


def accuracy_rows(df: pd.DataFrame) -> list[tuple[str, str, str, str]]:
    """(label, dataset, protocol, metric) for every accuracy the cells measured, in record order, as
    their records' `accuracies` declare them. A (dataset, protocol) whose cells all failed gets a
    `top1` entry, so tables can say so."""
    names = dict(zip(df["dataset"], df["dataset_name"]))
    pairs = list(dict.fromkeys(zip(df["dataset"], df["protocol"])))
    protocols_of = {d: [p for dd, p in pairs if dd == d] for d, _ in pairs}
    out = []
    for d, p in pairs:
        sel = df[(df["dataset"] == d) & (df["protocol"] == p) & (df["status"] == "ok")]
        label = names[d] + (f" ({p})" if len(protocols_of[d]) > 1 else "")
        declared = dict(pair for accuracies in sel.get("accuracies", ()) for pair in accuracies.items())
        measured = [(m, tag) for m, tag in declared.items() if m in sel and sel[m].notna().any()]
        out += [(f"{label} {tag}" if tag else label, d, p, m) for m, tag in measured]
        if sel.empty:
            out.append((label, d, p, "top1"))
    return out


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def varying_setting_columns(df: pd.DataFrame) -> list[str]:
    """The `setting.<name>` columns that tell cells of one protocol apart (see varying_settings)."""
    settings = [{c[8:]: v for c, v in r.items() if c.startswith("setting.") and not _missing(v)}
                for r in df.to_dict("records")]
    return [f"setting.{k}" for k in varying_settings(list(df["protocol"]), settings)]


def summary_table(df: pd.DataFrame, force_flops: bool = False) -> Table:
    if df.empty:
        raise BenchError("no records to tabulate")
    bad = _unverified(df[df["status"] == "ok"], force_flops)
    varying = varying_setting_columns(df)
    columns = ["model", "model_name", "dataset", "dataset_name", "protocol", "seed", *varying, "status", "error",
               "top1", "params", "gmacs", "train_img_per_s", "train_device_seconds", "wall_seconds"]
    # what the cell loaded and the transform it used, and where it ran: in the data (csv, json), not the
    # printed columns (`with_provenance` prints the run's)
    data = df.reindex(columns=[*columns, "contender", "suite", "run_id", "checkpoint", "preprocessing"]
                      ).reset_index(drop=True)
    # a contender the suite named (not its default name) is said beside its model
    named = any(isinstance(c, str) and c != default_name(m, {WEIGHTS: i})
                for c, m, i in zip(data["contender"], data["model"], df.get(WEIGHTS_COLUMN, [None] * len(df))))
    headers = ["Model", *["Contender"] * named, "Dataset", "Protocol", "Seed", *(c.split(".", 1)[1] for c in varying),
               "Status", "Top-1 (%)", "Params (M)", "GMACs", "Train img/s", "Train device-s", "Wall (s)"]
    rows = []
    for _, r in data.iterrows():
        status = "ok" if r["status"] == "ok" else f"failed: {str(r['error'])[:60]}"
        rows.append([r["model_name"], *[setting_text(r["contender"])] * named, r["dataset_name"], r["protocol"],
                     str(r["seed"]),
                     *(setting_text(r[c]) for c in varying),
                     status, _num(r["top1"] * 100, ".2f"), significant(r["params"] / 1e6),
                     _num(r["gmacs"], ".4g") + (f" {DAGGER}" if r["model"] in bad else ""),
                     _num(r["train_img_per_s"], ".0f"), _num(r["train_device_seconds"], ".1f"),
                     _num(r["wall_seconds"], ".1f")])
    return Table(data, headers, rows, _notes(bad), fixed_header=False)


def with_provenance(table: Table) -> Table:
    """The summary layout with each row's suite, run and contender first (`benchbench db query`: rows of
    many runs); another layout as it is."""
    if not {"suite", "run_id", "contender"} <= set(table.data.columns) or "Suite" in table.headers:
        return table
    said = [[setting_text(v) for v in table.data[c]] for c in ("suite", "run_id", "contender")]
    rows = [[*(col[i] for col in said), *[c for h, c in zip(table.headers, row) if h != "Contender"]]
            for i, row in enumerate(table.rows)]
    return replace(table, headers=["Suite", "Run", "Contender", *[h for h in table.headers if h != "Contender"]],
                   rows=rows)


def transfer_table(df: pd.DataFrame, force_flops: bool = False) -> Table:
    ok = successful(df)
    _unverified(ok, force_flops)
    models = list(dict.fromkeys(ok["model"]))
    model_names = dict(zip(ok["model"], ok["model_name"]))
    data_rows, rows = [], []
    for label, d, p, metric in accuracy_rows(ok):
        row, r = [label], {"row": label, "dataset": d, "protocol": p, "metric": metric}
        for m in models:
            mean, std, n = _accuracy(ok[(ok["dataset"] == d) & (ok["protocol"] == p) & (ok["model"] == m)], metric)
            r.update({f"{m}:top1_pct": mean, f"{m}:top1_pct_std": std, f"{m}:n": n})
            row.append(_acc_text(mean, std, n))
        data_rows.append(r)
        rows.append(row)
    if not rows:
        raise BenchError("paper-transfer: no cell measured an accuracy; this layout needs cells of protocols that report one")
    days = {m: float(ok.loc[ok["model"] == m, "train_device_days"].sum()) if "train_device_days" in ok else math.nan
            for m in models}
    data_rows.append({"row": "train_device_days", **{f"{m}:train_device_days": v for m, v in days.items()}})
    rows.append(["Device-days (all training in this run)", *(_num(days[m], ".3g") for m in models)])
    return Table(pd.DataFrame(data_rows), ["", *(model_names[m] for m in models)], rows)


def _column(ok: pd.DataFrame, name: str) -> pd.Series:
    return ok[name].astype(float) if name in ok else pd.Series(math.nan, index=ok.index, dtype=float)


def pretraining_epochs(ok: pd.DataFrame) -> pd.Series:
    """Pre-training epochs of each cell: the recorded `pretrain_epochs`; else, for a cell that records
    no pre-training of another cell (`pretrain_images_seen`), the epochs it trained for (`train_epochs`:
    a cell trained from scratch is its own pre-training). A cell that starts from another cell's
    weights and records no pretrain_epochs gets NaN: its train_epochs are fine-tuning epochs."""
    own = _column(ok, "pretrain_images_seen").isna()
    return _column(ok, "pretrain_epochs").fillna(_column(ok, "train_epochs").where(own))


def pretraining_exaflops(ok: pd.DataFrame) -> pd.Series:
    """Pre-training exaFLOPs of each cell: the recorded `pretrain_exaflops` (fine-tuning and measure
    cells), else the cell's own training compute, `train_exaflops` (benchbench.meters.compute's formula of the
    images it saw: a cell trained from scratch is its own pre-training)."""
    return _column(ok, "pretrain_exaflops").fillna(_column(ok, "train_exaflops"))


def scaling_table(df: pd.DataFrame, force_flops: bool = False) -> Table:
    ok = successful(df).copy()
    bad = _unverified(ok, force_flops)
    ok["_epochs"], ok["_exaflops"] = pretraining_epochs(ok), pretraining_exaflops(ok)
    accuracies = accuracy_rows(ok)
    data_rows, rows, spends = [], [], []
    for (model, epochs), sel in ok.groupby(["model", "_epochs"], sort=False, dropna=False):
        r = {"model": model, "model_name": sel["model_name"].iloc[0], "epochs": epochs}
        row = [r["model_name"], _num(epochs, ".3g")]
        for label, d, p, metric in accuracies:
            mean, std, n = _accuracy(sel[(sel["dataset"] == d) & (sel["protocol"] == p)], metric)
            r[f"{label}:top1_pct"], r[f"{label}:top1_pct_std"] = mean, std
            row.append(_acc_text(mean, std, n))
        flops = _first(sel, "pretrain_exaflops")
        r["pretrain_exaflops"] = flops if not math.isnan(flops) else _mean_std(sel["_exaflops"])[0]
        row.append(_num(r["pretrain_exaflops"], ".3g") + (f" {DAGGER}" if model in bad else ""))
        data_rows.append(r)
        rows.append(row)
        spends.append(spend(sel))
    headers = ["Model", "Epochs", *(f"{label} top-1 (%)" for label, *_ in accuracies), "Pre-training exaFLOPs"]
    return with_spend(Table(pd.DataFrame(data_rows), headers, rows, _notes(bad)), spends)


def train_size(ok: pd.DataFrame) -> pd.Series:
    """Training examples of each cell: its recorded `train_examples`."""
    out = ok["train_examples"] if "train_examples" in ok else pd.Series(math.nan, index=ok.index)
    return out.astype(float)


def data_scaling_table(df: pd.DataFrame, force_flops: bool = False) -> Table:
    ok = successful(df).copy()
    bad = _unverified(ok, force_flops)
    ok["_n"] = train_size(ok)
    if ok["_n"].isna().all():
        raise BenchError("data-scaling: no cell records its training-set size (train_examples); "
                         "this layout needs cells of a training protocol that vary the training-set size (a [sweep])")
    sizes = sorted(ok["_n"].dropna().unique())
    data_rows, rows = [], []
    for model, sel in ok.groupby("model", sort=False):
        r = {"model": model, "model_name": sel["model_name"].iloc[0], "params_m": _first(sel, "params") / 1e6,
             "gmacs": _first(sel, "gmacs")}
        row = [r["model_name"], significant(r["params_m"]), _num(r["gmacs"], ".3g") + (f" {DAGGER}" if model in bad else "")]
        for size in sizes:
            mean, std, n = _accuracy(sel[sel["_n"] == size], "top1")
            r.update({f"{int(size)}:top1_pct": mean, f"{int(size)}:top1_pct_std": std, f"{int(size)}:n": n})
            row.append(_acc_text(mean, std, n))
        data_rows.append(r)
        rows.append(row)
    datasets = ", ".join(dict.fromkeys(ok["dataset_name"]))
    headers = ["Model", "Params (M)", "GMACs", *(f"{int(n):,} train images: top-1 (%)" for n in sizes)]
    return Table(pd.DataFrame(data_rows), headers, rows, [f"Top-1 on the test split of {datasets}."] + _notes(bad))


TIMM_COLUMNS = ["model", "img_size", "top1", "top1_err", "top5", "top5_err", "param_count", "crop_pct",
                "interpolation"]


def _field(value, key: str):
    """`value[key]` of a record's JSON field (checkpoint, preprocessing), None where it has none."""
    return value.get(key) if isinstance(value, dict) else None


def hub_name(source) -> str | None:
    """`<name>` of an `hf-hub:<org>/<name>[@<revision>]` source; None for anything else."""
    if not isinstance(source, str) or not source.startswith("hf-hub:"):
        return None
    return source[len("hf-hub:"):].split("@", 1)[0].rsplit("/", 1)[-1] or None


def _eval_img_per_s(row: pd.Series) -> float:
    measured = row.get("eval_img_per_s")
    if not _missing(measured):
        return float(measured)
    images, seconds = row.get("eval_images"), row.get("eval_device_seconds")
    return math.nan if _missing(images) or _missing(seconds) or not seconds else float(images) / float(seconds)


def timm_table(df: pd.DataFrame, force_flops: bool = False) -> Table:
    ok = successful(df)
    if "checkpoint" in ok:
        ok = ok[[isinstance(c, dict) for c in ok["checkpoint"]]]
    else:
        ok = ok.iloc[0:0]
    if "top1" in ok:
        ok = ok[ok["top1"].notna()]
    if ok.empty:
        raise BenchError("timm: no cell scored a checkpoint (a record naming its checkpoint, with a top-1); "
                         "this layout needs cells that evaluate checkpoints (init = a file or hf-hub: id)")
    bad = _unverified(ok, force_flops)
    data_rows, rows = [], []
    for _, r in ok.iterrows():
        source = _field(r["checkpoint"], "source")
        pre = r.get("preprocessing")
        top1, top5 = float(r["top1"]) * 100, float(r.get("top5", math.nan)) * 100
        d = {"model": hub_name(source) or r["model"], "img_size": r["resolution"], "top1": top1,
             "top1_err": 100 - top1, "top5": top5, "top5_err": 100 - top5, "param_count": float(r["params"]) / 1e6,
             "crop_pct": _field(pre, "crop_pct"), "interpolation": _field(pre, "interpolation"),
             "gmacs": r.get("gmacs"), "eval_img_per_s": _eval_img_per_s(r),
             "eval_batch_size": r.get("eval_batch_size_used"), "precision": r.get("precision"),
             "dataset": r["dataset"], "protocol": r["protocol"], "model_id": r["model"],
             "checkpoint": r["checkpoint"], "preprocessing": pre if isinstance(pre, dict) else None}
        data_rows.append(d)
        rows.append([d["model"], setting_text(d["img_size"]), _num(top1, ".3f"), _num(d["top1_err"], ".3f"),
                     _num(top5, ".3f"), _num(d["top5_err"], ".3f"), _num(d["param_count"], ".2f"),
                     _num(d["crop_pct"], ".3f") if d["crop_pct"] is not None else MISSING,
                     d["interpolation"] or MISSING,
                     _num(d["gmacs"], ".4g") + (f" {DAGGER}" if r["model"] in bad else ""),
                     _num(d["eval_img_per_s"], ".0f"), r["dataset_name"]])
    headers = [*TIMM_COLUMNS, "gmacs", "img/s", "dataset"]
    notes = ["top1/top5 in %, param_count in millions; gmacs: multiply-accumulates of one forward pass (norms and "
             "pooling not counted); img/s: the evaluation's, on the recorded device, batch size and precision."]
    return Table(pd.DataFrame(data_rows), headers, rows, notes + _notes(bad))


def read_reference(path) -> "Reference":
    """A published table: a reference table or a timm results CSV (`benchbench.judge.reference.read_any`)."""
    from benchbench.judge.reference import read_any

    return read_any(path)


def _candidates(row: dict) -> list[str]:
    """Names a row of ours may have in a published table: its shown name, its model id, the id's last
    part (after "/"), the checkpoint file's name without its suffix."""
    names = [row["model"], row["model_id"], str(row["model_id"]).rsplit("/", 1)[-1]]
    file = _field(row.get("checkpoint"), "file")
    if isinstance(file, str) and file:
        names.append(Path(file).stem)
    return list(dict.fromkeys(n.lower() for n in names if isinstance(n, str) and n))


def _published(reference: "Reference", row: dict) -> dict[str, "ReferenceRow"]:
    """{top1/top5: the reference's row} for a row of the timm layout: the first of its names
    (`_candidates`) that the reference has a top-1 or top-5 of, at the row's img_size, dataset and
    protocol where the reference gives them."""
    def applies(ref) -> bool:
        return (ref.metric in ("top1", "top5") and ref.resolution in (None, row["img_size"])
                and ref.dataset in (None, row["dataset"]) and ref.protocol in (None, row["protocol"]))

    for name in _candidates(row):
        hits = {}
        for ref in reference.rows:
            if name in ref.names and applies(ref):
                hits.setdefault(ref.metric, ref)
        if hits:
            return hits
    return {}


def reference_table(table: Table, reference: "Reference", name: str | None = None) -> Table:
    """`table` (the timm layout) beside a published table: for each row matched by name (`_candidates`,
    case-insensitive) and img_size, the published top-1/top-5 and ours minus theirs, in points; a note
    lists the rows it could not match."""
    name = name or reference.name
    data_rows, rows, unmatched = [], [], []
    for row in table.data.to_dict("records"):
        hits = _published(reference, row)
        out = {**row, "reference_model": next((r.model for r in hits.values()), None)}
        for metric in ("top1", "top5"):
            theirs = hits[metric].value * 100 if metric in hits else math.nan
            out[f"reference_{metric}"], out[f"{metric}_diff"] = theirs, row[metric] - theirs
        if not hits:
            unmatched.append(row["model"])
        data_rows.append(out)
        rows.append([row["model"], setting_text(row["img_size"]), _num(row["top1"], ".3f"),
                     _num(out["reference_top1"], ".3f"), _signed(out["top1_diff"]), _num(row["top5"], ".3f"),
                     _num(out["reference_top5"], ".3f"), _signed(out["top5_diff"]),
                     out["reference_model"] or MISSING])
    headers = ["model", "img_size", "top1", f"{name} top1", "top1 diff", "top5", f"{name} top5", "top5 diff",
               f"{name} model"]
    notes = ["diff: ours minus the reference, in points of %."]
    if unmatched:
        notes.append(f"Not matched in {name} (no row whose model is the checkpoint's name, the model id or the "
                     f"file's name, at its img_size): {', '.join(unmatched)}.")
    return Table(pd.DataFrame(data_rows), headers, rows, notes)


def _signed(x: float) -> str:
    return MISSING if _missing(x) else f"{x:+.3f}"


def intervals_table(df: pd.DataFrame, force_flops: bool = False) -> Table:
    """One row per model and accuracy: mean top-1, the Wilson 95 % interval of that top-1 as a binomial
    over one test set's images (`eval_images`), the sample std over seeds (a separate column), and the
    mean ECE (`ece`) where measured."""
    ok = successful(df)
    data_rows, rows = [], []
    for label, d, p, metric in accuracy_rows(ok):
        for m in dict.fromkeys(ok["model"]):
            sel = ok[(ok["dataset"] == d) & (ok["protocol"] == p) & (ok["model"] == m)]
            mean, std, n = _mean_std(sel[metric]) if metric in sel else (math.nan, math.nan, 0)
            if n == 0 or math.isnan(mean):
                continue
            images = _first(sel, "eval_images")
            low, high = wilson(mean * images, int(images)) if images and images > 0 else (math.nan, math.nan)
            measured_ece = metric == "top1" and "ece" in sel and sel["ece"].notna().any()
            ece = _mean_std(sel["ece"])[0] if measured_ece else math.nan
            data_rows.append({"model": m, "row": label, "dataset": d, "protocol": p, "metric": metric, "top1": mean,
                              "wilson_low": low, "wilson_high": high, "eval_images": images, "seeds": n,
                              "seed_std": std if n > 1 else math.nan, "ece": ece})
            rows.append([sel["model_name"].iloc[0], label, _num(mean * 100, ".2f"),
                         MISSING if math.isnan(low) else f"[{low * 100:.2f}, {high * 100:.2f}]",
                         MISSING if math.isnan(images) else f"{int(images):,}", str(n),
                         _num(std * 100, ".2f") if n > 1 else MISSING, _num(ece * 100, ".2f")])
    headers = ["Model", "Accuracy", "Top-1 (%)", "Wilson 95 % (%)", "Test images", "Seeds", "Seed std (pts)",
               "ECE (%)"]
    notes = ["Wilson 95 %: the top-1 as a binomial over the test images; seed std: the spread over seeds, "
             "shown apart (the two are not merged). ECE: 15 equal-width bins of the top-1 probability."]
    return Table(pd.DataFrame(data_rows), headers, rows, notes)


BUILDERS = {"models": model_table, "summary": summary_table, "paper-transfer": transfer_table,
            "paper-scaling": scaling_table, "data-scaling": data_scaling_table, "compute": compute_table,
            "timm": timm_table, "intervals": intervals_table}


def build_table(df: pd.DataFrame, layout: str = "models", force_flops: bool = False) -> Table:
    if layout not in BUILDERS:
        raise BenchError(f"unknown table layout {layout!r}; allowed: {', '.join(LAYOUTS)}")
    df = precisions_apart(df)
    if layout in ENTRIES:
        df = variants_apart(df, ENTRIES[layout](df))
    return BUILDERS[layout](df, force_flops)


# What one entry of an aggregating layout holds besides its model: the cells an entry aggregates share
# these (the layout spans the rest as rows or columns: datasets, protocols, epochs, training-set sizes).
ENTRIES = {
    "models": lambda df: [df["dataset"], df["protocol"]],
    "paper-transfer": lambda df: [df["dataset"], df["protocol"]],
    "intervals": lambda df: [df["dataset"], df["protocol"]],
    "paper-scaling": lambda df: [df["dataset"], df["protocol"], pretraining_epochs(df)],
    "data-scaling": lambda df: [train_size(df)],
}


def _variant_text(value) -> str | None:
    """A value as variants are told apart by; None for a setting a record was made without (its
    protocol gained it later, or has none), which tells no cell apart."""
    return None if _missing(value) else json.dumps(value, sort_keys=True, default=str)


def _restates_precision(df: pd.DataFrame, column: str) -> bool:
    """Whether a setting only says the precision each cell ran at (that precision, or auto, which ran as
    it): `precisions_apart` has the cells apart by it already."""
    said = [(v, p) for v, p in zip(df[column], cell_precisions(df)) if not _missing(v)]
    return bool(said) and all(isinstance(v, str) and v in PRECISION_CHOICES and v in (PRECISION_DEFAULT, p)
                              for v, p in said)


def variants_apart(df: pd.DataFrame, entry: list[pd.Series]) -> pd.DataFrame:
    """No layout aggregates anything but seeds: where the cells that one entry of a table would aggregate
    (one model, the same `entry` values) differ in their contender (the model's weights), resolution or
    any setting, the model becomes one model per variant, named by what tells them apart: the contender's
    name where its weights differ ("vit-b16@in21k"), the other settings after it ("ViT-B/16 (lr=0.001)";
    id "vit-b16 (lr=0.001)"). A model whose entries each hold one variant keeps its name. A setting a
    record lacks tells it from no other, nor does one that says only the precision a cell ran at."""
    if df.empty or "model" not in df:
        return df
    dims = [c for c in ("contender", "resolution") if c in df] + [
        c for c in df.columns if c.startswith("setting.") and not _restates_precision(df, c)]
    texts = pd.DataFrame({d: df[d].map(_variant_text) for d in dims}, index=df.index)
    keys = pd.DataFrame({"model": df["model"], **{f"_k{i}": k.astype(str) for i, k in enumerate(entry)}},
                        index=df.index)
    together = pd.concat([keys, texts], axis=1).groupby(list(keys.columns), sort=False, dropna=False)[dims].nunique()
    varying = (together > 1).groupby(level="model", sort=False).any()
    varying = {m: [d for d in dims if row[d]] for m, row in varying.iterrows() if row.any()}
    if not varying:
        return df
    df = df.copy()
    for model, apart in varying.items():
        mine = df["model"] == model
        named = "contender" in apart  # the weights' setting is then said by the contender's name
        shown = [d for d in apart if d != "contender" and not (named and d == WEIGHTS_COLUMN)]
        for i in df.index[mine]:
            extra = ", ".join(f"{setting_text(df.at[i, d])} px" if d == "resolution" else
                              f"{d[len('setting.'):]}={setting_text(df.at[i, d])}" for d in shown)
            suffix = f" ({extra})" if extra else ""
            base_id = df.at[i, "contender"] if named else model
            base_name = df.at[i, "contender"] if named else df.at[i, "model_name"]
            df.at[i, "model"], df.at[i, "model_name"] = base_id + suffix, base_name + suffix
    return df


def cell_precisions(df: pd.DataFrame) -> pd.Series:
    """Each cell's precision as it ran (its record's `precision`: resolved on its device); None for a
    cell whose protocol records no precision."""
    if "precision" not in df:
        return pd.Series([None] * len(df), index=df.index, dtype=object)
    return pd.Series([p if isinstance(p, str) else None for p in df["precision"]], index=df.index, dtype=object)


def precisions_apart(df: pd.DataFrame) -> pd.DataFrame:
    """No layout pools a model's cells of different precisions (their accuracy, throughput or device-days):
    a model whose cells ran at more than one precision becomes one model per precision, labelled by it
    ("ViT-B/16 (bf16)", "ViT-B/16 (fp32)"; id "vit-b16@bf16"); a model run at one precision keeps its
    name. fp8, torchao's float8 training, is labelled always. A cell that records no precision counts as
    a precision of its own ("precision not recorded") when its model has cells that do."""
    if df.empty or "model" not in df:
        return df
    precision = cell_precisions(df)
    several = precision.fillna("-").groupby(df["model"]).transform("nunique") > 1
    label = several | (precision == "fp8")
    if not label.any():
        return df
    df = df.copy()
    tag = precision.fillna("precision not recorded")[label]
    df.loc[label, "model"] = df.loc[label, "model"] + "@" + precision.fillna("unrecorded")[label]
    df.loc[label, "model_name"] = df.loc[label, "model_name"] + " (" + tag + ")"
    return df


def _latex_escape(text: str) -> str:
    for ch in ("\\", "&", "%", "$", "#", "_", "{", "}"):
        text = text.replace(ch, "\\" + ch)
    return text.replace(" ± ", r" $\pm$ ").replace(DAGGER, r"$^\dagger$")


def alignments(table: Table) -> list[str]:
    """"left" or "right" per column: numbers right, text left."""
    return ["right" if numeric_column([row[i] for row in table.rows]) else "left" for i in range(len(table.headers))]


def _encodable(data: pd.DataFrame) -> pd.DataFrame:
    """`data` with each text holding a lone surrogate (a record's JSON may carry one, as `"\\ud800"`)
    written with that character as an escape (`\\ud800`), as the database keeps it
    (benchbench.text.encodable): pandas' JSON writer and stdout cannot encode it."""
    def fix(value):
        return encodable(value) if isinstance(value, str) else value

    def unencodable(column: str) -> bool:
        if not (data[column].dtype == object or pd.api.types.is_string_dtype(data[column])):
            return False
        return any(isinstance(v, str) and fix(v) is not v for v in data[column])

    bad = [c for c in data.columns if unencodable(c)]  # others keep their values and types as they are
    return data.assign(**{c: pd.Series([fix(v) for v in data[c]], index=data.index, dtype=data[c].dtype)
                          for c in bad}) if bad else data


def render(table: Table, fmt: str = "markdown") -> str:
    if fmt not in FORMATS:
        raise BenchError(f"unknown table format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fmt == "csv":
        return _encodable(table.data).to_csv(index=False)
    if fmt == "json":
        return _encodable(table.data).to_json(orient="records", indent=2) + "\n"
    table = readable(table)
    align = alignments(table)
    if fmt == "latex":
        lines = [r"\begin{tabular}{" + "".join(a[0] for a in align) + "}", r"\toprule",
                 " & ".join(_latex_escape(h) for h in table.headers) + r" \\", r"\midrule",
                 *(" & ".join(_latex_escape(c) for c in row) + r" \\" for row in table.rows),
                 r"\bottomrule", r"\end{tabular}"]
        lines += [f"% {note}" for note in table.notes]
        return "\n".join(lines) + "\n"
    tablefmt = {"markdown": "github", "html": "html"}[fmt]
    rows, headers = table.rows, table.headers
    if fmt == "markdown":  # a `|` inside a cell ends the cell: escaped, as GitHub's tables read `\|`
        rows = [[c.replace("|", "\\|") if isinstance(c, str) else c for c in row] for row in rows]
        headers = [h.replace("|", "\\|") for h in headers]
    text = tabulate(rows, headers, tablefmt=tablefmt, disable_numparse=True, colalign=align) + "\n"
    if table.notes:
        sep = "<br>\n" if fmt == "html" else "\n"
        text += "\n" + sep.join(table.notes) + "\n"
    return text
