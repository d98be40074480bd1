"""The projection checked on two of timm's benchmark tables: every model of SOURCE projected onto the
device TARGET was measured on, with constants and intervals fitted without that device's tables (the
shipped fold `without_<device>`, or `all` for a device none of them holds), against what TARGET measured.

Errors are |projected / measured - 1|, over the models both tables hold at the same image size with more
than `min_gmacs` GMACs (all models apart). Two baselines beside the method: the best single ratio for the
pair, known in hindsight (the median of measured ratios), and the datasheet roofline (the source time's
compute share at 100 % of the tensor peak scaled by the peaks' ratio, the rest by the bandwidths').
"""

from __future__ import annotations

import numpy as np

from benchbench.projection.catalog import Device
from benchbench.projection.method import (Constants, Modes, counts_only_img_per_s, family_of, fold_without,
                                          interval, load_constants, physics_half_width, project_img_per_s,
                                          projection_kind)
from benchbench.projection.tables import Table, joined

MIN_GMACS = 0.5
FAMILIES = ("vision-transformer", "resnet", "resnetv2-bit", "convnext", "efficientnet", "other")
ROOFLINE = Constants(eta_tensor=1.0, alpha_bw=1.0, compile_keep=1.0, nontensor_rule="power")


def error_stats(pred: np.ndarray, meas: np.ndarray, lo: np.ndarray | None = None,
                hi: np.ndarray | None = None) -> dict:
    """Models, median and p90 absolute error in percent, the median signed error (percent: > 0, projected
    faster than measured; a bias common to the models, where it is near the median absolute error), and how
    often the 80 % interval holds the measured value (percent)."""
    signed = (pred / meas - 1.0) * 100.0
    ape = np.abs(signed)
    out = {"models": int(len(ape)), "median_abs_error": round(float(np.median(ape)), 2),
           "p90_abs_error": round(float(np.percentile(ape, 90)), 2),
           "median_signed_error": round(float(np.median(signed)), 2)}
    if lo is not None and hi is not None:
        out["coverage_80"] = round(float(np.mean((meas >= lo) & (meas <= hi))) * 100.0, 1)
    return out


def validate(source: Table, target: Table, src: Device, tgt: Device, *, min_gmacs: float = MIN_GMACS,
             per_model: bool = False) -> dict:
    """The statistics of projecting `source` (measured on `src`) onto `tgt` against `target`; with
    `per_model`, also `rows`: each model's measured, projected and 80 % interval img/s, and its error."""
    fold = fold_without(tgt.id)
    consts, calib = load_constants(fold)
    both = joined(source, target)
    family = both["model"].map(family_of).to_numpy()
    measured_src, measured = both["img_per_s"].to_numpy(float), both["img_per_s_target"].to_numpy(float)
    gmacs, macts = both["gmacs"].to_numpy(float), both["macts_m"].to_numpy(float)
    software_changes = source.software != target.software
    kind = projection_kind(src.id == tgt.id, source.compiled, target.compiled, software_changes)
    pred = project_img_per_s(measured_src, gmacs, macts, src, tgt, consts, source.compiled, target.compiled)
    phys = physics_half_width(measured_src, gmacs, macts, src, tgt, consts, calib,
                              Modes(source.compiled, target.compiled))
    lo, hi = interval(pred, family, kind, calib, phys, software_changes=software_changes)
    roof = project_img_per_s(measured_src, gmacs, macts, src, tgt, ROOFLINE, source.compiled, target.compiled)
    counts = counts_only_img_per_s(gmacs, macts, tgt, consts, target.compiled)
    c_lo, c_hi = interval(counts, family, "counts", calib)
    big = gmacs > min_gmacs
    if not big.any():
        big = np.ones_like(big)
    ratio = float(np.median(measured[big] / measured_src[big]))
    out = error_stats(pred[big], measured[big], lo[big], hi[big])
    out["by_family"] = {}
    for fam in FAMILIES:
        s = big & (family == fam)
        if s.any():
            out["by_family"][fam] = error_stats(pred[s], measured[s], lo[s], hi[s]) | {
                "best_single_ratio": error_stats(measured_src[s] * ratio, measured[s]),
                "datasheet_roofline": error_stats(roof[s], measured[s])}
    out["baselines"] = {"best_single_ratio": error_stats(measured_src[big] * ratio, measured[big]) | {"ratio": round(ratio, 4)},
                        "datasheet_roofline": error_stats(roof[big], measured[big])}
    out["all_models"] = error_stats(pred, measured, lo, hi)
    out["counts_only"] = error_stats(counts[big], measured[big], c_lo[big], c_hi[big])
    out["pair"] = {"source": source.label, "target": target.label, "from": src.id, "to": tgt.id, "kind": kind,
                   "min_gmacs": min_gmacs}
    out["fitted"] = {"fold": fold, "constants": consts.__dict__ | {}, "interval_inflation": calib.inflation,
                     "software_floor": calib.software_floor_half_width}
    if per_model:
        out["rows"] = [{"model": model, "img_size": int(size), "family": fam, "source_img_per_s": float(a),
                        "measured_img_per_s": float(b), "projected_img_per_s": round(float(p), 2),
                        "interval_80": [round(float(low), 2), round(float(high), 2)],
                        "abs_error_pct": round(abs(float(p) / float(b) - 1.0) * 100.0, 2)}
                       for model, size, fam, a, b, p, low, high in zip(
                           both["model"], both["img_size"], family, measured_src, measured, pred, lo, hi)]
    return out
