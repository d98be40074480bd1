"""Paper-style tables: a pivot of the records, then formatting. Rounding happens only here."""

from __future__ import annotations

import math

import pandas as pd
from tabulate import tabulate

from benchbench.errors import BenchError

FORMATS = ("markdown", "latex", "csv", "html", "json")


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


def model_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per model (in run order): params, GMACs, top-1 per dataset (mean, std, n), device-days.

    Numeric and unrounded; `render` formats it.
    """
    if df.empty:
        raise BenchError("no records to tabulate")
    datasets = list(dict.fromkeys(df["dataset"]))
    names = dict(zip(df["dataset"], df["dataset_name"]))
    rows = []
    for model in dict.fromkeys(df["model"]):
        cells = df[df["model"] == model]
        ok = cells[cells["status"] == "ok"]
        row = {"model": model, "model_name": cells["model_name"].iloc[0]}
        row["params_m"] = _first(cells, "params") / 1e6
        row["gmacs"] = _first(cells, "gmacs")
        for d in datasets:
            sel = ok[ok["dataset"] == d]
            mean, std, n = _mean_std(sel["top1"] * 100) if "top1" in sel else (math.nan, math.nan, 0)
            row[f"{d}:top1_pct"], row[f"{d}:top1_pct_std"], row[f"{d}:n"] = mean, std, n
            row[f"{d}:failed"] = int((cells["dataset"] == d).sum() - n)
        days = ok["train_device_days"].dropna() if "train_device_days" in ok else pd.Series(dtype=float)
        row["train_device_days"] = float(days.sum()) if len(days) else math.nan
        rows.append(row)
    table = pd.DataFrame(rows)
    table.attrs["datasets"] = {d: names[d] for d in datasets}
    return table


def _num(x: float, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _display(table: pd.DataFrame, pm: str) -> tuple[list[str], list[list[str]]]:
    datasets = table.attrs["datasets"]
    headers = ["Model", "Params (M)", "GMACs", *(f"{name} top-1 (%)" for name in datasets.values()),
               "Train device-days"]
    body = []
    for _, r in table.iterrows():
        accs = []
        for d in datasets:
            if r[f"{d}:n"] == 0:
                accs.append("failed" if r[f"{d}:failed"] else "-")
            elif r[f"{d}:n"] > 1:
                accs.append(f"{r[f'{d}:top1_pct']:.2f}{pm}{r[f'{d}:top1_pct_std']:.2f}")
            else:
                accs.append(f"{r[f'{d}:top1_pct']:.2f}")
        body.append([r["model_name"], _num(r["params_m"], ".2f"), _num(r["gmacs"], ".3g"), *accs,
                     _num(r["train_device_days"], ".3g")])
    return headers, body


def _latex_escape(text: str) -> str:
    for ch in ("\\", "&", "%", "$", "#", "_", "{", "}"):
        text = text.replace(ch, "\\" + ch)
    return text


def render(table: pd.DataFrame, fmt: str = "markdown") -> str:
    if fmt not in FORMATS:
        raise BenchError(f"unknown table format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fmt == "csv":
        return table.to_csv(index=False)
    if fmt == "json":
        return table.to_json(orient="records", indent=2) + "\n"
    if fmt == "latex":
        headers, body = _display(table, " +- ")
        headers = [_latex_escape(h) for h in headers]
        body = [[_latex_escape(c).replace(" +- ", r" $\pm$ ") for c in row] for row in body]
        lines = [r"\begin{tabular}{l" + "r" * (len(headers) - 1) + "}", r"\toprule",
                 " & ".join(headers) + r" \\", r"\midrule",
                 *(" & ".join(row) + r" \\" for row in body), r"\bottomrule", r"\end{tabular}"]
        return "\n".join(lines) + "\n"
    headers, body = _display(table, " ± ")
    tablefmt = {"markdown": "github", "html": "html"}[fmt]
    return tabulate(body, headers, tablefmt=tablefmt, disable_numparse=True, colalign=("left",) + ("right",) * (len(headers) - 1)) + "\n"
