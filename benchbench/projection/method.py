"""Project a model's measured inference throughput from one device onto another.

Pure functions (numpy/pandas only).  Per image, with F = 2 * GMACs * 1e9 FLOPs and
A = activations (the timm ``infer_macts`` column, millions):

* compute part   t_c = F / (eta_tensor * P)      P = datasheet dense tensor FLOP/s (AMP dtype)
* non-tensor part t_n = measured time - t_c      (memory traffic, elementwise/norm/softmax,
                                                  depthwise convs, launch gaps)

The split of the SOURCE time comes from the model's own measurement: its achieved FLOP/s
against ``eta_tensor`` x the source's peak gives its compute share (capped at 1).  The compute
part scales with the tensor-peak ratio; the non-tensor part with an effective "non-tensor
speed" S = BW^alpha * (SIMT_FLOPs / REF_FLOP_PER_BYTE)^(1 - alpha), i.e. a power-law mix of
DRAM bandwidth and CUDA-core throughput (alpha = elasticity to bandwidth).  Switching eager ->
torch.compile multiplies the non-tensor part by ``compile_keep`` (fusion removes traffic).
The result is floored at the target roofline max(F / P, 2 bytes * A / BW).

Counts-only projection (no measurement): t = F / (counts_eta_tensor * P)
+ counts_bytes_per_act * A / S, same S.

Intervals (80 %): log-space quantiles of validated errors of the same kind and family,
widened in quadrature by the physical uncertainty of the non-tensor scaling (uniform between
pure-bandwidth and pure-SIMT scaling) and by the software noise floor when software changes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from benchbench.projection.catalog import Device

REF_FLOP_PER_BYTE = 50.0  # fixed unit choice (not fitted): makes SIMT FLOP/s comparable to byte/s
MIN_BYTES_PER_ACT = 2.0  # roofline floor: every counted activation written once in fp16
Z80 = 1.2816  # two-sided 80 % normal quantile (for converting std to half-width)

FAMILY_PATTERNS: list[tuple[str, str]] = [
    # Vision transformers: plain ViT and its direct descendants with the same block structure.
    ("vision-transformer", r"^(vit_|deit|beit|eva|flexivit)"),
    # BiT: ResNet-v2 with GroupNorm and weight-standardised convolutions (timm's resnetv2_<depth>x<width>_bit*).
    # Neither normalisation folds into the convolutions as BatchNorm does, so its non-tensor work is its own.
    ("resnetv2-bit", r"^resnetv2_\d+x\d+_bit"),
    # ResNet family: ResNet/ResNeXt/SE/ECA/wide variants and the other ResNetV2s.
    ("resnet", r"^(resnet(?!st)|resnext|seresne|ecaresnet|wide_resnet|legacy_seresne)"),
    ("convnext", r"^convnext"),
    ("efficientnet", r"^(tf_)?efficientnet"),
]


@dataclass(frozen=True)
class Constants:
    """The fitted physical constants (see fit_constants.py for how each is fitted).

    eta_tensor:          fraction of the datasheet dense tensor peak reached by a fully
                         compute-bound model (physical range 0.5-1.2; >1 possible on GeForce
                         parts that boost above the datasheet clock).
    alpha_bw:            elasticity of non-tensor time to DRAM bandwidth; 1 - alpha_bw goes to
                         CUDA-core (SIMT) FLOP/s.  Range 0-1.
    compile_keep:        fraction of eager non-tensor time that remains under torch.compile
                         (operator fusion).  Range 0-1.
    counts_eta_tensor:   counts-only: average fraction of tensor peak on the compute part.
    counts_bytes_per_act: counts-only: effective DRAM bytes per counted activation (fp16 write +
                         read(s) of activations, norms, residuals), range ~2-30.
    """

    eta_tensor: float = 1.0
    alpha_bw: float = 0.5
    compile_keep: float = 0.6
    counts_eta_tensor: float = 0.5
    counts_bytes_per_act: float = 8.0
    nontensor_rule: str = "min_eager"  # "power" | "min" | "min_eager" | "soft_eager" (a choice)
    p_soft: float = 4.0  # soft_eager only: bottleneck sharpness (power mean exponent -p)


@dataclass(frozen=True)
class Calibration:
    """Interval calibration, fitted in-fold only (see fit_constants.calibrate).

    80 % half-width in log space = inflation * sqrt(E^2 + PHYS^2 + SW^2):

    * ``abs_q80[kind][family]``: in-fold 80th percentile of |ln(measured/predicted)| for this
      kind of projection and family ("all" = fallback);
    * PHYS: physics/model uncertainty of the non-tensor scaling.  ``physics="ensemble"``: half
      the spread of ln(prediction) over the candidate non-tensor rules fitted on the same data
      (``ensemble`` holds their constants); ``"bw_simt"``: Z80 * (1-share) * |ln BW ratio -
      ln SIMT ratio| / sqrt(12) (uniform between pure-bandwidth and pure-SIMT scaling);
    * SW: ``software_floor_half_width`` when the software version changes and the kind's own
      errors do not already contain a software change;
    * ``inflation``: smallest factor giving >= 80 % mean coverage in leave-one-file-pair-out
      inside the fold.
    """

    abs_q80: dict[str, dict[str, float]] = field(default_factory=dict)
    software_floor_half_width: float = 0.05
    inflation: float = 1.0
    physics: str = "ensemble"
    ensemble: list[dict] = field(default_factory=list)


def family_of(model: str) -> str:
    """Model family from timm model-name prefix: vision-transformer, resnetv2-bit, resnet, convnext, efficientnet, other."""
    for fam, pat in FAMILY_PATTERNS:
        if re.match(pat, model):
            return fam
    return "other"


def uses_min_rule(c: "Constants", compiled: bool) -> bool:
    """Whether the non-tensor part follows the bottleneck (min) rule in this mode."""
    return c.nontensor_rule == "min" or (c.nontensor_rule == "min_eager" and not compiled)


def nontensor_speed(dev: Device, c: "Constants", compiled: bool = False) -> float:
    """Absolute effective non-tensor speed (byte/s-equivalent), used by counts-only.

    Power law: BW^a * (SIMT/REF)^(1-a).  Min rule: min(BW, SIMT/REF).  Devices without a SIMT
    FP32 figure (TPUs) use bandwidth only.
    """
    bw = dev.mem_bw_bytes_per_s
    simt = dev.fp32_flops_per_s
    if simt is None:
        return bw
    if uses_min_rule(c, compiled):
        return min(bw, simt / REF_FLOP_PER_BYTE)
    return bw ** c.alpha_bw * (simt / REF_FLOP_PER_BYTE) ** (1.0 - c.alpha_bw)


def soft_bottleneck_ratio(r_bw: float, r_simt: float, p: float) -> float:
    """Soft bottleneck of two time ratios: power mean of the speed-ups with exponent -p.

    Speed-ups u = 1/r are combined as ((u_bw^-p + u_simt^-p)/2)^(-1/p) in the direction where
    their geometric mean is >= 1 and inverted for the other direction, so A->B->A = identity.
    p -> infinity gives the min rule, p -> 0 the geometric mean (power law with alpha = 0.5).
    """
    u = np.array([1.0 / r_bw, 1.0 / r_simt])
    flip = np.prod(u) < 1.0
    if flip:
        u = 1.0 / u
    m = float(np.min(u)) if p >= 1e3 else float(np.mean(u ** -p) ** (-1.0 / p))
    return m if flip else 1.0 / m


def nontensor_time_ratio(src: Device, tgt: Device, c: "Constants", compiled: bool) -> float:
    """t_target / t_source of the non-tensor part (mode = the target's execution mode).

    Min (bottleneck) rule, no constant: the non-tensor time follows the resource that changes
    LEAST between the two devices, i.e. of r_bw = BW_S/BW_T and r_simt = SIMT_S/SIMT_T the one
    with the smaller |ln r|.  For an upgrade in both resources this is the smaller speed-up,
    min(BW_T/BW_S, SIMT_T/SIMT_S); unlike the literal "min speed-up" it is invertible
    (A->B->A = identity; the literal form applies SIMT to 5090->3090 but BW to 3090->5090).
    Power law: (BW_S/BW_T)^a (SIMT_S/SIMT_T)^(1-a).
    """
    bw = src.mem_bw_bytes_per_s / tgt.mem_bw_bytes_per_s
    ss, st = src.fp32_flops_per_s, tgt.fp32_flops_per_s
    if ss is None or st is None:
        return bw
    simt = ss / st
    if uses_min_rule(c, compiled):
        return bw if abs(math.log(bw)) <= abs(math.log(simt)) else simt
    if c.nontensor_rule == "soft_eager" and not compiled:
        return soft_bottleneck_ratio(bw, simt, c.p_soft)
    return bw ** c.alpha_bw * simt ** (1.0 - c.alpha_bw)


def compute_share(img_per_s: np.ndarray, gmacs: np.ndarray, dev: Device,
                  eta_tensor: float) -> np.ndarray:
    """Share of the measured time spent in tensor compute: achieved/(eta*peak), capped to [0,1]."""
    achieved_flops = img_per_s * gmacs * 2e9
    return np.clip(achieved_flops / (eta_tensor * dev.amp_flops_per_s()), 0.0, 1.0)


def roofline_floor_s(gmacs: np.ndarray, macts_m: np.ndarray, dev: Device) -> np.ndarray:
    """Lower bound on time per image on ``dev``: max(FLOPs/peak, min bytes/bandwidth)."""
    t_compute = gmacs * 2e9 / dev.amp_flops_per_s()
    t_memory = MIN_BYTES_PER_ACT * macts_m * 1e6 / dev.mem_bw_bytes_per_s
    return np.maximum(t_compute, t_memory)


def compile_factor(src_compiled: bool, tgt_compiled: bool, c: Constants) -> float:
    """Multiplier on the non-tensor part for an eager<->compiled change."""
    if src_compiled == tgt_compiled:
        return 1.0
    return c.compile_keep if tgt_compiled else 1.0 / c.compile_keep


def project_img_per_s(img_per_s: np.ndarray, gmacs: np.ndarray, macts_m: np.ndarray,
                      src: Device, tgt: Device, c: Constants,
                      src_compiled: bool = False, tgt_compiled: bool = False) -> np.ndarray:
    """Predicted target throughput (img/s) from the measured source throughput."""
    img_per_s = np.asarray(img_per_s, float)
    gmacs = np.asarray(gmacs, float)
    t_src_s = 1.0 / img_per_s
    share = compute_share(img_per_s, gmacs, src, c.eta_tensor)
    t_compute_s = share * t_src_s * src.amp_flops_per_s() / tgt.amp_flops_per_s()
    nt_ratio = nontensor_time_ratio(src, tgt, c, tgt_compiled)
    t_other_s = (1.0 - share) * t_src_s * nt_ratio * compile_factor(src_compiled, tgt_compiled, c)
    t_tgt_s = np.maximum(t_compute_s + t_other_s, roofline_floor_s(gmacs, np.asarray(macts_m, float), tgt))
    return 1.0 / t_tgt_s


def counts_only_img_per_s(gmacs: np.ndarray, macts_m: np.ndarray, dev: Device, c: Constants,
                          compiled: bool = False) -> np.ndarray:
    """Throughput (img/s) from counts alone: compute at eta*peak plus activation traffic."""
    gmacs = np.asarray(gmacs, float)
    macts_m = np.asarray(macts_m, float)
    t_compute_s = gmacs * 2e9 / (c.counts_eta_tensor * dev.amp_flops_per_s())
    keep = c.compile_keep if compiled else 1.0
    t_other_s = keep * c.counts_bytes_per_act * macts_m * 1e6 / nontensor_speed(dev, c, compiled)
    return 1.0 / np.maximum(t_compute_s + t_other_s, roofline_floor_s(gmacs, macts_m, dev))


def transfer_sigma_log(img_per_s: np.ndarray, gmacs: np.ndarray, src: Device, tgt: Device,
                       c: Constants) -> np.ndarray:
    """Std (log space) of the prediction from not knowing how non-tensor time scales.

    The non-tensor ratio lies between the pure-bandwidth and the pure-SIMT ratio; taken as
    uniform over that range (std = range/sqrt(12)), weighted by the non-tensor share.
    """
    simt_s, simt_t = src.fp32_flops_per_s, tgt.fp32_flops_per_s
    if simt_s is None or simt_t is None:
        return np.zeros_like(np.asarray(img_per_s, float))
    log_range = abs(math.log(src.mem_bw_bytes_per_s / tgt.mem_bw_bytes_per_s)
                    - math.log(simt_s / simt_t))
    share = compute_share(np.asarray(img_per_s, float), np.asarray(gmacs, float), src, c.eta_tensor)
    return (1.0 - share) * log_range / math.sqrt(12.0)


KIND_FALLBACK = {"device+software": ["device", "software"], "device+compile": ["compile", "device"],
                 "device": ["device+software"], "software": ["device+software"],
                 "compile": ["device+compile"], "identity": ["software"]}


def same_device(src: Device, tgt: Device) -> bool:
    """Whether two entries are one device: its name and every figure, whatever short id each goes by (a
    measurement's device is found by the name torch reports, a target by the id a user wrote)."""
    return replace(src, id=tgt.id) == tgt


def projection_kind(same_device: bool, src_compiled: bool, tgt_compiled: bool,
                    software_changes: bool) -> str:
    """identity | software | device | device+software | compile | device+compile."""
    if src_compiled != tgt_compiled:
        return "compile" if same_device else "device+compile"
    if same_device:
        return "software" if software_changes else "identity"
    return "device+software" if software_changes else "device"


def calibration_kind(kind: str, available) -> str:
    """``kind`` if calibrated, else the nearest calibrated kind."""
    if kind in available:
        return kind
    for k in KIND_FALLBACK.get(kind, []):
        if k in available:
            return k
    return "device" if "device" in available else next(iter(available))


def physics_half_width(img_per_s, gmacs, macts_m, src: Device, tgt: Device, c: Constants,
                       calib: Calibration, modes: Modes | None = None) -> np.ndarray:
    """80 % half-width (log space) from the non-tensor scaling rule's uncertainty."""
    modes = modes or Modes()
    src_compiled, tgt_compiled = modes.src_compiled, modes.tgt_compiled
    img_per_s = np.asarray(img_per_s, float)
    if src is tgt:
        return np.zeros_like(img_per_s)
    if calib.physics == "bw_simt":
        return Z80 * transfer_sigma_log(img_per_s, gmacs, src, tgt, c)
    preds = [project_img_per_s(img_per_s, gmacs, macts_m, src, tgt, cc, src_compiled, tgt_compiled)
             for cc in [c] + [Constants(**e) for e in calib.ensemble]]
    lp = np.log(np.vstack(preds))
    return (lp.max(axis=0) - lp.min(axis=0)) / 2.0


def half_width(families, kind: str, calib: Calibration, phys_hw=0.0,
               software_changes: bool = False) -> np.ndarray:
    """80 % half-width in log space (see Calibration)."""
    ck = calibration_kind(kind, calib.abs_q80)
    table = calib.abs_q80[ck]
    e = np.array([table.get(f, table["all"]) for f in np.atleast_1d(np.asarray(families))])
    sw = calib.software_floor_half_width if software_changes and "software" not in ck else 0.0
    return calib.inflation * np.sqrt(e ** 2 + np.asarray(phys_hw) ** 2 + sw ** 2)


def interval(pred_img_per_s, families, kind: str, calib: Calibration, phys_hw=0.0,
             software_changes: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """80 % interval (lo, hi) in img/s, symmetric in log space around the prediction."""
    h = half_width(families, kind, calib, phys_hw, software_changes)
    pred = np.asarray(pred_img_per_s, float)
    return pred * np.exp(-h), pred * np.exp(h)


@dataclass(frozen=True)
class Modes:
    """How source and target ran: compiled or eager each, and whether the software (torch) differs."""

    src_compiled: bool = False
    tgt_compiled: bool = False
    software_changes: bool = False


@dataclass(frozen=True)
class Counts:
    """One model as a projection sees it: its measured img/s on the source, forward GMACs and millions of
    activations per image (3 forward passes' of each for a training step), and its family (`family_of`)."""

    img_per_s: float
    gmacs: float
    macts_m: float
    family: str


def project_one(model: Counts, src: Device, tgt: Device, fitted: tuple[Constants, Calibration],
                modes: Modes = Modes()) -> tuple[float, float, float]:
    """Project ONE model's measured throughput from `src` to `tgt`: (img/s, lo80, hi80), with the
    constants and calibration `fitted` (`load_constants`)."""
    constants, calibration = fitted
    args = (np.array([model.img_per_s], float), np.array([model.gmacs], float), np.array([model.macts_m], float))
    pred = project_img_per_s(*args, src, tgt, constants, modes.src_compiled, modes.tgt_compiled)
    kind = projection_kind(same_device(src, tgt), modes.src_compiled, modes.tgt_compiled, modes.software_changes)
    phys = physics_half_width(*args, src, tgt, constants, calibration, modes)
    lo, hi = interval(pred, [model.family], kind, calibration, phys, modes.software_changes)
    return float(pred[0]), float(lo[0]), float(hi[0])


CONSTANTS_FILE = Path(__file__).with_name("constants.json")


def load_constants(key: str = "all", path: Path = CONSTANTS_FILE) -> tuple[Constants, Calibration]:
    """The constants and interval calibration fitted on the shipped tables (scripts/fit_projection.py):
    `all` of them, or `without_<device id>` (that device's tables left out)."""
    import json

    folds = json.loads(path.read_text())
    d = folds[key] if key in folds else folds["all"]
    return Constants(**d["constants"]), Calibration(**d["calibration"])


def fold_without(device_id: str, path: Path = CONSTANTS_FILE) -> str:
    """The fold of the shipped constants fitted without `device_id`'s tables: `without_<id>` where the
    shipped tables hold that device, else `all` (which never saw it)."""
    return f"without_{device_id}" if device_id in fitted_devices(path) else "all"


@lru_cache(maxsize=None)
def fitted_devices(path: Path = CONSTANTS_FILE) -> frozenset[str]:
    """The ids of the devices whose tables the constants in `path` were fitted on: each has a fold fitted
    without it (`without_<id>`). Read once per file and process."""
    import json

    return frozenset(k.removeprefix("without_") for k in json.loads(path.read_text()) if k.startswith("without_"))


# ---------------------------------------------------------------- training from inference

def train_ratio_table(infer: pd.DataFrame, train: pd.DataFrame) -> pd.DataFrame:
    """Per-family inference/training throughput ratio (median, q10, q90, n).

    ``infer`` has timm inference columns, ``train`` timm training columns (same device and
    software); rows are joined on model and image size.
    """
    m = infer.merge(train, left_on=["model", "infer_img_size"],
                    right_on=["model", "train_img_size"])
    ratio = m["infer_samples_per_sec"] / m["train_samples_per_sec"]
    df = pd.DataFrame({"family": m["model"].map(family_of), "ratio": ratio})
    rows = {"all": df["ratio"]} | {f: g["ratio"] for f, g in df.groupby("family")}
    return pd.DataFrame({f: {"median": r.median(), "q10": r.quantile(0.1),
                             "q90": r.quantile(0.9), "n": int(len(r))}
                         for f, r in rows.items()}).T


def load_train_ratios(path: Path = CONSTANTS_FILE) -> dict[str, dict[str, float]]:
    """Per family, inference over training img/s as scripts/fit_projection.py derives them from the shipped
    tables (`train_from_infer` of constants.json: median, q10, q90, n)."""
    import json

    return json.loads(path.read_text())["train_from_infer"]["ratios"]


def train_from_infer(img_per_s: float, lo: float, hi: float, family: str,
                     ratios: dict[str, dict[str, float]]) -> tuple[float, float, float, float]:
    """A training throughput from an inference one (`img_per_s`, its 80 % interval [lo, hi]): divided by
    the family's median ratio (`all`'s for a family the tables lack), the interval widened by the
    ratio's own spread (q10 to q90), the two log half-widths added in quadrature on each side (taken as
    independent). Returns (img/s, lo80, hi80, the ratio)."""
    row = ratios.get(family) or ratios["all"]
    median = row["median"]
    value = img_per_s / median
    low = math.hypot(math.log(img_per_s / lo), math.log(row["q90"] / median))
    high = math.hypot(math.log(hi / img_per_s), math.log(median / row["q10"]))
    return value, value * math.exp(-low), value * math.exp(high), median
