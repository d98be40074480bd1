"""The projection's constants fitted on the shipped timm tables (results/references/timm-benchmarks),
optionally leaving devices out: `scripts/fit_projection.py` writes them to constants.json.

Fit order (each by a coarse grid search minimising the mean over file pairs of
(median + p90)/2 of |ln(predicted/measured)|, models > 0.5 GMACs):

1. eta_tensor, alpha_bw: on ordered pairs of files from DIFFERENT devices with the same
   execution mode (eager/eager or compiled/compiled), software may differ.  Without such pairs
   they stay at their physical priors (1.0, 0.5).
2. compile_keep: on same-device, same-software eager<->compiled pairs (eta fixed from 1.).
3. counts_eta_tensor, counts_bytes_per_act: on every single file (counts-only projection).
4. Calibration (interval quantiles): in-fold errors of the fitted method on all pairs,
   per kind and family; software floor from same-device software pairs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from benchbench.projection.catalog import resolve
from benchbench.projection.method import (Calibration, Constants, Modes, counts_only_img_per_s, family_of,
                                          half_width, physics_half_width, project_img_per_s, projection_kind,
                                          train_ratio_table)
from benchbench.projection.tables import read_table

REF_DIR = Path(__file__).resolve().parents[2] / "results" / "references" / "timm-benchmarks"
MIN_GMACS = 0.5


def get_device(device_id: str):
    return resolve(device_id)


@dataclass(frozen=True)
class Table:
    """One timm inference results file and what it was measured on."""

    path: str
    device: str  # catalog key
    software: str  # e.g. "pt240"
    compiled: bool

    @property
    def label(self) -> str:
        """Short human label, e.g. rtx4090/pt291/dynamo."""
        return f"{self.device}/{self.software}/{'dynamo' if self.compiled else 'eager'}"


def describe_file(path: str, device: str | None = None) -> Table:
    """Device (the name's `3090`, `4090`, `5090` unless given), software and execution mode of a timm
    results file, from its name."""
    name = Path(path).name
    sw = re.search(r"pt(\d+)", name)
    dev = device or re.search(r"(\d090)", name).group(1)  # type: ignore[union-attr]
    return Table(str(path), get_device_key(dev), sw.group(0) if sw else "unknown",
                 "dynamo" in name)


def get_device_key(name: str) -> str:
    """The catalog id of a device name or alias."""
    return resolve(name).id


def shipped(ref_dir: Path = REF_DIR) -> list[Table]:
    """The shipped inference tables, described by their names."""
    return [describe_file(str(p)) for p in sorted(ref_dir.glob("benchmark-infer-*.csv"))]


def load(table: Table) -> pd.DataFrame:
    """An inference table's checked rows (benchbench.projection.tables), in timm's column names."""
    rows = read_table(table.path).rows
    return pd.DataFrame({"model": rows["model"], "infer_img_size": rows["img_size"],
                         "infer_samples_per_sec": rows["img_per_s"], "infer_gmacs": rows["gmacs"],
                         "infer_macts": rows["macts_m"], "param_count": rows["params_m"]})


def join(src: pd.DataFrame, tgt: pd.DataFrame, min_gmacs: float = MIN_GMACS) -> pd.DataFrame:
    """Models present in both files at the same image size (counts from the source)."""
    m = src.merge(tgt[["model", "infer_img_size", "infer_samples_per_sec"]],
                  on=["model", "infer_img_size"], suffixes=("_src", "_tgt"))
    m = m[m["infer_gmacs"] > min_gmacs].copy()
    m["family"] = m["model"].map(family_of)
    return m


def pair_kind(a: Table, b: Table) -> str:
    """Kind of projection between two files."""
    if a.compiled != b.compiled:
        return "compile" if a.device == b.device else "device+compile"
    if a.device == b.device:
        return "software" if a.software != b.software else "identity"
    return "device" if a.software == b.software else "device+software"


def log_errors(pairs: list[tuple[Table, Table, pd.DataFrame]], c: Constants) -> list[np.ndarray]:
    """ln(predicted/measured) of the projection for each pair."""
    out = []
    for a, b, m in pairs:
        pred = project_img_per_s(m["infer_samples_per_sec_src"].values, m["infer_gmacs"].values,
                                 m["infer_macts"].values, get_device(a.device),
                                 get_device(b.device), c, a.compiled, b.compiled)
        out.append(np.log(pred / m["infer_samples_per_sec_tgt"].values))
    return out


def score(errs: list[np.ndarray]) -> float:
    """Mean over pairs of (median + p90)/2 of absolute log error."""
    return float(np.mean([(np.median(np.abs(e)) + np.percentile(np.abs(e), 90)) / 2 for e in errs]))


def grid_fit(pairs, base: Constants, grids: dict[str, np.ndarray]) -> Constants:
    """Exhaustive grid search over the named constants; others stay as in ``base``."""
    best, best_c = np.inf, base
    names = list(grids)
    for values in itertools.product(*grids.values()):
        c = Constants(**(asdict(base) | dict(zip(names, map(float, values)))))
        s = score(log_errors(pairs, c))
        if s < best:
            best, best_c = s, c
    return best_c


def fit_counts(tables: list[tuple[Table, pd.DataFrame]], base: Constants) -> Constants:
    """Fit the two counts-only constants on every single file."""
    best, best_c = np.inf, base
    for eta, bpa in itertools.product(np.arange(0.1, 1.01, 0.05), np.geomspace(2, 64, 31)):
        c = Constants(**(asdict(base) | {"counts_eta_tensor": float(eta),
                                         "counts_bytes_per_act": float(bpa)}))
        errs = [counts_log_errors(t, df, c) for t, df in tables]
        s = score(errs)
        if s < best:
            best, best_c = s, c
    return best_c


def counts_log_errors(t: Table, df: pd.DataFrame, c: Constants) -> np.ndarray:
    """ln(predicted/measured) of the counts-only projection on one file (> 0.5 GMACs)."""
    d = df[df["infer_gmacs"] > MIN_GMACS]
    pred = counts_only_img_per_s(d["infer_gmacs"].values, d["infer_macts"].values,
                                 get_device(t.device), c, t.compiled)
    return np.log(pred / d["infer_samples_per_sec"].values)


def _abs_q80(df: pd.DataFrame) -> dict[str, dict[str, float]]:
    """kind -> family -> 80th percentile of |e| (families with >= 20 models, plus 'all')."""
    q: dict[str, dict[str, float]] = {}
    for kind, g in df.groupby("kind"):
        q[str(kind)] = {"all": float(g.e.abs().quantile(0.8))}
        for fam, gf in g.groupby("family"):
            if len(gf) >= 20:
                q[str(kind)][str(fam)] = float(gf.e.abs().quantile(0.8))
    return q


INFLATION_GRID = np.round(np.arange(0.5, 4.001, 0.05), 2)


def calibrate(pairs, tables, c: Constants, ensemble: list[dict],
              physics: str = "ensemble") -> Calibration:
    """In-fold interval calibration (no file outside the fold is read).

    1. abs_q80: 80th percentile of |ln(measured/predicted)| per kind and family over all in-fold
       ordered file pairs (counts-only: over single files).
    2. software floor: 80th pct of |ln ratio - median| of same-device software pairs (min).
    3. inflation: leave-one-file-pair-out.  For every unordered pair of files, abs_q80 is
       recomputed without both of its directions; the smallest factor on a 0.05 grid whose
       mean coverage over the left-out pairs is >= 80 % is kept.
    """
    errs = log_errors(pairs, c)
    rows = []
    for i, ((a, b, m), e) in enumerate(zip(pairs, errs)):
        rows.append(pd.DataFrame({"kind": pair_kind(a, b), "family": m["family"].values, "e": -e,
                                  "group": "|".join(sorted([a.path, b.path]))}))
    allr = pd.concat(rows, ignore_index=True)
    floors = []
    for a, b, m in pairs:
        if pair_kind(a, b) == "software":
            lr = np.log(m["infer_samples_per_sec_tgt"] / m["infer_samples_per_sec_src"])
            floors.append(float(np.quantile(np.abs(lr - lr.median()), 0.8)))
    sw = float(np.min(floors)) if floors else 0.05
    crow = []
    for t, df in tables:
        d = df[df["infer_gmacs"] > MIN_GMACS]
        crow.append(pd.DataFrame({"kind": "counts", "family": d["model"].map(family_of).values,
                                  "e": -counts_log_errors(t, df, c)}))
    q = _abs_q80(pd.concat([allr] + crow))
    # leave-one-file-pair-out inflation
    base = Calibration(q, sw, 1.0, physics, ensemble)
    covs = []
    for grp, g in allr.groupby("group"):
        rest = Calibration(_abs_q80(allr[allr.group != grp]), sw, 1.0, physics, ensemble)
        for (a, b, m), in [[p] for p in pairs if "|".join(sorted([p[0].path, p[1].path])) == grp]:
            e = np.abs(np.log(m["infer_samples_per_sec_tgt"].values)
                       - np.log(project_img_per_s(m["infer_samples_per_sec_src"].values,
                                                  m["infer_gmacs"].values, m["infer_macts"].values,
                                                  get_device(a.device), get_device(b.device), c,
                                                  a.compiled, b.compiled)))
            ph = physics_half_width(m["infer_samples_per_sec_src"].values, m["infer_gmacs"].values,
                                    m["infer_macts"].values, get_device(a.device),
                                    get_device(b.device), c, rest, Modes(a.compiled, b.compiled))
            h = half_width(m["family"].values, pair_kind(a, b), rest, ph, a.software != b.software)
            covs.append([float(np.mean(e <= k * h)) for k in INFLATION_GRID])
    mean_cov = np.mean(np.array(covs), axis=0) if covs else np.ones(len(INFLATION_GRID))
    ok = np.nonzero(mean_cov >= 0.8)[0]
    k = float(INFLATION_GRID[ok[0]]) if len(ok) else float(INFLATION_GRID[-1])
    return replace(base, inflation=k)


RULES = ("power", "min", "min_eager", "soft_eager")
N_SHAPE_CONSTANTS = {"min": 0, "power": 1, "min_eager": 1, "soft_eager": 2}  # fitted besides eta_tensor


P_SOFT_GRID = np.array([0.5, 1, 2, 3, 4, 6, 8, 12, 16, 1e9])  # 1e9 = hard min (JSON-safe "infinity")


def fit_device_scaling(cross, rule: str) -> tuple[Constants, float, list[str]]:
    """Fit eta_tensor (and alpha_bw where the rule uses it) on cross-device pairs.

    Returns the constants, the in-fold objective J and the provenance of alpha_bw.
    """
    eta_grid, alpha_grid = np.arange(0.5, 1.51, 0.05), np.arange(0.0, 1.01, 0.05)
    base = Constants(nontensor_rule=rule)
    if not cross:
        return base, float("nan"), ["prior (no cross-device pair)"]
    lab = lambda ps: [f"{a.label} -> {b.label}" for a, b, _ in ps]  # noqa: E731
    if rule == "power":
        c = grid_fit(cross, base, {"eta_tensor": eta_grid, "alpha_bw": alpha_grid})
        prov = lab(cross)
    elif rule == "min":
        c = grid_fit(cross, base, {"eta_tensor": eta_grid})
        prov = ["unused"]
    else:  # min_eager / soft_eager: alpha only matters for compiled pairs
        comp_cross = [p for p in cross if p[0].compiled]
        shape = {"p_soft": P_SOFT_GRID} if rule == "soft_eager" else {}
        if comp_cross:
            c = grid_fit(cross, base, {"eta_tensor": eta_grid, "alpha_bw": alpha_grid} | shape)
            prov = lab(comp_cross)
        else:  # no compiled cross-device data: alpha from the power-law fit, eta refitted
            p = grid_fit(cross, Constants(nontensor_rule="power"),
                         {"eta_tensor": eta_grid, "alpha_bw": alpha_grid})
            c = grid_fit(cross, replace(base, alpha_bw=p.alpha_bw), {"eta_tensor": eta_grid} | shape)
            prov = ["power-law fit on (eager) " + x for x in lab(cross)]
    return c, score(log_errors(cross, c)), prov


def select_rule(objectives: dict[str, float], tol: float = 0.01) -> str:
    """Pre-declared rule: lowest J; a richer rule must beat a simpler one by > tol (relative)."""
    order = sorted(objectives, key=lambda r: (N_SHAPE_CONSTANTS[r], RULES.index(r)))
    best = order[0]
    for r in order[1:]:
        if N_SHAPE_CONSTANTS[r] > N_SHAPE_CONSTANTS[best]:
            if objectives[r] < objectives[best] * (1.0 - tol):
                best = r
        elif objectives[r] < objectives[best]:
            best = r
    return best


def fold_data(exclude_devices: set[str] = frozenset()):
    """Tables and all ordered file pairs of the files not measured on an excluded device."""
    excl = {get_device_key(d) for d in exclude_devices}
    use = [t for t in shipped() if t.device not in excl]
    tables = [(t, load(t)) for t in use]
    pairs = [(a, b, join(da, db)) for (a, da), (b, db) in itertools.permutations(tables, 2)]
    return use, tables, pairs


_FOLD_CACHE: dict = {}


def fit(exclude_devices: set[str] = frozenset(), rule: str | None = None,
        data=None, physics: str = "ensemble") -> tuple[Constants, Calibration, dict]:
    """Fit constants and calibration on every shipped file not measured on an excluded device.

    ``rule=None`` selects the non-tensor rule by the pre-declared in-fold rule (select_rule).
    """
    key = frozenset(get_device_key(d) for d in exclude_devices)
    if key not in _FOLD_CACHE:
        use, tables, pairs = data or fold_data(exclude_devices)
        cross = [p for p in pairs if p[0].device != p[1].device and p[0].compiled == p[1].compiled]
        _FOLD_CACHE[key] = (use, tables, pairs, cross,
                            {r: fit_device_scaling(cross, r) for r in RULES})
    use, tables, pairs, cross, fits = _FOLD_CACHE[key]
    comp = [p for p in pairs if pair_kind(p[0], p[1]) == "compile" and p[0].software == p[1].software]
    objectives = {r: f[1] for r, f in fits.items()}
    chosen = rule or (select_rule(objectives) if cross else "min_eager")
    c, _, alpha_prov = fits[chosen]
    shape_keys = ("eta_tensor", "alpha_bw", "p_soft", "nontensor_rule")
    prov: dict = {"nontensor_rule": chosen,
                  "in_fold_objective_J": {r: round(v, 5) for r, v in objectives.items()}}
    prov["eta_tensor"] = [f"{a.label} -> {b.label}" for a, b, _ in cross] or ["prior"]
    prov["alpha_bw"] = alpha_prov
    if comp:
        c = grid_fit(comp, c, {"compile_keep": np.arange(0.1, 1.01, 0.025)})
    prov["compile_keep"] = [f"{a.label} -> {b.label}" for a, b, _ in comp] or ["prior"]
    c = fit_counts(tables, c)
    prov["counts_eta_tensor"] = prov["counts_bytes_per_act"] = [t.label for t in use]
    ensemble = [asdict(c) | {k: asdict(f[0])[k] for k in shape_keys}
                for r, f in fits.items() if r != chosen and cross]
    calib = calibrate(pairs, tables, c, ensemble, physics)
    prov["calibration"] = [f"{a.label} -> {b.label}" for a, b, _ in pairs] + [t.label for t in use]
    prov["files"] = [Path(t.path).name for t in use]  # names: no path of the machine it ran on
    return c, calib, prov


def _rounded(value):
    """Floats to 6 significant digits: a grid's values without their binary noise."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


# The one device and software the shipped tables measured both inference and training on (AMP, NCHW).
TRAIN_PAIR = ("benchmark-infer-amp-nchw-pt112-cu113-rtx3090.csv", "benchmark-train-amp-nchw-pt112-cu113-rtx3090.csv")


def train_ratios(ref_dir: Path = REF_DIR) -> dict:
    """Per family (and `all`), a model's inference img/s over its training img/s on TRAIN_PAIR's device
    (timm's RTX 3090, PyTorch 1.12): median, q10, q90 and the models `n`, with the files: what turns an
    inference throughput into a training one (benchbench.projection.method.train_from_infer)."""
    infer, train = (read_table(ref_dir / name).rows for name in TRAIN_PAIR)
    table = train_ratio_table(
        pd.DataFrame({"model": infer["model"], "infer_img_size": infer["img_size"],
                      "infer_samples_per_sec": infer["img_per_s"]}),
        pd.DataFrame({"model": train["model"], "train_img_size": train["img_size"],
                      "train_samples_per_sec": train["img_per_s"]}))
    ratios = {family: {"median": float(r["median"]), "q10": float(r["q10"]), "q90": float(r["q90"]), "n": int(r["n"])}
              for family, r in table.iterrows()}
    return {"ratios": ratios, "fitted_on": {"files": list(TRAIN_PAIR)}}


def main() -> None:
    """CLI: fit, print and write constants.json."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--exclude", nargs="*", default=[], help="devices left out of the fit")
    ap.add_argument("--out", default=str(Path(__file__).with_name("constants.json")))
    args = ap.parse_args()
    folds = {"all": set(args.exclude)} if args.exclude else {
        "all": set(), "without_rtx-3090": {"3090"}, "without_rtx-4090": {"4090"},
        "without_rtx-5090": {"5090"}}
    out = {}
    for name, excl in folds.items():
        c, calib, prov = fit(excl)
        print(f"[{name}] " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in asdict(c).items()))
        out[name] = {"constants": asdict(c), "calibration": asdict(calib), "fitted_on": prov}
    out["train_from_infer"] = train_ratios()
    Path(args.out).write_text(json.dumps(_rounded(out), indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
