"""Models against models within one run (`benchbench compare RUN --models A B [C ...]`): every pair, on
every configuration both ran (dataset, protocol, resolution, settings), for every accuracy.

Where both models kept predictions for the same images (benchbench.paired): the exact McNemar test,
two-sided, on the discordant images, seeds paired seed by seed and combined (discordant images summed
over the seed pairs, the difference averaged, the bootstrap resampling images with all their pairs),
the paired bootstrap 95 % interval of the difference and the minimum detectable difference at the test
set's size. Otherwise, with 2 or more seeds each, Welch's t-test (two-sided) over seeds; with fewer,
no test. Holm's correction runs over every comparison with a p-value; a difference is `significant`
when its adjusted p-value is below `alpha`.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pandas as pd

from benchbench import paired
from benchbench.errors import BenchError, unknown_message
from benchbench.stats import holm, welch

COLUMNS = ("dataset", "protocol", "setting", "metric", "model_a", "model_b", "acc_a", "acc_b", "seeds", "test",
           "p_value", "p_adjusted", "diff", "diff_ci95", "n_images", "mdd", "how", "verdict")


def _config(row: pd.Series) -> str:
    settings = {c[len("setting."):]: row[c] for c in row.index
                if c.startswith("setting.") and not (isinstance(row[c], float) and math.isnan(row[c]))}
    res = row.get("resolution")
    res = None if res is None or (isinstance(res, float) and math.isnan(res)) else int(res)
    return json.dumps([row["dataset"], row["protocol"], res, settings], sort_keys=True, default=str)


def check_models(df: pd.DataFrame, models: list[str], run_dir: str | Path) -> None:
    """BenchError naming the first model the run has no successful cell of, with a did-you-mean."""
    if len(models) < 2:
        raise BenchError(f"--models: name at least 2 models to compare (given: {', '.join(models) or 'none'})")
    have = sorted(set(df.loc[df["status"] == "ok", "model"])) if len(df) else []
    for m in models:
        if m not in have:
            raise BenchError(unknown_message(f"model in {run_dir}", m, have))
    if len(set(models)) != len(models):
        raise BenchError(f"--models: {', '.join(models)} names a model twice")


def _numbers(values: pd.Series) -> list[float]:
    return [float(x) for x in values if isinstance(x, (int, float)) and not math.isnan(float(x))]


def _unpaired(va: list[float], vb: list[float], why: str) -> dict:
    test = welch(va, vb)
    if test is None:
        return {"test": "none (one seed, no paired predictions)" if min(len(va), len(vb)) < 2 else "exact (no spread)",
                "p_value": math.nan, "how": why}
    p_two_sided = min(1.0, 2 * min(test.p_lower, 1 - test.p_lower))
    return {"test": "Welch's t-test (two-sided, over seeds)", "p_value": p_two_sided,
            "how": f"n = {len(va)} vs {len(vb)} seeds; not paired: {why}"}


def versus(df: pd.DataFrame, run_dir: str | Path, models: list[str], *, alpha: float = 0.05,
           resamples: int = 10_000) -> pd.DataFrame:
    """One row per configuration, pair of `models` (in the order given: B against A) and accuracy
    metric (COLUMNS). BenchError for an unknown model, or when no configuration has two of them."""
    check_models(df, models, run_dir)
    ok = df[(df["status"] == "ok") & df["model"].isin(models)]
    configs = pd.Series([_config(r) for _, r in ok.iterrows()], index=ok.index, dtype=object)
    rows = []
    parsed = {c: json.loads(c) for c in dict.fromkeys(configs)}
    varying = sorted({k for *_, s in parsed.values() for k in s
                      if len({json.dumps(t.get(k), default=str) for *_, t in parsed.values()}) > 1})
    resolutions = len({p[2] for p in parsed.values()})
    for config, (dataset, protocol, res, settings) in parsed.items():
        cells = ok[configs == config]
        accuracies = {m: label for acc in cells["accuracies"] if isinstance(acc, dict) for m, label in acc.items()}
        for model_a, model_b in itertools.combinations([m for m in models if m in set(cells["model"])], 2):
            rows_a, rows_b = cells[cells["model"] == model_a], cells[cells["model"] == model_b]
            for metric in accuracies:
                if metric not in cells.columns:
                    continue
                va, vb = _numbers(rows_a[metric]), _numbers(rows_b[metric])
                if not va or not vb:
                    continue
                row = {"dataset": dataset, "protocol": protocol,
                       "setting": ", ".join([f"{res} px"] * (res is not None and resolutions > 1)
                                            + [f"{k}={settings.get(k, '-')}" for k in varying]),
                       "metric": metric, "model_a": model_a, "model_b": model_b,
                       "acc_a": sum(va) / len(va), "acc_b": sum(vb) / len(vb),
                       "seeds": f"{len(va)} vs {len(vb)}", "diff": sum(vb) / len(vb) - sum(va) / len(va),
                       "diff_ci95": None, "n_images": None, "mdd": math.nan}
                got = paired.pair((Path(run_dir), rows_a), (Path(run_dir), rows_b), metric)
                if isinstance(got, str):
                    row.update(_unpaired(va, vb, got))
                else:
                    t = paired.test(got, resamples=resamples)
                    row.update(test="exact McNemar (paired, two-sided)", p_value=t.p_two_sided, diff=t.diff,
                               diff_ci95=[t.ci95[0], t.ci95[1]], n_images=t.images, mdd=t.mdd,
                               how=f"{t.b_only} images only {model_b} got right, {t.a_only} only {model_a}; {t.how}")
                rows.append(row)
    if not rows:
        raise BenchError(f"no configuration (dataset, protocol, resolution, settings) in {run_dir} has two of "
                         f"{', '.join(models)} with an accuracy; nothing to compare")
    which = [i for i, r in enumerate(rows) if not math.isnan(r["p_value"])]
    adjusted = holm([rows[i]["p_value"] for i in which])
    for r in rows:
        r["p_adjusted"] = math.nan
    for i, p in zip(which, adjusted):
        rows[i]["p_adjusted"] = p
    for r in rows:
        r["verdict"] = verdict(r, alpha)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def verdict(row: dict, alpha: float) -> str:
    """"<B> better" / "<A> better" (significant after Holm), "no significant difference", or "not tested"."""
    p = row["p_adjusted"]
    if math.isnan(p):
        return "not tested"
    if p >= alpha:
        return "no significant difference"
    return f"{row['model_b'] if row['diff'] > 0 else row['model_a']} better"
