"""Paper-style tables: a pivot of the records, then formatting. Rounding happens only here.

Layouts:
- `models`: one row per model: params, GMACs, top-1 per dataset (seeds as mean ± std), device-days.
- `compute`: one row per cell: params, GMACs, epochs, pre-training exaFLOPs, and where measured the
  training throughput and the projected device-days (the paper's compute columns).

A record whose `flops_status` is not "ok" (an operator fvcore could not count, or the two counts
disagree) is refused unless forced; forced, its GMACs carry a dagger and a footnote.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd
from tabulate import tabulate

from benchbench.errors import BenchError

FORMATS = ("markdown", "latex", "csv", "html", "json")
LAYOUTS = ("models", "compute")
DAGGER = "†"


@dataclass(frozen=True)
class Table:
    data: pd.DataFrame  # numeric and unrounded: what csv and json carry
    headers: list[str]
    rows: list[list[str]]  # formatted; " ± " between mean and std
    notes: list[str] = field(default_factory=list)


def _mean_std(values: pd.Series) -> tuple[float, float, int]:
    values = values.dropna()
    n = len(values)
    if n == 0:
        return math.nan, math.nan, 0
    return float(values.mean()), float(values.std(ddof=1)) if n > 1 else 0.0, n


def _first(cells: pd.DataFrame, column: str) -> float:
    """The model's measured value (the same in every cell of the model), NaN if never measured."""
    if column not in cells or not cells[column].notna().any():
        return math.nan
    return float(cells[column].dropna().iloc[0])


def _num(x: float, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _unverified(df: pd.DataFrame, force: bool) -> dict[str, str]:
    """{model: flops_status} of models whose MAC count is not verified; BenchError unless forced."""
    if "flops_status" not in df:
        return {}
    bad = {m: s for m, s in zip(df["model"], df["flops_status"]) if isinstance(s, str) and s != "ok"}
    if bad and not force:
        listed = "; ".join(f"{m}: {s}" for m, s in bad.items())
        raise BenchError(f"refusing to publish FLOPs that are not verified ({listed}). Fix the count "
                         "(a handle for the operator in benchbench/measure/flops.py) or pass --force-flops "
                         f"to publish them marked {DAGGER}")
    return bad


def model_table(df: pd.DataFrame, force_flops: bool = False) -> Table:
    if df.empty:
        raise BenchError("no records to tabulate")
    bad = _unverified(df, force_flops)
    datasets = list(dict.fromkeys(df["dataset"]))
    names = dict(zip(df["dataset"], df["dataset_name"]))
    data_rows, rows = [], []
    for model in dict.fromkeys(df["model"]):
        cells = df[df["model"] == model]
        ok = cells[cells["status"] == "ok"]
        r = {"model": model, "model_name": cells["model_name"].iloc[0],
             "params_m": _first(cells, "params") / 1e6, "gmacs": _first(cells, "gmacs")}
        accs = []
        for d in datasets:
            sel = ok[ok["dataset"] == d]
            mean, std, n = _mean_std(sel["top1"] * 100) if "top1" in sel else (math.nan, math.nan, 0)
            failed = int((cells["dataset"] == d).sum() - n)
            r.update({f"{d}:top1_pct": mean, f"{d}:top1_pct_std": std, f"{d}:n": n, f"{d}:failed": failed})
            if n == 0:
                accs.append("failed" if failed else "-")
            else:
                accs.append(f"{mean:.2f} ± {std:.2f}" if n > 1 else f"{mean:.2f}")
        days = ok["train_device_days"].dropna() if "train_device_days" in ok else pd.Series(dtype=float)
        r["train_device_days"] = float(days.sum()) if len(days) else math.nan
        data_rows.append(r)
        gmacs = _num(r["gmacs"], ".3g") + (f" {DAGGER}" if model in bad else "")
        rows.append([r["model_name"], _num(r["params_m"], ".2f"), gmacs, *accs, _num(r["train_device_days"], ".3g")])
    headers = ["Model", "Params (M)", "GMACs", *(f"{names[d]} top-1 (%)" for d in datasets), "Train device-days"]
    return Table(pd.DataFrame(data_rows), headers, rows, _notes(bad))


def compute_table(df: pd.DataFrame, force_flops: bool = False) -> Table:
    ok = df[df["status"] == "ok"] if not df.empty else df
    if ok.empty:
        raise BenchError("no successful records to tabulate")
    bad = _unverified(ok, force_flops)
    columns = ["model", "model_name", "dataset_name", "pretrain_epochs", "params", "gmacs", "pretrain_exaflops",
               "train_img_per_s", "projected_device_days", "device"]
    data = ok.reindex(columns=columns).reset_index(drop=True)
    measured = data["projected_device_days"].notna().any()
    headers = ["Model", "Data", "Epochs", "Params (M)", "GMACs", "Pre-training exaFLOPs"]
    if measured:
        devices = ", ".join(dict.fromkeys(data["device"].dropna()))
        headers += [f"Train img/s ({devices})", f"Projected device-days ({devices})"]
    rows = []
    for _, r in data.iterrows():
        row = [r["model_name"], r["dataset_name"], _num(r["pretrain_epochs"], "g"), _num(r["params"] / 1e6, ".1f"),
               _num(r["gmacs"], ".4g") + (f" {DAGGER}" if r["model"] in bad else ""),
               _num(r["pretrain_exaflops"], ".0f")]
        if measured:
            row += [_num(r["train_img_per_s"], ".0f"), _num(r["projected_device_days"], ".3g")]
        rows.append(row)
    return Table(data, headers, rows, _notes(bad))


def _notes(bad: dict[str, str]) -> list[str]:
    return [f"{DAGGER} {model}: flops_status {status}" for model, status in bad.items()]


def build_table(df: pd.DataFrame, layout: str = "models", force_flops: bool = False) -> Table:
    if layout not in LAYOUTS:
        raise BenchError(f"unknown table layout {layout!r}; allowed: {', '.join(LAYOUTS)}")
    return (model_table if layout == "models" else compute_table)(df, force_flops)


def _latex_escape(text: str) -> str:
    for ch in ("\\", "&", "%", "$", "#", "_", "{", "}"):
        text = text.replace(ch, "\\" + ch)
    return text.replace(" ± ", r" $\pm$ ").replace(DAGGER, r"$^\dagger$")


def render(table: Table, fmt: str = "markdown") -> str:
    if fmt not in FORMATS:
        raise BenchError(f"unknown table format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fmt == "csv":
        return table.data.to_csv(index=False)
    if fmt == "json":
        return table.data.to_json(orient="records", indent=2) + "\n"
    if fmt == "latex":
        lines = [r"\begin{tabular}{l" + "r" * (len(table.headers) - 1) + "}", r"\toprule",
                 " & ".join(_latex_escape(h) for h in table.headers) + r" \\", r"\midrule",
                 *(" & ".join(_latex_escape(c) for c in row) + r" \\" for row in table.rows),
                 r"\bottomrule", r"\end{tabular}"]
        lines += [f"% {note}" for note in table.notes]
        return "\n".join(lines) + "\n"
    tablefmt = {"markdown": "github", "html": "html"}[fmt]
    text = tabulate(table.rows, table.headers, tablefmt=tablefmt, disable_numparse=True,
                    colalign=("left",) + ("right",) * (len(table.headers) - 1)) + "\n"
    if table.notes:
        sep = "<br>\n" if fmt == "html" else "\n"
        text += "\n" + sep.join(table.notes) + "\n"
    return text
