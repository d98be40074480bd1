"""Contenders against contenders within one run (`benchbench compare RUN --models A B [C ...]`): every
pair, on every configuration both ran (dataset, protocol, resolution, settings but the weights' file),
for every accuracy. A contender is a model with its weights, named as benchbench.store.contender says (or by
its model's id where the run holds one contender of that model).

Where both contenders kept predictions for the same images (benchbench.judge.paired): the exact McNemar test,
two-sided, on the discordant images, seeds paired seed by seed and combined (discordant images summed
over the seed pairs, the difference averaged, the bootstrap resampling images with all their pairs),
the paired bootstrap 95 % interval of the difference and the minimum detectable difference at the test
set's size. Otherwise, with 2 or more seeds each, Welch's t-test (two-sided) over seeds; with fewer,
no test. Holm's correction runs over every comparison with a p-value; a difference is `significant`
when its adjusted p-value is below `alpha` (benchbench.judge.rule.two_sided_verdict).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pandas as pd

from benchbench.judge import paired
from benchbench.store.contender import WEIGHTS_COLUMN, Entry, pick
from benchbench.errors import BenchError
from benchbench.judge.rule import Rules, configuration, numbers, two_sided_verdict
from benchbench.judge.stats import holm, welch

COLUMNS = ("dataset", "protocol", "setting", "metric", "contender_a", "contender_b", "model_a", "model_b", "acc_a",
           "acc_b", "seeds", "test", "p_value", "p_adjusted", "diff", "diff_ci95", "n_images", "mdd", "how", "verdict")


def entries(df: pd.DataFrame) -> list[Entry]:
    """The contenders of a run's successful cells (benchbench.store.contender.Entry)."""
    if df.empty:
        return []
    ok = df[df["status"] == "ok"]
    weights = ok[WEIGHTS_COLUMN] if WEIGHTS_COLUMN in ok else pd.Series(None, index=ok.index)
    contender = ok["contender"] if "contender" in ok else ok["model"]
    return [Entry(str(c), str(m), w if isinstance(w, str) else "") for c, m, w in zip(contender, ok["model"], weights)]


def _unpaired(va: list[float], vb: list[float], why: str) -> dict:
    test = welch(va, vb)
    if test is None:
        return {"test": "none (one seed, no paired predictions)" if min(len(va), len(vb)) < 2 else "exact (no spread)",
                "p_value": math.nan, "how": why}
    p_two_sided = min(1.0, 2 * min(test.p_lower, 1 - test.p_lower))
    return {"test": "Welch's t-test (two-sided, over seeds)", "p_value": p_two_sided,
            "how": f"n = {len(va)} vs {len(vb)} seeds; not paired: {why}"}


def versus(df: pd.DataFrame, run_dir: str | Path, names: list[str], *, alpha: float = 0.05,
           resamples: int = 10_000) -> pd.DataFrame:
    """One row per configuration, pair of the contenders `names` names (in the order given: B against A)
    and accuracy metric (COLUMNS). BenchError for a name that names no contender, or when no
    configuration has two of them."""
    Rules(alpha=alpha).check()
    chosen = pick(entries(df), names, str(run_dir), at_least=2)
    ok = df[(df["status"] == "ok")]
    ok = ok[(ok["contender"] if "contender" in ok else ok["model"]).isin(chosen)]
    if "contender" not in ok:
        ok = ok.assign(contender=ok["model"])
    configs = pd.Series([configuration(r, contender=False) for r in ok.to_dict("records")], index=ok.index, dtype=object)
    rows = []
    parsed = {c: json.loads(c) for c in dict.fromkeys(configs)}
    varying = sorted({k for *_, s in parsed.values() for k in s
                      if len({json.dumps(t.get(k), default=str) for *_, t in parsed.values()}) > 1})
    resolutions = len({p[2] for p in parsed.values()})
    for config, (dataset, protocol, res, settings) in parsed.items():
        cells = ok[configs == config]
        accuracies = {m: label for acc in cells["accuracies"] if isinstance(acc, dict) for m, label in acc.items()}
        for name_a, name_b in itertools.combinations([n for n in chosen if n in set(cells["contender"])], 2):
            rows_a, rows_b = cells[cells["contender"] == name_a], cells[cells["contender"] == name_b]
            for metric in accuracies:
                if metric not in cells.columns:
                    continue
                va, vb = numbers(rows_a[metric]), numbers(rows_b[metric])
                if not va or not vb:
                    continue
                row = {"dataset": dataset, "protocol": protocol,
                       "setting": ", ".join([f"{res} px"] * (res is not None and resolutions > 1)
                                            + [f"{k}={settings.get(k, '-')}" for k in varying]),
                       "metric": metric, "contender_a": name_a, "contender_b": name_b,
                       "model_a": rows_a["model"].iloc[0], "model_b": rows_b["model"].iloc[0],
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
                               how=f"{t.b_only} images only {name_b} got right, {t.a_only} only {name_a}; {t.how}")
                rows.append(row)
    if not rows:
        raise BenchError(f"no configuration (dataset, protocol, resolution, settings) in {run_dir} has two of "
                         f"{', '.join(chosen)} with an accuracy; nothing to compare")
    which = [i for i, r in enumerate(rows) if not math.isnan(r["p_value"])]
    adjusted = holm([rows[i]["p_value"] for i in which])
    for r in rows:
        r["p_adjusted"] = math.nan
    for i, p in zip(which, adjusted):
        rows[i]["p_adjusted"] = p
    for r in rows:
        r["verdict"] = two_sided_verdict(r["p_adjusted"], r["diff"], r["contender_a"], r["contender_b"], alpha)
    return pd.DataFrame(rows, columns=list(COLUMNS))
